"""The one path from ``api.schedule``'s arguments to saved tasks, for one task or thousands.

``api.schedule`` is this path with one item, ``api.schedule_many`` with many; the
helpers (``reminders.intake.occasions``) and ``reminders_import`` build items for it. So a task
is refused, created or updated by the same rules whichever way it came in.

Invariants:

* All or nothing. Every item is checked, by ``validation.clean_task`` (the model's
  rules and ``reminders.intake.validation``'s), before anything is written; if any item is bad
  nothing is saved, and every bad item is reported, by its index, with its errors on the
  parameters at fault (``at``, ``tz`` and ``about`` where the model says ``run_at``,
  ``timezone``, ``content_type`` and ``object_id``).
* The caller's transaction goes on. A call inside the CRM's own transaction works in a
  savepoint of it; an item whose kind's builder runs a query that fails (which, on
  PostgreSQL, aborts the transaction) is refused on ``payload``, that savepoint rolled
  back and the items after it checked in a fresh one (``_written``): no other item is
  refused for that error, and the caller's next query works.
* Upsert by key. An item with a key updates the task that has it, or creates it; the
  item is the whole task (a parameter left out takes its default, as in a first call).
  A key given twice in one call is refused on its second item. Of two callers creating
  one key at the same moment, the one the unique key stops updates the other's task.
* Re-planning. A task whose schedule changed, or that was cancelled or in error, is
  re-planned (``ScheduledTask.replan_all``, the admin's rule too): its runs not yet
  started are cancelled and its next run planned afresh; a paused task stays paused.
* Lock first. A known task's row is locked before anything is cancelled or planned, by
  this path and by the admin's save (``save_edited``): a scheduler planning the task
  holds that lock until its runs commit, so they are seen and cancelled with the rest,
  and its advance of ``next_run`` never overwrites the new plan (nor a stale copy it).
* Cost. One query fetches, and locks, the tasks of the items' keys (one per
  ``max_query_params`` keys where the database limits them); checking reads no table;
  new tasks are written by a bulk INSERT and known ones by a bulk INSERT that updates
  them (``_update``), ``CHUNK`` rows a statement; the pending runs of re-planned tasks
  are cancelled by one UPDATE per ``REPLAN_CHUNK``, after one read of those few that
  need more (runs in doubt, make-ups: ``RunQuerySet.cancel_pending``). All in one
  transaction, planned from one ``now``. No savepoint per item: only a builder's failed
  query costs more (a fresh transaction, and the keys' lock again, for the items after).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from .. import kinds
from ..conf import settings as conf
from ..engine import planning, wake
from ..exceptions import BulkValidationError, UnknownKind
from ..models import Priority, ScheduledTask
from ..schedule import timing
from . import about, users, validation

# ``api.schedule``'s parameters: what an item may give.
PARAMETERS = (
    "kind",
    "recipient",
    "cron",
    "at",
    "tz",
    "payload",
    "key",
    "channel",
    "priority",
    "about",
)
REQUIRED = ("kind", "recipient")
# Never coerced, so that what is stored is what the caller wrote (``recipient``, which
# may also be a user, is checked on its own).
TEXT = ("kind", "cron", "tz", "key", "channel", "priority")

# The model's field names, as the caller spells them.
PARAMETER_OF_FIELD = {
    "run_at": "at",
    "timezone": "tz",
    "content_type": "about",
    "object_id": "about",
}
# Written again when a known task is updated: what an item sets and what planning does.
UPDATED_FIELDS = (
    "kind",
    "recipient",
    "cron",
    "run_at",
    "timezone",
    "payload",
    "channel",
    "priority",
    "content_type",
    "object_id",
    "status",
    "next_run",
    *ScheduledTask.ERROR_FIELDS,
    "updated_at",
)
SCHEDULE_FIELDS = ("cron", "run_at", "timezone")

# Rows a bulk INSERT statement writes (fewer where the database limits parameters).
CHUNK = 1000
# How often (items checked) ``progress`` hears of it.
PROGRESS_EVERY = 250

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Draft:
    """One item's task fields, read from its parameters; not yet checked as a task."""

    key: str | None
    fields: dict[str, Any]


@dataclass(frozen=True)
class Outcome:
    """The tasks of a call, in the order of its items, and how many were new."""

    tasks: list[ScheduledTask]
    created: int

    @property
    def updated(self) -> int:
        return len(self.tasks) - self.created


def schedule_all(
    items: Iterable[Mapping[str, Any]], *, progress: Progress | None = None
) -> Outcome:
    """Create or update one task per item (the keyword arguments of ``api.schedule``),
    all or none: ``BulkValidationError`` lists every bad item, and nothing is saved.

    ``progress(checked, total)`` is called as items are checked."""
    drafts: list[Draft | None] = []
    causes: dict[int, ValidationError] = {}
    first_of_key: dict[str, int] = {}
    reader = _Reader()
    for index, item in enumerate(items):
        try:
            draft = reader.read(item)
        except ValidationError as exc:
            causes[index] = renamed(exc)
            drafts.append(None)
            continue
        if draft.key is not None and draft.key in first_of_key:
            causes[index] = ValidationError(
                {
                    "key": ValidationError(
                        "The key %(key)r is also item %(first)d's: one call schedules one "
                        "task per key.",
                        code="key_repeated",
                        params={"key": draft.key, "first": first_of_key[draft.key]},
                    )
                }
            )
            drafts.append(None)
            continue
        if draft.key is not None:
            first_of_key[draft.key] = index
        drafts.append(draft)
    for attempt in (1, 2):
        try:
            outcome = _written(drafts, dict(causes), progress)
            # Once, whatever the number of tasks due now: schedulers scan them all.
            if any(task.due_soon() for task in outcome.tasks):
                wake.notify()
            return outcome
        except IntegrityError:
            if attempt == 2 or not first_of_key:
                raise
            # Another caller created one of the keys first: update that task instead.
    raise AssertionError("unreachable")  # pragma: no cover


class _Reader:
    """Reads items into drafts; what it needs once per call (the user resolver, each
    kind's priority) it works out on first use."""

    def __init__(self) -> None:
        self._resolve: Callable[[Any], object] | None = None
        self._priorities: dict[str, str] = {}

    def read(self, item: object) -> Draft:
        if not isinstance(item, Mapping):
            raise ValidationError(
                "An item is a mapping of api.schedule's keyword arguments, not %(type)s.",
                code="item_type",
                params={"type": type(item).__name__},
            )
        _check_names(item)
        values: dict[str, Any] = {name: item.get(name) for name in PARAMETERS}
        errors: dict[str, Any] = {}
        recipient = values["recipient"]
        if users.is_user(recipient):
            try:
                recipient = users.member_id(recipient, self._resolver())
            except ValidationError as exc:
                errors = exc.update_error_dict(errors)
        tz = values["tz"] or django_settings.TIME_ZONE
        if values["cron"] is not None and values["at"] is not None:
            errors["cron"] = ValidationError(
                "Give exactly one of cron and at, not both.", code="cron_and_at"
            )
        try:
            run_at = _aware(values["at"], tz)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        content_type, object_id = None, None
        if values["about"] is not None:
            try:
                content_type, object_id = about.reference(values["about"])
            except ValidationError as exc:
                errors["about"] = exc
        if errors:
            raise ValidationError(errors)
        kind = values["kind"]
        return Draft(
            key=values["key"] or None,
            fields={
                "kind": kind,
                "recipient": recipient,
                "cron": (values["cron"] or "").strip(),
                "run_at": run_at,
                "timezone": tz,
                "payload": {} if values["payload"] is None else values["payload"],
                "channel": values["channel"] or conf.DEFAULT_CHANNEL,
                "priority": values["priority"] or self._priority(kind),
                "content_type": content_type,
                "object_id": object_id,
            },
        )

    def _priority(self, kind: str) -> str:
        """The kind's own priority, for an item that gives none."""
        if kind not in self._priorities:
            try:
                self._priorities[kind] = kinds.policy(kind).priority
            except UnknownKind:
                self._priorities[kind] = Priority.NORMAL  # the kind's error is on its field
        return self._priorities[kind]

    def _resolver(self) -> Callable[[Any], object]:
        if self._resolve is None:
            self._resolve = users.resolver()
        return self._resolve


def _check_names(item: Mapping[Any, Any]) -> None:
    """The item names only ``api.schedule``'s parameters, its required ones among them,
    and gives text where text is due."""
    errors: dict[str, str] = {}
    for name in item:
        if name not in PARAMETERS:
            errors[str(name)] = (
                f"{name} is not a parameter of api.schedule (they are: {', '.join(PARAMETERS)})."
            )
    for name in REQUIRED:
        if item.get(name) is None:
            errors[name] = f"{name} is required."
    for name in TEXT:
        value = item.get(name)
        if value is not None and not isinstance(value, str):
            errors[name] = f"{name} must be text, not {type(value).__name__}."
    recipient = item.get("recipient")
    if not (recipient is None or isinstance(recipient, str) or users.is_user(recipient)):
        errors["recipient"] = (
            f"recipient must be a member id (text) or a user, not {type(recipient).__name__}."
        )
    if errors:
        raise ValidationError(errors)


def _aware(at: object, tz: str) -> datetime | None:
    if at is None:
        return None
    if not isinstance(at, datetime):
        raise ValidationError(
            {
                "at": ValidationError(
                    "at must be a datetime, not %(type)s.",
                    code="at_type",
                    params={"type": type(at).__name__},
                )
            }
        )
    if timezone.is_aware(at):
        return at
    return timing.wall_clock_in(at, tz)


def renamed(exc: ValidationError) -> ValidationError:
    """``exc`` with its errors on the caller's parameter names instead of the model's
    (two fields of one parameter saying the same thing say it once)."""
    if not hasattr(exc, "error_dict"):
        return exc
    errors: dict[str, list[ValidationError]] = {}
    for field, field_errors in exc.error_dict.items():
        said = errors.setdefault(PARAMETER_OF_FIELD.get(field, field), [])
        seen = {tuple(error.messages) for error in said}
        said.extend(error for error in field_errors if tuple(error.messages) not in seen)
    return ValidationError(errors)


class _QueryFailed(Exception):
    """A check met a failed query: the transaction is rolled back, and the items from
    ``resume_at`` on are checked in a fresh one."""

    def __init__(self, resume_at: int) -> None:
        super().__init__(resume_at)
        self.resume_at = resume_at


def _written(
    drafts: list[Draft | None], causes: dict[int, ValidationError], progress: Progress | None
) -> Outcome:
    """``_write`` in a transaction (a savepoint in the caller's) of its own. A builder
    whose query failed (on PostgreSQL the transaction is aborted then) rolls it back: its
    item is refused for it, and the items after it are checked again in a fresh one, so
    that none is refused for another's error and the caller's transaction goes on. Only
    then does it cost more queries (the keys' lock again)."""
    start = 0
    while True:
        if start and start >= len(drafts):
            raise BulkValidationError(causes)
        try:
            with transaction.atomic():
                return _write(drafts, causes, progress, start=start)
        except _QueryFailed as failed:
            start = failed.resume_at


def _write(
    drafts: list[Draft | None],
    causes: dict[int, ValidationError],
    progress: Progress | None,
    *,
    start: int = 0,
) -> Outcome:
    """Check the items from ``start`` on and, if none of all is bad, write them;
    ``_QueryFailed`` once a check met a failed query."""
    now = timezone.now()
    known = _locked_by_key([draft.key for draft in drafts[start:] if draft and draft.key])
    tasks: list[ScheduledTask] = []
    replanned: list[ScheduledTask] = []
    total = len(drafts)
    for index, draft in enumerate(drafts):
        if index < start:
            continue
        broken = False
        if draft is not None:
            task = known.get(draft.key) if draft.key else None
            if task is None:
                task, changed = ScheduledTask(key=draft.key), True
            else:
                changed = any(getattr(task, n) != draft.fields[n] for n in SCHEDULE_FIELDS)
            for name, value in draft.fields.items():
                setattr(task, name, value)
            try:
                # The content type came from ContentType.objects: asking the database
                # whether it exists would be a query per item.
                validation.clean_task(task, exclude=("content_type",), now=now)
            except ValidationError as exc:
                causes[index] = renamed(exc)
                broken = validation.query_failed(exc)
            else:
                tasks.append(task)
                # Scheduling a cancelled task (or one in error) again revives it; a
                # paused one stays paused, re-planned if its schedule changed.
                if changed or task.status in (
                    ScheduledTask.Status.CANCELLED,
                    ScheduledTask.Status.ERROR,
                ):
                    replanned.append(task)
        checked = index + 1
        if progress is not None and (checked % PROGRESS_EVERY == 0 or checked == total):
            progress(checked, total)
        if broken:
            raise _QueryFailed(checked)
    if causes:
        raise BulkValidationError(causes)
    planning.replan_all(replanned, now)
    new = [task for task in tasks if task.pk is None]
    old = [task for task in tasks if task.pk is not None]
    _insert(new)
    _update(old)
    return Outcome(tasks, created=len(new))


def save_edited(task: ScheduledTask, fields: Collection[str], *, replan: bool) -> None:
    """Save a task edited field by field (the admin's form) by ``schedule_all``'s rules,
    in one transaction: a saved task's row is locked first, as the API's upsert locks
    it, so a scheduler planning it finishes first and the runs it planned are seen; the
    rest of the task (``next_run``, status, errors) is taken as the locked row has it,
    not as it was read before; with ``replan`` (a new task, or its schedule changed) it
    is re-planned (``ScheduledTask.replan_all``: its pending runs cancelled); then
    ``fields`` and what planning set are written. The schedulers are woken once this
    commits if the task falls due within a tick."""
    now = timezone.now()
    with transaction.atomic():
        if task.pk is None:
            planning.replan_all([task], now)
            task.save()
        else:
            locked = ScheduledTask.objects.select_for_update().get(pk=task.pk)
            written = set(fields) | {"updated_at"}
            for field in ScheduledTask._meta.concrete_fields:
                if not field.primary_key and field.name not in written:
                    setattr(task, field.attname, getattr(locked, field.attname))
            if replan:
                planning.replan_all([task], now)
                written |= {"status", "next_run", *ScheduledTask.ERROR_FIELDS}
            task.save(update_fields=sorted(written))
    planning.wake_if_due(task)


def _locked_by_key(keys: list[str]) -> dict[str, ScheduledTask]:
    """The tasks that have these keys, locked until the transaction ends (in key order
    of their rows, so two calls over the same keys never wait for each other in a
    circle)."""
    step = connection.features.max_query_params or len(keys) or 1
    found: dict[str, ScheduledTask] = {}
    for start in range(0, len(keys), step):
        rows = (
            ScheduledTask.objects.select_for_update()
            .filter(key__in=keys[start : start + step])
            .order_by("pk")
        )
        found.update((task.key, task) for task in rows if task.key is not None)
    return found


def _update(tasks: list[ScheduledTask]) -> None:
    """Write known tasks again, ``CHUNK`` rows a statement: an INSERT of their rows,
    whose primary keys are taken, that updates them instead (``ON CONFLICT (id) DO
    UPDATE``; MariaDB's ``ON DUPLICATE KEY UPDATE``, where the key is the same row's).
    Django's ``bulk_update`` writes a CASE per field and row instead, and takes seconds
    per thousand rows."""
    if not tasks:
        return
    created = [task.created_at for task in tasks]
    target = None
    if connection.features.supports_update_conflicts_with_target:
        target = [ScheduledTask._meta.pk.name]
    ScheduledTask.objects.bulk_create(
        tasks,
        batch_size=CHUNK,
        update_conflicts=True,
        update_fields=UPDATED_FIELDS,
        unique_fields=target,
    )
    # The INSERT set ``created_at`` on these objects as on new ones; the rows kept theirs.
    for task, when in zip(tasks, created, strict=True):
        task.created_at = when


def _insert(tasks: list[ScheduledTask]) -> None:
    """Save new tasks, their ids set: in bulk where the database returns the ids of the
    rows a bulk INSERT makes (PostgreSQL, SQLite, MariaDB), else one by one (MySQL)."""
    if connection.features.can_return_rows_from_bulk_insert:
        ScheduledTask.objects.bulk_create(tasks, batch_size=CHUNK)
        return
    for task in tasks:  # pragma: no cover - MySQL only
        task.save(force_insert=True)
