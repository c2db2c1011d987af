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

Three sources decide a date, in this order (:func:`decide`; the run records which,
``TaskRun.day_source``, with its note):

1. ``ops``: a date ops entered for the calendar (``reminders.calendars.days.CalendarDay``,
   the admin or ``reminders_calendar import``), whatever the backend says of it.
2. ``package``: the backend, in a year it covers.
3. ``ops`` again for a year ops declared entered in full (``CalendarYear``): its other
   days follow Monday to Friday.
4. ``fallback``: a year nobody covers follows the calendar's ``UNCOVERED`` rule::

       "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "weekdays"}

   ``weekdays`` (the default): Monday to Friday worked, so reports never silently stop;
   ``skip``: no day is worked (``calendar_uncovered``, the behaviour before ops entries).
   Either way it is loud: ``signals.calendar_uncovered`` for each occurrence so decided,
   and from ``REMINDERS_CALENDAR_WARN_DAYS`` (60) days before a calendar's coverage
   ends (:func:`covered_until`) the ops app alerts daily, shows a banner and exports
   the date.

Invariants:

* A calendar backend is asked about a date only in a year it covers; an uncovered year is
  never a guess of the backend's, only the stated rule, and says so.
* Make-up working days are working days, weekend or not; statutory holidays are not,
  weekday or not.
* The setting is read on use, each backend built once per process, and the registry reset
  on ``setting_changed``, so ``override_settings`` works. A rule other than ``weekdays``
  or ``skip`` is ``ImproperlyConfigured`` (system check ``reminders.E010``).
* Ops entries are read per calendar, all years at once, and kept in the process for a
  while (``days.entries``): planning never costs a query per run. Runs already
  planned keep what was decided when they were planned.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import chinese_calendar
from chinese_calendar import constants as chinese_constants
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from ..exceptions import RemindersError
from ..i18n import early_gettext as _
from . import days
from .days import DaySource, entries

__all__ = [
    "DEFAULT_CALENDARS",
    "FALLBACK",
    "HOLIDAY",
    "OPS",
    "PACKAGE",
    "UNCOVERED",
    "Calendar",
    "ChineseCalendar",
    "DayOff",
    "Decision",
    "UnknownCalendar",
    "covered_until",
    "day_off",
    "decide",
    "get",
    "names",
]

HOLIDAY = "holiday"
UNCOVERED = "calendar_uncovered"
# What decided a date (``Decision.source``).
PACKAGE = DaySource.PACKAGE.value
OPS = DaySource.OPS.value
FALLBACK = DaySource.FALLBACK.value
# The rules for a year nobody covers (``UNCOVERED`` beside ``BACKEND``).
WEEKDAYS = "weekdays"
SKIP = "skip"
UNCOVERED_RULES = (WEEKDAYS, SKIP)

DEFAULT_CALENDARS: dict[str, Any] = {
    "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
}


class UnknownCalendar(RemindersError, ImproperlyConfigured):
    """A calendar name that ``REMINDERS_CALENDARS`` does not configure."""


class Calendar(ABC):
    """Which local dates are worked, in the years the calendar covers.

    ``name`` is the alias it is configured under; ``OPTIONS`` are passed as keywords.
    """

    # The rule for a year it does not cover (``UNCOVERED``): set by the registry.
    uncovered: str = WEEKDAYS

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

    def source(self) -> str:
        """Where its days come from, for a person: a package and its version."""
        return type(self).__name__


class ChineseCalendar(Calendar):
    """Mainland China's official calendar (the State Council's yearly notice), from the
    ``chinesecalendar`` package: statutory holidays rest, make-up weekend days work. A
    new year is covered once a release of the package carries its notice."""

    def is_working_day(self, day: date) -> bool:
        return bool(chinese_calendar.is_workday(day))

    def years(self) -> range:
        return _chinese_years()

    def source(self) -> str:
        return _chinesecalendar_release()


@cache
def _chinese_years() -> range:
    """The years the package's data spans, read once (it is asked for every run)."""
    known = [*chinese_constants.holidays, *chinese_constants.workdays]
    return range(min(known).year, max(known).year + 1)


@cache
def _chinesecalendar_release() -> str:
    """The package and its version, read once (every run records it)."""
    try:
        return f"chinesecalendar {version('chinesecalendar')}"
    except PackageNotFoundError:  # pragma: no cover - installed without metadata
        return "chinesecalendar"


@dataclass(frozen=True)
class DayOff:
    """Why a day is not worked by ``calendar``: ``code`` is ``holiday`` or
    ``calendar_uncovered``; ``message`` says it for a person, naming the source."""

    code: str
    message: str
    calendar: str
    year: int
    source: str = ""
    note: str = ""


@dataclass(frozen=True)
class Decision:
    """What ``calendar`` says of ``day``: worked or not, which source decided
    (``package``, ``ops``, ``fallback``) and its note (the package and version, the
    notice ops named, or the rule); ``rule`` is the fallback rule when it decided."""

    calendar: str
    day: date
    working: bool
    source: str
    note: str
    rule: str = ""

    @property
    def uncovered(self) -> bool:
        """Whether no one covers the day's year (the fallback rule decided)."""
        return self.source == FALLBACK

    def day_off(self) -> DayOff | None:
        """None when worked, else why not."""
        if self.working:
            return None
        year = self.day.year
        if self.rule == SKIP:
            return DayOff(
                UNCOVERED,
                f"Calendar {self.calendar!r} does not cover {year} yet, so whether "
                f"{self.day.isoformat()} is a working day is unknown: not sent "
                f"(fallback rule {SKIP!r}).",
                self.calendar,
                year,
                self.source,
                self.note,
            )
        return DayOff(
            HOLIDAY,
            f"{self.day.isoformat()} is a rest day by calendar {self.calendar!r} ({self.said()}).",
            self.calendar,
            year,
            self.source,
            self.note,
        )

    def said(self) -> str:
        """The source and its note, for a person (English: a run's record)."""
        if self.source == OPS:
            return f"ops entry: {self.note}"
        if self.source == PACKAGE:
            return f"package: {self.note}"
        return self.note


def decide(calendar: str, day: date) -> Decision | None:
    """What ``calendar`` says of ``day`` (the module docstring's order); None for ""
    (every day is worked)."""
    if not calendar:
        return None
    chosen = get(calendar)
    known = entries(calendar)
    entry = known.days.get(day)
    if entry is not None:
        kind, note = entry
        return Decision(calendar, day, kind == "working", OPS, note)
    if chosen.covers(day.year):
        return Decision(calendar, day, chosen.is_working_day(day), PACKAGE, chosen.source())
    weekday = day.weekday() < 5
    if day.year in known.years:
        return Decision(calendar, day, weekday, OPS, known.years[day.year])
    rule = chosen.uncovered
    note = f"fallback rule {rule!r}: calendar {calendar!r} does not cover {day.year}"
    return Decision(calendar, day, weekday and rule == WEEKDAYS, FALLBACK, note, rule)


def day_off(calendar: str, day: date) -> DayOff | None:
    """None when ``day`` is worked by ``calendar`` ("": every day is), else why not."""
    decision = decide(calendar, day)
    return None if decision is None else decision.day_off()


def covers(calendar: str, year: int) -> bool:
    """Whether the backend or ops (a year entered in full) cover ``year``."""
    return get(calendar).covers(year) or year in entries(calendar).years


# ``covered_until`` looks this many years ahead at most (a backend may cover them all).
COVERAGE_HORIZON = 100


def covered_until(calendar: str, today: date | None = None) -> date:
    """The last day of the run of covered years from ``today``'s (default: the current
    local date), at most ``COVERAGE_HORIZON`` years on; the eve of its year when
    ``today``'s own year is not covered."""
    from django.utils import timezone

    first = (today or timezone.localdate()).year
    year = first
    while year < first + COVERAGE_HORIZON and covers(calendar, year):
        year += 1
    return date(year - 1, 12, 31)


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
    rule = config.get("UNCOVERED", WEEKDAYS)
    if rule not in UNCOVERED_RULES:
        raise ImproperlyConfigured(
            _("Calendar %(name)r: UNCOVERED must be one of %(rules)s, not %(value)r.")
            % {"name": name, "rules": ", ".join(UNCOVERED_RULES), "value": rule}
        )
    try:
        calendar = backend(name, **config.get("OPTIONS", {}))
    except TypeError as exc:
        raise ImproperlyConfigured(
            _("Calendar %(name)r: %(error)s") % {"name": name, "error": exc}
        ) from exc
    calendar.uncovered = rule
    return calendar


def reset() -> None:
    _calendars.clear()
    days.forget()


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting == "REMINDERS_CALENDARS":
        reset()
