"""The messages recalled lately: one count through the ledger's partial index on
``recalled_at`` (``reminders.engine.recall`` sets it once every part is taken back)."""

from __future__ import annotations

from datetime import datetime, timedelta

from reminders.models import SendLog

# How far back recalls are counted: a message can be recalled within 24 hours of its
# sending (WeCom's app), so a day shows each one's whole window.
RECALL_WINDOW = timedelta(hours=24)


def recalled(now: datetime) -> int:
    """Messages recalled (every part taken back) in the ``RECALL_WINDOW`` up to ``now``."""
    return SendLog.objects.filter(recalled_at__gt=now - RECALL_WINDOW, recalled_at__lte=now).count()
