"""A WeCom app in memory that forgives nothing WeCom does not, and faults on request:
the channel the model-based test (tests/reminders/test_model_based.py) sends through.

``FaithfulSender`` is ``MemorySender`` with the options of a WeCom app (cards, recall,
the duplicate check) and, beside what ``MemorySender`` already holds of WeCom's rules:

* WeCom's per-member limit, 30 messages a minute and 1,000 an hour per app: WeCom
  drops a message over it without delivering it, so this does too, answering as if it
  had been delivered; the message goes to ``dropped`` (``recipient_rate`` is WeCom's,
  so the engine paces a member as it paces them on WeCom).
* faults, in order, from ``faults``: ``busy`` (errcode -1, nothing delivered), ``5xx``
  (an HTTP 502 before WeCom acted: in doubt, nothing delivered), ``lost`` (delivered,
  the reply lost: in doubt) and ``die`` (delivered, then the worker dies before it
  records anything: ``WorkerDied``, which no ``except Exception`` catches).

``limit_problem`` says which of WeCom's content limits a delivered message breaks (text
and markdown 2,048 bytes, which WeCom cuts; a text card's title 128 and description
512), so that a test asserts none does. ``deliveries`` keeps every delivery with its
moment (the clock's, which a test may move).
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any, ClassVar

from reminders.exceptions import InDoubtSendError, TransientSendError
from reminders.senders.base import Message, Rate, SendResult
from reminders.senders.memory import MemorySender

# WeCom's per-member limits of app messages: (count, seconds).
MEMBER_LIMITS = ((30, 60), (1000, 3600))
# WeCom's content limits, in UTF-8 bytes.
TEXT_BYTES = 2048
TEXTCARD_BYTES = {"title": 128, "description": 512}
FAULTS = ("busy", "5xx", "lost", "die")


class WorkerDied(BaseException):
    """The worker process ended here (a kill, an OOM): nothing after it runs."""


class FaithfulSender(MemorySender):
    recipient_rate: ClassVar[Rate | None] = Rate.at_most(*MEMBER_LIMITS[0])
    faults: ClassVar[list[str]] = []
    # (the clock's moment, the message) of every delivery, in order
    deliveries: ClassVar[list[tuple[float, Message]]] = []
    dropped: ClassVar[list[Message]] = []
    _drops = itertools.count(1)

    def __init__(self, alias: str, **options: Any) -> None:
        super().__init__(alias, cards=True, duplicate_check=True, **options)

    @classmethod
    def clear(cls) -> None:
        super().clear()
        cls.faults.clear()
        cls.deliveries.clear()
        cls.dropped.clear()

    def send(self, message: Message) -> SendResult:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "busy":
            raise TransientSendError("system busy", code="-1")
        if fault == "5xx":
            raise InDoubtSendError("HTTP 502 Bad Gateway", code="http_502")
        if self._over_member_limit(message):
            self.dropped.append(message)
            return SendResult(message_id=f"dropped-{next(self._drops)}")
        result = super().send(message)
        if fault == "lost":
            raise InDoubtSendError("no answer (read timeout)", code="timeout")
        if fault == "die":
            raise WorkerDied(message.idempotency_key)
        return result

    def _deliver(self, message: Message, outcome: SendResult | None) -> SendResult:
        delivered = len(self.outbox)
        result = super()._deliver(message, outcome)
        if len(self.outbox) > delivered:
            self.deliveries.append((time.time(), message))
        return result

    def _over_member_limit(self, message: Message) -> bool:
        now = time.time()
        for count, seconds in MEMBER_LIMITS:
            recent = [
                at
                for at, sent in self.deliveries
                if sent.recipient == message.recipient and now - at < seconds
            ]
            if len(recent) >= count:
                return True
        return False


def limit_problem(message: Message) -> str | None:
    """Which of WeCom's content limits ``message`` breaks, in words; None if none."""
    body = message.body
    if message.msgtype in ("text", "markdown"):
        size = len(str(body.get("content", "")).encode())
        if size > TEXT_BYTES:
            return f"{message.msgtype} of {size} bytes (WeCom cuts it at {TEXT_BYTES})"
    if message.msgtype == "textcard":
        for name, limit in TEXTCARD_BYTES.items():
            size = len(str(body.get(name, "")).encode())
            if size > limit:
                return f"textcard {name} of {size} bytes (at most {limit})"
    return None


def describe(message: Message) -> str:
    """One line for a report: the key, the recipient and the start of the body."""
    return f"{message.idempotency_key} to {message.recipient}: {json.dumps(message.body)[:120]}"
