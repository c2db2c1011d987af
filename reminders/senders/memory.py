"""Keeps messages in a list, like Django's locmem e-mail backend: for tests.

``MemorySender.outbox`` holds what was sent in this process. ``MemorySender.script``
takes exceptions (or ``None`` for success) that the next sends raise, in order.
"""

from __future__ import annotations

import itertools
from typing import ClassVar

from .base import BaseSender, Message, SendResult


class MemorySender(BaseSender):
    outbox: ClassVar[list[Message]] = []
    script: ClassVar[list[Exception | None]] = []
    _ids = itertools.count(1)

    @classmethod
    def clear(cls) -> None:
        cls.outbox.clear()
        cls.script.clear()

    def send(self, message: Message) -> SendResult:
        if self.script:
            outcome = self.script.pop(0)
            if outcome is not None:
                raise outcome
        self.outbox.append(message)
        return SendResult(message_id=f"memory-{next(self._ids)}")
