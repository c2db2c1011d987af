"""Deprecated: moved to ``reminders.admin.confirm`` (the actions' confirmation pages).

Kept for code that still imports ``reminders.admin_confirm``: it re-exports that
module's names, the same objects, and warns on import with the new path."""

from __future__ import annotations

import warnings

from .admin.confirm import (
    LISTED,
    TEMPLATE,
    Noun,
    Plan,
    Row,
    confirmed,
    left_lines,
    page,
    report,
)

__all__ = ["LISTED", "TEMPLATE", "Noun", "Plan", "Row", "confirmed", "left_lines", "page", "report"]

warnings.warn(
    "reminders.admin_confirm is deprecated: import from reminders.admin.confirm instead.",
    DeprecationWarning,
    stacklevel=2,
)
