"""Calendar days kept by ops: the official schedule of a year, entered when it is
published, whatever the calendar package knows (``reminders.calendars`` reads them).

* ``CalendarDay``: one date of one configured calendar, ``rest`` or ``working``, with a
  note naming its source (the notice's number), who changed it and when. It decides
  that date over the calendar's backend.
* ``CalendarYear``: a year of a calendar that ops declare entered in full (the year's
  notice, every holiday and make-up day of it). Such a year is *covered*: its days not
  entered follow Monday to Friday, and no one is warned of it. A year that neither the
  backend nor a ``CalendarYear`` covers falls back to the calendar's ``UNCOVERED`` rule,
  loudly (``reminders.calendars``). Entering single days does not cover their year: a
  company day off entered in March must not silence the warning that the next year's
  notice is missing.

Invariants, in the database: one row per calendar and date, and per calendar and year
(unique constraints); a day's kind is ``rest`` or ``working`` and a year is a plausible
one (check constraints). Rows are written through ``enter`` (the CSV import and the
admin's range form) or the admin's own form. ``entries`` reads a calendar's rows, all
years at once (two queries), and keeps them in the process for ``ENTRIES_SECONDS``:
planning never costs a query per run, and another process sees an edit within that
time; every write makes this process forget what it read (``forget``), at once and
again after the commit. Editing them needs ``reminders.edit_calendarday``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.utils.translation import gettext_lazy as _

EDIT_PERMISSION = "reminders.edit_calendarday"
FIRST_YEAR, LAST_YEAR = 1900, 2200


class DayKind(models.TextChoices):
    REST = "rest", _("rest day")
    WORKING = "working", _("working day")


class DaySource(models.TextChoices):
    """What decided a run's day (``TaskRun.day_source``)."""

    PACKAGE = "package", _("calendar package")
    OPS = "ops", _("ops entry")
    FALLBACK = "fallback", _("fallback rule")


class CalendarDay(models.Model):
    calendar = models.CharField(_("calendar"), max_length=64)
    day = models.DateField(_("date"))
    kind = models.CharField(
        _("rest or working"), max_length=max(len(v) for v in DayKind.values), choices=DayKind
    )
    note = models.CharField(
        _("source"),
        max_length=200,
        help_text=_("Where this comes from, e.g. the official notice's number."),
    )
    changed_by = models.CharField(_("changed by"), max_length=150, blank=True)
    changed_at = models.DateTimeField(_("changed"), auto_now=True)

    class Meta:
        app_label = "reminders"
        verbose_name = _("calendar day")
        verbose_name_plural = _("calendar days")
        ordering = ("calendar", "day")
        constraints = [
            models.UniqueConstraint(fields=["calendar", "day"], name="reminders_calendarday_once"),
            models.CheckConstraint(
                name="reminders_calendarday_kind", condition=Q(kind__in=["rest", "working"])
            ),
        ]
        permissions = [("edit_calendarday", "Can edit the working-day calendar")]

    def __str__(self) -> str:
        return f"{self.calendar} {self.day.isoformat()} {self.kind}"


class CalendarYear(models.Model):
    calendar = models.CharField(_("calendar"), max_length=64)
    year = models.PositiveSmallIntegerField(_("year"))
    note = models.CharField(
        _("source"),
        max_length=200,
        help_text=_("The official notice entered in full, e.g. its number."),
    )
    changed_by = models.CharField(_("changed by"), max_length=150, blank=True)
    changed_at = models.DateTimeField(_("changed"), auto_now=True)

    class Meta:
        app_label = "reminders"
        verbose_name = _("calendar year entered in full")
        verbose_name_plural = _("calendar years entered in full")
        ordering = ("calendar", "year")
        constraints = [
            models.UniqueConstraint(
                fields=["calendar", "year"], name="reminders_calendaryear_once"
            ),
            models.CheckConstraint(
                name="reminders_calendaryear_plausible",
                condition=Q(year__gte=FIRST_YEAR, year__lte=LAST_YEAR),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.calendar} {self.year}"


@dataclass(frozen=True)
class Entry:
    """One day to enter: its date, ``rest`` or ``working``, and its source."""

    day: date
    kind: str
    note: str


@dataclass(frozen=True)
class Entered:
    """What ``enter`` did: days new, days changed, days already so, and the years it
    declared entered in full."""

    created: int
    changed: int
    unchanged: int
    years: tuple[int, ...]


def enter(
    calendar: str,
    entries: Sequence[Entry],
    *,
    by: str,
    complete: Iterable[int] = (),
    note: str = "",
) -> Entered:
    """Save ``entries`` in ``calendar`` (a date entered before takes the new kind and
    note), and declare the years in ``complete`` entered in full (with ``note``, else
    the first entry's); all in one transaction, with two queries to read what is there
    and one statement per kind of write."""
    by = by[:150]
    with transaction.atomic():
        known = {
            row.day: row
            for row in CalendarDay.objects.select_for_update().filter(
                calendar=calendar, day__in=[entry.day for entry in entries]
            )
        }
        new, changed, unchanged = [], [], 0
        for entry in entries:
            row = known.get(entry.day)
            if row is None:
                new.append(
                    CalendarDay(
                        calendar=calendar,
                        day=entry.day,
                        kind=entry.kind,
                        note=entry.note,
                        changed_by=by,
                    )
                )
            elif (row.kind, row.note) != (entry.kind, entry.note):
                row.kind, row.note, row.changed_by = entry.kind, entry.note, by
                changed.append(row)
            else:
                unchanged += 1
        CalendarDay.objects.bulk_create(new)
        for row in changed:  # auto_now is set by save(), which bulk_update skips
            row.save(update_fields=["kind", "note", "changed_by", "changed_at"])
        years = tuple(sorted(set(complete)))
        year_note = note or (entries[0].note if entries else "")
        for year in years:
            CalendarYear.objects.update_or_create(
                calendar=calendar, year=year, defaults={"note": year_note, "changed_by": by}
            )
        transaction.on_commit(forget)
    forget()
    return Entered(len(new), len(changed), unchanged, years)


# Ops entries are read again after this long (another process's edits).
ENTRIES_SECONDS = 30.0


@dataclass(frozen=True)
class Entries:
    """Ops entries of one calendar: date to (kind, note), and year entered in full to
    its note; when they were read (``time.monotonic``)."""

    days: dict[date, tuple[str, str]]
    years: dict[int, str]
    read_at: float


_entries: dict[str, Entries] = {}


def entries(calendar: str) -> Entries:
    """The calendar's ops entries, read at most every ``ENTRIES_SECONDS``."""
    known = _entries.get(calendar)
    now = time.monotonic()
    if known is None or now - known.read_at > ENTRIES_SECONDS:
        days = {
            day: (kind, note)
            for day, kind, note in CalendarDay.objects.filter(calendar=calendar).values_list(
                "day", "kind", "note"
            )
        }
        years = dict(CalendarYear.objects.filter(calendar=calendar).values_list("year", "note"))
        known = Entries(days, years, now)
        _entries[calendar] = known
    return known


def forget() -> None:
    """Read ops entries again on next use (they changed)."""
    _entries.clear()


@receiver(post_save, sender=CalendarDay, dispatch_uid="reminders.calendar_day_saved")
@receiver(post_delete, sender=CalendarDay, dispatch_uid="reminders.calendar_day_deleted")
@receiver(post_save, sender=CalendarYear, dispatch_uid="reminders.calendar_year_saved")
@receiver(post_delete, sender=CalendarYear, dispatch_uid="reminders.calendar_year_deleted")
def _forget_on_change(**kwargs: Any) -> None:
    """This process reads the days again at once (after the commit too, so that a
    read inside the transaction does not keep what it saw)."""
    forget()
    transaction.on_commit(forget)
