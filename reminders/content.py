"""A message as the engine hands it to a sender, and what a builder may return for one.

``Content`` is the provider's ``msgtype`` and its object, as WeCom's API nests them. A
builder (``reminders.builders``) may return one, a ``str`` (sent as ``text``) or the
dict WeCom's API takes (``{"msgtype": "textcard", "textcard": {...}}``); ``as_content``
turns each into a ``Content`` or says, in a ``ValueError``, why it cannot.

Invariant: a ``Content`` that ``as_content`` returned can be rendered to the bytes a
sender sends (``senders.base.render_body``): its type is a name, its body a JSON object
whose text fields are text. Whether a channel carries it (its size, its type) is the
sender's ``check_message``, asked when the task is scheduled.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from .models import ScheduledTask, TaskRun


@dataclass(frozen=True)
class Content:
    """A message body as the provider's ``msgtype`` and its object."""

    msgtype: str
    body: dict[str, Any]


# What a builder may return, and a builder.
Built: TypeAlias = "Content | str | dict[str, Any]"
Builder: TypeAlias = "Callable[[ScheduledTask, TaskRun], Built]"

# The fields that, where present, must be text in the message types the engine knows
# (whether one is missing or empty is the sender's to say).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("content",),
    "markdown": ("content",),
    "textcard": ("title", "description", "url"),
}
LINK_LIMIT = 2048  # bytes: WeCom's limit of a textcard's url
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
                f'returned a dict without "msgtype" and a body under its name: {_short(value)}'
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


def link_problem(url: object) -> str | None:
    """What is wrong with ``url`` as a message's link, or None: it must be an http(s)
    address with a host, without spaces or control characters, of at most 2,048 bytes
    (WeCom's limit; a link is never cut, a cut one is a broken one)."""
    if not isinstance(url, str):
        return f"must be text, not {type(url).__name__}."
    size = len(url.encode(errors="surrogatepass"))
    if size > LINK_LIMIT:
        return f"is {size} bytes, over WeCom's limit of {LINK_LIMIT} for a link."
    problem = f"must be an http or https address, not {_short(url)}."
    if any(char.isspace() or unicodedata.category(char) in ("Cc", "Cs") for char in url):
        return problem
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed IPv6 host
        return problem
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return problem
    return None


def _short(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
