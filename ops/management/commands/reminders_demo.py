"""Demo data for ``make run``: an admin login and a few tasks that show messages flowing.

Every task has a key, so running this again updates the same rows instead of adding
new ones; the one-shot tasks are moved to the new "now" and so fire again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from reminders import api, timing
from reminders.management.base import TranslatedCommand
from reminders.models import ScheduledTask

SALESPEOPLE = ("zhangsan", "lisi", "wangwu")
MANAGER = "zhaoliu"


@dataclass(frozen=True)
class DemoTask:
    key: str
    kind: str
    recipient: str
    cron: str | None = None
    at: datetime | None = None
    payload: dict[str, Any] = field(default_factory=dict)


def demo_tasks(now: datetime, tz: str) -> list[DemoTask]:
    """The demo's tasks as of ``now``: recurring ones fixed, one-shots relative to now."""
    local_now = now.astimezone(timing.zone(tz))
    morning = timing.localize(datetime.combine(local_now.date(), time(9)), timing.zone(tz))
    tasks = [
        DemoTask(f"demo:daily_report:{who}", "daily_report", who, cron="0 9 * * *")
        for who in SALESPEOPLE
    ]
    tasks += [
        DemoTask("demo:weekly_report", "weekly_report", MANAGER, cron="0 9 * * 1"),
        # The greeting belongs to the morning: at 09:00 if that is still ahead, else now.
        DemoTask("demo:birthday", "birthday", SALESPEOPLE[0], at=max(morning, now)),
        DemoTask(
            "demo:follow_up",
            "follow_up",
            SALESPEOPLE[1],
            at=now + timedelta(minutes=1),
            payload={"content": "Demo: call ACME back about the quote."},
        ),
        DemoTask(
            "demo:inquiry_timeout",
            "inquiry_timeout",
            SALESPEOPLE[2],
            at=now,
            payload={"content": "Demo: an inquiry from Globex has waited 30 minutes."},
        ),
        DemoTask(
            "demo:every_minute",
            "follow_up",
            MANAGER,
            cron="* * * * *",
            payload={"content": "Demo: this message goes out every minute."},
        ),
    ]
    return tasks


class Command(TranslatedCommand):
    help = gettext_noop(
        "Create or update the demo data for `make run`: a superuser from $DEMO_ADMIN_USER / "
        "$DEMO_ADMIN_PASSWORD (default admin/admin) and a few keyed demo tasks. "
        "Safe to run again: it updates the same rows and never prompts."
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
        username = os.environ.get("DEMO_ADMIN_USER") or "admin"
        password = os.environ.get("DEMO_ADMIN_PASSWORD") or "admin"
        with transaction.atomic():
            created = self._superuser(username, password)
            lines = [
                self._task(task, tz)
                for task in demo_tasks(timezone.now().replace(microsecond=0), tz)
            ]
        if options["verbosity"] >= 1:
            superuser = (
                _("Superuser created: login %(username)s / password %(password)s")
                if created
                else _("Superuser updated: login %(username)s / password %(password)s")
            )
            self.stdout.write(superuser % {"username": username, "password": password})
            for line in lines:
                self.stdout.write(line)

    def _superuser(self, username: str, password: str) -> bool:
        user_model = get_user_model()
        user, created = user_model._default_manager.get_or_create(
            defaults=None, **{user_model.USERNAME_FIELD: username}
        )
        user.is_staff = True
        user.is_superuser = True
        user.is_active = True
        user.set_password(password)
        user.save()
        return created

    def _task(self, demo: DemoTask, tz: str) -> str:
        existed = ScheduledTask.objects.filter(key=demo.key).exists()
        task = api.schedule(
            demo.kind,
            demo.recipient,
            cron=demo.cron,
            at=demo.at,
            tz=tz,
            payload=demo.payload,
            key=demo.key,
        )
        next_run = task.next_run.astimezone(timing.zone(tz)) if task.next_run else None
        line = (
            _("updated %(key)s: %(kind)s -> %(recipient)s, %(schedule)s, next run %(next)s")
            if existed
            else _("created %(key)s: %(kind)s -> %(recipient)s, %(schedule)s, next run %(next)s")
        )
        values = {
            "key": demo.key,
            "kind": task.kind,
            "recipient": task.recipient,
            "schedule": task.schedule_display,
            "next": next_run.isoformat(timespec="seconds") if next_run else "-",
        }
        return f"  {line % values}"
