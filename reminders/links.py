"""A link in a message: what WeCom accepts as one.

A module of its own, importing nothing of the app, so that the settings
(``REMINDERS_REPORT_URL``) and the wording check links by the same rule without the
settings depending on what messages are made of.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit

LINK_LIMIT = 2048  # bytes: WeCom's limit of a textcard's url


def link_problem(url: object) -> str | None:
    """What is wrong with ``url`` as a message's link, or None: it must be an http(s)
    address with a host, without spaces or control characters, of at most 2,048 bytes
    (WeCom's limit; a link is never cut, a cut one is a broken one)."""
    if not isinstance(url, str):
        return f"must be text, not {type(url).__name__}."
    size = len(url.encode(errors="surrogatepass"))
    if size > LINK_LIMIT:
        return f"is {size} bytes, over WeCom's limit of {LINK_LIMIT} for a link."
    problem = f"must be an http or https address, not {short(url)}."
    if any(char.isspace() or unicodedata.category(char) in ("Cc", "Cs") for char in url):
        return problem
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed IPv6 host
        return problem
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return problem
    return None


def short(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters with "…"."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
