"""Deprecated: moved to ``reminders.admin.filters`` (the run history's filters).

Kept for code that still imports ``reminders.admin_filters``: it re-exports that
module's names, the same objects, and warns on import with the new path."""

from __future__ import annotations

import warnings

from .admin.filters import (
    DUE_PARAMETER,
    FAILED_TODAY,
    HANDLED_PARAMETER,
    LAST_7_DAYS,
    TODAY,
    YESTERDAY,
    DueDayFilter,
    HandledFilter,
    KindListFilter,
    local_days,
)

__all__ = [
    "DUE_PARAMETER",
    "FAILED_TODAY",
    "HANDLED_PARAMETER",
    "LAST_7_DAYS",
    "TODAY",
    "YESTERDAY",
    "DueDayFilter",
    "HandledFilter",
    "KindListFilter",
    "local_days",
]

warnings.warn(
    "reminders.admin_filters is deprecated: import from reminders.admin.filters instead.",
    DeprecationWarning,
    stacklevel=2,
)
