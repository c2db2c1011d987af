"""The demo data of ``make run``: a few keyed tasks that show messages flowing, and a
login for the admin.

Invariants, because a demo that escapes its sandbox messages real people or opens a
real admin:

* It only runs where ``REMINDERS_DEFAULT_CHANNEL`` reaches no one (``demo_channel``):
  the console or the WeCom sandbox. The recipients are ``demo-`` ids, not the common
  member ids (``zhangsan``) a real corp has.
* It never changes an existing user: the login is created if its username is free, and
  otherwise left exactly as it is.
* It prints only a password it generated itself; one given in ``DEMO_ADMIN_PASSWORD``
  is used, never echoed.
* Every task has a key, so running it again updates the same rows instead of adding new
  ones; the one-shot tasks are moved to the new "now" and so fire again.
* One demo salesperson (``DIGEST_MEMBER``) has moved follow-ups to a digest
  (``preferences.set``, as a CRM would on their behalf): their three follow-ups go as one
  message at the end of the window (``REMINDERS_DIGEST_SECONDS``; ``make run`` makes it
  five minutes).
* Every time it prints (a one-shot's, the next run's) is in the project's ``TIME_ZONE``,
  whatever zone the tasks are in (``--tz``); a cron expression of another zone names it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _

from reminders import api, preferences
from reminders.intake.occasions import escalation_key
from reminders.models import ScheduledTask
from reminders.schedule import timing

SALESPEOPLE = ("demo-zhangsan", "demo-lisi", "demo-wangwu")
MANAGER = "demo-zhaoliu"
DEFAULT_USERNAME = "admin"
PASSWORD_BYTES = 12  # 16 characters of token_urlsafe
INQUIRY_KEY = "demo:inquiry_timeout"
# Time enough to open the sandbox's page and click the inquiry's card.
ESCALATE_AFTER = timedelta(minutes=5)
# Who gets their follow-ups as one digest, and the customers they are about.
DIGEST_MEMBER = SALESPEOPLE[0]
DIGEST_CUSTOMERS = ("Initech", "Umbrella", "Hooli")


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
    tomorrow = local_now.date() + timedelta(days=1)
    greeting = (
        max(morning, now)
        if local_now.time() < time(12)
        else timing.localize(datetime.combine(tomorrow, time(9)), timing.zone(tz))
    )
    tasks = [
        DemoTask(f"demo:daily_report:{who.removeprefix('demo-')}", "daily_report", who, "0 9 * * *")
        for who in SALESPEOPLE
    ]
    tasks += [
        DemoTask("demo:weekly_report", "weekly_report", MANAGER, cron="0 9 * * 1"),
        # The greeting belongs to the morning: at 09:00 if that is still ahead, else now
        # until its kind's 12:00 deadline, else 09:00 tomorrow (never made to expire).
        DemoTask("demo:birthday", "birthday", SALESPEOPLE[0], at=greeting),
        # A card with buttons on the WeCom app (text on the console): click "Done" in
        # the sandbox's page and the card says so, the admin shows who acted.
        DemoTask(
            "demo:follow_up",
            "follow_up",
            SALESPEOPLE[1],
            at=now + timedelta(minutes=1),
            payload={"customer": "ACME", "subject": _("Call back about the quote")},
        ),
        # An inquiry alert due now, escalated to the manager ESCALATE_AFTER later unless
        # someone clicks "I'll take it" or "Done" on its card first.
        DemoTask(
            INQUIRY_KEY,
            "inquiry_timeout",
            SALESPEOPLE[2],
            at=now,
            payload={"customer": "Globex", "subject": _("500 units: price?"), "minutes": 30},
        ),
        DemoTask(
            escalation_key(INQUIRY_KEY),
            "inquiry_timeout",
            MANAGER,
            at=now + ESCALATE_AFTER,
            payload={
                "customer": "Globex",
                "subject": _("500 units: price?"),
                "minutes": 30 + ESCALATE_AFTER // timedelta(minutes=1),
                "escalated_from": SALESPEOPLE[2],
            },
        ),
        # Three follow-ups a minute apart to a salesperson who takes them as one digest
        # (``digest_choice``): one message listing the three, at the window's end.
        *(
            DemoTask(
                f"demo:digest:{number}",
                "follow_up",
                DIGEST_MEMBER,
                at=now + timedelta(minutes=number),
                payload={"customer": customer, "url": f"https://crm.example/customers/{number}"},
            )
            for number, customer in enumerate(DIGEST_CUSTOMERS, start=1)
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


def digest_choice() -> str:
    """``DIGEST_MEMBER`` takes follow-ups as a digest, as the CRM's API records it; a line
    saying so."""
    preferences.set(
        DIGEST_MEMBER,
        "follow_up",
        digest=True,
        by="reminders_demo",
        reason=_("The demo: follow-ups as one digest."),
    )
    return "  " + _("%(member)s takes follow-ups as one digest") % {"member": DIGEST_MEMBER}


def ensure_login(username: str, given_password: str | None) -> str:
    """A superuser ``username`` if no user has that name, with ``given_password`` or a
    generated one; a line saying what was done (the password only if generated).
    An existing user is never touched."""
    user_model = get_user_model()
    manager = user_model._default_manager
    if manager.filter(**{user_model.USERNAME_FIELD: username}).exists():
        return _(
            "User %(username)s exists: left unchanged (`manage.py changepassword "
            "%(username)s` sets its password)."
        ) % {"username": username}
    password = given_password or secrets.token_urlsafe(PASSWORD_BYTES)
    manager.create_superuser(**{user_model.USERNAME_FIELD: username}, password=password)
    if given_password:
        return _(
            "Superuser created: login %(username)s, with the password in $DEMO_ADMIN_PASSWORD"
        ) % {"username": username}
    return _("Superuser created: login %(username)s / password %(password)s") % {
        "username": username,
        "password": password,
    }


def save_task(demo: DemoTask, tz: str) -> str:
    """Create or update ``demo``'s task; a line saying which, and when it runs next."""
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
    # When its next message goes (its earliest waiting run), as the task list says:
    # ``next_run`` is where planning resumes, an hour on for the every-minute task.
    annotated = ScheduledTask.objects.with_next_send().get(pk=task.pk)
    next_send = getattr(annotated, "next_send_at", task.next_run)
    line = (
        _("updated %(key)s: %(kind)s -> %(recipient)s, %(schedule)s, next run %(next)s")
        if existed
        else _("created %(key)s: %(kind)s -> %(recipient)s, %(schedule)s, next run %(next)s")
    )
    values = {
        "key": demo.key,
        "kind": task.kind,
        "recipient": task.recipient,
        "schedule": _schedule(task),
        "next": _shown(next_send) if next_send else "-",
    }
    return f"  {line % values}"


def _shown(moment: datetime) -> str:
    """A time as the demo prints every time: in the project's ``TIME_ZONE``, so that the
    lines read alike whatever zone a task's schedule is in."""
    return moment.astimezone(timing.zone(settings.TIME_ZONE)).isoformat(timespec="seconds")


def _schedule(task: ScheduledTask) -> str:
    """A one-shot's time (``_shown``), or the cron expression, with its zone where that
    is not the project's."""
    if task.run_at is not None:
        return _shown(task.run_at)
    if task.timezone != settings.TIME_ZONE:
        return f"{task.cron} ({task.timezone})"
    return task.cron
