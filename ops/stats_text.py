"""Deprecated: ``reminders_stats``' tables live in ``ops.stats.text``. This name
re-exports them and warns on import; nothing in ``ops`` imports it."""

from __future__ import annotations

import warnings

from .stats.text import Row, render, table, width

__all__ = ["Row", "render", "table", "width"]

warnings.warn(
    "ops.stats_text is deprecated: import ops.stats.text", DeprecationWarning, stacklevel=2
)
