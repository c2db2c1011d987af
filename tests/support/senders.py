"""Senders for tests that watch deliveries from outside the sending process."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from reminders.exceptions import TransientSendError
from reminders.senders import BaseSender, Message, SendResult


class RecordingSender(BaseSender):
    """Appends one JSON line per delivered message to ``$RECORD_FILE``.

    ``$RECORD_DELAY`` (seconds) sleeps after delivering and before returning, so a test
    can kill the process between the provider's delivery and our record of it.
    ``$RECORD_FAIL_FIRST`` (n) fails the first n sends of each key with a passing error.
    With ``duplicate_check`` it behaves like WeCom with ``enable_duplicate_check``: a body
    already delivered to the same recipient within ``duplicate_check_seconds`` is accepted
    and not delivered again, whatever its key; the reply carries the first delivery's id.
    """

    duplicate_check_seconds = 3600

    def __init__(self, alias: str, *, duplicate_check: bool = False, **options: Any) -> None:
        super().__init__(alias, **options)
        self.supports_duplicate_check = duplicate_check  # type: ignore[misc]
        self._failures: dict[str, int] = {}

    @property
    def path(self) -> Path:
        return Path(os.environ["RECORD_FILE"])

    def delivered(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def send(self, message: Message) -> SendResult:
        fail_first = int(os.environ.get("RECORD_FAIL_FIRST", "0"))
        seen = self._failures.get(message.idempotency_key, 0)
        if seen < fail_first:
            self._failures[message.idempotency_key] = seen + 1
            raise TransientSendError("provider busy", code="-1")
        first = self._earlier_delivery(message)
        message_id = first["id"] if first else f"rec-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        if first is None:
            line = json.dumps(
                {
                    "key": message.idempotency_key,
                    "to": message.recipient,
                    "body": message.rendered,
                    "id": message_id,
                    "pid": os.getpid(),
                    "at": time.time(),
                }
            )
            # One write of one line with O_APPEND: lines from several processes never mix.
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        delay = float(os.environ.get("RECORD_DELAY", "0"))
        if delay:
            time.sleep(delay)
        return SendResult(message_id=message_id, code="0")

    def _earlier_delivery(self, message: Message) -> dict[str, Any] | None:
        """An identical body delivered to the same recipient within the window, if the
        duplicate check is on: what the provider compares is the request, not our key."""
        if not self.supports_duplicate_check:
            return None
        since = time.time() - self.duplicate_check_seconds
        return next(
            (
                row
                for row in self.delivered()
                if row["to"] == message.recipient
                and row["body"] == message.rendered
                and row["at"] > since
            ),
            None,
        )
