"""Retention: the finished runs, ledger rows and completed one-shot tasks
``reminders_prune`` deletes, and why everything else stays.

History grows by a run per occurrence and a ledger row per message. ``prune`` deletes
what is older than a cut-off (``now - older_than``) and no longer read by anything that
decides what is sent, so that pruning never changes what the engine does next. Ops
history goes with it: the admin, the dashboard and the stats show what is kept.

Invariants, each with the reader it protects:

* Only finished runs: ``sent``, ``failed``, ``expired``, ``skipped``, ``cancelled``.
  A run still ``scheduled``, ``retrying``, ``queued`` or ``running`` is work in hand,
  however old.
* ``unknown`` is kept until an operator settles it. Such a run may have reached its
  recipient or not; it is the open question ops answer by retrying it (it is then no
  longer ``unknown``) or by marking it handled. Deleting it would drop the question
  unanswered, and its key's ``unknown`` row is what keeps the message from being sent
  again meanwhile. Once handled before the cut-off it goes like any other.
* Old means everything about a run is old: its occurrence, due time and creation, and
  its finishing time where it has one, are all before the cut-off. A run recorded
  finished from the start (``skipped``) has none: its creation says when.
* A one-shot task keeps the runs of every time it had (``run_at``, now or before it
  was moved) as long as the task exists, but cancelled runs and runs made on request.
  Planning a time again (scheduled again after a cancel, moved back, resumed from an
  error) plans that same occurrence, and its run (one per task and occurrence) is what
  stops it from being sent a second time; a cancelled one would be put back in line
  anyway, and a run made on request is never planned again.
* A completed one-shot task goes whole, with its runs, once it is old (its time, its
  creation and its last change before the cut-off) and every run of it would go by the
  rules above but that one (no run unfinished, none ``unknown`` unhandled, none
  recent). Its ledger rows stay by their own rule (a row outlives its task). Of a
  keyed one, its key stays with every time it had a run (``PrunedOneShot``: the times
  its runs keep for it while it exists, its time now and those it was moved from, but
  cancelled runs and runs made on request): scheduling the key again for any of them
  completes the new task at once rather than sending it again.
* A remembered time (``PrunedOneShot``) goes once it can no longer come back: its
  kind's deadline for it (``send_by``, ``max_lateness_seconds``, taken at the latest
  stagger a recipient may have) is before the cut-off, so that, scheduled again, it
  would expire, never be sent; a time already past that when its task goes is not
  kept. A kind with no deadline (a report: sent however late) or not registered here,
  and a zone unknown, keep theirs for good.
* A task that still has an unfinished run from before the cut-off (or up to a local
  day after it) keeps every run: delivery reads the runs of that run's local day to
  send at most one message a day.
* The cut-off is never nearer than ``minimum_age()``: a day; each ``compensate`` kind's
  make-up horizon (``compensate_max_age_seconds``: planning reads the failed and missed
  runs that young, and the make-ups that cover them); each channel's duplicate window.
* A ledger row goes only when its key is done with: ``sent``, ``failed`` or
  ``unknown``, never ``sending`` (a send in hand, or a crash the next start of its run
  decides); reserved, last written and sent before the cut-off and outside every
  channel's duplicate window; and no run that stays carries its key (delivery reads a
  row by its run's key, so a kept run's next attempt finds the truth there). Runs go
  first: a row never goes while the run that carries its key is still there.
* Short transactions. Ids are read first, a batch at a time (MariaDB cannot delete
  with a ``LIMIT`` in a subquery), then deleted by primary key in a transaction of their
  own that reads every condition again: runs once locked by primary key (those a worker
  holds are skipped, for the next prune), ledger rows in the ``DELETE`` itself. No
  statement holds locks for long, and a row that changed meanwhile stays.
* Nothing else is touched. ``SendLog.run`` is ``SET_NULL``: a row outlives its run.
  ``ops`` records run and task ids as plain numbers, never as foreign keys, so its
  alerts outlive the runs they were about (and this module never imports ``ops``).
* A dry run reads the same batches and counts, taking the runs it would delete as gone
  when it looks at the ledger: it says what a prune of the same data deletes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from .. import kinds
from ..conf import settings as conf
from ..exceptions import RemindersError, RetentionTooShort
from ..models import JobTake, PrunedOneShot, ScheduledTask, SendLog, TaskRun
from ..schedule.timing import InvalidSchedule
from ..senders import get_sender

logger = logging.getLogger(__name__)

# Rows read, and deleted, per transaction unless told otherwise.
BATCH_SIZE = 1000
# Finished runs that go once old; ``unknown`` goes only once handled.
SETTLED = (
    TaskRun.Status.SENT,
    TaskRun.Status.FAILED,
    TaskRun.Status.EXPIRED,
    TaskRun.Status.SKIPPED,
    TaskRun.Status.CANCELLED,
)
# Ledger rows whose key may be done with; ``sending`` never is.
DONE_KEYS = (SendLog.Status.SENT, SendLog.Status.FAILED, SendLog.Status.UNKNOWN)
# Runs this close to an unfinished run of their task may share its local day (a day
# is at most 25 hours long, in any zone).
SAME_DAY = timedelta(days=2)
MIN_AGE = timedelta(days=1)

_AGE = re.compile(r"([0-9]+)([hdw])")
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}

# ``progress(what, deleted in this batch, deleted so far)``, after each batch.
Progress = Callable[[str, int, int], None]


def parse_age(text: str) -> timedelta:
    """``90d``, ``12h``, ``2w``: a whole number of hours, days or weeks, more than 0;
    ``ValueError`` saying so for anything else."""
    found = _AGE.fullmatch(text.strip().lower())
    if found is None or int(found[1]) == 0:
        raise ValueError(
            _(
                "%(text)r is not an age: a whole number above 0 and h (hours), d (days) "
                "or w (weeks), such as 90d"
            )
            % {"text": text}
        )
    return int(found[1]) * _UNITS[found[2]]


def describe(age: timedelta) -> str:
    """``age`` as ``parse_age`` reads it, in days where it is whole days."""
    if age % _UNITS["d"] == timedelta(0):
        return f"{age // _UNITS['d']}d"
    if age % _UNITS["h"] == timedelta(0):
        return f"{age // _UNITS['h']}h"
    return f"{age.total_seconds():g}s"


@dataclass(frozen=True)
class Floor:
    """The nearest a cut-off may be, and what reads that far back."""

    age: timedelta
    reason: str


def minimum_age() -> Floor:
    """A day, or longer where a kind's make-up horizon or a channel's duplicate window
    is (see the module docstring); the longest, with its reason."""
    floors = [Floor(MIN_AGE, _("a day"))]
    for name in kinds.names():
        policy = kinds.policy(name)
        if policy.missed == "compensate":
            floors.append(
                Floor(
                    timedelta(seconds=policy.compensate_max_age_seconds),
                    _("the make-up horizon of %(kind)s (compensate_max_age_seconds)")
                    % {"kind": name},
                )
            )
    for alias, seconds in duplicate_windows().items():
        floors.append(
            Floor(
                timedelta(seconds=seconds),
                _("the duplicate window of channel %(alias)r") % {"alias": alias},
            )
        )
    return max(floors, key=lambda floor: floor.age)


def duplicate_windows() -> dict[str, int]:
    """Each channel's duplicate window in seconds, where its provider drops a body it
    has seen: the sender's, or its backend's declared one where it cannot be built
    here (missing credentials)."""
    windows: dict[str, int] = {}
    for alias, config in conf.CHANNELS.items():
        sender: Any
        try:
            sender = get_sender(alias)
        except (RemindersError, ImproperlyConfigured, TypeError):
            try:
                sender = import_string(str((config or {}).get("BACKEND", "")))
            except ImportError:
                continue
        if getattr(sender, "supports_duplicate_check", False):
            windows[alias] = int(getattr(sender, "duplicate_check_seconds", 0))
    return windows


def default_age() -> timedelta:
    """``REMINDERS_RETENTION_DAYS``: what a prune removes unless told otherwise."""
    return timedelta(days=conf.RETENTION_DAYS)


def _done_with(cutoff: datetime) -> Q:
    """Runs settled and old at ``cutoff`` (see the module docstring)."""
    settled = Q(status__in=SETTLED) | Q(status=TaskRun.Status.UNKNOWN, handled_at__lt=cutoff)
    old = Q(occurrence__lt=cutoff, due_at__lt=cutoff, created_at__lt=cutoff) & (
        Q(finished_at__isnull=True) | Q(finished_at__lt=cutoff)
    )
    return settled & old


def prunable_runs(cutoff: datetime) -> models.QuerySet[TaskRun]:
    """The runs a prune at ``cutoff`` deletes (see the module docstring)."""
    of_one_shot = ScheduledTask.objects.filter(pk=OuterRef("task_id"), cron="")
    planned_again = Exists(of_one_shot) & Q(is_manual=False) & ~Q(status=TaskRun.Status.CANCELLED)
    unfinished_then = TaskRun.objects.filter(
        task_id=OuterRef("task_id"),
        status__in=TaskRun.UNFINISHED,
        occurrence__lt=cutoff + SAME_DAY,
    )
    return (
        TaskRun.objects.filter(_done_with(cutoff))
        .exclude(planned_again)
        .filter(~Exists(unfinished_then))
    )


def prunable_tasks(cutoff: datetime) -> models.QuerySet[ScheduledTask]:
    """The completed one-shot tasks a prune at ``cutoff`` deletes, with their runs."""
    kept_run = TaskRun.objects.filter(task_id=OuterRef("pk")).exclude(_done_with(cutoff))
    return ScheduledTask.objects.filter(
        status=ScheduledTask.Status.COMPLETED,
        cron="",
        run_at__lt=cutoff,
        created_at__lt=cutoff,
        updated_at__lt=cutoff,
    ).filter(~Exists(kept_run))


def prunable_ledger(cutoff: datetime) -> models.QuerySet[SendLog]:
    """The ledger rows old enough for a prune at ``cutoff``, whatever runs carry their
    keys (``prune`` checks that per batch)."""
    return SendLog.objects.filter(
        Q(sent_at__isnull=True) | Q(sent_at__lt=cutoff),
        status__in=DONE_KEYS,
        created_at__lt=cutoff,
        updated_at__lt=cutoff,
    )


def may_come_back(kind: str, zone: str, at: datetime, cutoff: datetime) -> bool:
    """Whether a one-shot of ``kind`` at ``at`` (in ``zone``), scheduled again, could
    still be sent at ``cutoff`` or later: its kind has no deadline, or its deadline for
    ``at`` at the latest stagger a recipient may have is not before ``cutoff``. A kind
    not registered here (or whose policy the settings break) or a zone unknown may."""
    try:
        policy = kinds.policy(kind)
        longest = policy.jitter_seconds + (policy.batches - 1) * policy.batch_interval_seconds
        deadline = policy.deadline(at, at + timedelta(seconds=longest), zone)
    except (RemindersError, InvalidSchedule):
        return True
    return deadline is None or deadline >= cutoff


def prunable_times(cutoff: datetime) -> models.QuerySet[PrunedOneShot]:
    """The remembered one-shot times a prune at ``cutoff`` looks at: of kinds with a
    deadline, before the cut-off (``may_come_back`` decides each)."""
    with_deadline = []
    for name in kinds.names():
        try:
            policy = kinds.policy(name)
        except RemindersError:
            continue  # the system checks say why
        if policy.send_by or policy.max_lateness_seconds is not None:
            with_deadline.append(name)
    return PrunedOneShot.objects.filter(kind__in=with_deadline or [""], run_at__lt=cutoff)


@dataclass
class Pruned:
    """What a prune deleted, or would delete (``dry_run``)."""

    cutoff: datetime
    older_than: timedelta
    dry_run: bool = False
    runs: int = 0
    ledger: int = 0
    tasks: int = 0
    times: int = 0

    def __str__(self) -> str:
        runs = ngettext("%(count)d run", "%(count)d runs", self.runs) % {"count": self.runs}
        ledger = ngettext("%(count)d ledger row", "%(count)d ledger rows", self.ledger) % {
            "count": self.ledger
        }
        tasks = ngettext(
            "%(count)d completed one-shot task", "%(count)d completed one-shot tasks", self.tasks
        ) % {"count": self.tasks}
        what = {
            "runs": runs,
            "ledger": ledger,
            "tasks": tasks,
            "age": describe(self.older_than),
            "cutoff": self.cutoff.isoformat(),
        }
        if self.dry_run:
            said = (
                _(
                    "Would delete %(runs)s, %(ledger)s, %(tasks)s (older than %(age)s: "
                    "before %(cutoff)s)."
                )
                % what
            )
        else:
            said = (
                _(
                    "Deleted %(runs)s, %(ledger)s, %(tasks)s (older than %(age)s: before "
                    "%(cutoff)s)."
                )
                % what
            )
        return f"{said} {self._times()}" if self.times else said

    def _times(self) -> str:
        """The remembered one-shot times forgotten, in a sentence of their own."""
        if self.dry_run:
            text = ngettext(
                "Would forget %(count)d time of pruned one-shot tasks: it can no longer be sent.",
                "Would forget %(count)d times of pruned one-shot tasks: they can no longer be "
                "sent.",
                self.times,
            )
        else:
            text = ngettext(
                "Forgot %(count)d time of pruned one-shot tasks: it can no longer be sent.",
                "Forgot %(count)d times of pruned one-shot tasks: they can no longer be sent.",
                self.times,
            )
        return text % {"count": self.times}


def prune(
    older_than: timedelta,
    *,
    batch_size: int = BATCH_SIZE,
    dry_run: bool = False,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> Pruned:
    """Delete the runs, then the completed one-shot tasks (with their runs), then the
    remembered times of pruned ones that can no longer come back, then the ledger rows,
    older than ``older_than`` that nothing reads any more, ``batch_size`` rows a
    transaction; with ``dry_run``, count them.

    Raises ``RetentionTooShort`` for an age under ``minimum_age()``.
    """
    floor = minimum_age()
    if older_than < floor.age:
        raise RetentionTooShort(
            _(
                "%(age)s is shorter than %(floor)s, %(reason)s: history that young still "
                "decides what is sent."
            )
            % {"age": describe(older_than), "floor": describe(floor.age), "reason": floor.reason}
        )
    now = now or timezone.now()
    cutoff = now - older_than
    # Never inside a duplicate window, even for a caller that moved the floor.
    ledger_cutoff = min(
        [cutoff, *(now - timedelta(seconds=s) for s in duplicate_windows().values())]
    )
    size = _batch_size(batch_size)
    result = Pruned(cutoff, older_than, dry_run)
    for page in _pages(prunable_runs(cutoff), size):
        done = len(page) if dry_run else _delete_runs(page, cutoff)
        result.runs += done
        _tell(progress, _("runs"), done, result.runs)
    for page in _pages(prunable_tasks(cutoff), size, "key", "run_at"):
        done, runs = _count_tasks(page) if dry_run else _delete_tasks(page, cutoff)
        result.tasks += done
        result.runs += runs
        _tell(progress, _("completed one-shot tasks"), done, result.tasks)
    for page in _pages(prunable_times(cutoff), size, "kind", "timezone", "run_at"):
        done = _forget_times(page, cutoff, dry_run)
        result.times += done
        _tell(progress, _("one-shot times of pruned tasks"), done, result.times)
    for rows in _pages(prunable_ledger(ledger_cutoff), size, "key", "task_id"):
        done = _count_free(rows, cutoff) if dry_run else _delete_ledger(rows, ledger_cutoff)
        result.ledger += done
        _tell(progress, _("ledger rows"), done, result.ledger)
    if not dry_run:
        # Bookkeeping, not history: a job that ended before starting its runs leaves its
        # take for the claim that takes them over, unless they ended meanwhile.
        JobTake.objects.filter(taken_at__lt=cutoff).delete()
    logger.info("%s", result)
    return result


def _batch_size(asked: int) -> int:
    """``asked``, but never more ids than the database takes in one statement (a batch
    of keys is looked up with its tasks' ids beside them)."""
    limit = connection.features.max_query_params
    return max(1, min(asked, (limit - 100) // 2)) if limit else max(1, asked)


def _pages(
    queryset: models.QuerySet[Any], size: int, *fields: str
) -> Iterator[list[tuple[Any, ...]]]:
    """``queryset``'s primary keys (and ``fields``) in primary-key order, ``size`` at a
    time; each page is read once the previous one has been dealt with."""
    last = None
    while True:
        page = queryset.order_by("pk")
        if last is not None:
            page = page.filter(pk__gt=last)
        rows = list(page.values_list("pk", *fields)[:size])
        if not rows:
            return
        yield rows
        if len(rows) < size:
            return
        last = rows[-1][0]


def _tell(progress: Progress | None, what: str, done: int, total: int) -> None:
    logger.debug("%s: %d in this batch, %d in all", what, done, total)
    if progress is not None:
        progress(what, done, total)


def _lock(ids: Sequence[int]) -> list[int]:
    """Lock the runs ``ids`` until the transaction ends, by primary key alone (so no
    other row, nor any task, is locked); those another transaction holds are left out
    where the database can skip them, and waited for elsewhere. Returns the locked."""
    runs = TaskRun.objects.filter(pk__in=ids)
    if connection.features.has_select_for_update_skip_locked:
        runs = runs.select_for_update(skip_locked=True)
    elif connection.features.has_select_for_update:
        runs = runs.select_for_update()
    return list(runs.values_list("pk", flat=True))


def _delete_runs(page: Sequence[tuple[Any, ...]], cutoff: datetime) -> int:
    """Delete the runs of ``page`` that are still to go, in one transaction: locked
    first, then every condition read again (a run retried meanwhile stays)."""
    with transaction.atomic():
        locked = _lock([row[0] for row in page])
        still = list(prunable_runs(cutoff).filter(pk__in=locked).values_list("pk", flat=True))
        if still:
            # Their ledger rows stay, without a run (``SendLog.run`` is SET_NULL).
            TaskRun.objects.filter(pk__in=still).only("pk").delete()
    return len(still)


def _count_tasks(page: Sequence[tuple[Any, ...]]) -> tuple[int, int]:
    """What deleting the tasks of ``page`` deletes: tasks, and runs with them."""
    return len(page), TaskRun.objects.filter(task_id__in=[row[0] for row in page]).count()


def _delete_tasks(page: Sequence[tuple[Any, ...]], cutoff: datetime) -> tuple[int, int]:
    """Delete the tasks of ``page`` that are still to go, with their runs, in one
    transaction: locked first (the lock the API's upsert and the planner take), every
    condition read again, the key and time of the keyed ones kept. Returns how many
    tasks and runs went."""
    with transaction.atomic():
        tasks = ScheduledTask.objects.filter(pk__in=[row[0] for row in page])
        if connection.features.has_select_for_update_skip_locked:
            tasks = tasks.select_for_update(skip_locked=True)
        elif connection.features.has_select_for_update:
            tasks = tasks.select_for_update()
        locked = list(tasks.values_list("pk", flat=True))
        still = list(
            prunable_tasks(cutoff)
            .filter(pk__in=locked)
            .values_list("pk", "key", "run_at", "kind", "timezone")
        )
        if not still:
            return 0, 0
        PrunedOneShot.objects.bulk_create(_times_of(still, cutoff), ignore_conflicts=True)
        # Their runs go with them; their ledger rows stay, without a task or a run.
        _, deleted = ScheduledTask.objects.filter(pk__in=[row[0] for row in still]).delete()
    return len(still), deleted.get(TaskRun._meta.label, 0)


def _times_of(tasks: Sequence[tuple[Any, ...]], cutoff: datetime) -> list[PrunedOneShot]:
    """What is kept of the keyed ``tasks`` (pk, key, run_at, kind, zone): their time now
    and every occurrence a run of theirs had (but cancelled ones, runs made on request
    and make-ups, as ``prunable_runs`` keeps them for a task that exists), those that
    may still come back."""
    keyed = {pk: (key, kind, zone) for pk, key, _, kind, zone in tasks if key}
    times = {(pk, at) for pk, key, at, _, _ in tasks if key and at}
    runs = TaskRun.objects.filter(task_id__in=list(keyed), is_manual=False, is_compensation=False)
    times |= set(runs.exclude(status=TaskRun.Status.CANCELLED).values_list("task_id", "occurrence"))
    return [
        PrunedOneShot(key=keyed[pk][0], run_at=at, kind=keyed[pk][1], timezone=keyed[pk][2])
        for pk, at in sorted(times)
        if may_come_back(keyed[pk][1], keyed[pk][2], at, cutoff)
    ]


def _forget_times(page: Sequence[tuple[Any, ...]], cutoff: datetime, dry_run: bool) -> int:
    """Delete (or count) the remembered times of ``page`` (pk, kind, zone, run_at) that
    can no longer come back; one statement, rows nothing else writes."""
    gone = [pk for pk, kind, zone, at in page if not may_come_back(kind, zone, at, cutoff)]
    if dry_run or not gone:
        return len(gone)
    deleted, _ = PrunedOneShot.objects.filter(pk__in=gone).delete()
    return deleted


def _carried(rows: Sequence[tuple[Any, ...]], gone: models.QuerySet[TaskRun] | None) -> set[str]:
    """The keys of ``rows`` that a run carries, leaving out the runs of ``gone`` (those
    a dry run takes as deleted). A key's runs are its task's (a key starts with its
    task's id; a row whose task was deleted has no runs left), so they are looked up
    by task first."""
    keys = {key for _, key, _ in rows}
    tasks = {task for _, _, task in rows if task is not None}
    if not tasks:
        return set()
    carriers = dict(
        TaskRun.objects.filter(task_id__in=tasks, ledger_key__in=keys).values_list(
            "pk", "ledger_key"
        )
    )
    if gone is not None and carriers:
        for pk in gone.filter(pk__in=list(carriers)).values_list("pk", flat=True):
            del carriers[pk]
    return set(carriers.values())


def _count_free(rows: Sequence[tuple[Any, ...]], cutoff: datetime) -> int:
    gone = TaskRun.objects.filter(
        Q(pk__in=prunable_runs(cutoff).values("pk")) | Q(task__in=prunable_tasks(cutoff))
    )
    carried = _carried(rows, gone=gone)
    return sum(key not in carried for _, key, _ in rows)


def _delete_ledger(rows: Sequence[tuple[Any, ...]], ledger_cutoff: datetime) -> int:
    """One DELETE of the rows no run carries, every condition read again in it."""
    with transaction.atomic():
        carried = _carried(rows, gone=None)
        free = [pk for pk, key, _ in rows if key not in carried]
        if not free:
            return 0
        deleted, _ = prunable_ledger(ledger_cutoff).filter(pk__in=free).delete()
    return deleted
