"""The contract every sender implements; the engine knows nothing else about them."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar


def render_body(msgtype: str, body: dict[str, Any]) -> str:
    """The canonical JSON of a message: the same message always gives the same bytes."""
    return json.dumps(
        {"msgtype": msgtype, msgtype: body},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
    )


@dataclass(frozen=True)
class Message:
    """One message to one recipient, as the ledger recorded it."""

    recipient: str
    msgtype: str
    body: dict[str, Any]
    idempotency_key: str

    @classmethod
    def from_rendered(cls, recipient: str, rendered: str, idempotency_key: str) -> Message:
        data = json.loads(rendered)
        msgtype = data["msgtype"]
        return cls(recipient, msgtype, data[msgtype], idempotency_key)

    @property
    def rendered(self) -> str:
        return render_body(self.msgtype, self.body)


@dataclass(frozen=True)
class SendResult:
    """What the provider answered to a delivered message."""

    message_id: str = ""
    code: str = "0"
    detail: dict[str, Any] = field(default_factory=dict)


class BaseSender(ABC):
    """Delivers one message; raises a ``SendError`` subclass when it cannot.

    ``TransientSendError`` for what may pass (retried), ``PermanentSendError`` for what
    never will. A sender whose provider drops an identical body sent again within
    ``duplicate_check_seconds`` sets ``supports_duplicate_check``: only then does the
    engine re-send a message whose earlier attempt ended with no known outcome.
    """

    supports_duplicate_check: ClassVar[bool] = False
    duplicate_check_seconds: ClassVar[int] = 0

    def __init__(self, alias: str, **options: Any) -> None:
        self.alias = alias
        self.options = options

    @abstractmethod
    def send(self, message: Message) -> SendResult: ...

    def close(self) -> None:  # noqa: B027 - optional hook, most senders hold nothing
        """Release connections; called when the settings change."""
