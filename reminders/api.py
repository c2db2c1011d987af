"""What CRM code calls: ``schedule`` a message and ``cancel`` it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from . import kinds, timing, validation
from .conf import settings as conf
from .exceptions import UnknownKind
from .models import Priority, ScheduledTask

__all__ = ["cancel", "schedule"]

# The model's field names, as the caller spelled them.
_PARAMETER = {"run_at": "at", "timezone": "tz"}


def schedule(
    kind: str,
    recipient: str,
    *,
    cron: str | None = None,
    at: datetime | None = None,
    tz: str | None = None,
    payload: dict[str, Any] | None = None,
    key: str | None = None,
    channel: str | None = None,
    priority: str | None = None,
) -> ScheduledTask:
    """Create a task, or with ``key`` create-or-update the task that has it.

    Exactly one of ``cron`` and ``at``; a naive ``at`` is read in ``tz``. Raises
    ``ValidationError`` naming the parameter at fault; nothing is saved then. What is
    refused, and why, is ``reminders.validation``'s to say. A task due now (or within a
    tick) wakes the schedulers once the caller's transaction commits (``reminders.wake``).
    """
    _require_text(
        kind=kind,
        recipient=recipient,
        cron=cron,
        tz=tz,
        key=key,
        channel=channel,
        priority=priority,
    )
    tz = tz or django_settings.TIME_ZONE
    try:
        default_priority = kinds.policy(kind).priority
    except UnknownKind:
        default_priority = Priority.NORMAL
    fields: dict[str, Any] = {
        "kind": kind,
        "recipient": recipient,
        "cron": (cron or "").strip(),
        "run_at": _aware(at, tz),
        "timezone": tz,
        "payload": {} if payload is None else payload,
        "channel": channel or conf.DEFAULT_CHANNEL,
        "priority": priority or default_priority,
    }
    if cron is not None and at is not None:
        raise _renamed(ValidationError({"cron": "Give exactly one of cron and at, not both."}))
    for _ in range(2):
        try:
            with transaction.atomic():
                return _upsert(key or None, fields)
        except IntegrityError:
            if not key:
                raise
            # Another caller created the same key first: update that one.
            continue
    raise RuntimeError("unreachable")  # pragma: no cover


def _require_text(**parameters: object) -> None:
    """Text parameters are ``str`` (or None where optional): never coerced, so that what
    is stored is what the caller wrote."""
    errors = {
        name: f"{name} must be text, not {type(value).__name__}."
        for name, value in parameters.items()
        if value is not None and not isinstance(value, str)
    }
    if errors:
        raise ValidationError(errors)


def _aware(at: object, tz: str) -> datetime | None:
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise ValidationError({"at": f"at must be a datetime, not {type(at).__name__}."})
    if timezone.is_aware(at):
        return at
    return timing.wall_clock_in(at, tz)


def _upsert(key: str | None, fields: dict[str, Any]) -> ScheduledTask:
    task = None
    if key is not None:
        task = ScheduledTask.objects.select_for_update().filter(key=key).first()
    if task is None:
        task = ScheduledTask(key=key)
        schedule_changed = True
    else:
        schedule_changed = any(
            getattr(task, name) != fields[name] for name in ("cron", "run_at", "timezone")
        )
    for name, value in fields.items():
        setattr(task, name, value)
    try:
        validation.clean_task(task)
    except ValidationError as exc:
        raise _renamed(exc) from None
    # Scheduling a cancelled task (or one in error) again revives it; a paused one stays
    # paused, re-planned if its schedule changed.
    if schedule_changed or task.status in (
        ScheduledTask.Status.CANCELLED,
        ScheduledTask.Status.ERROR,
    ):
        task.replan(timezone.now())
    task.save()
    task.wake_if_due()
    return task


def _renamed(exc: ValidationError) -> ValidationError:
    if not hasattr(exc, "error_dict"):
        return exc
    return ValidationError(
        {_PARAMETER.get(field, field): errors for field, errors in exc.error_dict.items()}
    )


def cancel(key: str) -> bool:
    """Cancel the task with ``key`` and its runs not yet started; False if none has it."""
    with transaction.atomic():
        task = ScheduledTask.objects.select_for_update().filter(key=key).first()
        if task is None or task.status == ScheduledTask.Status.CANCELLED:
            return False
        task.cancel()
        return True
