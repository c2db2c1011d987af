"""Whether a task can be sent as asked, decided once: when it is scheduled.

The invariant: every task the API or the admin saves names one member its channel can
reach, a schedule that fires, a one-shot time inside ``AT_EARLIEST``..``AT_LATEST``, a
payload JSON can carry (in a language the project declares, if it names one), and a
message its channel can carry. The message is the one its first occurrence renders
through ``kinds.render``, which is what delivery sends, so the check stays true when a
kind's wording changes.

Why at scheduling: a task that cannot be sent fails at every occurrence, long after the
caller that made the mistake has moved on, and only a run's error shows it. Refused
when scheduled, the caller hears of it at once, with the field at fault, and nothing is
saved.

Each rule lives in one place. What one field decides is the model's: its field
validators and database constraints (``reminders.models``, ``reminders.recipients``),
which imports and bulk writes meet too. What needs several fields or the channel is
here. ``reminders.intake.scheduling``, the one path of ``api.schedule``, ``api.schedule_many``
and the CSV import, calls ``clean_task``; the admin's form, whose ModelForm already runs
the model's ``full_clean``, calls ``check_sendable`` after it. Errors are keyed by the
model's field names.

Checking reads no table, so that thousands of tasks scheduled at once cost no query
each: the model's check constraints are not asked row by row (each would be a query),
because each is the database's copy of a field validator or of the model's ``clean()``,
which have already said the same on the field at fault; the database still enforces
them when the row is written. Only the admin, checking one task a request, runs each
check in a savepoint (``check_sendable(savepoints=True)``): a CRM's builder that runs a
failing query then costs the form an error, not its transaction. Without savepoints
(``api.schedule`` and ``api.schedule_many``, many tasks at once) such an error is code
``QUERY_FAILED`` (``query_failed``), so that the caller, which checks in a transaction
of its own, rolls that back before it asks anything else (``intake.scheduling``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import kinds
from ..exceptions import RemindersError, SendError
from ..messages.builders import supported_language
from ..models import ScheduledTask, TaskRun
from ..schedule import timing
from ..senders import BaseSender, Message, get_sender

# A one-shot time must fall in these years. Later than 2100 is a typo, not a plan, and
# the zone database's offsets for far years are a guess; near the year 9999 converting
# to UTC overflows, and MariaDB's DATETIME ends there. Earlier than 1970 is as much a typo
# (a past time is due at once).
AT_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
AT_LATEST = datetime(2100, 1, 1, tzinfo=UTC)
# The code of the error on ``payload`` of a kind whose builder ran a query that failed.
QUERY_FAILED = "render_query"


def clean_task(
    task: ScheduledTask, *, exclude: Collection[str] = (), now: datetime | None = None
) -> None:
    """The model's ``full_clean`` (its fields and ``clean()``; not its check
    constraints, see above) and then ``check_sendable`` as of ``now``: raises one
    ``ValidationError`` with every field's errors; the caller saves only if none."""
    errors: dict[str, Any] = {}
    try:
        task.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    try:
        check_sendable(task, skip={*exclude, *errors}, now=now)
    except ValidationError as exc:
        errors = exc.update_error_dict(errors)
    if errors:
        raise ValidationError(errors)


def check_sendable(
    task: ScheduledTask,
    *,
    skip: Collection[str] = (),
    now: datetime | None = None,
    savepoints: bool = False,
) -> None:
    """The checks beyond one field, on a task whose fields passed the model's own; the
    message checked is its first occurrence after ``now`` (default: the present).

    ``skip`` names fields already found wrong: a check that reads one of them is left
    out, since its error would only repeat that one. With ``savepoints`` each check runs
    in a savepoint of its own (the admin, one task a request): a query that fails in a
    CRM's builder is rolled back with its check, and the caller's transaction goes on
    (on PostgreSQL it would be aborted).
    """
    now = now or timezone.now()
    failed = set(skip)
    errors: dict[str, list[ValidationError]] = {}
    for field, reads, check in CHECKS:
        if failed & reads:
            continue
        try:
            with transaction.atomic() if savepoints else nullcontext():
                check(task, now)
        except ValidationError as exc:
            errors.setdefault(field, []).extend(exc.error_list)
            failed.add(field)
    if errors:
        raise ValidationError(errors)


def _check_run_at(task: ScheduledTask, now: datetime) -> None:
    at = task.run_at
    if at is None:
        return
    if timezone.is_naive(at):
        at = at.replace(tzinfo=UTC)
    if not AT_EARLIEST <= at < AT_LATEST:
        raise ValidationError(
            _("The time %(at)s is outside the years %(first)d to %(last)d a one-shot may use."),
            code="run_at_horizon",
            params={"at": at.isoformat(), "first": AT_EARLIEST.year, "last": AT_LATEST.year - 1},
        )


def _check_payload_json(task: ScheduledTask, now: datetime) -> None:
    """What JSON (and every database's JSON column) can carry: no NaN or Infinity, no
    objects JSON does not know, no lone surrogates, no NUL (PostgreSQL refuses it)."""
    try:
        json.dumps(task.payload, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValidationError(
            _("The payload cannot be stored as JSON: %(error)s."),
            code="payload_json",
            params={"error": exc},
        ) from None
    if any("\x00" in text for text in _texts(task.payload)):
        raise ValidationError(_("The payload contains a NUL character."), code="payload_nul")


def _texts(value: Any) -> Iterator[str]:
    """Every string in a JSON value, keys included (without recursion: any depth)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def _check_content(task: ScheduledTask, now: datetime) -> None:
    """``payload["content"]``, which replaces a kind's wording, must be text to send."""
    if "content" not in task.payload:
        return
    content = task.payload["content"]
    if not isinstance(content, str):
        raise ValidationError(
            _('The payload\'s "content" must be text, not %(type)s.'),
            code="content_type",
            params={"type": "null" if content is None else type(content).__name__},
        )
    if not content.strip():
        raise ValidationError(_('The payload\'s "content" is empty.'), code="content_empty")


def _check_language(task: ScheduledTask, now: datetime) -> None:
    """``payload["lang"]``, the language of the task's message, is one the project
    declares (``settings.LANGUAGES``), as ``builders.language`` reads it."""
    if task.payload.get("lang") is None or supported_language(task.payload["lang"]):
        return
    raise ValidationError(
        _('The payload\'s "lang" %(lang)s is not a language this project declares.'),
        code="payload_lang",
        params={"lang": repr(task.payload["lang"])[:80]},
    )


def _sender(task: ScheduledTask) -> BaseSender:
    try:
        return get_sender(task.channel)
    except (RemindersError, ImproperlyConfigured, TypeError) as exc:
        # TypeError: OPTIONS without one the backend needs, or with one it does not take.
        raise ValidationError(
            _("The channel %(channel)s cannot be used: %(error)s"),
            code="channel_unusable",
            params={"channel": task.channel, "error": exc},
        ) from None


def _check_channel(task: ScheduledTask, now: datetime) -> None:
    _sender(task)


def _check_recipient(task: ScheduledTask, now: datetime) -> None:
    """The channel's own rule, which may be narrower than a member id (a phone number)."""
    try:
        _sender(task).validate_recipient(task.recipient)
    except SendError as exc:
        raise ValidationError(str(exc), code="recipient_channel") from None


def _check_message(task: ScheduledTask, now: datetime) -> None:
    """The first occurrence's message, rendered as delivery renders it, fits the channel."""
    run = _first_run(task, now)
    try:
        content = kinds.render(task, run)
    except Exception as exc:  # a CRM's kind may fail on any payload it cannot use
        raise ValidationError(
            _("The kind %(kind)s cannot render a message from this payload: %(error)s"),
            code=QUERY_FAILED if _from_the_database(exc) else "render",
            params={"kind": task.kind, "error": f"{type(exc).__name__}: {exc}"},
        ) from None
    message = Message(task.recipient, content.msgtype, content.body, idempotency_key="")
    try:
        _sender(task).check_message(message)
    except SendError as exc:
        raise ValidationError(
            _("The channel %(channel)s cannot carry this task's message: %(error)s"),
            code="message",
            params={"channel": task.channel, "error": exc},
        ) from None


def _from_the_database(exc: BaseException) -> bool:
    """Whether ``exc``, or what it was raised from, is a database's error."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DatabaseError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def query_failed(exc: ValidationError) -> bool:
    """Whether a check that raised ``exc`` met a failed query (a CRM's builder's): on
    PostgreSQL the transaction it ran in is aborted then, whatever the error says, and
    must be rolled back before any other query (``QUERY_FAILED``)."""
    errors = exc.error_dict.values() if hasattr(exc, "error_dict") else [exc.error_list]
    return any(error.code == QUERY_FAILED for listed in errors for error in listed)


def _first_run(task: ScheduledTask, now: datetime) -> TaskRun:
    """An unsaved run of the task's first occurrence after ``now``: what
    ``kinds.render`` needs."""
    if task.run_at is not None:
        occurrence = task.run_at
    else:
        occurrence = timing.next_occurrence(task.cron, task.timezone, now)
    local = occurrence.astimezone(timing.zone(task.timezone))
    return TaskRun(task=task, occurrence=occurrence, run_date=local.date(), due_at=occurrence)


_SCHEDULE = frozenset({"cron", "run_at", "timezone"})

# Each check: the field its error is reported on, the fields it reads, the check (of the
# task as of a moment).
CHECKS: list[tuple[str, frozenset[str], Callable[[ScheduledTask, datetime], None]]] = [
    ("run_at", frozenset({"run_at"}), _check_run_at),
    ("payload", frozenset({"payload"}), _check_payload_json),
    ("payload", frozenset({"payload"}), _check_content),
    ("payload", frozenset({"payload"}), _check_language),
    ("channel", frozenset({"channel"}), _check_channel),
    ("recipient", frozenset({"recipient", "channel"}), _check_recipient),
    (
        "payload",
        _SCHEDULE | {"kind", "channel", "recipient", "payload"},
        _check_message,
    ),
]
