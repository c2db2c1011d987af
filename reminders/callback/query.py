"""The values WeCom signs a callback with, as its query string gives them:
``msg_signature``, ``timestamp`` and ``nonce``, the same on the POST of a message and on
the GET that verifies the URL.

Invariants, and why:

* All three are read, and their shapes checked, before any is used; a refused one is
  ``BadQuery`` (400) naming it and saying why, so that nothing past this point meets a
  value WeCom never sends, nor errs on one (a 500 would make WeCom retry it):

  - ``timestamp`` is 1 to 12 ASCII digits: WeCom's seconds since 1970. Python's ``int``
    takes more (a sign, spaces, underscores, another script's digits, thousands of
    digits), none of which WeCom sends nor a timestamp of ours is.
  - ``nonce`` is 1 to 64 printable ASCII characters, no space: WeCom's are digits, and
    it is kept whole (``CallbackNonce.nonce``, 64 characters) in every database, where
    a NUL or a character outside the database's encoding would be an error.
  - ``msg_signature`` is there; its value is the signature check's to judge (``crypto``:
    a wrong one is ``BadSignature``, 403), as compared bytes, whatever it holds.

* A request is taken while its timestamp is within ``window`` seconds of our clock,
  either way, and ``StaleRequest`` (403) otherwise: a replay whose nonce was forgotten is
  refused by its age. The comparison is of whole seconds, never of floats.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from .exceptions import BadQuery, StaleRequest

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_NONCE = re.compile(r"[!-~]{1,64}")
_SHOWN = 40  # characters of a bad value quoted in a refusal
NAMES = ("msg_signature", "timestamp", "nonce")


@dataclass(frozen=True, kw_only=True)
class Signed:
    """The three values of a callback's query string, their shapes checked."""

    msg_signature: str
    timestamp: str
    nonce: str

    @property
    def seconds(self) -> int:
        return int(self.timestamp)

    def as_kwargs(self) -> dict[str, str]:
        """The three, named as ``crypto`` and ``events`` take them."""
        return {name: getattr(self, name) for name in NAMES}


def read(query: Mapping[str, str]) -> Signed:
    """The values ``query`` signs a callback with; ``BadQuery`` naming the first one
    missing or of a shape WeCom never sends."""
    for name in NAMES:
        if name not in query:
            raise BadQuery(f"The query string has no {name}.", field=name)
    timestamp, nonce = query["timestamp"], query["nonce"]
    if not _TIMESTAMP.fullmatch(timestamp):
        raise BadQuery(
            f"timestamp is {timestamp[:_SHOWN]!r}, not WeCom's seconds since 1970 "
            "(1 to 12 digits 0-9).",
            field="timestamp",
        )
    if not _NONCE.fullmatch(nonce):
        raise BadQuery(
            f"nonce is {nonce[:_SHOWN]!r}, not 1 to 64 printable ASCII characters "
            "without spaces, as WeCom's are.",
            field="nonce",
        )
    return Signed(msg_signature=query["msg_signature"], timestamp=timestamp, nonce=nonce)


def check_fresh(signed: Signed, *, now: float, window: float) -> None:
    """``StaleRequest`` unless ``signed``'s timestamp is within ``window`` seconds of
    ``now``, either way."""
    if abs(int(now) - signed.seconds) > window:
        raise StaleRequest(
            f"timestamp {signed.timestamp} is more than {window:g} seconds from our clock: "
            "a replay, or a clock off."
        )
