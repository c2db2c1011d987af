"""Deprecated: moved to ``reminders.admin.calendar`` (the calendar days' admin).

Kept for code that still imports ``reminders.admin_calendar``: it re-exports that
module's names, the same objects, and warns on import with the new path."""

from __future__ import annotations

import warnings

from .admin.calendar import (
    RANGE_DAYS,
    CalendarDayAdmin,
    CalendarDayForm,
    CalendarEditAdmin,
    CalendarYearAdmin,
    CalendarYearForm,
    RangeForm,
)

__all__ = [
    "RANGE_DAYS",
    "CalendarDayAdmin",
    "CalendarDayForm",
    "CalendarEditAdmin",
    "CalendarYearAdmin",
    "CalendarYearForm",
    "RangeForm",
]

warnings.warn(
    "reminders.admin_calendar is deprecated: import from reminders.admin.calendar instead.",
    DeprecationWarning,
    stacklevel=2,
)
