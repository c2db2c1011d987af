"""Task kinds: what each sends and the policies it runs under.

A CRM adds its own with :func:`register`. Each kind's builder writes a message from its
task's payload, in the task's language (``reminders.messages.builders``: a CRM may plug in its
own for any kind; the five built in are worded in ``reminders.messages.wording``);
``payload["content"]`` overrides the built-in kinds' wording.

Invariant: :func:`render`, which every caller goes through, stamps the message with its
occurrence (the local date and time in the task's zone) and the task's id, as its last
line ("— 2026-12-03 09:00 · #42"). A provider's duplicate check compares bodies, not our
keys: without the stamp, two occurrences of one CRM-written text to one member inside
the window would be merged and the second silently dropped. So two different
occurrences never render byte-identical bodies for one recipient, while a run rendered
again renders the same bytes (the stamp is a function of the task and the occurrence).
The stamp goes in ``text`` and ``markdown`` content and a ``textcard`` description; a
kind with another ``msgtype`` must tell its occurrences apart itself. The bytes depend
on the task, the occurrence, the settings and the translation catalogs only: a run
rendered again after a change of ``LANGUAGE_CODE``, ``REMINDERS_BUILDERS`` or a catalog
may differ, as after any change of wording.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils import translation
from django.utils.translation import gettext_lazy as _

from .conf import settings as conf
from .exceptions import UnknownKind
from .messages import builders, wording
from .messages.content import Content
from .messages.stamps import STAMPED_FIELDS as STAMPED_FIELDS
from .messages.stamps import makeup_line as makeup_line
from .messages.stamps import stamp as stamp
from .messages.stamps import stamped, tail
from .schedule.policies import Policy

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

    from .messages.content import Built
    from .models import ScheduledTask, TaskRun


@dataclass(frozen=True)
class Kind:
    """A kind of task: its name, its label (the admin's), its default builder (what
    ``render`` returns a message from: ``reminders.messages.builders``) and its policy.

    ``content_override``: ``payload["content"]``, when set, is the message (as text)
    instead of what any builder of the kind writes. The five built-in kinds have it; a
    CRM's kind reads its payload itself unless it asks for it.
    """

    name: str
    label: str | _StrPromise
    render: Callable[[ScheduledTask, TaskRun], Built] = field(compare=False)
    # When its messages go; ``REMINDERS_KINDS`` overrides it field by field.
    policy: Policy = field(default_factory=Policy)
    content_override: bool = False


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


def label(name: str) -> str:
    """What ops read for kind ``name``: its label in the active language, or the name
    itself for a kind no longer registered (a CRM's, removed), so a row still says it."""
    kind = _registry.get(name)
    return str(kind.label) if kind is not None else name


def policy(name: str) -> Policy:
    """The policy kind ``name`` runs under: its own, with the overrides of
    ``REMINDERS_KINDS[name]`` (read on every call, so settings changes apply)."""
    return get(name).policy.with_overrides(conf.KINDS.get(name, {}))


def render(task: ScheduledTask, run: TaskRun) -> Content:
    """The message one run of ``task`` sends: its kind's content for that occurrence.

    Every caller that needs a task's message (delivery, validation at schedule time)
    goes through here, so what is checked is what is sent. The kind's builder
    (``builders.build``: a CRM's, else the kind's own) writes it in the task's language
    (``builders.language``), unless ``payload["content"]`` overrides it. The message is
    then stamped with the occurrence and the task (:func:`stamp`), whatever the builder
    wrote; a make-up run's message says so first (:func:`makeup_line`), in the task's
    language too.
    """
    kind = get(task.kind)
    payload = task.payload if isinstance(task.payload, dict) else {}
    with translation.override(builders.language(task)):
        if kind.content_override and "content" in payload:
            content = Content("text", {"content": str(payload["content"])})
        else:
            content = builders.build(kind.name, kind.render, task, run)
        for line in tail(task, run):
            content = stamped(content, line)
    return content


register(
    Kind(
        "daily_report",
        _("Daily report"),
        wording.daily_report,
        Policy(
            jitter_seconds=300,
            batches=10,
            batch_interval_seconds=60,
            missed="compensate",
            calendar="cn",
        ),
        content_override=True,
    )
)
register(
    Kind(
        "weekly_report",
        _("Weekly report"),
        wording.weekly_report,
        Policy(
            jitter_seconds=300,
            batches=10,
            batch_interval_seconds=60,
            missed="compensate",
            calendar="cn",
        ),
        content_override=True,
    )
)
register(
    Kind(
        "birthday",
        _("Birthday greeting"),
        wording.birthday,
        Policy(priority="high", send_by="12:00", missed="skip"),
        content_override=True,
    )
)
register(
    Kind(
        "follow_up",
        _("Follow-up reminder"),
        wording.follow_up,
        Policy(max_lateness_seconds=2 * 3600),
        content_override=True,
    )
)
register(
    Kind(
        "inquiry_timeout",
        _("Inquiry waiting too long"),
        wording.inquiry_timeout,
        Policy(priority="high", max_lateness_seconds=30 * 60),
        content_override=True,
    )
)
