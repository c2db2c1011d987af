"""The engine's signals, heard: each one records an event, and that is all.

A receiver runs in the engine's process once the engine's transaction has committed
(``reminders.signals.after_commit``), and its error is logged there, never raised. So
it does one cheap thing: an INSERT (plus, only for a run whose task was not loaded
with it, one read of the task's kind and channel). Grouping, throttling and sending
happen in the alert step (``ops.alerts``), outside the send path.
"""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver
from django.utils import timezone

from reminders import signals
from reminders.models import ScheduledTask, TaskRun

from .models import AlertEvent, AlertType


def _kind_and_channel(run: TaskRun) -> tuple[str, str]:
    if TaskRun._meta.get_field("task").is_cached(run):
        return run.task.kind, run.task.channel
    row = ScheduledTask.objects.filter(pk=run.task_id).values_list("kind", "channel").first()
    return row or ("", "")


def _record_run(alert_type: str, run: TaskRun, code: str = "", message: str = "") -> None:
    kind, channel = _kind_and_channel(run)
    AlertEvent.objects.record(
        alert_type,
        occurred_at=timezone.now(),
        kind=kind,
        channel=channel,
        code=run.error_code or code,
        message=run.error_message or message,
        run_id=run.pk,
        task_id=run.task_id,
    )


@receiver(signals.run_failed, dispatch_uid="ops.run_failed")
def run_failed(sender: Any, run: TaskRun, error: Any = None, **kwargs: Any) -> None:
    """A final failure; one the provider blames on our credentials or settings
    (``ConfigurationSendError``) is a configuration alert of its channel."""
    configuration = getattr(error, "category", "") == "configuration"
    _record_run(
        AlertType.CONFIGURATION if configuration else AlertType.RUN_FAILED,
        run,
        getattr(error, "code", ""),
        getattr(error, "message", ""),
    )


@receiver(signals.run_unknown, dispatch_uid="ops.run_unknown")
def run_unknown(sender: Any, run: TaskRun, **kwargs: Any) -> None:
    _record_run(AlertType.RUN_UNKNOWN, run)


@receiver(signals.run_expired, dispatch_uid="ops.run_expired")
def run_expired(sender: Any, run: TaskRun, **kwargs: Any) -> None:
    _record_run(AlertType.RUN_EXPIRED, run)


@receiver(signals.run_stuck, dispatch_uid="ops.run_stuck")
def run_stuck(sender: Any, run: TaskRun, **kwargs: Any) -> None:
    _record_run(AlertType.RUN_STUCK, run, "stuck", "Still running after REMINDERS_RUN_TIMEOUT.")


@receiver(signals.task_error, dispatch_uid="ops.task_error")
def task_error(
    sender: Any, task: ScheduledTask, code: str = "", message: str = "", **kwargs: Any
) -> None:
    AlertEvent.objects.record(
        AlertType.TASK_ERROR,
        occurred_at=timezone.now(),
        kind=task.kind,
        channel=task.channel,
        code=code,
        message=message,
        task_id=task.pk,
    )


@receiver(signals.calendar_uncovered, dispatch_uid="ops.calendar_uncovered")
def calendar_uncovered(
    sender: Any, task: ScheduledTask, calendar: str, year: int, rule: str = "", **kwargs: Any
) -> None:
    decided = f": the fallback rule {rule!r} decided the day" if rule else ""
    AlertEvent.objects.record(
        AlertType.CALENDAR_UNCOVERED,
        occurred_at=timezone.now(),
        kind=task.kind,
        channel=task.channel,
        scope=f"{calendar} {year}",
        code="calendar_uncovered",
        message=f"Calendar {calendar!r} does not cover {year}{decided}.",
        data={"calendar": calendar, "year": year, "rule": rule},
        task_id=task.pk,
    )
