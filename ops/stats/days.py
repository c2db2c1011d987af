"""The local day of ``settings.TIME_ZONE`` the numbers are of: its bounds, its hours, the
stretches a run's due time falls in, and instants and ages as the JSON writes them.

Invariants: a day is a local day, 23, 24 or 25 hours long across a DST change, and its
bounds are instants in UTC; its hours are cut by elapsed time, never by the wall clock.
``bucket_of`` (SQL, without time zone functions) and ``index`` (Python) put a due time in
the same stretch. A caller may ask for a day from 1971 to 2099 only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta

from django.conf import settings as django_settings
from django.db.models import Case, IntegerField, Value, When
from django.utils import timezone

from reminders.schedule import timing


def zone_name() -> str:
    return str(django_settings.TIME_ZONE or "UTC")


def today(now: datetime | None = None) -> date:
    """The local date of ``now`` in ``settings.TIME_ZONE``."""
    return timing.local_date(now or timezone.now(), zone_name())


# Days a caller may ask for: outside, a year cannot hold runs, and the ends of ``date``
# would overflow.
FIRST_YEAR, LAST_YEAR = 1971, 2099


def parse_day(raw: str) -> date:
    """A day written ``YYYY-MM-DD``, from 1971 to 2099; ValueError otherwise."""
    day = date.fromisoformat(raw)
    if len(raw) != 10 or not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise ValueError(f"not a day from {FIRST_YEAR} to {LAST_YEAR}: {raw!r}")
    return day


def day_bounds(day: date) -> tuple[datetime, datetime]:
    """The first instant of ``day`` in ``settings.TIME_ZONE`` and of the next day, in UTC:
    Python subtracts and adds aware datetimes of one zone on the wall clock, which a DST
    day would get wrong by an hour."""
    tz = timing.zone(zone_name())
    start = timing.localize(datetime.combine(day, time.min), tz)
    end = timing.localize(datetime.combine(day + timedelta(days=1), time.min), tz)
    return start.astimezone(UTC), end.astimezone(UTC)


def hour_starts(start: datetime, end: datetime) -> list[datetime]:
    """The instants that cut a local day into hours: 23, 24 or 25 of them, by the clock
    of elapsed time (a day's DST change makes one hour's label repeat or go missing)."""
    count = math.ceil((end - start).total_seconds() / 3600)
    return [start + timedelta(hours=i) for i in range(count)]


def label(moment: datetime, fmt: str) -> str:
    """``moment`` on the clock of ``settings.TIME_ZONE``, written with ``fmt``."""
    return moment.astimezone(timing.zone(zone_name())).strftime(fmt)


def bucket_of(bounds: Sequence[datetime]) -> Case:
    """The index of the stretch ``[bounds[i], bounds[i + 1])`` holding a run's due time,
    as SQL every database runs (no time zone functions: MariaDB may lack their tables)."""
    whens = [When(due_at__lt=bound, then=Value(i)) for i, bound in enumerate(bounds[1:-1])]
    return Case(*whens, default=Value(len(bounds) - 2), output_field=IntegerField())


def index(bounds: Sequence[datetime], moment: datetime) -> int:
    """``bucket_of`` in Python."""
    for i, bound in enumerate(bounds[1:-1]):
        if moment < bound:
            return i
    return len(bounds) - 2


def local_iso(moment: datetime) -> str:
    """``moment`` in ISO 8601 on the clock of ``settings.TIME_ZONE``, with its offset."""
    return moment.astimezone(timing.zone(zone_name())).isoformat()


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else local_iso(moment)


def tenths(seconds: float | None) -> float | None:
    """An age or a wait in seconds, rounded to the tenth as the JSON writes it."""
    return None if seconds is None else round(seconds, 1)
