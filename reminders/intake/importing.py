"""Tasks from a CSV file, as ``reminders_import`` reads it: each row one item of
``api.schedule_many``.

The file is UTF-8, with or without the byte-order mark Excel writes ("CSV UTF-8"). Its
first line names the columns, matched whatever their case and surrounding spaces:

* ``recipient`` (required): a WeCom member id;
* ``cron``, or ``at``: an ISO 8601 date and time (``2026-07-01 09:00``, or with an offset
  ``2026-07-01T09:00+08:00``); one without an offset is on the clock of ``tz``;
* ``born`` instead of either: an ISO 8601 date (``1990-02-28``) for a yearly greeting on
  that day (``reminders.intake.occasions``), at the time of day in ``at`` (``09:30``) or 09:00;
* ``tz``, ``key``, ``priority``, ``channel``: as ``api.schedule`` takes them; ``tz`` and
  ``channel`` default to the command's ``--tz`` and ``--channel``;
* any other column goes into the payload, as text, under its name as written.

An empty cell is as if its column were absent; a row whose cells are all empty (Excel
leaves some) is skipped.

Invariants: nothing is imported unless every row is good, since every row goes to one
``schedule_many`` call, in one transaction. Every bad row is reported with its line in
the file (the header is line 1, and a quoted cell that spans lines counts each of them)
and the reason: what reading it found (a date that is not ISO 8601) or what scheduling
it did (the API's checks, the same as for any task). A dry run does all of this, the
database's part included, and then rolls it back.

What it says (the errors, the report) is in the active language: a command's
``LANGUAGE_CODE``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..exceptions import BulkValidationError, RemindersError
from ..models import validate_channel, validate_kind, validate_timezone
from . import occasions, scheduling

# The columns that are ``api.schedule``'s parameters (or ``born``); others are payload.
COLUMNS = ("recipient", "cron", "at", "tz", "key", "priority", "channel", "born")
BOM = "\ufeff"


@dataclass(frozen=True, order=True)
class RowError:
    """Why the row starting at ``line`` cannot be imported; ``field`` names the column
    or parameter at fault ("" for the row as a whole)."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        where = _("line %(line)d") % {"line": self.line} if self.line else _("the file")
        if self.field:
            return _("%(where)s, %(field)s: %(message)s") % {
                "where": where,
                "field": self.field,
                "message": self.message,
            }
        return _("%(where)s: %(message)s") % {"where": where, "message": self.message}


class ImportFailed(RemindersError):
    """Rows (or the file) that cannot be imported; nothing was."""

    def __init__(self, errors: list[RowError]) -> None:
        self.errors = sorted(errors)
        lines = len({error.line for error in self.errors})
        super().__init__(
            ngettext(
                "%(count)d line cannot be imported; nothing was imported.",
                "%(count)d lines cannot be imported; nothing was imported.",
                lines,
            )
            % {"count": lines}
        )


@dataclass(frozen=True)
class Row:
    """One row of the file: the line it starts on and its ``schedule_many`` item."""

    line: int
    item: dict[str, Any]


@dataclass(frozen=True)
class Report:
    """What an import did (or, in a dry run, would have done)."""

    rows: int
    created: int
    updated: int
    dry_run: bool

    def __str__(self) -> str:
        numbers = {
            "rows": ngettext("%(n)s row", "%(n)s rows", self.rows) % {"n": f"{self.rows:,}"},
            "created": ngettext("%(n)s task", "%(n)s tasks", self.created)
            % {"n": f"{self.created:,}"},
            "updated": f"{self.updated:,}",
        }
        if self.dry_run:
            return (
                _(
                    "Dry run: %(rows)s checked, all good; %(created)s would be created and "
                    "%(updated)s updated. Nothing was saved."
                )
                % numbers
            )
        return _("Imported %(rows)s: %(created)s created, %(updated)s updated.") % numbers


@dataclass(frozen=True)
class Defaults:
    """What every row gets unless its own cells say otherwise."""

    kind: str
    tz: str | None = None
    channel: str | None = None


def import_csv(
    path: Path,
    defaults: Defaults,
    *,
    dry_run: bool = False,
    progress: scheduling.Progress | None = None,
) -> Report:
    """Schedule a task for each row of the CSV file at ``path``, all or none; raises
    ``ImportFailed`` listing every bad row (nothing is saved then)."""
    check_defaults(defaults)
    rows, errors = read(lines_of(path), defaults)
    outcome = None
    with transaction.atomic():
        try:
            outcome = scheduling.schedule_all([row.item for row in rows], progress=progress)
        except BulkValidationError as exc:
            errors += [
                RowError(rows[index].line, field, message)
                for index, fields in exc.errors.items()
                for field, messages in fields.items()
                for message in messages
            ]
        if errors or dry_run:
            transaction.set_rollback(True)
    if errors or outcome is None:
        raise ImportFailed(errors)
    return Report(len(rows), outcome.created, outcome.updated, dry_run)


def check_defaults(defaults: Defaults) -> None:
    """``ValidationError`` naming ``kind``, ``tz`` or ``channel`` when the value every
    row would get is wrong: said once, not once per row."""
    errors: dict[str, Any] = {}
    checks = (
        ("kind", defaults.kind, validate_kind),
        ("tz", defaults.tz, validate_timezone),
        ("channel", defaults.channel, validate_channel),
    )
    for name, value, validate in checks:
        if value is None:
            continue
        try:
            validate(value)
        except ValidationError as exc:
            errors[name] = exc
    if errors:
        raise ValidationError(errors)


def lines_of(path: Path) -> list[str]:
    """The file's lines, decoded from UTF-8 without its byte-order mark, if any;
    ``ImportFailed`` when it cannot be read or is not UTF-8 (naming the line)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        message = _("Cannot read %(path)s: %(error)s.") % {"path": path, "error": exc.strerror}
        raise ImportFailed([RowError(0, "", message)]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        message = _(
            "The file is not UTF-8 (a byte that cannot be, at this line). In Excel, save it "
            'as "CSV UTF-8".'
        )
        raise ImportFailed([RowError(line, "", message)]) from None
    return list(io.StringIO(text.removeprefix(BOM), newline=""))


def read(lines: Iterable[str], defaults: Defaults) -> tuple[list[Row], list[RowError]]:
    """The items of the rows that can be read, and the errors of those that cannot.
    ``ImportFailed`` when the header itself is wrong."""
    reader = csv.reader(lines)
    cells_by_line = _records(reader)
    try:
        _line, header = next(cells_by_line)
    except StopIteration:
        raise ImportFailed(
            [RowError(1, "", _("The file is empty: line 1 names the columns."))]
        ) from None
    columns = _columns(header)
    rows: list[Row] = []
    errors: list[RowError] = []
    for line, cells in cells_by_line:
        if not any(cells):
            continue
        try:
            rows.append(Row(line, _item(columns, cells, defaults)))
        except ValidationError as exc:
            errors += [
                RowError(line, field, message)
                for field, messages in _messages(exc)
                for message in messages
            ]
    return rows, errors


def _records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """Each record with the line it starts on (a quoted cell may span lines)."""
    line = 1
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            message = _("This is not CSV: %(error)s.") % {"error": exc}
            raise ImportFailed([RowError(line, "", message)]) from None
        yield line, cells
        line = reader.line_num + 1


def _columns(header: list[str]) -> list[str]:
    """Each column's name: a known column's in lower case, another's as written (it is
    a payload key); "" for a nameless one. ``ImportFailed`` for a column named twice or
    a header without ``recipient``."""
    names = [
        cell.strip().lower() if cell.strip().lower() in COLUMNS else cell.strip() for cell in header
    ]
    errors = []
    seen: set[str] = set()
    for name in names:
        if name and name in seen:
            errors.append(
                RowError(1, name, _("The column %(name)r appears twice.") % {"name": name})
            )
        seen.add(name)
    if "recipient" not in seen:
        errors.append(RowError(1, "recipient", _("The header has no recipient column.")))
    if errors:
        raise ImportFailed(errors)
    return names


def _item(columns: list[str], cells: list[str], defaults: Defaults) -> dict[str, Any]:
    """The ``schedule_many`` item of one row; ``ValidationError`` naming the column."""
    errors: dict[str, str] = {}
    given, payload = _cells(columns, cells, errors)
    item: dict[str, Any] = {
        "kind": defaults.kind,
        "recipient": given.get("recipient"),
        "tz": given.get("tz") or defaults.tz,
        "key": given.get("key"),
        "priority": given.get("priority"),
        "channel": given.get("channel") or defaults.channel,
        "payload": payload,
    }
    if "born" in given:
        return _birthday_item(item, given, errors)
    if "at" in given:
        item["at"] = _parse(
            errors,
            "at",
            given["at"],
            datetime.fromisoformat,
            _("%(value)r is not an ISO 8601 date and time (YYYY-MM-DD HH:MM)."),
        )
    if "cron" in given:
        item["cron"] = given["cron"]
    if errors:
        raise ValidationError(errors)
    return item


def _cells(
    columns: list[str], cells: list[str], errors: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """A row's non-empty cells by column: the task's own (``COLUMNS``), and the rest, its
    payload. A value under a column with no name is an error (in ``errors``)."""
    given: dict[str, str] = {}
    payload: dict[str, str] = {}
    for position, value in enumerate(cells):
        if value == "":
            continue
        name = columns[position] if position < len(columns) else ""
        if not name:
            errors[""] = _(
                "Cell %(position)d has a value but its column no name in the header."
            ) % {"position": position + 1}
        elif name in COLUMNS:
            given[name] = value
        else:
            payload[name] = value
    return given, payload


def _birthday_item(
    item: dict[str, Any], given: dict[str, str], errors: dict[str, str]
) -> dict[str, Any]:
    """The item of a row with ``born``: a yearly reminder on that day, at ``at`` if the
    row gives a time of day; ``ValidationError`` with ``errors`` and any of its own."""
    born = _parse(
        errors,
        "born",
        given["born"],
        date.fromisoformat,
        _("%(value)r is not an ISO 8601 date (YYYY-MM-DD)."),
    )
    at = occasions.BIRTHDAY_TIME
    if "at" in given:
        at = _parse(
            errors,
            "at",
            given["at"],
            time.fromisoformat,
            _("%(value)r is not an ISO 8601 time of day (HH:MM)."),
        )
    if "cron" in given:
        errors["cron"] = _("Give cron or born, not both.")
    if errors or born is None or at is None:
        raise ValidationError(errors)
    return occasions.birthday_item(item["recipient"], born, at=at, kind=item["kind"], **_rest(item))


def _rest(item: dict[str, Any]) -> dict[str, Any]:
    return {name: item[name] for name in ("tz", "key", "payload", "channel", "priority")}


def _parse(
    errors: dict[str, str], name: str, text: str, parse: Callable[[str], Any], refusal: str
) -> Any:
    """``parse(text)``; None when it cannot, with ``refusal`` (which says the value as
    ``%(value)r``) in ``errors[name]``."""
    try:
        return parse(text)
    except ValueError:
        errors[name] = refusal % {"value": text}
        return None


def _messages(exc: ValidationError) -> Iterator[tuple[str, list[str]]]:
    if hasattr(exc, "error_dict"):
        yield from exc.message_dict.items()
    else:
        yield "", exc.messages
