"""Keeps messages in a list, like Django's locmem e-mail backend: for tests.

``MemorySender.outbox`` holds what was delivered in this process. ``MemorySender.script``
scripts the next sends, in order: an exception is raised, a ``SendResult`` is returned
(the message counts as sent), ``None`` is a plain success, a number is a success that
takes that many seconds.

With the option ``duplicate_check`` it is exactly as forgiving as WeCom with
``enable_duplicate_check``, and no more: a body identical to one the same app
(``rate_scope``) delivered to the same recipient within ``duplicate_check_seconds`` is
accepted but not delivered, whatever its idempotency key. It goes to
``MemorySender.suppressed`` instead of ``outbox``, and the reply carries the first
delivery's message id, as the WeCom sandbox answers. A message of a type with no field
for the stamp is never suppressed: the WeCom app channel sends those without the check
(``WeComSender.deduplicates``), so a re-send of one is a second delivery there too.

With the option ``cards`` it carries cards with buttons (``carries_cards``), as the WeCom
app channel does. Whatever its options, it takes a ``template_card`` of ``card_type``
``button_interaction`` as WeCom does, and no more forgivingly: one WeCom would refuse
(no ``task_id``, too many buttons, a text too long: ``template_card.problem``) raises
``PayloadSendError``, and one whose ``task_id`` the same app (``rate_scope``) delivered
before is not delivered again: it goes to ``suppressed`` and the reply says it was
delivered before (``template_card.delivered_before``), as the WeCom app sender reports
WeCom's errcode 42014.

With the option ``oversize="split"`` it sends a text over WeCom's 2,048 bytes as the
WeCom app channel does, in parts (``reminders.senders.parts``), and judges each part on
its own, as WeCom does: a part identical to one delivered before is dropped even where
the rest of the message is new. ``outbox`` and ``suppressed`` then hold the parts.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from typing import Any, ClassVar

from ..exceptions import PayloadSendError
from . import template_card
from .base import BaseSender, Message, SendResult
from .parts import CONTENT_LIMIT, size, split_content
from .wecom import BODY_CHECKED


class MemorySender(BaseSender):
    outbox: ClassVar[list[Message]] = []
    suppressed: ClassVar[list[Message]] = []
    script: ClassVar[list[BaseException | SendResult | float | None]] = []
    duplicate_check_seconds = 3600
    # (rate scope, recipient, rendered body) -> (when it was delivered, its message id)
    _deliveries: ClassVar[dict[tuple[str, str, str], tuple[float, str]]] = {}
    # (rate scope, task_id) -> the message id of the card delivered with it
    _task_ids: ClassVar[dict[tuple[str, str], str]] = {}
    _ids = itertools.count(1)

    def __init__(
        self,
        alias: str,
        *,
        duplicate_check: bool = False,
        oversize: str | None = None,
        cards: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(alias, **options)
        self.supports_duplicate_check = duplicate_check  # type: ignore[misc]
        self.carries_cards = cards  # type: ignore[misc]
        self.split = oversize == "split"

    @classmethod
    def clear(cls) -> None:
        cls.outbox.clear()
        cls.suppressed.clear()
        cls.script.clear()
        cls._deliveries.clear()
        cls._task_ids.clear()

    def send(self, message: Message) -> SendResult:
        outcome = self.script.pop(0) if self.script else None
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, float | int):
            time.sleep(outcome)
            outcome = None
        self.check_message(message)
        parts = self._parts(message)
        if len(parts) == 1:
            return self._deliver(message, outcome)
        msgids = [self._deliver(part, None).message_id for part in parts]
        return outcome or SendResult(
            message_id=msgids[0], detail={"parts": len(msgids), "msgids": msgids}
        )

    def check_message(self, message: Message) -> None:
        """A card with buttons that WeCom would refuse is refused here too."""
        body = message.body
        if message.msgtype == "template_card" and body.get("card_type") == template_card.CARD_TYPE:
            problem = template_card.problem(body)
            if problem:
                raise PayloadSendError(
                    f"Channel {self.alias!r}: template_card message: {problem}.", code="card"
                )

    def _deliver(self, message: Message, outcome: SendResult | None) -> SendResult:
        """One message to the provider: dropped as a duplicate, or delivered."""
        task_id = template_card.card_task_id(message)
        if task_id is not None and (self.rate_scope, task_id) in self._task_ids:
            self.suppressed.append(message)
            return template_card.delivered_before(task_id)
        first = self._earlier_delivery(message)
        if first is not None:
            self.suppressed.append(message)
            return outcome or SendResult(message_id=first)
        result = outcome or SendResult(message_id=f"memory-{next(self._ids)}")
        self.outbox.append(message)
        self._deliveries[self._dedup_key(message)] = (time.time(), result.message_id)
        if task_id is not None:
            self._task_ids[(self.rate_scope, task_id)] = result.message_id
        return result

    def _parts(self, message: Message) -> list[Message]:
        """The messages the provider gets: with ``oversize="split"`` a text over WeCom's
        limit is its parts (``parts.split_content``), each judged on its own."""
        content = message.body.get("content")
        if (
            not self.split
            or message.msgtype not in ("text", "markdown")
            or not isinstance(content, str)
            or size(content) <= CONTENT_LIMIT
        ):
            return [message]
        return [
            replace(message, body={**message.body, "content": part})
            for part in split_content(content)
        ]

    def deduplicates(self, message: Message) -> bool:
        """As the WeCom app channel: a type that carries the stamp is checked (with the
        option ``duplicate_check``), and a card with a ``task_id`` is never taken twice."""
        if template_card.card_task_id(message) is not None:
            return True
        return self.supports_duplicate_check and message.msgtype in BODY_CHECKED

    def _dedup_key(self, message: Message) -> tuple[str, str, str]:
        """What the provider compares: per app (the rate scope), recipient and body."""
        return (self.rate_scope, message.recipient, message.rendered)

    def _earlier_delivery(self, message: Message) -> str | None:
        """The message id of an identical body delivered to the same recipient within
        the window, if the duplicate check is on and there is one."""
        if not self.deduplicates(message):
            return None
        earlier = self._deliveries.get(self._dedup_key(message))
        if earlier is None or time.time() - earlier[0] >= self.duplicate_check_seconds:
            return None
        return earlier[1]
