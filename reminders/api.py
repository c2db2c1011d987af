"""What CRM code calls: ``schedule`` messages, one or many, and ``cancel`` them.

Every way in is one path, ``reminders.intake.scheduling``: ``schedule`` is one item of it,
``schedule_many`` thousands, and the helpers (``schedule_birthday``,
``schedule_inquiry_timeout``) build their items with ``reminders.intake.occasions``. So each
refuses, creates and updates tasks by the same rules, and bad input raises a
``ValidationError`` naming the parameter at fault, with nothing saved.

A task may be about a CRM object (``about``), found again by ``cancel_for(obj)``; a
recipient may be a CRM user, who stands for their WeCom member id (``reminders.intake.users``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date, datetime, time
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Model

from .engine import actions
from .exceptions import BulkValidationError
from .intake import about as about_objects
from .intake import clicks, occasions, scheduling
from .intake.occasions import BIRTHDAY_TIME, birthday_item
from .models import ScheduledTask

__all__ = [
    "birthday_item",
    "cancel",
    "cancel_for",
    "schedule",
    "schedule_birthday",
    "schedule_inquiry_timeout",
    "schedule_many",
]


def schedule(
    kind: str,
    recipient: str | Model,
    *,
    cron: str | None = None,
    at: datetime | None = None,
    tz: str | None = None,
    payload: dict[str, Any] | None = None,
    key: str | None = None,
    channel: str | None = None,
    priority: str | None = None,
    about: Model | None = None,
) -> ScheduledTask:
    """Create a task, or with ``key`` create-or-update the task that has it.

    ``recipient`` is a WeCom member id, or a user of the CRM (``reminders.intake.users``).
    Exactly one of ``cron`` and ``at``; a naive ``at`` is read in ``tz``. ``about``: the
    saved CRM object the task is about, for ``cancel_for``. Raises ``ValidationError``
    naming the parameter at fault; nothing is saved then, and a transaction of the
    caller's goes on (a kind's builder whose query failed included: the error is on
    ``payload``). What is refused, and why, is
    ``reminders.intake.validation``'s to say. A task due now (or within a tick) wakes the
    schedulers once the caller's transaction commits (``reminders.engine.wake``).
    """
    item = {
        "kind": kind,
        "recipient": recipient,
        "cron": cron,
        "at": at,
        "tz": tz,
        "payload": payload,
        "key": key,
        "channel": channel,
        "priority": priority,
        "about": about,
    }
    try:
        [task] = scheduling.schedule_all([item]).tasks
    except BulkValidationError as exc:
        raise exc.causes[0] from None
    return task


def schedule_many(
    items: Iterable[Mapping[str, Any]],
    *,
    progress: scheduling.Progress | None = None,
) -> list[ScheduledTask]:
    """``schedule`` for each item (a mapping of its keyword arguments, ``kind`` and
    ``recipient`` included), in one transaction: all the tasks, in the order of the
    items, or none. Upserts by key as ``schedule`` does; a key may appear once per call.

    Raises ``reminders.exceptions.BulkValidationError`` (a ``ValidationError``) whose
    ``errors`` maps each bad item's index to its errors by parameter. ``progress(checked,
    total)`` is called as the items are checked (for a progress bar).
    """
    return scheduling.schedule_all(items, progress=progress).tasks


def schedule_birthday(
    recipient: str | Model,
    born: date,
    *,
    at: time = BIRTHDAY_TIME,
    tz: str | None = None,
    key: str | None = None,
    about: Model | None = None,
    payload: dict[str, Any] | None = None,
) -> ScheduledTask:
    """A ``birthday`` greeting every year at ``at`` on the clock of ``tz``, on the day
    and month of ``born``; a 29 February birthday on 28 February in common years
    (``reminders.intake.occasions``). In ``schedule_many``, use ``birthday_item``."""
    item = birthday_item(recipient, born, at=at, tz=tz, key=key, about=about, payload=payload)
    return schedule(**item)


def schedule_inquiry_timeout(
    recipient: str | Model,
    arrived_at: datetime,
    *,
    minutes: int,
    about: Model,
    escalate_to: str | Model | None = None,
    escalate_after_minutes: int | None = None,
    payload: dict[str, Any] | None = None,
    key: str | None = None,
    reopen: bool = False,
) -> list[ScheduledTask]:
    """An ``inquiry_timeout`` alert to ``recipient`` ``minutes`` after ``arrived_at``,
    and with ``escalate_to`` a second one to them ``escalate_after_minutes`` later
    (saying whom it escalates from and how long the inquiry has waited); returns the
    tasks, the alert first. Both are about ``about`` (the inquiry: ``cancel_for`` it
    when it is answered) and keyed from ``key`` or from it, so calling again updates
    them; an escalation left out of a later call is cancelled. An escalation that a
    click cancelled (someone marked the inquiry done or took it on) is not planned
    again by a later call, and is returned as it is, unless ``reopen`` is true.
    ``ValidationError`` names the parameter at fault; nothing is saved then."""
    items = occasions.inquiry_timeout_items(
        recipient,
        arrived_at,
        minutes=minutes,
        about=about,
        escalate_to=escalate_to,
        escalate_after_minutes=escalate_after_minutes,
        payload=payload,
        key=key,
    )
    with transaction.atomic():
        closed = None if len(items) == 1 or reopen else _closed_escalation(items[0]["key"])
        try:
            tasks = scheduling.schedule_all(items[:1] if closed else items).tasks
        except BulkValidationError as exc:
            raise _inquiry_errors(exc) from None
        if closed:
            tasks.append(closed)
        if escalate_to is None:
            cancel(occasions.escalation_key(items[0]["key"]))
    return tasks


def _closed_escalation(first_key: str) -> ScheduledTask | None:
    """The inquiry's escalation, cancelled, if a click ended the inquiry (marked it done
    or took it on): left as it is unless the CRM reopens it."""
    escalation = (
        ScheduledTask.objects.filter(key=occasions.escalation_key(first_key))
        .filter(status=ScheduledTask.Status.CANCELLED)
        .first()
    )
    return escalation if escalation and clicks.ended_by_a_click(first_key) else None


# An inquiry item's parameters, as ``schedule_inquiry_timeout`` names them: the alert's,
# then the escalation's.
_INQUIRY_PARAMETERS: tuple[dict[str, str], ...] = (
    {"at": "arrived_at"},
    {"recipient": "escalate_to", "at": "escalate_after_minutes"},
)


def _inquiry_errors(exc: BulkValidationError) -> ValidationError:
    errors: dict[str, list[str]] = {}
    for index, fields in exc.errors.items():
        for field, messages in fields.items():
            said = errors.setdefault(_INQUIRY_PARAMETERS[index].get(field, field), [])
            said.extend(message for message in messages if message not in said)
    return ValidationError(errors)


def cancel(key: str) -> bool:
    """Cancel the task with ``key`` and its runs not yet started; False if none has it."""
    with transaction.atomic():
        task = ScheduledTask.objects.select_for_update().filter(key=key).first()
        if task is None or task.status == ScheduledTask.Status.CANCELLED:
            return False
        actions.cancel(task)
        return True


def cancel_for(obj: Model) -> int:
    """Cancel every task about ``obj`` not cancelled yet, and their runs not yet
    started, in one transaction; returns how many tasks."""
    try:
        content_type, object_id = about_objects.reference(obj)
    except ValidationError as exc:
        raise ValidationError({"obj": exc}) from None
    with transaction.atomic():
        tasks = list(
            ScheduledTask.objects.select_for_update()
            .filter(content_type=content_type, object_id=object_id)
            .exclude(status=ScheduledTask.Status.CANCELLED)
            .order_by("pk")
        )
        for task in tasks:
            actions.cancel(task)
    return len(tasks)
