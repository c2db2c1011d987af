import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reminders.worker import ReminderWorker

LOG_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


def positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError(value)
    return number


class Command(BaseCommand):
    help = (
        "Run the reminders scheduler and its django-q2 workers until SIGTERM or Ctrl-C. "
        "Start one per host, or several: each occurrence is still sent once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--tick",
            type=positive_float,
            default=None,
            help="Seconds between scans for due work (default: REMINDERS_TICK_SECONDS).",
        )
        parser.add_argument(
            "--no-cluster",
            action="store_true",
            help="Only schedule and claim; leave execution to clusters run elsewhere "
            "(default: %(default)r).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("reminders").setLevel(LOG_LEVELS[options["verbosity"]])
        ReminderWorker(tick=options["tick"], with_cluster=not options["no_cluster"]).run()
