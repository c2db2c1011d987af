"""Deprecated: how the numbers are written for people lives in ``ops.stats.format``. This
name re-exports it and warns on import; nothing in ``ops`` imports it."""

from __future__ import annotations

import warnings

from .stats.format import NOTHING, rate, seconds

__all__ = ["NOTHING", "rate", "seconds"]

warnings.warn(
    "ops.stats_format is deprecated: import ops.stats.format", DeprecationWarning, stacklevel=2
)
