"""Rate limits shared by every process and host, kept in the database.

Each limit is a generic cell rate algorithm (GCRA) bucket: one row holding the
"theoretical arrival time" of the next send. Reserving a send moves it on by one
interval; a send may go out once the clock is within the burst tolerance of it. The
result is a token bucket that needs one number of state and no background refill. A
worker reserves each message's slot right before sending it, and sleeps until the slot
if it lies ahead.

A provider's "too fast" pauses a bucket for everyone (``pause``); runs that cannot get a
slot soon wait for a later tick without spending a retry attempt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import inf

from django.db import connection, transaction
from django.utils import timezone

from .models import RateBucket
from .senders.base import Limit, Rate

__all__ = ["Limit", "Rate", "Slot", "pause", "reserve"]


@dataclass(frozen=True)
class Slot:
    """When a send may go (``reserved``), or the earliest it might if asked again later."""

    at: float
    reserved: bool


def reserve(
    requests: Sequence[Sequence[Limit]],
    *,
    max_wait: float,
    together: bool = False,
    now: float | None = None,
) -> list[Slot]:
    """Reserve one send for each request, in order, under all of its limits.

    A request that could not go within ``max_wait`` reserves nothing, and every later
    request on the bucket that held it back is refused too, so each bucket keeps its order.
    With ``together`` the requests are a batch to be sent back to back: after the first
    reserved one, a request is reserved only if it may go at that same moment.
    Unlimited buckets only carry pauses: they are read, never locked or written.
    """
    limits_by_name = {limit.name: limit for limits in requests for limit in limits}
    paced = sorted(name for name, limit in limits_by_name.items() if limit.rate.per_second < inf)
    if paced:
        # Outside the transaction: on MariaDB an INSERT that finds the row takes a shared
        # lock on it, and two callers upgrading theirs to FOR UPDATE deadlock.
        RateBucket.objects.bulk_create(
            [RateBucket(name=name) for name in paced], ignore_conflicts=True
        )
    with transaction.atomic():
        tat: dict[str, float] = {}
        buckets: dict[str, RateBucket] = {}
        if paced:
            rows = RateBucket.objects.filter(name__in=paced).order_by("name")
            if connection.features.has_select_for_update:
                rows = rows.select_for_update()
            buckets = {row.name: row for row in rows}
            tat = {name: row.tat for name, row in buckets.items()}
        # The clock is read once the rows are ours: a time taken before waiting for the
        # lock would hand out slots in the past, which then go out together.
        now = time.time() if now is None else now
        held = _pauses(limits_by_name, buckets)
        blocked: set[str] = set()
        slots: list[Slot] = []
        deadline = now + max_wait
        for limits in requests:
            ready = {
                limit.name: max(
                    tat.get(limit.name, now) - limit.rate.tolerance, held.get(limit.name, now), now
                )
                for limit in limits
            }
            at = max(ready.values(), default=now)
            late = {name for name, moment in ready.items() if moment > deadline}
            if late or blocked.intersection(ready):
                blocked.update(late)
                slots.append(Slot(at, False))
                continue
            for limit in limits:
                if limit.name in tat:
                    tat[limit.name] = max(tat[limit.name], at) + limit.rate.interval
            slots.append(Slot(at, True))
            if together:
                deadline = min(deadline, at)
        # One UPDATE per new value: a batch's fresh recipients all move to the same one.
        moved: dict[float, list[int]] = {}
        for name, row in buckets.items():
            if tat[name] != row.tat:
                moved.setdefault(tat[name], []).append(row.pk)
        for value, pks in moved.items():
            RateBucket.objects.filter(pk__in=pks).update(tat=value)
    return slots


def _pauses(limits: dict[str, Limit], locked: dict[str, RateBucket]) -> dict[str, float]:
    """Until when each bucket is paused: from the locked rows, and for the unlimited
    ones a plain read (a pause is rare, so the read usually finds nothing)."""
    rows = list(locked.values())
    unlocked = [name for name in limits if name not in locked]
    if unlocked:
        rows += RateBucket.objects.filter(name__in=unlocked, paused_until__isnull=False)
    return {row.name: row.paused_until.timestamp() for row in rows if row.paused_until}


def pause(name: str, seconds: float, reason: str) -> datetime:
    """Hold the bucket ``name`` back for everyone for ``seconds`` (never shortens a pause)."""
    until = timezone.now() + timedelta(seconds=seconds)
    RateBucket.objects.bulk_create([RateBucket(name=name)], ignore_conflicts=True)
    with transaction.atomic():
        row = RateBucket.objects.select_for_update().get(name=name)
        if row.paused_until is None or row.paused_until < until:
            row.paused_until = until
            row.pause_reason = reason[:200]
            row.save(update_fields=["paused_until", "pause_reason"])
        return row.paused_until
