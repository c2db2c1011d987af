"""Working-day calendars a CRM might plug in, for the tests."""

from __future__ import annotations

from datetime import date
from typing import Any

from reminders.calendars import Calendar


class FourDayWeek(Calendar):
    """Monday to Thursday, in the years given as ``OPTIONS: {"years": [first, last]}``."""

    def __init__(self, name: str, *, years: tuple[int, int] = (2020, 2030), **options: Any):
        super().__init__(name, **options)
        self.first, self.last = years

    def is_working_day(self, day: date) -> bool:
        return day.weekday() < 4

    def years(self) -> range:
        return range(self.first, self.last + 1)


class NoWorkingDays(Calendar):
    def is_working_day(self, day: date) -> bool:
        return False

    def years(self) -> range:
        return range(1970, 2100)
