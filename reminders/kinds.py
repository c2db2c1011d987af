"""Task kinds: what each sends and the policies it runs under.

A CRM adds its own with :func:`register`. Each kind renders a message from its task's
payload; ``payload["content"]`` overrides the built-in wording.

Invariant: :func:`render`, which every caller goes through, stamps the message with its
occurrence (the local date and time in the task's zone) and the task's id, as its last
line ("— 2026-12-03 09:00 · #42"). A provider's duplicate check compares bodies, not our
keys: without the stamp, two occurrences of one CRM-written text to one member inside
the window would be merged and the second silently dropped. So two different
occurrences never render byte-identical bodies for one recipient, while a run rendered
again renders the same bytes (the stamp is a function of the task and the occurrence).
The stamp goes in ``text`` and ``markdown`` content and a ``textcard`` description; a
kind with another ``msgtype`` must tell its occurrences apart itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.translation import gettext_lazy as _

from . import timing
from .conf import settings as conf
from .exceptions import UnknownKind
from .policies import Policy

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

    from .models import ScheduledTask, TaskRun


@dataclass(frozen=True)
class Content:
    """A message body as the provider's ``msgtype`` and its object."""

    msgtype: str
    body: dict[str, Any]


# Where the stamp goes in each message type that has room for it.
STAMPED_FIELDS: dict[str, str] = {
    "text": "content",
    "markdown": "content",
    "textcard": "description",
}


def _text(template: str) -> Callable[[ScheduledTask, TaskRun], Content]:
    """A kind's text: ``payload["content"]`` if set, else ``template`` formatted with the
    occurrence's ``{date}`` and ``{time}`` (which the stamp shows anyway)."""

    def render(task: ScheduledTask, run: TaskRun) -> Content:
        payload = task.payload or {}
        if "content" in payload:
            return Content("text", {"content": str(payload["content"])})
        local = run.occurrence.astimezone(timing.zone(task.timezone))
        text = template.format(date=local.date().isoformat(), time=local.strftime("%H:%M"))
        return Content("text", {"content": text})

    return render


def stamp(task: ScheduledTask, run: TaskRun) -> str:
    """The occurrence's local date and time in the task's zone and the task's id:
    ``"— 2026-12-03 09:00 · #42"``.

    Seconds appear when the occurrence has them: ledger keys tell occurrences apart to
    the second, so two runs of one task that both send differ here too. A wall-clock time
    that a zone shows twice (the hour the clocks go back) gets its UTC offset.
    """
    local = run.occurrence.astimezone(timing.zone(task.timezone))
    when = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        when += local.strftime(" UTC%z")
    # An unsaved task (a message checked before the task is stored) has no id yet.
    task_id = task.pk if task.pk is not None else "?"
    return f"— {when} · #{task_id}"


def stamped(content: Content, line: str) -> Content:
    """``content`` with ``line`` appended as its last line, where its type has room. An
    empty text stays empty: the stamp must not turn it into a message the sender's
    check for empty content would let through."""
    name = STAMPED_FIELDS.get(content.msgtype)
    text = content.body.get(name, "") if name else ""
    if not name or not isinstance(text, str) or not text.strip():
        return content
    return Content(content.msgtype, {**content.body, name: f"{text}\n{line}"})


@dataclass(frozen=True)
class Kind:
    name: str
    label: str | _StrPromise
    render: Callable[[ScheduledTask, TaskRun], Content] = field(compare=False)
    # When its messages go; ``REMINDERS_KINDS`` overrides it field by field.
    policy: Policy = field(default_factory=Policy)


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


def policy(name: str) -> Policy:
    """The policy kind ``name`` runs under: its own, with the overrides of
    ``REMINDERS_KINDS[name]`` (read on every call, so settings changes apply)."""
    return get(name).policy.with_overrides(conf.KINDS.get(name, {}))


def render(task: ScheduledTask, run: TaskRun) -> Content:
    """The message one run of ``task`` sends: its kind's content for that occurrence.

    Every caller that needs a task's message (delivery, validation at schedule time)
    goes through here, so what is checked is what is sent. The message is stamped with
    the occurrence and the task (:func:`stamp`), whatever the kind rendered; a make-up
    run's message says so first (:func:`makeup_line`).
    """
    content = get(task.kind).render(task, run)
    if run.is_compensation:
        content = stamped(content, makeup_line(task, run))
    return stamped(content, stamp(task, run))


def makeup_line(task: ScheduledTask, run: TaskRun) -> str:
    """What marks a make-up run's message, the line before the stamp: the occurrence it
    makes up, ``"Make-up for 2026-12-02, missed."`` (with the time for a task that may
    fire more than once a day). A function of the run alone, so a re-send is the same
    bytes."""
    local = run.occurrence.astimezone(timing.zone(task.timezone))
    when = local.strftime("%Y-%m-%d" if task.keyed_by_day else "%Y-%m-%d %H:%M")
    return f"Make-up for {when}, missed."


register(
    Kind(
        "daily_report",
        _("Daily report"),
        _text("Please submit your daily report."),
        Policy(
            jitter_seconds=300,
            batches=10,
            batch_interval_seconds=60,
            missed="compensate",
            calendar="cn",
        ),
    )
)
register(
    Kind(
        "weekly_report",
        _("Weekly report"),
        _text("Please submit your weekly report."),
        Policy(
            jitter_seconds=300,
            batches=10,
            batch_interval_seconds=60,
            missed="compensate",
            calendar="cn",
        ),
    )
)
register(
    Kind(
        "birthday",
        _("Birthday greeting"),
        _text("Happy birthday! Best wishes from all of us."),
        Policy(priority="high", send_by="12:00", missed="skip"),
    )
)
register(
    Kind(
        "follow_up",
        _("Follow-up reminder"),
        _text("You have a customer follow-up due."),
        Policy(max_lateness_seconds=2 * 3600),
    )
)
register(
    Kind(
        "inquiry_timeout",
        _("Inquiry waiting too long"),
        _text("A customer inquiry has been waiting too long for your reply."),
        Policy(priority="high", max_lateness_seconds=30 * 60),
    )
)
