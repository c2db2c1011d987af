"""``reminders_prune [--older-than 90d] [--batch-size N] [--dry-run]``: delete finished
runs, ledger rows and completed one-shot tasks older than an age, a batch per short
transaction; meant for cron.

What goes and what stays is ``reminders.engine.retention``'s; this command only reads the
options, says what was done, and turns misuse into a ``CommandError``.
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from datetime import timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders.exceptions import RetentionTooShort
from reminders.management.base import TranslatedCommand

from ...engine import retention


def _age(value: str) -> timedelta:
    try:
        return retention.parse_age(value)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


def _batch_size(value: str) -> int:
    try:
        size = int(value)
    except ValueError:
        size = 0
    if size < 1:
        raise ArgumentTypeError(_("%(value)r is not a whole number above 0") % {"value": value})
    return size


class Command(TranslatedCommand):
    help = gettext_noop(
        "Delete finished runs, send-ledger rows and completed one-shot tasks older than an "
        "age, in small batches. Kept whatever their age: unfinished runs, runs in doubt "
        "nobody has handled, the runs of every time a one-shot task had, and any ledger "
        "row a kept run carries, still 'sending', or inside a channel's duplicate window; "
        "of a keyed one-shot task deleted, its key and time."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=_age,
            default=None,
            metavar="AGE",
            help=_(
                "Delete what is older than this: a whole number of hours, days or weeks "
                "(12h, 90d, 2w); at least a day, and at least the longest make-up horizon "
                "and duplicate window (default: REMINDERS_RETENTION_DAYS days)."
            ),
        )
        parser.add_argument(
            "--batch-size",
            type=_batch_size,
            default=retention.BATCH_SIZE,
            help=_("Rows deleted per transaction (default: %(default)r)."),
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help=_("Count what would be deleted, and delete nothing."),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        age = options["older_than"]
        given = "REMINDERS_RETENTION_DAYS" if age is None else "--older-than"
        try:
            if age is None:
                age = retention.default_age()
            result = retention.prune(
                age,
                batch_size=options["batch_size"],
                dry_run=options["dry_run"],
                progress=self._progress(options["verbosity"], options["dry_run"]),
            )
        except RetentionTooShort as exc:
            raise CommandError(f"{given} {exc}") from None
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        if options["verbosity"] >= 1:
            self.stdout.write(str(result))

    def _progress(self, verbosity: int, dry_run: bool) -> retention.Progress | None:
        if verbosity < 2:
            return None
        line = (
            _("%(what)s: would delete %(done)d (%(total)d so far)")
            if dry_run
            else _("%(what)s: deleted %(done)d (%(total)d so far)")
        )

        def show(what: str, done: int, total: int) -> None:
            self.stdout.write(line % {"what": what, "done": done, "total": total})

        return show
