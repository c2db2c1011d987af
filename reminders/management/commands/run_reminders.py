import logging
from typing import Any

from django.core.management.base import CommandParser
from django.db import router
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders.checks import WORKER_TAG
from reminders.management.base import TranslatedCommand
from reminders.models import ScheduledTask

from ...engine.worker import ReminderWorker

LOG_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError(value)
    return number


class Command(TranslatedCommand):
    help = gettext_noop(
        "Run the reminders scheduler and its django-q2 workers until SIGTERM or Ctrl-C. "
        "Start one per host, or several: each occurrence is still sent once."
    )
    # Checked in handle(): with the database (tasks of kinds this process does not know),
    # and the worker's own deployment checks (its cluster), which other commands skip.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tick",
            type=positive_float,
            default=None,
            help=_("Seconds between scans for due work (default: REMINDERS_TICK_SECONDS)."),
        )
        parser.add_argument(
            "--skip-checks",
            action="store_true",
            help=_("Start without running the system checks (default: %(default)r)."),
        )
        parser.add_argument(
            "--no-cluster",
            action="store_true",
            help=_(
                "Only schedule and claim; leave execution to clusters run elsewhere "
                "(default: %(default)r)."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["skip_checks"]:
            self.check(databases=[router.db_for_write(ScheduledTask)])
            self.check(tags=[WORKER_TAG], include_deployment_checks=True)
        logging.getLogger("reminders").setLevel(LOG_LEVELS[options["verbosity"]])
        ReminderWorker(tick=options["tick"], with_cluster=not options["no_cluster"]).run()
