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

It takes a message back (``recall``) and updates a card (``update_card``) as the WeCom
app does, and no more forgivingly. A recall names a message id it delivered, within 24
hours (``recall_window``), once; the message moves to ``recalled``. A delivered card's
reply carries a ``response_code``, as WeCom's does, and ``click_code(task_id)`` issues
another as a click on the card would (for a test to put in its callback event); an
update takes a code it issued, once, within 72 hours, for the card's recipient, and is
kept in ``card_updates``. Both need the option ``cards``: a channel without it is one that
recalls nothing and updates no card (a group robot).

With the option ``oversize="split"`` it sends a text over WeCom's 2,048 bytes as the
WeCom app channel does, in parts (``reminders.senders.parts``), and judges each part on
its own, as WeCom does: a part identical to one delivered before is dropped even where
the rest of the message is new. ``outbox`` and ``suppressed`` then hold the parts. Each
part is a request of its own and meets the next scripted outcome: a failure on a later
part names the parts delivered before it (``SendError.delivered_parts``), and a message
that names parts an earlier attempt delivered (``Message.sent_parts``) gets only the
rest sent, as the WeCom app channel does.
Without ``oversize``, a text over WeCom's 2,048 bytes is refused
(``PayloadSendError``), as WeCom refuses it.
"""

from __future__ import annotations

import itertools
import secrets
import time
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ..exceptions import PayloadSendError, PermanentSendError, RecipientSendError, SendError
from . import template_card
from .base import BaseSender, Message, SendResult
from .parts import CONTENT_LIMIT, size, split_content
from .wecom import BODY_CHECKED, RECALL_WINDOW

# WeCom takes a card's response code once, within 72 hours of its issue.
RESPONSE_CODE_SECONDS = 72 * 3600


@dataclass
class _Code:
    """A response code issued for a card: whose card, when, and whether it was used."""

    scope: str
    task_id: str
    recipient: str
    issued_at: float
    used: bool = False


class MemorySender(BaseSender):
    outbox: ClassVar[list[Message]] = []
    suppressed: ClassVar[list[Message]] = []
    recalled: ClassVar[list[Message]] = []
    # (recipient, task_id, replace_name) of every card updated
    card_updates: ClassVar[list[tuple[str, str, str]]] = []
    # (recipient, task_id, card) of every card replaced by a whole new one
    card_replacements: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []
    script: ClassVar[list[BaseException | SendResult | float | None]] = []
    duplicate_check_seconds = 3600
    # (rate scope, recipient, rendered body) -> (when it was delivered, its message id)
    _deliveries: ClassVar[dict[tuple[str, str, str], tuple[float, str]]] = {}
    # (rate scope, task_id) -> the message id of the card delivered with it
    _task_ids: ClassVar[dict[tuple[str, str], str]] = {}
    # message id -> (rate scope, when it was delivered, the message)
    _sent: ClassVar[dict[str, tuple[str, float, Message]]] = {}
    _codes: ClassVar[dict[str, _Code]] = {}
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
        self.recall_window = RECALL_WINDOW if cards else None  # type: ignore[misc]
        self.split = oversize == "split"

    @classmethod
    def clear(cls) -> None:
        cls._ids = itertools.count(1)
        cls.outbox.clear()
        cls.suppressed.clear()
        cls.script.clear()
        cls._deliveries.clear()
        cls._task_ids.clear()
        cls.recalled.clear()
        cls.card_updates.clear()
        cls.card_replacements.clear()
        cls._sent.clear()
        cls._codes.clear()

    def send(self, message: Message) -> SendResult:
        outcome = self._scripted()
        self.check_message(message)
        parts = self._parts(message)
        if len(parts) == 1:
            return self._deliver(message, outcome)
        # Each part is a request of its own, as to WeCom: it meets the next scripted
        # outcome; those an earlier attempt delivered are not sent again.
        msgids = list(message.sent_parts)
        for index, part in enumerate(parts[len(msgids) :]):
            try:
                result = self._deliver(part, outcome if index == 0 else self._scripted())
            except SendError as exc:
                exc.delivered_parts = tuple(msgids)
                raise
            msgids.append(result.message_id)
        return SendResult(message_id=msgids[0], detail={"parts": len(msgids), "msgids": msgids})

    def _scripted(self) -> SendResult | None:
        """The next scripted outcome of a request: raised, slept, or returned."""
        outcome = self.script.pop(0) if self.script else None
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, float | int):
            time.sleep(outcome)
            return None
        return outcome

    def check_message(self, message: Message) -> None:
        """A card with buttons that WeCom would refuse is refused here too, and so is a
        text over WeCom's 2,048 bytes where the channel does not split it."""
        body = message.body
        content = body.get("content")
        oversize = isinstance(content, str) and size(content) > CONTENT_LIMIT
        if message.msgtype in ("text", "markdown") and oversize and not self.split:
            raise PayloadSendError(
                f"Channel {self.alias!r}: the content is {size(str(content))} bytes, over "
                f"WeCom's limit of {CONTENT_LIMIT}.",
                code="too-large",
            )
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
        self._sent[result.message_id] = (self.rate_scope, time.time(), message)
        if task_id is not None:
            self._task_ids[(self.rate_scope, task_id)] = result.message_id
            if self.carries_cards and message.body.get("card_type") == template_card.CARD_TYPE:
                code = self._issue(task_id, message.recipient)
                result = replace(result, detail={**result.detail, "response_code": code})
        return result

    # -- after the send ---------------------------------------------------------------

    def recall(self, message_id: str) -> None:
        """As WeCom's ``message/recall``: a message this app delivered, within 24 hours,
        once; the channel must recall at all (``cards``, as a WeCom app)."""
        window = self.recall_window
        if window is None:
            return super().recall(message_id)
        sent = self._sent.get(message_id)
        if sent is None or sent[0] != self.rate_scope:
            raise PermanentSendError(f"Recall {message_id}: no such message.", code="40058")
        if time.time() - sent[1] > window.total_seconds():
            raise PermanentSendError(f"Recall {message_id}: sent over 24 hours ago.", code="40058")
        del self._sent[message_id]
        self.recalled.append(sent[2])

    @classmethod
    def click_code(cls, task_id: str) -> str:
        """A response code for the card ``task_id`` delivered, as a click on it brings."""
        for (scope, used_id), message_id in cls._task_ids.items():
            if used_id == task_id and message_id in cls._sent:
                return cls._issue_in(scope, task_id, cls._sent[message_id][2].recipient)
        raise LookupError(f"no card {task_id} was delivered")

    def update_card(self, recipient: str, response_code: str, replace_name: str) -> None:
        """As WeCom's ``update_template_card``: a code issued for this app's card to
        ``recipient``, used once, within 72 hours; the text held to a button's length."""
        if not self.carries_cards:
            return super().update_card(recipient, response_code, replace_name)
        code = self._spendable(recipient, response_code)
        found = template_card.text_problem("button_list.text", replace_name, "button.replace_name")
        if found:
            raise PermanentSendError(f"update_template_card: {found}.", code="45002")
        code.used = True
        self.card_updates.append((recipient, code.task_id, replace_name))

    def replace_card(self, recipient: str, response_code: str, card: dict[str, Any]) -> None:
        """As WeCom's ``update_template_card`` with a whole card: the code as for
        ``update_card``, and a card WeCom would send, of the same ``task_id``."""
        if not self.carries_cards:
            return super().replace_card(recipient, response_code, card)
        code = self._spendable(recipient, response_code)
        found = template_card.problem(card)
        if found:
            raise PermanentSendError(f"update_template_card: {found}.", code="40058")
        if card.get("task_id") != code.task_id:
            raise PermanentSendError(
                "update_template_card: the card's task_id is not the updated card's.",
                code="40058",
            )
        code.used = True
        self.card_replacements.append((recipient, code.task_id, card))

    def _spendable(self, recipient: str, response_code: str) -> _Code:
        """The code ``response_code``, if this app issued it for a card to ``recipient``,
        unused and under 72 hours old; else what WeCom answers."""
        code = self._codes.get(response_code)
        if (
            code is None
            or code.scope != self.rate_scope
            or code.used
            or time.time() - code.issued_at > RESPONSE_CODE_SECONDS
        ):
            raise PermanentSendError("update_template_card: invalid response_code.", code="40058")
        if code.recipient != recipient:
            raise RecipientSendError(
                f"update_template_card: {recipient} did not get the card.", code="invaliduser"
            )
        return code

    def _issue(self, task_id: str, recipient: str) -> str:
        return self._issue_in(self.rate_scope, task_id, recipient)

    @classmethod
    def _issue_in(cls, scope: str, task_id: str, recipient: str) -> str:
        code = secrets.token_urlsafe(24)
        cls._codes[code] = _Code(scope, task_id, recipient, time.time())
        return code

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
