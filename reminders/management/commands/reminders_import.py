"""``reminders_import FILE.csv --kind KIND``: schedule a task per row, all or none.

The reading and checking are ``reminders.intake.importing``'s; this command only wires them to
the command line: a progress bar on a terminal, the bad rows on stderr, and a non-zero
exit status when any row is bad (then nothing is imported).
"""

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders.management.base import TranslatedCommand

from ...intake import importing
from ..progress import ProgressBar


class Command(TranslatedCommand):
    help = gettext_noop(
        'Schedule a task for each row of a CSV file (UTF-8, as Excel\'s "CSV UTF-8" '
        "writes it; columns: recipient, cron or at or born, tz, key, priority, channel, "
        "and any other column into the payload). All rows or none: every bad row is "
        "reported with its line, and then nothing is imported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path, help=_("The CSV file."))
        parser.add_argument("--kind", required=True, help=_("The kind of every task."))
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help=_("Check every row, as an import would, and save nothing."),
        )
        parser.add_argument(
            "--tz",
            default=None,
            help=_("The time zone of rows without one (default: TIME_ZONE)."),
        )
        parser.add_argument(
            "--channel",
            default=None,
            help=_("The channel of rows without one (default: REMINDERS_DEFAULT_CHANNEL)."),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        defaults = importing.Defaults(options["kind"], options["tz"], options["channel"])
        bar = ProgressBar(self.stderr, _("Checking rows"))
        try:
            report = importing.import_csv(
                options["file"], defaults, dry_run=options["dry_run"], progress=bar
            )
        except ValidationError as exc:
            raise CommandError(
                "; ".join(
                    f"--{name}: {' '.join(errors)}" for name, errors in exc.message_dict.items()
                )
            ) from None
        except importing.ImportFailed as exc:
            bar.close()
            for error in exc.errors:
                self.stderr.write(str(error))
            raise CommandError(str(exc)) from None
        finally:
            bar.close()
        self.stdout.write(str(report))
