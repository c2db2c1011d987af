"""Tasks, their runs (one per occurrence) and the send ledger (one row per idempotency key).

The database holds the invariants: exactly one of ``cron`` and ``run_at``, one run per
task and occurrence, one ledger row per key, and a task about one CRM object (a content
type and a primary key, ``about``) or about none, never half of one. Models hold state:
fields, constraints, QuerySet verbs and small state changes. What acts on them lives in
the engine: planning (``engine.planning``) and operators' actions (``engine.actions``).

Where each lives: ``tasks`` (``ScheduledTask``), ``runs`` (``TaskRun``) and
``run_queries`` (its QuerySet verbs), ``ledger``
(``SendLog``, ``JobTake``), ``upkeep`` (the engine's bookkeeping), ``acting``
(what people did with their cards), ``preferences`` (what recipients want of each
kind), ``choices`` (the
vocabulary they share), ``validators`` (the fields' rules), ``sql`` (the statements
every message costs); the calendar days are ``reminders.calendars.days``'. Every name
is importable from ``reminders.models``, the path CRMs and migrations use.
"""

from ..calendars.days import CalendarDay, CalendarYear, DayKind, DaySource
from .acting import CallbackNonce, RunAction
from .choices import (
    CANCELLED_IN_DOUBT,
    CANCELLED_MID_SEND,
    CANCELLED_PARTLY_SENT,
    CANCELLED_WITH_TASK_IN_DOUBT,
    CANCELLED_WITH_TASK_PARTLY_SENT,
    DIGEST_CODE,
    DIGEST_KEY,
    EXPIRED_CODE,
    LOST_STATUSES,
    MADE_UP_WITH,
    MAKEUP_CANCELLED,
    MAKEUP_OFFSET,
    MAKEUP_SUFFIX,
    MISSED,
    MISSED_CODES,
    OPTED_OUT_CODE,
    PASSED_IN_ERROR,
    PASSED_WHILE_PAUSED,
    QUIET_CODE,
    RUN_NOW_KEY,
    THROTTLED_CODE,
    Priority,
    RunStatus,
    SkipReason,
)
from .ledger import JobTake, JobTakeQuerySet, SendLog
from .preferences import Preference, PreferenceChange, QuietHours, QuietHoursChange
from .run_queries import REPLANNED_FIELDS, RunQuerySet, StartValues
from .runs import FailedToday, TaskRun
from .tasks import OBJECT_ID_MAX_LENGTH, ScheduledTask, TaskQuerySet
from .upkeep import (
    HeartbeatQuerySet,
    ProviderToken,
    PrunedOneShot,
    RateBucket,
    SchedulerHeartbeat,
)
from .validators import (
    validate_calendar,
    validate_channel,
    validate_cron,
    validate_key,
    validate_kind,
    validate_payload,
    validate_quiet_hours,
    validate_recipient,
    validate_timezone,
)

__all__ = [
    "CANCELLED_IN_DOUBT",
    "CANCELLED_MID_SEND",
    "CANCELLED_PARTLY_SENT",
    "CANCELLED_WITH_TASK_IN_DOUBT",
    "CANCELLED_WITH_TASK_PARTLY_SENT",
    "DIGEST_CODE",
    "DIGEST_KEY",
    "EXPIRED_CODE",
    "LOST_STATUSES",
    "MADE_UP_WITH",
    "MAKEUP_CANCELLED",
    "MAKEUP_OFFSET",
    "MAKEUP_SUFFIX",
    "MISSED",
    "MISSED_CODES",
    "OBJECT_ID_MAX_LENGTH",
    "OPTED_OUT_CODE",
    "PASSED_IN_ERROR",
    "PASSED_WHILE_PAUSED",
    "QUIET_CODE",
    "REPLANNED_FIELDS",
    "RUN_NOW_KEY",
    "THROTTLED_CODE",
    "CalendarDay",
    "CalendarYear",
    "CallbackNonce",
    "DayKind",
    "DaySource",
    "FailedToday",
    "HeartbeatQuerySet",
    "JobTake",
    "JobTakeQuerySet",
    "Preference",
    "PreferenceChange",
    "Priority",
    "ProviderToken",
    "PrunedOneShot",
    "QuietHours",
    "QuietHoursChange",
    "RateBucket",
    "RunAction",
    "RunQuerySet",
    "RunStatus",
    "ScheduledTask",
    "SchedulerHeartbeat",
    "SendLog",
    "SkipReason",
    "StartValues",
    "TaskQuerySet",
    "TaskRun",
    "validate_calendar",
    "validate_channel",
    "validate_cron",
    "validate_key",
    "validate_kind",
    "validate_payload",
    "validate_quiet_hours",
    "validate_recipient",
    "validate_timezone",
]
