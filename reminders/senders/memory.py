"""Keeps messages in a list, like Django's locmem e-mail backend: for tests.

``MemorySender.outbox`` holds what was sent in this process. ``MemorySender.script``
scripts the next sends, in order: an exception is raised, a ``SendResult`` is returned
(the message counts as sent), ``None`` is a plain success, a number is a success that
takes that many seconds. With the option ``duplicate_check`` it drops a message whose
key and body it already holds, as WeCom does with ``enable_duplicate_check``.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, ClassVar

from .base import BaseSender, Message, SendResult


class MemorySender(BaseSender):
    outbox: ClassVar[list[Message]] = []
    script: ClassVar[list[BaseException | SendResult | float | None]] = []
    duplicate_check_seconds = 3600
    _ids = itertools.count(1)

    def __init__(self, alias: str, *, duplicate_check: bool = False, **options: Any) -> None:
        super().__init__(alias, **options)
        self.supports_duplicate_check = duplicate_check  # type: ignore[misc]

    @classmethod
    def clear(cls) -> None:
        cls.outbox.clear()
        cls.script.clear()

    def send(self, message: Message) -> SendResult:
        outcome = self.script.pop(0) if self.script else None
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, float | int):
            time.sleep(outcome)
            outcome = None
        if not (self.supports_duplicate_check and message in self.outbox):
            self.outbox.append(message)
        return outcome or SendResult(message_id=f"memory-{next(self._ids)}")
