"""Task kinds: what each sends and the policies it runs under.

A CRM adds its own with :func:`register`. Each kind renders a message from its task's
payload; ``payload["content"]`` overrides the built-in wording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy as _

from . import timing
from .exceptions import UnknownKind

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

    from .models import ScheduledTask, TaskRun


@dataclass(frozen=True)
class Content:
    """A message body as the provider's ``msgtype`` and its object."""

    msgtype: str
    body: dict[str, Any]


def _text(template: str) -> Callable[[ScheduledTask, TaskRun], Content]:
    def render(task: ScheduledTask, run: TaskRun) -> Content:
        payload = task.payload or {}
        if "content" in payload:
            return Content("text", {"content": str(payload["content"])})
        # The occurrence's own date and time keep two reminders to one person apart: a
        # provider's duplicate check would merge identical bodies.
        local = run.occurrence.astimezone(timing.zone(task.timezone))
        text = template.format(date=run.run_date.isoformat(), time=local.strftime("%H:%M"))
        return Content("text", {"content": text})

    return render


@dataclass(frozen=True)
class Kind:
    name: str
    label: str | _StrPromise
    render: Callable[[ScheduledTask, TaskRun], Content] = field(compare=False)
    priority: str = "normal"
    # Stagger: a deterministic offset in [0, jitter) plus a batch slot by recipient hash.
    jitter_seconds: int = 0
    batches: int = 1
    batch_interval_seconds: int = 60


_registry: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    _registry[kind.name] = kind
    return kind


def get(name: str) -> Kind:
    try:
        return _registry[name]
    except KeyError:
        raise UnknownKind(f"{name!r} is not a registered task kind.") from None


def names() -> list[str]:
    return sorted(_registry)


def render(task: ScheduledTask, run: TaskRun) -> Content:
    """The message one run of ``task`` sends: its kind's content for that occurrence.

    Every caller that needs a task's message (delivery, validation at schedule time)
    goes through here, so what is checked is what is sent.
    """
    return get(task.kind).render(task, run)


register(
    Kind(
        "daily_report",
        _("Daily report"),
        _text("Please submit your daily report for {date}."),
        jitter_seconds=300,
    )
)
register(
    Kind(
        "weekly_report",
        _("Weekly report"),
        _text("Please submit your weekly report for the week of {date}."),
        jitter_seconds=300,
    )
)
register(
    Kind(
        "birthday",
        _("Birthday greeting"),
        _text("Happy birthday! Best wishes from all of us. ({date})"),
        priority="high",
    )
)
register(
    Kind(
        "follow_up",
        _("Follow-up reminder"),
        _text("You have a customer follow-up due at {time} ({date})."),
    )
)
register(
    Kind(
        "inquiry_timeout",
        _("Inquiry waiting too long"),
        _text("A customer inquiry has been waiting too long for your reply ({date} {time})."),
        priority="high",
    )
)
