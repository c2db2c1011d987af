"""The ops staff's admin of the reminders app, a package as ``django.contrib.admin`` is:
the tasks, their runs, the send ledger and the calendar days ops enter.

Importing it registers on ``django.contrib.admin.site``, in this order, the admins of
``ScheduledTask`` (``tasks``), ``TaskRun`` and the "Failed today" entry (``runs``),
``SendLog`` (``ledger``), ``CalendarDay`` and ``CalendarYear`` (``calendar``), and
``Preference`` and its history (``preferences``):
``admin.autodiscover()`` imports it as it imported the module it replaces. The other
modules register nothing: the task's form (``task_form``), run now (``run_now``), the
confirmation pages (``confirm``), the change form's read-only previews (``display``),
the run history's filters (``filters``), what the history and the ledger say of digests
(``digests``) and the history's read-only base (``read_only``).

The admin holds no rules of its own: its actions call the models' state methods, the
same ones the API and the commands use, and every page and POST checks its permissions
on the server. Its modules import the app's models and services (``reminders.models``,
``scheduling``, ``calendars``, ``calendar_days``…) and each other; never ``ops``, which
builds on this app (its dashboard links to these pages), not the other way round.

The names ``reminders.admin`` had as a module are imported here, so that
``from reminders.admin import ScheduledTaskAdmin`` still works; the old sibling modules
(``reminders.admin_confirm``…) are shims that say where their names went.
"""

from __future__ import annotations

# The modules that register, in the order they did when the admin was one module.
from . import tasks, runs, ledger, calendar, preferences  # isort: skip
from .calendar import CalendarDayAdmin, CalendarYearAdmin
from .ledger import SendLogAdmin
from .read_only import ReadOnlyAdmin
from .runs import NOT_CHANGED, RUN_NOUN, FailedTodayAdmin, TaskRunAdmin
from .task_form import (
    EVERY_DAY,
    SCHEDULE_FIELDS,
    RunAtInTaskZoneForm,
    ScheduledTaskForm,
    WallClockDateTimeField,
)
from .tasks import PREVIEW_FIELDS, STATE_FIELDS, ScheduledTaskAdmin, TaskChangeList

__all__ = [
    "EVERY_DAY",
    "NOT_CHANGED",
    "PREVIEW_FIELDS",
    "RUN_NOUN",
    "SCHEDULE_FIELDS",
    "STATE_FIELDS",
    "CalendarDayAdmin",
    "CalendarYearAdmin",
    "FailedTodayAdmin",
    "ReadOnlyAdmin",
    "RunAtInTaskZoneForm",
    "ScheduledTaskAdmin",
    "ScheduledTaskForm",
    "SendLogAdmin",
    "TaskChangeList",
    "TaskRunAdmin",
    "WallClockDateTimeField",
    "calendar",
    "ledger",
    "preferences",
    "runs",
    "tasks",
]
