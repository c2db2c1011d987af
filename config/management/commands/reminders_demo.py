"""``manage.py reminders_demo``: the demo data of ``make run`` (``config.demo``), in the
standalone project only, and only where the default channel reaches no one."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from config import demo, demo_channel
from reminders.conf import settings as conf
from reminders.management.base import TranslatedCommand
from reminders.schedule import timing


class Command(TranslatedCommand):
    help = gettext_noop(
        "Create or update the demo data for `make run`: a few keyed demo tasks, and a "
        "superuser $DEMO_ADMIN_USER (default admin) if no user has that name, with "
        "$DEMO_ADMIN_PASSWORD or a generated password (printed). Runs only when "
        "REMINDERS_DEFAULT_CHANNEL is the console or the WeCom sandbox. Safe to run "
        "again: it updates the same tasks, never changes an existing user and never prompts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--noinput",
            "--no-input",
            action="store_false",
            dest="interactive",
            help=_("Accepted so that scripts may pass it: this command never prompts."),
        )
        parser.add_argument(
            "--tz",
            default=None,
            help=_("Time zone of the demo tasks (default: the TIME_ZONE setting)."),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tz = options["tz"] or settings.TIME_ZONE
        try:
            timing.zone(tz)
        except timing.InvalidSchedule as exc:
            raise CommandError(str(exc)) from None
        channel = conf.DEFAULT_CHANNEL
        why = demo_channel.refusal(channel)
        if why is not None:
            raise CommandError(
                _(
                    "No demo data: REMINDERS_DEFAULT_CHANNEL %(channel)r may reach real "
                    "people: %(reason)s. The demo runs only on the console or the WeCom sandbox."
                )
                % {"channel": channel, "reason": why}
            )
        username = os.environ.get("DEMO_ADMIN_USER") or demo.DEFAULT_USERNAME
        with transaction.atomic():
            login = demo.ensure_login(username, os.environ.get("DEMO_ADMIN_PASSWORD") or None)
            now = timezone.now().replace(microsecond=0)
            lines = [demo.save_task(task, tz) for task in demo.demo_tasks(now, tz)]
            lines.append(demo.digest_choice())
        if options["verbosity"] >= 1:
            self.stdout.write(login)
            for line in lines:
                self.stdout.write(line)
