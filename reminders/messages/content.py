"""A message as the engine hands it to a sender, and what a builder may return for one.

``Content`` is the provider's ``msgtype`` and its object, as WeCom's API nests them. A
builder (``reminders.messages.builders``) may return one, a ``str`` (sent as ``text``) or the
dict WeCom's API takes (``{"msgtype": "textcard", "textcard": {...}}``); ``as_content``
turns each into a ``Content`` or says, in a ``ValueError``, why it cannot.

Invariant: a ``Content`` that ``as_content`` returned can be rendered to the bytes a
sender sends (``senders.base.render_body``): its type is a name, its body a JSON object
whose text fields are text. Whether a channel carries it (its size, its type) is the
sender's ``check_message``, asked when the task is scheduled.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..links import short


@dataclass(frozen=True)
class Content:
    """A message body as the provider's ``msgtype`` and its object."""

    msgtype: str
    body: dict[str, Any]


# What a builder may return (a builder is ``builders.Builder``).
Built: TypeAlias = "Content | str | dict[str, Any]"

# The fields that, where present, must be text in the message types the engine knows
# (whether one is missing or empty is the sender's to say).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("content",),
    "markdown": ("content",),
    "textcard": ("title", "description", "url"),
    "template_card": ("card_type", "task_id", "sub_title_text"),
}
SHAPES = 'a Content, a str (sent as text) or a dict {"msgtype": ..., <msgtype>: {...}}'


def as_content(value: object) -> Content:
    """``value`` as a ``Content``; ``ValueError`` saying what is wrong with it."""
    if isinstance(value, Content):
        content = value
    elif isinstance(value, str):
        content = Content("text", {"content": value})
    elif isinstance(value, dict):
        msgtype = value.get("msgtype")
        if not isinstance(msgtype, str) or msgtype not in value:
            raise ValueError(
                f'returned a dict without "msgtype" and a body under its name: {short(value)}'
            )
        extra = sorted(str(key) for key in value if key not in ("msgtype", msgtype))
        if extra:
            raise ValueError(f"returned a dict with keys beside the message: {', '.join(extra)}")
        content = Content(msgtype, value[msgtype])
    else:
        raise ValueError(f"returned {type(value).__name__}; a builder returns {SHAPES}")
    if not isinstance(content.msgtype, str) or not content.msgtype:
        raise ValueError(f"returned a message type that is not a name: {content.msgtype!r}")
    if not isinstance(content.body, dict):
        raise ValueError(
            f"returned a {content.msgtype} body that is {type(content.body).__name__}, not a dict"
        )
    for name in TEXT_FIELDS.get(content.msgtype, ()):
        if name in content.body and not isinstance(content.body[name], str):
            raise ValueError(f'returned a {content.msgtype} whose "{name}" is not text')
    try:
        json.dumps(content.body, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"returned a body JSON cannot carry: {exc}") from None
    return content
