"""Occurrences of a schedule in a time zone, and the deterministic stagger of each.

Cron expressions are evaluated on the local wall clock of the task's time zone:
each matching wall-clock time fires once. A time that does not exist (skipped by a
spring-forward change) fires at the same distance after the gap, as the clocks read
after the change (02:30 becomes 03:30); a time that exists twice (fall back) fires at
its first instance.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, croniter

CRON_FIELDS = 5
# The longest gap between two occurrences of a schedule that fires at all: February 29
# skips a century year that is not a leap year (2096, then 2104), so eight years.
CRON_SEARCH_YEARS = 10


class InvalidSchedule(ValueError):
    """A cron expression or time zone that cannot be used."""


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(f"{name!r} is not a known IANA time zone.") from None


def validate_cron(expression: str) -> None:
    _check_cron(expression.strip())


# Remembered per expression (the valid ones: an exception is never cached), since
# thousands of tasks scheduled at once share a few hundred expressions. Whether five cron
# fields fire within ten years does not depend on the year one starts counting from.
@lru_cache(maxsize=1024)
def _check_cron(expression: str) -> None:
    if not expression.startswith("@") and len(expression.split()) != CRON_FIELDS:
        raise InvalidSchedule(f"{expression!r} must have 5 fields (minute hour day month weekday).")
    if not croniter.is_valid(expression):
        raise InvalidSchedule(f"{expression!r} is not a valid cron expression.")
    start = datetime.now(UTC).replace(tzinfo=None)
    try:
        croniter(expression, start, max_years_between_matches=CRON_SEARCH_YEARS).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidSchedule(
            f"{expression!r} never fires (no occurrence in {CRON_SEARCH_YEARS} years)."
        ) from None


@lru_cache(maxsize=1024)
def fires_at_most_daily(expression: str) -> bool:
    """True when no day holds two occurrences (one minute and one hour value)."""
    fields, _ = croniter.expand(expression)
    minutes, hours = fields[0], fields[1]
    return len(minutes) == 1 and len(hours) == 1 and minutes[0] != "*" and hours[0] != "*"


def localize(naive: datetime, tz: ZoneInfo) -> datetime:
    """Attach ``tz`` to a wall-clock time, moving times inside a DST gap past it."""
    aware = naive.replace(tzinfo=tz)
    # A wall time in the gap does not survive the round trip through UTC.
    if aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != naive:
        # fold=0 in a gap uses the offset before the change: 02:30 EST is 03:30 EDT.
        return aware.astimezone(UTC).astimezone(tz)
    return aware


def wall_clock_in(naive: datetime, tz_name: str) -> datetime:
    """The moment the clocks of ``tz_name`` read ``naive`` (``localize``), for input
    still to be validated: a zone that is not valid, or a time at the very ends of
    ``datetime``'s range, gives the time in UTC, and validation reports the fault on its
    own field."""
    try:
        return localize(naive, zone(tz_name))
    except (InvalidSchedule, OverflowError):
        return naive.replace(tzinfo=UTC)


@lru_cache(maxsize=4096)
def next_occurrence(expression: str, tz_name: str, after: datetime) -> datetime:
    """The first occurrence strictly after ``after`` (aware), as an aware UTC datetime.

    A pure function of its arguments, remembered: tasks scheduled together are planned
    from one ``now``, so thousands of them cost one computation per distinct schedule."""
    tz = zone(tz_name)
    start = after.astimezone(tz).replace(tzinfo=None)
    itr = croniter(expression, start)
    # A few candidates at most: gap times map after later wall times and can land at
    # or before ``after``, in which case the next wall time is the answer.
    for _ in range(1000):
        candidate = localize(itr.get_next(datetime), tz).astimezone(UTC)
        if candidate > after:
            return candidate
    raise InvalidSchedule(f"{expression!r} has no occurrence after {after.isoformat()}.")


def local_date(moment: datetime, tz_name: str) -> date:
    return moment.astimezone(zone(tz_name)).date()


def local_day(moment: datetime, tz_name: str) -> tuple[datetime, datetime]:
    """The local day around ``moment`` in ``tz_name``: its first instant and the next
    day's, both aware. A midnight skipped by a DST change starts the day after the gap."""
    day = local_date(moment, tz_name)
    return day_start(day, tz_name), day_start(day + timedelta(days=1), tz_name)


def window(moment: datetime, tz_name: str, seconds: int) -> tuple[datetime, datetime]:
    """The window of ``seconds`` around ``moment`` on the wall clock of ``tz_name``:
    windows are counted from local midnight (09:00-09:15, 09:15-09:30 for 900 s), the
    day's last one ends at midnight, so that no window spans two local days, and a DST
    change moves no window's wall-clock bounds (a bound in a gap moves past it)."""
    tz = zone(tz_name)
    local = moment.astimezone(tz)
    into = local.hour * 3600 + local.minute * 60 + local.second
    first = into // seconds * seconds
    day = datetime.combine(local.date(), time())
    start = localize(day + timedelta(seconds=first), tz)
    if first + seconds >= 24 * 3600:
        return start, day_start(local.date() + timedelta(days=1), tz_name)
    return start, localize(day + timedelta(seconds=first + seconds), tz)


def day_start(day: date, tz_name: str) -> datetime:
    """The first instant of the local ``day`` in ``tz_name``, aware (see ``local_day``)."""
    return localize(datetime.combine(day, datetime.min.time()), zone(tz_name))


def local_time_on_day(moment: datetime, tz_name: str, clock: str) -> datetime:
    """``clock`` ("12:00") on ``moment``'s local day in ``tz_name``, aware; a time inside
    a DST gap moves past it, as occurrences do."""
    tz = zone(tz_name)
    hour, minute = (int(part) for part in clock.split(":"))
    day = moment.astimezone(tz).date()
    return localize(datetime.combine(day, time(hour, minute)), tz)


def fraction(*parts: object) -> float:
    """A stable number in [0, 1) from the parts: the same input always gives the same."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def stagger(
    *,
    recipient: str,
    jitter_seconds: int,
    batches: int,
    batch_interval_seconds: int,
) -> timedelta:
    """The delay after an occurrence at which its run falls due: a function of the
    recipient alone (and the kind's stagger), the same for each of its occurrences.

    Recipients are split by hash into ``batches`` groups ``batch_interval`` apart, and
    each gets a random-looking but deterministic offset within ``jitter``. So a re-plan
    gives the same time, tests can predict it, and one recipient's messages of a kind
    keep the order of their occurrences (the same offset moves them all), while a
    thousand recipients due at 09:00 spread over the batches and the jitter.
    """
    batch = int(fraction("batch", recipient) * batches) if batches > 1 else 0
    jitter = fraction("jitter", recipient) * jitter_seconds
    return timedelta(seconds=batch * batch_interval_seconds + int(jitter))
