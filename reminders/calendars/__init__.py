"""Working-day calendars: which local dates are worked, for the kinds that follow them.

Owns: the backends configured in ``REMINDERS_CALENDARS`` and the order in which a date
is decided (``backends``), the days and years ops enter (``days``), and how long the
calendars in use are covered (``coverage``). Imports the models and ``schedule``; never
the engine, the messages or the admin, which ask it.

``reminders.calendars.ChineseCalendar`` (the path settings name) and the module's other
public names are re-exported here from ``backends``.
"""

from .backends import (
    COVERAGE_HORIZON,
    DEFAULT_CALENDARS,
    FALLBACK,
    HOLIDAY,
    OPS,
    PACKAGE,
    SKIP,
    UNCOVERED,
    UNCOVERED_RULES,
    WEEKDAYS,
    Calendar,
    ChineseCalendar,
    DayOff,
    Decision,
    UnknownCalendar,
    configured,
    covered_until,
    covers,
    day_off,
    decide,
    get,
    names,
    reset,
)

__all__ = [
    "COVERAGE_HORIZON",
    "DEFAULT_CALENDARS",
    "FALLBACK",
    "HOLIDAY",
    "OPS",
    "PACKAGE",
    "SKIP",
    "UNCOVERED",
    "UNCOVERED_RULES",
    "WEEKDAYS",
    "Calendar",
    "ChineseCalendar",
    "DayOff",
    "Decision",
    "UnknownCalendar",
    "configured",
    "covered_until",
    "covers",
    "day_off",
    "decide",
    "get",
    "names",
    "reset",
]
