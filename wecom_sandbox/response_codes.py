"""The response codes the sandbox issued, each good for one card update; not thread-safe
on its own (``SandboxState`` holds its lock around it).

WeCom issues a ``response_code`` in ``message/send``'s reply to a delivered button card
and in every ``template_card_event`` of a click; ``message/update_template_card`` takes
one, once, within 72 hours of its issue (``config.RESPONSE_CODE_TTL``), on the sandbox
clock (``SandboxState.now``, moved by ``advance``).

Invariants: a code is spent only by an update that succeeds (``spend``, after every
check passed); ``check`` changes nothing. Codes of entries the ledger no longer holds,
and expired ones, are swept when the store doubles, so it stays bounded.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from . import codes
from .config import RESPONSE_CODE_TTL
from .replies import Rejected

SEND = "send"
CLICK = "click"
SWEEP_AT = 50_000


@dataclass
class Issued:
    """A code: the ledger entry of its card, when (sandbox clock) and by what it was
    issued, and whether an update spent it."""

    entry_id: int
    at: float
    source: str
    used: bool = False


class ResponseCodes:
    def __init__(self) -> None:
        self.issued: dict[str, Issued] = {}
        self.sweep_at = SWEEP_AT

    def issue(self, entry_id: int, now: float, source: str) -> str:
        code = secrets.token_urlsafe(48)
        self.issued[code] = Issued(entry_id=entry_id, at=now, source=source)
        return code

    def check(self, code: str, now: float) -> Issued:
        """The code's issue, if it may update its card now; ``Rejected`` (40058) if it
        is unknown, spent or expired."""
        issued = self.issued.get(code)
        if issued is None:
            raise Rejected(codes.INVALID_PARAMETER, "invalid response_code")
        if issued.used:
            raise Rejected(codes.INVALID_PARAMETER, "response_code has been used")
        if now - issued.at > RESPONSE_CODE_TTL:
            raise Rejected(codes.INVALID_PARAMETER, "response_code expired")
        return issued

    def spend(self, code: str) -> None:
        self.issued[code].used = True

    def sweep(self, now: float, oldest_entry_id: int) -> None:
        """Forget codes no update can take any more, once the store doubled."""
        if len(self.issued) <= self.sweep_at:
            return
        self.issued = {
            code: issued
            for code, issued in self.issued.items()
            if issued.entry_id >= oldest_entry_id and now - issued.at <= RESPONSE_CODE_TTL
        }
        self.sweep_at = max(SWEEP_AT, 2 * len(self.issued))
