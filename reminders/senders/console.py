"""Logs each message instead of sending it: for development."""

from __future__ import annotations

import itertools
import logging

from .base import BaseSender, Message, SendResult

logger = logging.getLogger("reminders.console")


class ConsoleSender(BaseSender):
    _ids = itertools.count(1)

    def send(self, message: Message) -> SendResult:
        logger.info("to %s: %s", message.recipient, message.rendered)
        return SendResult(message_id=f"console-{next(self._ids)}")
