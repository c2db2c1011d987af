"""Task kinds: what each sends and the policies it runs under.

A CRM adds its own with :func:`register`. Each kind's builder writes a message from its
task's payload, in the task's language (``reminders.messages.builders``: a CRM may plug in its
own for any kind; the six built in are worded in ``reminders.messages.wording``);
``payload["content"]`` overrides the built-in kinds' wording.

Invariant: :func:`render`, which every caller goes through, stamps the message with its
occurrence (the local date and time in the task's zone) and the task's id, as its last
line ("— 2026-12-03 09:00 · #42"). A provider's duplicate check compares bodies, not our
keys: without the stamp, two occurrences of one CRM-written text to one member inside
the window would be merged and the second silently dropped. So two different
occurrences never render byte-identical bodies for one recipient, while a run rendered
again renders the same bytes (the stamp is a function of the task and the occurrence).
The stamp goes in ``text`` and ``markdown`` content, a ``textcard`` description and a
button card's ``sub_title_text``; a kind with another ``msgtype`` must tell its
occurrences apart itself. The bytes depend
on the task, the occurrence, the settings and the translation catalogs only: a run
rendered again after a change of ``LANGUAGE_CODE``, ``REMINDERS_BUILDERS`` or a catalog
may differ, as after any change of wording.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils import translation
from django.utils.translation import gettext_lazy as _

from .messages import builders, digests, wording
from .messages.builders import builder
from .messages.cards import buttons
from .messages.content import Content
from .messages.stamps import STAMPED_FIELDS as STAMPED_FIELDS
from .messages.stamps import makeup_line as makeup_line
from .messages.stamps import stamp as stamp
from .messages.stamps import stamped, tail
from .registry import Kind, PayloadField, get, label, names, policy, register
from .registry import _registry as _registry
from .schedule.policies import Policy

__all__ = [
    "STAMPED_FIELDS",
    "Content",
    "Kind",
    "PayloadField",
    "Policy",
    "builder",
    "buttons",
    "get",
    "label",
    "makeup_line",
    "names",
    "policy",
    "register",
    "render",
    "stamp",
]

if TYPE_CHECKING:
    from .models import ScheduledTask, TaskRun


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
        if digests.is_digest(task):
            content = digests.content(task)
        elif kind.content_override and "content" in payload:
            content = Content("text", {"content": str(payload["content"])})
        else:
            content = builders.build(kind.name, kind.render, task, run)
        for line in tail(task, run):
            content = stamped(content, line)
    return content


# The payload keys the built-in kinds read (``messages.wording``), as the admin shows them.
CUSTOMER = PayloadField("customer", _("Customer"), _("Who it is about, as the CRM names them."))
SUBJECT = PayloadField("subject", _("Subject"), _("What is to be done, in a line."))
# One key, one field on the form: the help says what each kind does with it.
URL = PayloadField(
    "url",
    _("Link"),
    _(
        "What the message links to (http or https): the record in the CRM; for a report, "
        "where it is written (empty: REMINDERS_REPORT_URL)."
    ),
    "url",
)

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
            mandatory=True,
        ),
        content_override=True,
        fields=(URL,),
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
            mandatory=True,
        ),
        content_override=True,
        fields=(URL,),
    )
)
register(
    Kind(
        "birthday",
        _("Birthday greeting"),
        wording.birthday,
        Policy(priority="high", send_by="12:00", missed="skip"),
        content_override=True,
        fields=(PayloadField("name", _("Name"), _("How the greeting addresses them.")),),
    )
)
register(
    Kind(
        "follow_up",
        _("Follow-up reminder"),
        wording.follow_up,
        Policy(max_lateness_seconds=2 * 3600),
        content_override=True,
        fields=(CUSTOMER, SUBJECT, URL),
    )
)
register(
    Kind(
        "inquiry_timeout",
        _("Inquiry waiting too long"),
        wording.inquiry_timeout,
        Policy(
            priority="high",
            max_lateness_seconds=30 * 60,
            mandatory=True,
            breaks_quiet_hours=True,
        ),
        content_override=True,
        fields=(
            CUSTOMER,
            SUBJECT,
            PayloadField(
                "minutes", _("Minutes waited"), _("How long the inquiry has waited."), "number"
            ),
            URL,
            PayloadField(
                "owner",
                _("Owner"),
                _("The member told when someone else takes the inquiry on."),
                "member",
            ),
            PayloadField(
                "escalated_from",
                _("Escalated from"),
                _("The member it first went to: the message says it is an escalation."),
                "member",
            ),
        ),
    )
)
register(
    Kind(
        "inquiry_taken",
        _("Inquiry taken on"),
        wording.inquiry_taken,
        Policy(
            priority="high",
            max_lateness_seconds=30 * 60,
            mandatory=True,
            breaks_quiet_hours=True,
        ),
        content_override=True,
        fields=(
            PayloadField("taken_by", _("Taken on by"), _("Who took the inquiry on."), "member"),
            CUSTOMER,
            SUBJECT,
            URL,
        ),
    )
)
