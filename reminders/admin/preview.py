"""A task's next message, shown in the admin as its recipient will see it.

Rendered by the path delivery takes (``kinds.render``: the task's builder, in the task's
language, with the stamp and, on a card, its buttons), for the task's next occurrence the
calendar does not skip, and checked by the task's channel as a send would be, so a
builder's or a channel's refusal shows on the page rather than first at send time. The
run it renders is never saved. The builder runs in a savepoint: one whose query fails
(a ``DatabaseError``) is shown like any other failure, and the page's transaction goes on
(on PostgreSQL it would be aborted, and the page with it).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext

from .. import kinds
from ..engine import planning
from ..exceptions import SendError, UnplannableTask
from ..messages.content import Content
from ..models import ScheduledTask
from ..senders import Message, get_sender

# Occurrences looked at for one the calendar does not skip.
LOOK_AHEAD = 10


def next_message(task: ScheduledTask, now: datetime) -> SafeString:
    """The message of ``task``'s next occurrence after ``now``, as HTML; or why none."""
    if task.status in ScheduledTask.ENDED:
        return format_html("{}", gettext("None: the task has ended."))
    try:
        ahead = planning.upcoming(task, now, LOOK_AHEAD)
    except UnplannableTask as exc:
        return format_html("{}", gettext("Cannot be planned: %(reason)s") % {"reason": exc.message})
    sent = [u for u in ahead if u.day_off is None]
    if not sent:
        return format_html("{}", gettext("None: no occurrence ahead is sent."))
    run = planning.new_run(task, sent[0].occurrence)
    try:
        with transaction.atomic():  # a builder's failed query must not abort the page's
            content = kinds.render(task, run)
    except Exception as exc:  # a CRM's builder may fail on any payload: show it here
        return _problem(
            gettext("The message cannot be built: %(error)s")
            % {"error": f"{type(exc).__name__}: {exc}"}
        )
    try:
        get_sender(task.channel).check_message(
            Message(task.recipient, content.msgtype, content.body, idempotency_key="")
        )
    except SendError as exc:
        return _problem(
            gettext("The channel %(channel)s would refuse it: %(error)s")
            % {"channel": task.channel, "error": exc}
        )
    return format_html('<div class="reminders-preview">{}</div>', render(content))


def _problem(text: str) -> SafeString:
    return format_html('<p class="errornote reminders-preview-error">{}</p>', text)


def render(content: Content) -> SafeString:
    """A message body as HTML: text as it reads, a card with its titles, lines and
    buttons, anything else as the JSON the provider gets."""
    body = content.body
    if content.msgtype in ("text", "markdown"):
        return format_html('<pre class="reminders-preview-text">{}</pre>', body.get("content", ""))
    if content.msgtype == "template_card":
        return _card(body)
    return format_html(
        '<pre class="reminders-preview-json">{}</pre>',
        json.dumps({content.msgtype: body}, ensure_ascii=False, indent=2),
    )


def _card(card: dict[str, Any]) -> SafeString:
    main = card.get("main_title") or {}
    lines = format_html_join(
        "",
        "<li>{}: {}</li>",
        (
            (line.get("keyname", ""), line.get("value", ""))
            for line in card.get("horizontal_content_list") or []
        ),
    )
    buttons = format_html_join(
        "",
        '<button type="button" disabled data-key="{}">{}</button>',
        ((b.get("key", ""), b.get("text", "")) for b in card.get("button_list") or []),
    )
    return format_html(
        '<div class="reminders-preview-card"><strong>{}</strong><p>{}</p><p>{}</p>'
        "<ul>{}</ul><p>{}</p></div>",
        main.get("title", ""),
        main.get("desc", ""),
        card.get("sub_title_text", ""),
        lines,
        buttons,
    )
