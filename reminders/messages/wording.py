"""The engine's own wording of the six kinds it ships, in the task's language, fitted to
what WeCom carries.

Each public function is a kind's default builder (``Kind.render``, replaceable per kind:
``reminders.messages.builders``). What it reads from the payload, every field optional:

* ``daily_report``, ``weekly_report``: ``url``, where the report is written (else the
  setting ``REMINDERS_REPORT_URL``; ``""``: no link).
* ``birthday``: ``name``.
* ``follow_up``: ``customer``, ``subject``, ``url`` (the record); the due time shown is
  the occurrence in the task's zone.
* ``inquiry_timeout``: ``customer``, ``subject``, ``minutes`` (how long it has waited, a
  whole number), ``url``, ``escalated_from`` (the member id it was first sent to: the
  message then says it is an escalation, and to whom it went first), ``owner`` (the
  member told when someone else clicks "I'll take it").
* ``inquiry_taken``: ``taken_by`` (who clicked "I'll take it" on the inquiry's alert),
  ``customer``, ``subject``, ``url``: made by the callback (``intake.clicks``).

``payload["content"]`` (a CRM's own text) and ``payload["lang"]`` are ``kinds.render``'s.

Invariants:

* A follow-up and an inquiry alert are a card with buttons (``messages.cards``: done,
  remind me in an hour, and for an inquiry I'll take it) where the task's channel
  carries one (``BaseSender.carries_cards``: a WeCom app does, a group robot does not)
  and its clicks can come back (WeCom's callback configured for the channel's app:
  ``cards.carried``); never a button no click of which could reach the engine.
* Elsewhere, and for the other kinds, a message with a link is a ``textcard`` (title,
  description, url, button) where the task's channel carries one
  (``BaseSender.accepts``: a WeCom app does, a group robot does not), else ``text``
  with the link on a line of its own; without a link, ``text``.
* Every word comes from gettext, in the language ``kinds.render`` made active (the
  task's); the catalogs are in ``reminders/locale``.
* What the CRM wrote (customer, subject, name) is shown as one line of plain text: runs
  of whitespace and control characters become one space. Nothing is escaped: WeCom shows
  text as given (a textcard description knows a few ``<div class="gray">`` tags, which
  these messages do not use), so an escaped ``&amp;`` would show as such.
* It fits: a textcard's title in 128 bytes and description in 512, a text in 2,048, a
  card's texts in the lengths WeCom recommends (``senders.template_card``), counting the
  make-up line and the stamp that ``kinds.render`` adds under it (``stamps.tail``),
  which are never cut. What gives is the CRM's text: its fields share the room left
  equally (a short one keeps all of itself), each cut at a character (never inside one,
  nor between one and its accent or emoji modifier) and marked "…"
  (``messages.fitting``). The engine's words and the link are never cut (a cut link is
  a broken one: one over 2,048 bytes, or not http(s), is a bad payload).
* Deterministic: a function of the task, the run, the settings and the catalogs; never
  of the clock, so a run rendered again is the same bytes.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext, ngettext, pgettext

from ..conf import settings as conf
from ..exceptions import BadPayload, RemindersError
from ..links import link_problem
from ..recipients import MEMBER_ID
from ..schedule import timing
from ..senders import get_sender
from . import cards, stamps
from .content import Content
from .fitting import ELLIPSIS as ELLIPSIS
from .fitting import Line, fit
from .fitting import cut as cut
from .fitting import shares as shares
from .fitting import size as size

if TYPE_CHECKING:
    from ..models import ScheduledTask, TaskRun

# WeCom's limits, in UTF-8 bytes (the senders check them too: senders.wecom).
TITLE_LIMIT = 128
DESCRIPTION_LIMIT = 512
TEXT_LIMIT = 2048


@dataclass(frozen=True)
class Draft:
    """A message before it is fitted: a textcard's ``title`` or, as text, ``headline``
    (none: the lines alone), the ``lines`` both forms share, the link and its button."""

    title: Line
    lines: Sequence[Line]
    headline: Line | None = None
    url: str = ""
    button: str = ""


# The kinds -------------------------------------------------------------------------


def daily_report(task: ScheduledTask, run: TaskRun) -> Content:
    title = pgettext("message title", "Daily report")
    return _report(task, run, title, gettext("Please submit your daily report."))


def weekly_report(task: ScheduledTask, run: TaskRun) -> Content:
    title = pgettext("message title", "Weekly report")
    return _report(task, run, title, gettext("Please submit your weekly report."))


def _report(task: ScheduledTask, run: TaskRun, title: str, text: str) -> Content:
    url = link(task, default=conf.REPORT_URL)
    button = pgettext("textcard button, at most 4 characters", "Open")
    return compose(task, run, Draft(Line(title), [Line(text)], url=url, button=button))


def birthday(task: ScheduledTask, run: TaskRun) -> Content:
    name = crm_text(task, "name")
    if name:
        greeting = gettext("Happy birthday, %(name)s! Best wishes from all of us.")
        line = Line(greeting, crm={"name": name})
    else:
        line = Line(gettext("Happy birthday! Best wishes from all of us."))
    return compose(task, run, Draft(Line(pgettext("message title", "Happy birthday")), [line]))


def follow_up(task: ScheduledTask, run: TaskRun) -> Content:
    customer, subject = crm_text(task, "customer"), crm_text(task, "subject")
    titled = pgettext("message title", "Follow-up: %(customer)s")
    untitled = pgettext("message title", "Follow-up reminder")
    title = Line(titled, crm={"customer": customer}) if customer else Line(untitled)
    due = run.occurrence.astimezone(timing.zone(task.timezone)).strftime("%Y-%m-%d %H:%M")
    due_line = Line(gettext("Due: %(due)s"), fixed={"due": due})
    headline = Line(gettext("You have a customer follow-up due."))
    if cards.carried(task):
        face = cards.Face(title, headline, [*_subject(subject), due_line], customer, link(task))
        return cards.card(task, run, face)
    lines = [*_about(customer, subject), due_line]
    button = pgettext("textcard button, at most 4 characters", "View")
    draft = Draft(title, lines, headline=headline, url=link(task), button=button)
    return compose(task, run, draft)


def inquiry_timeout(task: ScheduledTask, run: TaskRun) -> Content:
    customer, subject = crm_text(task, "customer"), crm_text(task, "subject")
    minutes, first = _minutes(task), _member(task, "escalated_from")
    if first:
        titled = pgettext("message title", "Escalated inquiry: %(customer)s")
        untitled = pgettext("message title", "Escalated inquiry")
        headline = gettext("A customer inquiry that was not answered has been escalated to you.")
    else:
        titled = pgettext("message title", "Inquiry waiting: %(customer)s")
        untitled = pgettext("message title", "Inquiry waiting too long")
        headline = gettext("A customer inquiry has been waiting too long for your reply.")
    title = Line(titled, crm={"customer": customer}) if customer else Line(untitled)
    details: list[Line] = []
    if minutes is not None:
        waited = ngettext(
            "Waiting for a reply: %(minutes)d minute",
            "Waiting for a reply: %(minutes)d minutes",
            minutes,
        )
        details.append(Line(waited, fixed={"minutes": minutes}))
    if first:
        escalated = gettext("Escalated from: %(member)s, the first recipient")
        details.append(Line(escalated, fixed={"member": first}))
    if cards.carried(task):
        lines = [*_subject(subject), *details]
        face = cards.Face(title, Line(headline), lines, customer, link(task))
        return cards.card(task, run, face)
    button = pgettext("textcard button, at most 4 characters", "View")
    lines = [*_about(customer, subject), *details]
    draft = Draft(title, lines, headline=Line(headline), url=link(task), button=button)
    return compose(task, run, draft)


def inquiry_taken(task: ScheduledTask, run: TaskRun) -> Content:
    customer, subject = crm_text(task, "customer"), crm_text(task, "subject")
    titled = pgettext("message title", "Inquiry taken on: %(customer)s")
    untitled = pgettext("message title", "Inquiry taken on")
    title = Line(titled, crm={"customer": customer}) if customer else Line(untitled)
    taker = Line(gettext("Taken on by: %(member)s"), fixed={"member": _member(task, "taken_by")})
    headline = Line(gettext("Someone else is answering a customer inquiry of yours."))
    button = pgettext("textcard button, at most 4 characters", "View")
    lines = [taker, *_about(customer, subject)]
    draft = Draft(title, lines, headline=headline, url=link(task), button=button)
    return compose(task, run, draft)


def _about(customer: str, subject: str) -> list[Line]:
    lines = []
    if customer:
        lines.append(Line(gettext("Customer: %(customer)s"), crm={"customer": customer}))
    return [*lines, *_subject(subject)]


def _subject(subject: str) -> list[Line]:
    return [Line(gettext("Subject: %(subject)s"), crm={"subject": subject})] if subject else []


# The message ----------------------------------------------------------------------------


def compose(task: ScheduledTask, run: TaskRun, draft: Draft) -> Content:
    """``draft`` as a textcard (a link, and a channel that carries one) or a text,
    fitted with room for the lines ``kinds.render`` adds under it."""
    tail = stamps.tail(task, run)
    if draft.url and carries(task, "textcard"):
        body = {
            "title": fit([draft.title], TITLE_LIMIT),
            "description": fit(draft.lines, DESCRIPTION_LIMIT, tail),
            "url": draft.url,
            "btntxt": draft.button,
        }
        return Content("textcard", body)
    lines = [*([draft.headline] if draft.headline else []), *draft.lines]
    if draft.url:
        lines.append(Line("%(url)s", fixed={"url": draft.url}))
    return Content("text", {"content": fit(lines, TEXT_LIMIT, tail)})


def carries(task: ScheduledTask, msgtype: str) -> bool:
    """Whether the task's channel carries ``msgtype``; a channel that cannot be built
    says so where channels are checked, so it is taken to carry anything here."""
    try:
        return get_sender(task.channel).accepts(msgtype)
    except (RemindersError, ImproperlyConfigured, TypeError):
        return True


# The payload ----------------------------------------------------------------------------


def crm_text(task: ScheduledTask, name: str) -> str:
    """``payload[name]``, text the CRM wrote, as one line; "" when absent or blank."""
    value = _payload(task).get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadPayload(f'payload["{name}"] must be text, not {type(value).__name__}.')
    spaced = "".join(" " if unicodedata.category(char) == "Cc" else char for char in value)
    return " ".join(spaced.split())


def link(task: ScheduledTask, default: str = "") -> str:
    """``payload["url"]`` (``""``: no link), else ``default``; a bad one is refused."""
    url = _payload(task).get("url")
    if url is None:
        return default
    problem = link_problem(url) if url != "" else None
    if problem is not None:
        raise BadPayload(f'payload["url"] {problem}')
    return str(url)


def _minutes(task: ScheduledTask) -> int | None:
    value = _payload(task).get("minutes")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadPayload(
            f'payload["minutes"] must be a whole number of minutes, 0 or more, not {value!r}.'
        )
    return value


def _member(task: ScheduledTask, name: str) -> str:
    value = _payload(task).get(name)
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not MEMBER_ID.fullmatch(value):
        raise BadPayload(
            f'payload["{name}"] must be one WeCom member id (1 to 64 ASCII letters, digits '
            f"and _-@., starting with a letter or digit), not {value!r:.80}."
        )
    return value


def _payload(task: ScheduledTask) -> Mapping[str, Any]:
    return task.payload if isinstance(task.payload, dict) else {}
