"""``python manage.py reminders_stats [--date YYYY-MM-DD] [--json]``: the dashboard's
numbers for one day (default: today in ``settings.TIME_ZONE``) as tables, or as the JSON
the dashboard serves at ``admin/ops/dashboard/data.json``. The name and options are a
public contract: scripts and cron jobs call it."""

from __future__ import annotations

import json
from argparse import ArgumentTypeError
from datetime import date
from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from ops import stats
from ops.stats import text as stats_text
from reminders.management.base import TranslatedCommand


def _day(value: str) -> date:
    try:
        return stats.parse_day(value)
    except ValueError:
        raise ArgumentTypeError(
            _("not a day: %(value)r (expected YYYY-MM-DD)") % {"value": value}
        ) from None


class Command(TranslatedCommand):
    help = gettext_noop(
        "Print a day's reminders numbers: runs by kind and status, rates, failures, plan."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--date", type=_day, default=None, help=_("YYYY-MM-DD; default today."))
        parser.add_argument("--json", action="store_true", help=_("Print JSON instead of tables."))

    def handle(self, *args: Any, **options: Any) -> None:
        numbers = stats.compute(options["date"])
        if options["json"]:
            self.stdout.write(json.dumps(numbers.as_dict(), indent=1, ensure_ascii=False))
        else:
            self.stdout.write(stats_text.render(numbers), ending="")
