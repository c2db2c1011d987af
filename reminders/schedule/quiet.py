"""Quiet hours: when a recipient is not to be disturbed, and when that ends.

A quiet window is local hours, ``"21:00-08:30"`` (it may run past midnight), leaving at
least an hour of the day open (``MIN_OPEN``: checked here, by ``QuietWindow.parse``, for
a kind's policy, the API, the admin and the model alike), read on the clock the caller
names (the task's for a kind's hours, the recipient's for their own); a working-day
calendar may make its rest days quiet all day as well (the caller says which days are:
``rest_day``). ``quiet_until`` says when the quiet period around a moment ends: a
window's end that falls on a rest day runs on to the next working day, and a rest day
ends on the next day at the window's end (08:00 without a window), never at its
midnight, so the answer is a moment that is not quiet (bounded, however the calendar
reads), and after the moment asked about, the repeated hour of a fall-back night
included: an end the clocks read twice is the second, since between the two they read
quiet times again.

``release`` says when a held message goes: that end plus its stagger, wrapped within
the first half of the open time that follows, so it never lands inside quiet hours again
(and is not held once more when it starts, even half an hour late, a backlog); within a
day of the moment when only a window holds it (a window leaves an hour open; a day of
25 hours is cut short at 24). Rest days of a calendar hold longer: a week's holiday is
quiet all week.

Pure: no database, no clock but the one given. The engine defers a run due inside quiet
hours to their end (``engine.starting``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from ..exceptions import RemindersError
from ..i18n import early_gettext as _
from . import timing

_WINDOW = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]):([0-5][0-9])")
# However a calendar reads (a year of rest days), the search for the end stops here.
MAX_STEPS = 800
# What a window leaves open of each day, at least: a wave staggered over its recipients
# fits in it, and a message held by it goes within a day.
MIN_OPEN = timedelta(hours=1)
DAY = timedelta(hours=24)
# When a rest day ends, on the next working day, for quiet hours without a window.
MORNING = time(8, 0)


class BadQuietHours(RemindersError, ValueError):
    """A quiet window that is not ``HH:MM-HH:MM`` leaving at least an hour open."""


@dataclass(frozen=True)
class QuietWindow:
    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> QuietWindow:
        match = _WINDOW.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise BadQuietHours(
                _("Quiet hours are local times as HH:MM-HH:MM (21:00-08:30), not %(value)r.")
                % {"value": text}
            )
        start = time(int(match.group(1)), int(match.group(2)))
        end = time(int(match.group(3)), int(match.group(4)))
        if start == end:
            raise BadQuietHours(
                _("Quiet hours must start and end at different times, not %(value)r.")
                % {"value": text}
            )
        window = cls(start, end)
        if window.open < MIN_OPEN:
            raise BadQuietHours(
                _(
                    "Quiet hours must leave at least an hour of the day open: %(value)s "
                    "leaves %(minutes)d minutes."
                )
                % {"value": text, "minutes": window.open // timedelta(minutes=1)}
            )
        return window

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"

    @property
    def open(self) -> timedelta:
        """How much of a day (of 24 hours) is outside the window: from its end to its start."""
        minutes = (_minutes(self.start) - _minutes(self.end)) % (24 * 60)
        return timedelta(minutes=minutes)

    def covers(self, clock: time) -> bool:
        if self.start < self.end:
            return self.start <= clock < self.end
        return clock >= self.start or clock < self.end  # past midnight

    def end_after(self, local: datetime) -> date:
        """The local day of the end of the window ``local`` is in."""
        if self.start < self.end or local.time() < self.end:
            return local.date()
        return local.date() + timedelta(days=1)


def quiet_until(
    moment: datetime,
    tz_name: str,
    window: QuietWindow | None,
    rest_day: Callable[[date], bool] | None = None,
) -> datetime | None:
    """When the quiet period around ``moment`` ends, on ``tz_name``'s clock, or None when
    ``moment`` is not quiet: inside ``window``, or on a local day ``rest_day`` says is
    one, and whatever of either follows at once. A rest day ends on the next day at the
    window's end (``MORNING`` without one), never at its midnight; always after
    ``moment``, the repeated hour of a fall-back night included."""
    if window is None and rest_day is None:
        return None
    tz = timing.zone(tz_name)
    at = moment
    for _step in range(MAX_STEPS):
        local = at.astimezone(tz)
        if rest_day is not None and rest_day(local.date()):
            morning = window.end if window is not None else MORNING
            at = _next_wall_clock(local.date() + timedelta(days=1), morning, tz, at, last=True)
            continue
        if window is not None and window.covers(local.time()):
            at = _next_wall_clock(window.end_after(local), window.end, tz, at, last=True)
            continue
        return None if at == moment else at
    return at


def release(
    moment: datetime,
    tz_name: str,
    window: QuietWindow | None,
    rest_day: Callable[[date], bool] | None = None,
    *,
    stagger: timedelta = timedelta(0),
) -> datetime | None:
    """When a message due at ``moment`` inside quiet hours goes (None: it is not): at
    their end (``quiet_until``) plus ``stagger``, wrapped within the first half of the
    open time that follows, so it never lands inside quiet hours again, even started
    late (a backlog); and within a day of ``moment`` when only the window held it (it
    leaves an hour open, ``MIN_OPEN``)."""
    end = quiet_until(moment, tz_name, window, rest_day)
    if end is None:
        return None
    room = _open_after(end, timing.zone(tz_name), window, rest_day) / 2
    goes = end + (stagger % room if stagger >= room else stagger)
    # A day of 25 hours (a fall-back night) may stretch a window past a day: cut short.
    latest = moment + DAY
    return min(goes, latest) if latest > end else goes


def _open_after(
    end: datetime, tz: ZoneInfo, window: QuietWindow | None, rest_day: Callable[[date], bool] | None
) -> timedelta:
    """How long the open time from ``end`` (not quiet) lasts, a day at most: until the
    window starts again, or a rest day does."""
    local = end.astimezone(tz)
    starts = [end + DAY]
    if window is not None:
        day = local.date() if local.time() < window.start else local.date() + timedelta(days=1)
        starts.append(_next_wall_clock(day, window.start, tz, end))
    tomorrow = local.date() + timedelta(days=1)
    if rest_day is not None and rest_day(tomorrow):
        starts.append(_next_wall_clock(tomorrow, time(0), tz, end))
    return max(min(starts) - end, timedelta(seconds=2))


def _next_wall_clock(
    day: date, clock: time, tz: ZoneInfo, after: datetime, *, last: bool = False
) -> datetime:
    """The moment ``tz``'s clocks read ``clock`` on ``day``, after ``after``, in UTC so
    that moments compare as instants; a time inside a DST gap moves past it. When they
    read it twice (the repeated hour of a fall-back night), the first time after
    ``after``, or with ``last`` the second: the end of quiet hours, since between the
    two passes the clocks read times before it, quiet again."""
    naive = datetime.combine(day, clock)
    first = timing.localize(naive, tz).astimezone(UTC)
    second = naive.replace(tzinfo=tz, fold=1).astimezone(UTC)
    repeated = second > first and second.astimezone(tz).replace(tzinfo=None) == naive
    if first > after and not (last and repeated):
        return first
    return second


def _minutes(clock: time) -> int:
    return clock.hour * 60 + clock.minute
