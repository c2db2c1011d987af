"""What the sandbox answers: a ``Reply`` that the HTTP handler writes, delays or loses,
its JSON as WeCom writes it (compact, UTF-8 as is), and ``Rejected``, raised while a
request is handled to answer with an errcode.

Invariant: every error body carries an ``errcode`` and WeCom's ``errmsg`` for it (a
detail first, as WeCom words it), and besides only the fields WeCom adds to that
errcode (``invaliduser`` with 81013).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from . import codes

OK_REPLY = {"errcode": codes.OK, "errmsg": "ok"}


@dataclass(frozen=True)
class Reply:
    """What the handler sends back: a JSON body, or nothing at all when ``lose``;
    ``location`` for a redirect (the page's forms)."""

    body: bytes
    status: int = 200
    content_type: str = "application/json; charset=utf-8"
    lose: bool = False
    delay: float = 0.0
    location: str = ""


class Rejected(Exception):
    """Raised inside request handling to answer with an errcode."""

    def __init__(self, errcode: int, detail: str = "", **extra: Any) -> None:
        super().__init__(errcode)
        self.errcode = errcode
        self.errmsg = codes.message(errcode, detail)
        self.extra = extra


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode(data: dict[str, Any]) -> bytes:
    return _ENCODER.encode(data).encode()


def error_body(errcode: int, errmsg: str | None = None, **extra: Any) -> bytes:
    return encode({"errcode": errcode, "errmsg": errmsg or codes.message(errcode), **extra})
