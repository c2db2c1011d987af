"""Working-day calendars, configured like Django's ``CACHES`` in ``REMINDERS_CALENDARS``::

    REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "acme": "crm.calendars.AcmeCalendar",  # a dotted path alone: no OPTIONS
    }

A calendar answers one question, whether a local date is worked, for the years it
covers. A kind's policy names the calendar its occurrences must fall on (``""``: every
day), and a task may name another (``ScheduledTask.calendar``). :func:`day_off` says
why an occurrence's day is not worked, and the run is then recorded as skipped with that
reason instead of being sent.

Invariants:

* A calendar is asked about a date only in a year it covers. A year it does not cover is
  never a guess, neither a working day nor a holiday: :func:`day_off` says
  ``calendar_uncovered`` (the occurrence is skipped, and ops told), whatever the weekday.
* Make-up working days are working days, weekend or not; statutory holidays are not,
  weekday or not.
* The setting is read on use, each backend built once per process, and the registry reset
  on ``setting_changed``, so ``override_settings`` works.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any

import chinese_calendar
from chinese_calendar import constants as chinese_constants
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from .exceptions import RemindersError
from .i18n import early_gettext as _

__all__ = [
    "DEFAULT_CALENDARS",
    "HOLIDAY",
    "UNCOVERED",
    "Calendar",
    "ChineseCalendar",
    "DayOff",
    "UnknownCalendar",
    "day_off",
    "get",
    "names",
]

HOLIDAY = "holiday"
UNCOVERED = "calendar_uncovered"

DEFAULT_CALENDARS: dict[str, Any] = {
    "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
}


class UnknownCalendar(RemindersError, ImproperlyConfigured):
    """A calendar name that ``REMINDERS_CALENDARS`` does not configure."""


class Calendar(ABC):
    """Which local dates are worked, in the years the calendar covers.

    ``name`` is the alias it is configured under; ``OPTIONS`` are passed as keywords.
    """

    def __init__(self, name: str, **options: Any) -> None:
        if options:
            raise TypeError(f"{type(self).__name__} takes no option {', '.join(options)}.")
        self.name = name

    @abstractmethod
    def is_working_day(self, day: date) -> bool:
        """Whether ``day`` is worked; asked only for a year the calendar covers."""

    @abstractmethod
    def years(self) -> range:
        """The years the calendar knows every day of."""

    def covers(self, year: int) -> bool:
        return year in self.years()


class ChineseCalendar(Calendar):
    """Mainland China's official calendar (the State Council's yearly notice), from the
    ``chinesecalendar`` package: statutory holidays rest, make-up weekend days work. A
    new year is covered once a release of the package carries its notice."""

    def is_working_day(self, day: date) -> bool:
        return bool(chinese_calendar.is_workday(day))

    def years(self) -> range:
        known = [*chinese_constants.holidays, *chinese_constants.workdays]
        return range(min(known).year, max(known).year + 1)


@dataclass(frozen=True)
class DayOff:
    """Why a day is not worked by ``calendar``: ``code`` is ``holiday`` or
    ``calendar_uncovered``; ``message`` says it for a person."""

    code: str
    message: str
    calendar: str
    year: int


def day_off(calendar: str, day: date) -> DayOff | None:
    """None when ``day`` is worked by ``calendar`` ("": every day is), else why not."""
    if not calendar:
        return None
    chosen = get(calendar)
    if not chosen.covers(day.year):
        return DayOff(
            UNCOVERED,
            f"Calendar {calendar!r} does not cover {day.year} yet, so whether "
            f"{day.isoformat()} is a working day is unknown: not sent.",
            calendar,
            day.year,
        )
    if chosen.is_working_day(day):
        return None
    return DayOff(
        HOLIDAY,
        f"{day.isoformat()} is a rest day by calendar {calendar!r}.",
        calendar,
        day.year,
    )


_calendars: dict[str, Calendar] = {}


def configured() -> Mapping[str, Any]:
    """``REMINDERS_CALENDARS``, or the default (``cn``) when it is not set."""
    value = getattr(django_settings, "REMINDERS_CALENDARS", DEFAULT_CALENDARS)
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(_("REMINDERS_CALENDARS must be a dict of names to calendars."))
    return value


def names() -> list[str]:
    return sorted(configured())


def get(name: str) -> Calendar:
    """The calendar configured as ``name``, built once per process."""
    calendar = _calendars.get(name)
    if calendar is None:
        calendar = _build(name)
        _calendars[name] = calendar
    return calendar


def _build(name: str) -> Calendar:
    config = configured().get(name)
    if config is None:
        raise UnknownCalendar(
            _("REMINDERS_CALENDARS has no calendar %(name)r (configured: %(names)s).")
            % {"name": name, "names": ", ".join(names()) or _("none")}
        )
    if isinstance(config, str):
        config = {"BACKEND": config}
    try:
        backend = import_string(str(config.get("BACKEND")))
    except ImportError as exc:
        raise ImproperlyConfigured(
            _("Calendar %(name)r: cannot import backend: %(error)s") % {"name": name, "error": exc}
        ) from exc
    if not (isinstance(backend, type) and issubclass(backend, Calendar)):
        raise ImproperlyConfigured(
            _("Calendar %(name)r: %(backend)r is not a Calendar.")
            % {"name": name, "backend": backend}
        )
    try:
        return backend(name, **config.get("OPTIONS", {}))
    except TypeError as exc:
        raise ImproperlyConfigured(
            _("Calendar %(name)r: %(error)s") % {"name": name, "error": exc}
        ) from exc


def reset() -> None:
    _calendars.clear()


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "REMINDERS_CALENDARS":
        reset()
