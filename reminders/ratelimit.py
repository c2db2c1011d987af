"""Rate limits shared by every process and host, kept in the database.

Each limit is a generic cell rate algorithm (GCRA) bucket: one row holding the
"theoretical arrival time" of the next send. Reserving a send moves it on by one
interval; a send may go out once the clock is within the burst tolerance of it. The
result is a token bucket that needs one number of state and no background refill, and
whose reservations can be made ahead: a worker reserves slots for a whole batch in one
transaction, then sends each message at its slot.

A provider's "too fast" pauses a bucket for everyone (``pause``); runs that cannot get a
slot soon wait for a later tick without spending a retry attempt.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

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
    requests: Sequence[Sequence[Limit]], *, max_wait: float, now: float | None = None
) -> list[Slot]:
    """Reserve one send for each request, in order, under all of its limits.

    A request that could not go within ``max_wait`` reserves nothing, and every later
    request on the bucket that held it back is refused too, so each bucket keeps its order.
    """
    names = sorted({limit.name for limits in requests for limit in limits})
    now = time.time() if now is None else now
    if not names:
        return [Slot(now, True) for _ in requests]
    RateBucket.objects.bulk_create([RateBucket(name=name) for name in names], ignore_conflicts=True)
    with transaction.atomic():
        rows = RateBucket.objects.filter(name__in=names).order_by("name")
        if connection.features.has_select_for_update:
            rows = rows.select_for_update()
        buckets = {row.name: row for row in rows}
        tat = {name: row.tat for name, row in buckets.items()}
        held = {
            name: row.paused_until.timestamp()
            for name, row in buckets.items()
            if row.paused_until is not None
        }
        blocked: set[str] = set()
        slots: list[Slot] = []
        for limits in requests:
            ready = {
                limit.name: max(
                    tat[limit.name] - limit.rate.tolerance, held.get(limit.name, now), now
                )
                for limit in limits
            }
            at = max(ready.values(), default=now)
            late = {name for name, moment in ready.items() if moment - now > max_wait}
            if late or blocked.intersection(ready):
                blocked.update(late)
                slots.append(Slot(at, False))
                continue
            for limit in limits:
                tat[limit.name] = max(tat[limit.name], at) + limit.rate.interval
            slots.append(Slot(at, True))
        changed = [row for name, row in buckets.items() if tat[name] != row.tat]
        for row in changed:
            row.tat = tat[row.name]
        RateBucket.objects.bulk_update(changed, ["tat"])
    return slots


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
