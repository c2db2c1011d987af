"""The instant "send" both sides of the benchmark call: it only counts.

Each message appends one line (time, key, pid) to ``$BENCH_COUNT_FILE`` with a single
``O_APPEND`` write, so lines from concurrent processes never mix and the orchestrator
can count deliveries, find duplicates and see when the last one happened, from outside.
It costs a few microseconds: nothing next to the database work being measured.
"""

from __future__ import annotations

import os
import time
from typing import Any

from reminders.senders import BaseSender, Message, SendResult, get_sender

_fd: int | None = None


def count(key: str) -> None:
    global _fd
    path = os.environ.get("BENCH_COUNT_FILE")
    if not path:
        return
    if _fd is None:
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{time.time():.6f} {key} {os.getpid()}\n".encode())


class CountingSender(BaseSender):
    """A sender that delivers nowhere and answers at once. With the option
    ``duplicate_check`` it says its provider drops repeated bodies (as WeCom does), so
    the engine sends a claim's messages in batches."""

    duplicate_check_seconds = 3600

    def __init__(self, alias: str, *, duplicate_check: bool = False, **options: Any) -> None:
        super().__init__(alias, **options)
        self.supports_duplicate_check = duplicate_check  # type: ignore[misc]

    def send(self, message: Message) -> SendResult:
        count(message.idempotency_key)
        return SendResult(message_id="bench", code="0")


def bare_send(key: str, recipient: str, body: str) -> bool:
    """What a bare django-q2 job runs: the same sender, with no engine around it."""
    get_sender("bench").send(Message.from_rendered(recipient, body, key))
    return True
