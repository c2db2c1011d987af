"""Keeps messages in a list, like Django's locmem e-mail backend: for tests.

``MemorySender.outbox`` holds what was sent in this process. ``MemorySender.script``
scripts the next sends, in order: an exception is raised, a ``SendResult`` is returned
(the message counts as sent), ``None`` is a plain success.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

from .base import BaseSender, Message, SendResult


class MemorySender(BaseSender):
    outbox: ClassVar[list[Message]] = []
    script: ClassVar[list[Exception | SendResult | None]] = []
    _ids = itertools.count(1)

    @classmethod
    def clear(cls) -> None:
        cls.outbox.clear()
        cls.script.clear()

    def send(self, message: Message) -> SendResult:
        outcome = self.script.pop(0) if self.script else None
        if isinstance(outcome, Exception):
            raise outcome
        self.outbox.append(message)
        return outcome or SendResult(message_id=f"memory-{next(self._ids)}")
