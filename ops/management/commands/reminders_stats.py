"""``python manage.py reminders_stats [--date YYYY-MM-DD] [--json]``: the dashboard's
numbers for one day (default: today in ``settings.TIME_ZONE``) as tables, or as the JSON
the dashboard serves at ``admin/ops/dashboard/data.json``. The name and options are a
public contract: scripts and cron jobs call it."""

from __future__ import annotations

import json
from argparse import ArgumentTypeError
from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ops import stats, stats_text


def _day(value: str) -> date:
    try:
        return stats.parse_day(value)
    except ValueError:
        raise ArgumentTypeError(f"not a day: {value!r} (expected YYYY-MM-DD)") from None


class Command(BaseCommand):
    help = "Print a day's reminders numbers: runs by kind and status, rates, failures, plan."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--date", type=_day, default=None, help="YYYY-MM-DD; default today.")
        parser.add_argument("--json", action="store_true", help="Print JSON instead of tables.")

    def handle(self, *args: Any, **options: Any) -> None:
        numbers = stats.compute(options["date"])
        if options["json"]:
            self.stdout.write(json.dumps(numbers.as_dict(), indent=1, ensure_ascii=False))
        else:
            self.stdout.write(stats_text.render(numbers), ending="")
