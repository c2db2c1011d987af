"""A year's official schedule from a CSV file, and the year printed back for checking:
what ``reminders_calendar import`` and ``show`` do.

The file is ``date,rest|working,note`` per line (``2027-02-08,rest,<the notice's number>``),
UTF-8 with or without the byte-order mark, read as ``reminders_import`` reads its files
(``reminders.intake.importing``: the same decoding, the same line numbers, the same errors). A
first line whose first cell is ``date`` is a header and skipped; empty lines too.

Invariants: all or nothing. Every line is checked (an ISO 8601 date, ``rest`` or
``working``, a note naming the source of at most 200 characters, a date given once)
before anything is written, and every bad line is reported with its number and the
column at fault; then nothing is saved. An import declares the years of its dates
entered in full (``CalendarYear``): the file is the year's notice. A dry run checks and
saves nothing.
"""

from __future__ import annotations

import calendar as month_grid
import csv
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .. import calendars
from ..calendars import days as calendar_days
from ..calendars.days import DayKind, Entered, Entry, enter
from . import importing
from .importing import ImportFailed, RowError

NOTE_LENGTH = 200


@dataclass(frozen=True)
class Report:
    """What an import did, or in a dry run would have done."""

    calendar: str
    days: int
    years: tuple[int, ...]
    entered: Entered | None

    def __str__(self) -> str:
        values = {
            "days": ngettext("%(n)d day", "%(n)d days", self.days) % {"n": self.days},
            "calendar": self.calendar,
            "years": ", ".join(str(year) for year in self.years) or "-",
        }
        if self.entered is None:
            return (
                _(
                    "Dry run: %(days)s of calendar %(calendar)r checked, all good; "
                    "%(years)s would be entered in full. Nothing was saved."
                )
                % values
            )
        return _(
            "Imported %(days)s into calendar %(calendar)r (%(created)d new, %(changed)d "
            "changed, %(unchanged)d as they were); %(years)s entered in full."
        ) % {
            **values,
            "created": self.entered.created,
            "changed": self.entered.changed,
            "unchanged": self.entered.unchanged,
        }


def import_csv(path: Path, calendar: str, *, by: str, dry_run: bool = False) -> Report:
    """Enter the file's days into ``calendar`` and declare their years entered in full;
    ``ImportFailed`` (nothing saved) listing every bad line."""
    calendars.get(calendar)  # UnknownCalendar, before the file is read
    entries = read(importing.lines_of(path))
    years = tuple(sorted({entry.day.year for entry in entries}))
    if dry_run:
        return Report(calendar, len(entries), years, None)
    entered = enter(calendar, entries, by=by, complete=years)
    return Report(calendar, len(entries), years, entered)


def read(lines: Iterable[str]) -> list[Entry]:
    """The entries of the lines; ``ImportFailed`` naming every bad one."""
    entries: list[Entry] = []
    errors: list[RowError] = []
    first_line: dict[date, int] = {}
    for line, cells in importing._records(csv.reader(lines)):
        cells = [cell.strip() for cell in cells]
        if not any(cells):
            continue
        if line == 1 and cells[0].lower().lstrip("\ufeff") == "date":
            continue
        entry, problems = _entry(cells)
        errors += [RowError(line, field, message) for field, message in problems]
        if entry is None:
            continue
        if entry.day in first_line:
            errors.append(
                RowError(
                    line,
                    "date",
                    _("%(day)s is also on line %(line)d: give each date once.")
                    % {"day": entry.day.isoformat(), "line": first_line[entry.day]},
                )
            )
            continue
        first_line[entry.day] = line
        entries.append(entry)
    if not entries and not errors:
        errors.append(RowError(0, "", _("The file has no dates.")))
    if errors:
        raise ImportFailed(errors)
    return entries


def _entry(cells: list[str]) -> tuple[Entry | None, list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    if len(cells) != 3:
        problems.append(
            (
                "",
                _("A line has 3 cells: date, rest or working, note; not %(n)d.")
                % {"n": len(cells)},
            )
        )
        return None, problems
    text, kind, note = cells
    day = None
    try:
        day = date.fromisoformat(text)
    except ValueError:
        problems.append(("date", _("%(value)r is not a date as YYYY-MM-DD.") % {"value": text}))
    if kind.lower() not in DayKind.values:
        problems.append(("kind", _("%(value)r is not rest or working.") % {"value": kind}))
    if not note:
        problems.append(("note", _("Name the source, e.g. the official notice's number.")))
    elif len(note) > NOTE_LENGTH:
        problems.append(
            (
                "note",
                _("At most %(n)d characters, not %(length)d.")
                % {"n": NOTE_LENGTH, "length": len(note)},
            )
        )
    if problems or day is None:
        return None, problems
    return Entry(day, kind.lower(), note), []


# The printout ----------------------------------------------------------------------

REST_MARK = "*"
WORKING_WEEKEND_MARK = "+"


def year_text(calendar: str, year: int) -> str:
    """``year`` of ``calendar`` month by month, as a person checks it against the
    notice: each day with ``*`` if rested, ``+`` if a weekend day worked; under each
    month the days that differ from Monday to Friday and the days ops entered, with
    their source."""
    decisions = {
        day: calendars.decide(calendar, day)
        for day in (date(year, 1, 1) + timedelta(days=n) for n in range(366))
        if day.year == year
    }
    lines = [
        _coverage_line(calendar, year),
        _("Legend: %(rest)s rest day, %(working)s weekend day worked.")
        % {
            "rest": REST_MARK,
            "working": WORKING_WEEKEND_MARK,
        },
        "",
    ]
    heads = " ".join(_padded(name) + " " for name in _weekday_names()).rstrip()
    for month in range(1, 13):
        lines += [f"{year}-{month:02d}", heads]
        for week in month_grid.Calendar().monthdayscalendar(year, month):
            cells = []
            for number in week:
                if not number:
                    cells.append("   ")
                    continue
                decision = decisions[date(year, month, number)]
                mark = " "
                if decision is not None and not decision.working:
                    mark = REST_MARK
                elif decision is not None and date(year, month, number).weekday() >= 5:
                    mark = WORKING_WEEKEND_MARK
                cells.append(f"{number:>2}{mark}")
            lines.append(" ".join(cells).rstrip())
        entered = calendar_days.entries(calendar).days
        for day, decision in decisions.items():
            if day.month != month or decision is None:
                continue
            if decision.working != (day.weekday() < 5) or day in entered:
                kind = _("working") if decision.working else _("rest")
                lines.append(f"  {day.isoformat()} {kind}: {decision.said()}")
        lines.append("")
    return "\n".join(lines)


def _coverage_line(calendar: str, year: int) -> str:
    chosen = calendars.get(calendar)
    known = calendar_days.entries(calendar)
    values = {"calendar": calendar, "year": year}
    if chosen.covers(year):
        return _("Calendar %(calendar)r, %(year)d: covered by %(source)s.") % {
            **values,
            "source": chosen.source(),
        }
    if year in known.years:
        return _(
            "Calendar %(calendar)r, %(year)d: entered in full by ops (%(note)s); days not "
            "entered follow Monday to Friday."
        ) % {**values, "note": known.years[year]}
    return _(
        "Calendar %(calendar)r, %(year)d: not covered. Its days follow the fallback rule "
        "%(rule)r until the year's notice is imported."
    ) % {**values, "rule": chosen.uncovered}


def _padded(name: str) -> str:
    """``name`` right-aligned in two columns of a terminal (a CJK character takes two)."""
    width = sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in name)
    return " " * max(0, 2 - width) + name


def _weekday_names() -> list[str]:
    return [_("Mo"), _("Tu"), _("We"), _("Th"), _("Fr"), _("Sa"), _("Su")]
