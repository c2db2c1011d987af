"""Deprecated: moved to ``reminders.admin.run_now`` (the tasks' "Run now").

Kept for code that still imports ``reminders.admin_run_now``: it re-exports that
module's names, the same objects, and warns on import with the new path."""

from __future__ import annotations

import warnings

from .admin.run_now import TASK_NOUN, RunNowMixin

__all__ = ["TASK_NOUN", "RunNowMixin"]

warnings.warn(
    "reminders.admin_run_now is deprecated: import from reminders.admin.run_now instead.",
    DeprecationWarning,
    stacklevel=2,
)
