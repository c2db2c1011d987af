"""Rate limits shared by every process and host.

Each limit is a generic cell rate algorithm (GCRA) bucket: one number, the "theoretical
arrival time" (tat) of the next send. A send that costs n slots (a message split into n
parts) may go once ``tat + (n - 1) * interval - tolerance <= now`` and moves tat on by n
intervals, so a limit counts what reaches the provider, not our calls. The result is a
token bucket that needs one number of state and no background refill. A worker reserves
a batch's slots right before sending it, and sleeps until the first if it lies ahead.

A paced channel is split in two shares, high priority and bulk
(``senders.base.shares``), paced apart, that add up to the channel: each class always
gets its share, whatever the other has booked. A send may also take the other class's
idle slots, but only those within ``REMINDERS_RATE_BORROW_SECONDS`` (``Limit.lender``):
a class alone on the channel uses all of it, and a high send that falls due behind a
bulk backlog waits at most that long for its share. One number per bucket cannot let a
late request go before slots booked earlier; keeping the classes apart is what does.

A provider's "too fast" pauses a bucket for everyone (``pause``), for at most
``REMINDERS_MAX_PAUSE_SECONDS``: one reply (a Retry-After of hours) must not silence a
channel for longer than ops allow, and a capped pause is logged and says so in its
reason. Runs that cannot get a slot soon wait for a later tick without spending a retry
attempt.

The buckets live in the database (``RateBucket`` rows, locked while a reservation reads
and moves them), or in a Django cache shared by every process when
``REMINDERS_RATE_LIMIT_CACHE`` names one (``reminders.ratelimit.cache``). The algorithm
is the same; only where the numbers are kept differs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from math import inf

from django.db import OperationalError

from ..conf import settings as conf
from ..senders.base import Limit, Rate
from .store import Store

__all__ = ["Limit", "Rate", "Slot", "pause", "reserve", "shares_transaction"]

logger = logging.getLogger(__name__)


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
    Unlimited buckets only carry pauses: they are read, never locked or written (in the
    caller's transaction, if it has one: see ``shares_transaction``).
    """
    limits = _buckets(requests)
    paced = sorted(name for name, limit in limits.items() if limit.rate.per_second < inf)
    unlimited = sorted(name for name in limits if name not in paced)
    for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
        try:
            with _store().hold(paced, unlimited) as held:
                # The clock is read once the buckets are ours: a time taken before waiting
                # for them would hand out slots in the past, which then go out together.
                clock = time.time() if now is None else now
                tat = dict(held.tat)
                slots = _allot(requests, tat, held.paused, clock, max_wait, together)
                held.save({name: value for name, value in tat.items() if value != held.tat[name]})
            return slots
        except OperationalError as exc:
            # A database may end a reservation as the loser of a deadlock (InnoDB picks
            # one when lock waits cross, e.g. a plan that scans a small table); nothing
            # was reserved, so it is asked again, as the database advises.
            if attempt == DEADLOCK_ATTEMPTS or not _deadlock(exc):
                raise
            logger.info("rate-limit reservation lost a deadlock; asking again (%d)", attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def _buckets(requests: Sequence[Sequence[Limit]]) -> dict[str, Limit]:
    return {
        each.name: each
        for request in requests
        for limit in request
        for each in (limit, limit.lender)
        if each is not None
    }


def shares_transaction(requests: Sequence[Sequence[Limit]]) -> bool:
    """Whether reserving ``requests`` is only a read of database rows (the pauses of
    unlimited buckets kept in the database), which may run in the caller's transaction
    rather than in one of its own. Paced buckets are locked and written in a transaction
    of their own (one a lost deadlock can ask again, and that holds them no longer than
    it must); buckets in a cache are no database work, and no reason to keep one open."""
    if conf.RATE_LIMIT_CACHE:
        return False
    return all(limit.rate.per_second == inf for limit in _buckets(requests).values())


DEADLOCK_ATTEMPTS = 3


def _deadlock(exc: OperationalError) -> bool:
    """Whether the database ended the transaction as a deadlock's victim: MySQL and
    MariaDB error 1213, PostgreSQL SQLSTATE 40P01."""
    cause = exc.__cause__
    return (bool(exc.args) and exc.args[0] == 1213) or getattr(cause, "sqlstate", None) == "40P01"


def _allot(
    requests: Sequence[Sequence[Limit]],
    tat: dict[str, float],
    paused: dict[str, float],
    now: float,
    max_wait: float,
    together: bool,
) -> list[Slot]:
    """The GCRA itself: a slot for each request, moving ``tat`` on for those reserved."""
    blocked: set[str] = set()
    slots: list[Slot] = []
    deadline = now + max_wait
    borrow_until = now + conf.RATE_BORROW_SECONDS
    for request in requests:
        spend: dict[str, Limit] = {}
        ready: dict[str, float] = {}
        for limit in request:
            moment = _moment(limit, tat, paused, now)
            lender = limit.lender
            if lender is not None and lender.name not in blocked:
                lender = replace(lender, cost=limit.cost)
                lent = _moment(lender, tat, paused, now)
                if lent < moment and lent <= borrow_until:
                    limit, moment = lender, lent
            spend[limit.name] = limit
            ready[limit.name] = moment
        at = max(ready.values(), default=now)
        late = {name for name, moment in ready.items() if moment > deadline}
        if late or blocked.intersection(ready):
            blocked.update(late)
            slots.append(Slot(at, False))
            continue
        for name, limit in spend.items():
            if name in tat:
                tat[name] = max(tat[name], at) + limit.cost * limit.rate.interval
        slots.append(Slot(at, True))
        if together:
            deadline = min(deadline, at)
    return slots


def _moment(limit: Limit, tat: dict[str, float], paused: dict[str, float], now: float) -> float:
    """The earliest moment a send fits ``limit``: its pace, and a pause on it."""
    return max(_ready_at(limit, tat.get(limit.name, now)), paused.get(limit.name, now), now)


def _ready_at(limit: Limit, tat: float) -> float:
    """The earliest moment a send of ``limit.cost`` slots fits the bucket at ``tat``.

    Up to the burst this is GCRA's own test. A send of more slots than the burst (ten
    parts on a channel with a burst of five) could never fit; it goes whole once the
    bucket has been idle for its excess as well, so every window at least that many
    intervals long still sees at most ``burst + window * rate``.
    """
    return tat + (limit.cost - 1) * limit.rate.interval - limit.rate.tolerance


def pause(name: str, seconds: float, reason: str) -> datetime:
    """Hold the bucket ``name`` back for everyone for ``seconds``, at most
    ``REMINDERS_MAX_PAUSE_SECONDS`` (never shortens a pause); returns until when it is
    paused."""
    cap = conf.MAX_PAUSE_SECONDS
    if not seconds <= cap:  # also a NaN from a garbled Retry-After
        logger.warning(
            "%s: the provider asked for a pause of %s s, capped at %s s "
            "(REMINDERS_MAX_PAUSE_SECONDS)",
            name,
            f"{seconds:g}",
            f"{cap:g}",
        )
        reason = f"capped at {cap:g} s (asked {seconds:g} s): {reason}"
        seconds = cap
    return _store().pause(name, seconds, reason[:200])


def _store() -> Store:
    alias = conf.RATE_LIMIT_CACHE
    if alias:
        from .cache import CacheStore

        return CacheStore(alias)
    from .database import DatabaseStore

    return DatabaseStore()
