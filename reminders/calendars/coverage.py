"""How long the working-day calendars in use are covered, for the warnings ops get.

A calendar is *in use* when a registered kind's policy or a live (active or paused)
task names it. Its coverage ends on ``calendars.covered_until``: the last day of the run
of years, from the current one, that its package or ops (a year entered in full) cover.
It is *ending* from ``REMINDERS_CALENDAR_WARN_DAYS`` (default 60) days before that day
until the next year is covered (and when the current year is not covered at all); 0
turns the warnings off. The ops app turns this into a
daily alert, a banner on the dashboard and the task pages, and a metric; this module
only answers, with a handful of queries whatever the number of tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db.models import QuerySet
from django.utils import timezone

from .. import calendars, kinds
from ..conf import settings as conf


@dataclass(frozen=True)
class Coverage:
    """A calendar covered until ``until`` (inclusive), ``days_left`` after ``today``
    (negative once passed), and its rule for what comes after."""

    calendar: str
    until: date
    days_left: int
    rule: str

    @property
    def next_year(self) -> int:
        return self.until.year + 1


def named(live: QuerySet[Any] | None) -> set[str]:
    """The calendar names the registered kinds' policies give, and those the ``live``
    tasks name themselves; configured or not."""
    used: set[str | None] = set()
    for kind in kinds.names():
        try:
            used.add(kinds.policy(kind).calendar)
        except ImproperlyConfigured:
            continue
    if live is not None:
        used.update(
            live.exclude(calendar__isnull=True).values_list("calendar", flat=True).distinct()
        )
    return {name for name in used if name}


def in_use() -> list[str]:
    """The configured calendars that kinds or live (active or paused) tasks name, sorted."""
    from ..models import ScheduledTask

    live = ScheduledTask.objects.filter(
        status__in=(ScheduledTask.Status.ACTIVE, ScheduledTask.Status.PAUSED)
    )
    known = set(calendars.names())
    return sorted(name for name in named(live) if name in known)


def coverage(name: str, today: date) -> Coverage:
    until = calendars.covered_until(name, today)
    return Coverage(name, until, (until - today).days, calendars.get(name).uncovered)


def covered(today: date | None = None) -> list[Coverage]:
    """How far each calendar in use is covered from ``today`` (default: the current local
    date); one that cannot be read is left out (the system checks say why)."""
    today = today or timezone.localdate()
    found = []
    for name in in_use():
        try:
            found.append(coverage(name, today))
        except ImproperlyConfigured:
            continue
    return found


def is_ending(one: Coverage) -> bool:
    """Whether ``one`` ends within ``REMINDERS_CALENDAR_WARN_DAYS``, or has ended; never
    with the warnings off (0)."""
    within = conf.CALENDAR_WARN_DAYS
    return within != 0 and one.days_left < within


def ending(today: date | None = None) -> list[Coverage]:
    """The calendars in use whose coverage ends within ``REMINDERS_CALENDAR_WARN_DAYS``
    of ``today`` (default: the current local date), or has ended."""
    if conf.CALENDAR_WARN_DAYS == 0:
        return []
    return [one for one in covered(today) if is_ending(one)]
