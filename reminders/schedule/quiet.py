"""Quiet hours: when a recipient is not to be disturbed, and when that ends.

A quiet window is local hours, ``"21:00-08:30"`` (it may run past midnight), leaving at
least an hour of the day open (``MIN_OPEN``: checked here, by ``QuietWindow.parse``, for
a kind's policy, the API, the admin and the model alike), read on the task's clock; a working-day calendar may make its rest days quiet all day as well (the
caller says which days are: ``rest_day``). ``quiet_until`` says when the quiet period
around a moment ends: a window's end that falls on a rest day runs on to the next
working day, and so on, so the answer is a moment that is not quiet (bounded, however
the calendar reads).

Pure: no database, no clock but the one given. The engine defers a run due inside quiet
hours to their end (``engine.starting``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from ..exceptions import RemindersError
from ..i18n import early_gettext as _
from . import timing

_WINDOW = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]):([0-5][0-9])")
# However a calendar reads (a year of rest days), the search for the end stops here.
MAX_STEPS = 800
# What a window leaves open of each day, at least: a wave staggered over its recipients
# fits in it, and a message held by it goes within a day.
MIN_OPEN = timedelta(hours=1)


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
    one, and whatever of either follows at once."""
    if window is None and rest_day is None:
        return None
    tz = timing.zone(tz_name)
    at = moment
    for _step in range(MAX_STEPS):
        local = at.astimezone(tz)
        if rest_day is not None and rest_day(local.date()):
            at = timing.day_start(local.date() + timedelta(days=1), tz_name)
            continue
        if window is not None and window.covers(local.time()):
            end_day = window.end_after(local)
            at = timing.localize(datetime.combine(end_day, window.end), tz)
            continue
        return None if at == moment else at
    return at


def _minutes(clock: time) -> int:
    return clock.hour * 60 + clock.minute
