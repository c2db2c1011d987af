"""Old module paths that still import: each one the very module of its new home.

The package was laid out by concern (``engine``, ``schedule``, ``calendars``,
``messages``, ``intake``); a CRM may still import a module by its old path, and a
django-q2 job queued before an upgrade names its function by the old path
(``reminders.delivery.deliver``). ``MOVED`` maps each old path to its new one, and is
the one record of what moved where.

Invariants: importing an old path warns (``DeprecationWarning``, naming the new path, at
the importing line) and gives the *same* module object as the new path, not a copy, so
its names are the same objects and patching one patches the other; a path in ``MOVED``
never exists as a file too. ``install`` puts one finder per table on ``sys.meta_path``,
once, when the package is imported: before any of its submodules can be.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import ModuleType

MOVED: dict[str, str] = {
    # the admin, a package since 0.1.0
    "reminders.admin_calendar": "reminders.admin.calendar",
    "reminders.admin_confirm": "reminders.admin.confirm",
    "reminders.admin_display": "reminders.admin.display",
    "reminders.admin_filters": "reminders.admin.filters",
    "reminders.admin_run_now": "reminders.admin.run_now",
    # the engine: planning, claiming, delivering
    "reminders.cluster": "reminders.engine.cluster",
    "reminders.delivery": "reminders.engine.delivery",
    "reminders.dispatch": "reminders.engine.dispatch",
    "reminders.django_q_owner": "reminders.engine.django_q_owner",
    "reminders.outage": "reminders.engine.outage",
    "reminders.retention": "reminders.engine.retention",
    "reminders.sql": "reminders.models.sql",
    "reminders.wake": "reminders.engine.wake",
    "reminders.worker": "reminders.engine.worker",
    # when: time, cron words, a kind's timing rules
    "reminders.cron_text": "reminders.schedule.cron_text",
    "reminders.policies": "reminders.schedule.policies",
    "reminders.timing": "reminders.schedule.timing",
    # working-day calendars
    "reminders.calendar_coverage": "reminders.calendars.coverage",
    "reminders.calendar_days": "reminders.calendars.days",
    # what is said
    "reminders.builders": "reminders.messages.builders",
    "reminders.content": "reminders.messages.content",
    "reminders.stamps": "reminders.messages.stamps",
    "reminders.wording": "reminders.messages.wording",
    # what comes in: the API's path, CSV files, recipients
    "reminders.about": "reminders.intake.about",
    "reminders.calendar_import": "reminders.intake.calendar_import",
    "reminders.importing": "reminders.intake.importing",
    "reminders.occasions": "reminders.intake.occasions",
    "reminders.scheduling": "reminders.intake.scheduling",
    "reminders.users": "reminders.intake.users",
    "reminders.validation": "reminders.intake.validation",
    "reminders.progress": "reminders.management.progress",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} is deprecated: import from {self.new} instead.",
            DeprecationWarning,
            stacklevel=2,  # importlib's own frames are skipped: the importing line
        )
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system set the old path's spec on the module: give it its own back.
        module.__spec__ = self._spec


class MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of one table, and nothing else."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.table.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install(table: Mapping[str, str]) -> None:
    """Make the old paths of ``table`` importable (once per table, however often called)."""
    if not any(isinstance(f, MovedFinder) and f.table == table for f in sys.meta_path):
        sys.meta_path.append(MovedFinder(table))
