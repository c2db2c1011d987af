"""Deprecated: moved to ``reminders.admin.display`` (the task change form's previews).

Kept for code that still imports ``reminders.admin_display``: it re-exports that
module's names, the same objects, and warns on import with the new path."""

from __future__ import annotations

import warnings

from .admin.display import ERROR_CHARS, RECENT_RUNS, UPCOMING, recent_runs, upcoming

__all__ = ["ERROR_CHARS", "RECENT_RUNS", "UPCOMING", "recent_runs", "upcoming"]

warnings.warn(
    "reminders.admin_display is deprecated: import from reminders.admin.display instead.",
    DeprecationWarning,
    stacklevel=2,
)
