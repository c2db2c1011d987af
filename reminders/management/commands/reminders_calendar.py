"""``reminders_calendar import FILE [--calendar NAME] [--dry-run]`` and
``reminders_calendar show YEAR [--calendar NAME]``: ops keep the working-day calendar
current with the year's official notice, and print a year to check it.

The reading, checking and saving are ``reminders.intake.calendar_import``'s; this command only
wires them to the command line: the bad lines on stderr and a non-zero exit status
(then nothing is imported).
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders.management.base import TranslatedCommand

from ... import calendars
from ...intake import calendar_import
from ...intake.importing import ImportFailed

DEFAULT_CALENDAR = "cn"


def _year(text: str) -> int:
    try:
        year = int(text)
    except ValueError:
        year = 0
    if not 1900 <= year <= 2200:
        raise ValueError(text)
    return year


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment
        return ""


class Command(TranslatedCommand):
    help = gettext_noop(
        "Keep the working-day calendar current: import a year's official schedule from "
        "a CSV file (date,rest|working,note), or show a year month by month."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        load = actions.add_parser(
            "import",
            help=_("Enter the days of a CSV file (date,rest|working,note), all or none."),
        )
        load.add_argument("file", type=Path, help=_("The CSV file, UTF-8."))
        show = actions.add_parser("show", help=_("Print a year month by month, rest days marked."))
        show.add_argument("year", type=_year, help=_("The year, e.g. 2027."))
        for sub in (load, show):
            sub.add_argument(
                "--calendar",
                default=DEFAULT_CALENDAR,
                help=_("The calendar's name in REMINDERS_CALENDARS (default: %(default)r)."),
            )
        load.add_argument(
            "--dry-run", action="store_true", help=_("Check every line and save nothing.")
        )
        load.add_argument(
            "--by",
            default=_user(),
            help=_("Who enters the days, as recorded (default: %(default)r)."),
        )

    def handle(self, *args: Any, action: str, calendar: str, **options: Any) -> None:
        try:
            calendars.get(calendar)
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if action == "show":
            self.stdout.write(calendar_import.year_text(calendar, options["year"]))
            return
        try:
            report = calendar_import.import_csv(
                options["file"], calendar, by=options["by"], dry_run=options["dry_run"]
            )
        except ImportFailed as exc:
            for error in exc.errors:
                self.stderr.write(str(error))
            raise CommandError(str(exc)) from None
        self.stdout.write(str(report))
