"""The scheduler's work: turn due tasks into runs, claim due runs, hand them to django-q2.

Every function here is safe to call from any number of processes at once. Runs are
unique per (task, occurrence), so two schedulers materializing the same task create
one run; claims lock rows with ``SKIP LOCKED`` where the database has it and always
re-check the row's state in the ``UPDATE`` itself, so each run has one holder. A
claim's high priority runs are enqueued on the queue of their own cluster
(``high_queue``), never in a job with bulk runs, so bulk work cannot hold them up. Every
job goes to the engine's own cluster (``reminders.engine.cluster``), never to the host
project's django-q2. An error confined to one task (see ``ScheduledTask.runs_owed``)
marks that task and never stops a tick: every other task still gets its runs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import Case, F, Min, PositiveSmallIntegerField, When
from django.utils import timezone

from ..conf import settings as conf
from ..exceptions import UnplannableTask
from ..models import JobTake, Priority, RunQuerySet, ScheduledTask, TaskRun, sql
from . import cluster, digests, holds, lost_runs, planning

logger = logging.getLogger(__name__)

DELIVER = "reminders.engine.delivery.deliver"
# Tasks planned in one transaction at most.
PLAN_BATCH = 500


def _skip_locked() -> bool:
    return bool(connection.features.has_select_for_update_skip_locked)


def _by_recipient(groups: Iterable[list[int]], size: int) -> Iterator[list[int]]:
    """Chunks of about ``size`` runs, a recipient's runs (a group) never split: a chunk
    is full once it holds ``size`` or more."""
    chunk: list[int] = []
    for group in groups:
        chunk += group
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def materialize(now: datetime | None = None, limit: int | None = None) -> int:
    """``plan``, returning the number of runs planned."""
    return plan(now, limit).runs


class Planned(NamedTuple):
    runs: int  # runs planned (one another scheduler planned first counted too)
    tasks: int  # tasks looked at: ``limit`` of them means more may be due


def plan(now: datetime | None = None, limit: int | None = None) -> Planned:
    """Create the runs of every task that is due, or falls due within
    ``REMINDERS_PLAN_AHEAD_SECONDS`` (the plan is there to see, and a 09:00 wave is
    spread before it comes), and advance its ``next_run``.

    After downtime a task may owe several occurrences: its kind's missed rule decides
    (``ScheduledTask.runs_owed``): the latest is run (unless the rule is ``skip`` and it
    is late), the earlier ones are recorded as skipped (``missed``) so the gap is
    visible, up to ``REMINDERS_MISSED_RUNS_RECORDED`` of them, and under ``compensate``
    the missed ones and earlier runs that failed for good get make-up runs. A task that
    cannot be planned is put in ``error`` (and ops told) while the others are planned as
    usual. At most ``limit`` tasks (``PLAN_BATCH``) a call: a scheduler loops again at
    once while a call takes that many.
    """
    now = now or timezone.now()
    limit = PLAN_BATCH if limit is None else limit
    until = now + timedelta(seconds=conf.PLAN_AHEAD_SECONDS)
    with transaction.atomic():
        due = ScheduledTask.objects.due(until).order_by("next_run")
        if _skip_locked():
            due = due.select_for_update(skip_locked=True)
        tasks = list(due[:limit])
        planned: list[ScheduledTask] = []
        runs: list[TaskRun] = []
        history = lost_runs.History.read(tasks, now)
        for task in tasks:
            try:
                runs.extend(planning.runs_planned(task, now, until, history=history))
            except UnplannableTask as exc:
                logger.error("task %s cannot be planned (%s): %s", task.pk, exc.code, exc.message)
                task.mark_error(exc.code, exc.message, now)
            else:
                planned.append(task)
        digests.plan_releases(runs)
        holds.defer_planned(runs)
        TaskRun.objects.add_planned(runs)
        _advance(planned)
        # A last occurrence planned as skipped (a day off) ended at once. A task with a
        # run planned to wait is not asked (its job completes it): one-shots by the
        # thousand would each cost the statement a look at their runs.
        waiting = {run.task_id for run in runs if run.status in TaskRun.UNFINISHED}
        exhausted = [task.pk for task in planned if task.next_run is None]
        ended = [pk for pk in exhausted if pk not in waiting]
        ScheduledTask.objects.complete_ended(now, among=ended)
    if tasks:
        logger.debug("materialized %d runs for %d tasks", len(runs), len(planned))
    return Planned(len(runs), len(tasks))


def _advance(tasks: list[ScheduledTask]) -> None:
    """Save each task's new ``next_run`` and status: one UPDATE per distinct pair, as a
    burst of one-shots (all exhausted) or of one cron schedule shares a single one."""
    groups: dict[tuple[datetime | None, str], list[int]] = {}
    for task in tasks:
        groups.setdefault((task.next_run, task.status), []).append(task.pk)
    for (next_run, status), pks in groups.items():
        ScheduledTask.objects.filter(pk__in=pks).update(next_run=next_run, status=status)


# What a claim reads of each run it takes.
CLAIMED = ("pk", "status", "lease_token", "deadline", "error_code", "task__recipient", "task__kind")


@dataclass(frozen=True)
class Claim:
    token: str
    run_ids: list[int]


def claim(
    owner: str,
    limit: int,
    now: datetime | None = None,
    *,
    only_high: bool = False,
    abandoned: bool = True,
) -> Claim:
    """Lease up to ``limit`` due runs to ``owner`` and enqueue them, in one transaction;
    with ``only_high``, high priority runs only; without ``abandoned``, waiting runs
    only, not those held under an expired lease (a scheduler looks for those every
    few seconds, not at every claim: ``reminders.engine.worker``).

    A waiting run past its deadline is never claimed: the claim expires it instead
    (``expire_overdue``), and leaves one that may have been delivered to delivery. The
    enqueue joins the transaction (django-q2's ORM broker on the same database), so a
    claim and its queued job commit together or not at all.
    """
    now = now or timezone.now()
    token = uuid.uuid4().hex
    with transaction.atomic():
        runs = TaskRun.objects.claimable(now, abandoned=abandoned)
        if only_high:
            runs = runs.filter(priority=Priority.HIGH.rank)
        candidates = runs.order_by("priority", "next_attempt_at").values_list(*CLAIMED)
        if _skip_locked():
            candidates = candidates.select_for_update(skip_locked=True, of=_of_self())
        rows = list(candidates[:limit])
        # Under its limit, and of every priority, the claim took every due run it could:
        # any other of its recipients' is held by another transaction, and skipped again.
        full = len(rows) == limit or only_high
        rows = _not_expired(rows + (_recipients_rest(rows, now) if full else []), now)
        if not rows:
            return Claim(token, [])
        ids = [pk for pk, *_ in rows]
        # Runs still ``queued`` under an expired lease whose job took them (``JobTake``)
        # and ended before starting them: it failed, timed out, or went with its worker.
        # Those that only waited in the queue past their lease were never taken.
        # Each is counted once, whatever share of the dead job's runs this claim takes:
        # its take keeps the others, for the claims that take them over.
        stale = {held for _, status, held, *_ in rows if status == TaskRun.Status.QUEUED}
        lost = JobTake.objects.lost_runs(stale, ids, TaskRun.objects.queued()) if stale else set()
        # The state is re-checked here: without row locks (SQLite) another scheduler
        # may have claimed some of these ids since the SELECT.
        leased = TaskRun.objects.filter(pk__in=ids).due_or_abandoned(now)
        claimed = _leased(leased, _lease(owner, token, lost, now), rows)
        _enqueue(token, claimed)
    return Claim(token, [pk for pk, *_ in claimed])


def _lease(owner: str, token: str, lost: set[int], now: datetime) -> dict[str, Any]:
    """The values a claim's UPDATE sets on the runs it leases; ``lost``: those whose
    last job took them and ended before starting them (one more job failure each)."""
    return {
        # A run still ``running`` under an expired lease lost its worker: that attempt
        # never ended, and a worker's death is not the provider's failure, so it is
        # not counted (delivery counts the death itself if a send was in hand).
        # First: MariaDB evaluates SET left to right, with the values already set.
        "attempts": Case(
            When(status=TaskRun.Status.RUNNING, attempts__gt=0, then=F("attempts") - 1),
            default=F("attempts"),
            output_field=PositiveSmallIntegerField(),
        ),
        "job_failures": Case(
            When(status=TaskRun.Status.QUEUED, pk__in=lost, then=F("job_failures") + 1),
            default=F("job_failures"),
            output_field=PositiveSmallIntegerField(),
        ),
        "status": TaskRun.Status.QUEUED,
        "lease_owner": owner,
        "lease_token": token,
        "lease_expires_at": now + timedelta(seconds=conf.LEASE_SECONDS),
    }


def _leased(
    runs: RunQuerySet, lease: dict[str, Any], rows: list[tuple[Any, ...]]
) -> list[tuple[int, int, int, str, str, str]]:
    """Lease ``runs`` (``lease``: the UPDATE's values) and return those this claim now
    holds, in the order of their priority and due time, as ``_enqueue`` takes them. On
    PostgreSQL the UPDATE returns them (``sql.update_returning_rows``) and the rest of
    what a job needs comes from ``rows``, the claim's own read of them (its error code,
    recipient and kind, which the UPDATE leaves as they were, under the rows' locks);
    elsewhere they are read back by the lease's token."""
    returned = sql.update_returning_rows(
        runs, lease, ("pk", "priority", "job_failures", "next_attempt_at")
    )
    if returned is None:
        runs.update(**lease)
        return list(
            TaskRun.objects.filter(pk__in=[pk for pk, *_ in rows], lease_token=lease["lease_token"])
            .order_by("priority", "next_attempt_at")
            .values_list(
                "pk", "priority", "job_failures", "error_code", "task__recipient", "task__kind"
            )
        )
    read = {pk: (code, recipient, kind) for pk, *_, code, recipient, kind in rows}
    # As ORDER BY sorts them: a run under an expired lease may have no due time (last).
    returned.sort(key=lambda row: (row[1], row[3] is None, row[3] or timezone.now()))
    return [(pk, rank, failures, *read[pk]) for pk, rank, failures, _ in returned]


def _not_expired(rows: list[tuple[Any, ...]], now: datetime) -> list[tuple[Any, ...]]:
    """``rows`` less the waiting runs among them past their deadline, which are expired
    (``expire_overdue``) rather than claimed; one that may have been delivered stays,
    for delivery to decide. The claim holds their rows: no one else ends them meanwhile."""
    late = [
        pk
        for pk, status, _, deadline, *_ in rows
        if status in TaskRun.WAITING and deadline is not None and deadline < now
    ]
    if not late:
        return rows
    gone = {run.pk for run in _expire(TaskRun.objects.filter(pk__in=late), now)}
    return [row for row in rows if row[0] not in gone]


def _recipients_rest(rows: list[tuple[Any, ...]], now: datetime) -> list[tuple[Any, ...]]:
    """The due waiting runs of the recipients and kinds in ``rows`` that fold into digests
    or are throttled (``digests.folds``), beyond the claim's ``limit`` (read only when
    the claim met it, or took high runs only): a recipient's runs due at one moment go
    in one claim, and so one job and one digest, whatever order the database gave runs
    due at the same instant. At most ``PULL_LIMIT`` a recipient and kind, as a job takes
    in. Read as ``digests.open_runs`` reads them, so that the plan reads these
    recipients' runs only; their state is checked on the rows (runs queued under another
    claim are the job's to take in, ``digests.pull``)."""
    pairs = {(recipient, kind) for *_, code, recipient, kind in rows if digests.folds(kind, code)}
    if not pairs:
        return []
    taken = [pk for pk, *_ in rows]
    rest = digests.open_runs(pairs, *CLAIMED, "next_attempt_at", active=True).exclude(pk__in=taken)
    if _skip_locked():
        rest = rest.select_for_update(skip_locked=True, of=_of_self())
    waiting = [
        row
        for *row, next_attempt_at in rest
        if row[1] in TaskRun.WAITING and next_attempt_at <= now
    ]
    return [tuple(row) for row in waiting[: len(pairs) * digests.PULL_LIMIT]]


def _enqueue(token: str, claimed: list[tuple[int, int, int, str, str, str]]) -> None:
    """Enqueue the claimed runs in jobs of about ``RUNS_PER_JOB``, each on its priority's
    queue; a recipient's runs of a kind that folds or is throttled in one job, where
    they fold together (``engine.digests``).

    A run whose last job took it and ended before starting it (its count,
    ``job_failures``) goes in a job of its own: if it is what broke that job (a builder
    that hangs until the job's timeout), it breaks no other run's again.
    """
    queues: dict[str, dict[object, list[int]]] = {}
    alone: list[tuple[str, int]] = []
    pairs: dict[int, list[str]] = {}
    for pk, rank, job_failures, code, recipient, kind in claimed:
        folds = digests.folds(kind, code)
        if folds:
            pairs[pk] = [recipient, kind]
        if job_failures:
            alone.append((queue_for(rank), pk))
        else:
            together = (recipient, kind) if folds else pk
            queues.setdefault(queue_for(rank), {}).setdefault(together, []).append(pk)
    chunks = [(queue, [pk]) for queue, pk in alone]
    chunks += [
        (queue, chunk)
        for queue, recipients in queues.items()
        for chunk in _by_recipient(recipients.values(), conf.RUNS_PER_JOB)
    ]
    for queue, chunk in chunks:
        name = f"deliver-{token[:8]}-{chunk[0]}"
        # A job of runs that fold is told their recipients and kinds: it locks their
        # runs before it starts its own (``engine.digests.lock``).
        folding = sorted({tuple(pairs[pk]) for pk in chunk if pk in pairs})
        args = (token, chunk, [list(pair) for pair in folding]) if folding else (token, chunk)
        cluster.enqueue(queue, DELIVER, *args, task_name=name)


# The queues of the engine's clusters.
bulk_queue = cluster.bulk_queue
high_queue = cluster.high_queue


def queue_for(rank: int) -> str:
    """The queue a run of priority ``rank`` goes to: high runs to their own cluster's,
    where one runs (``REMINDERS_HIGH_WORKERS``), all others to the bulk one."""
    if rank == Priority.HIGH.rank and conf.HIGH_WORKERS > 0:
        return high_queue()
    return bulk_queue()


def _of_self() -> tuple[str, ...]:
    # ``claimable`` joins the task table; lock only the run rows where the database can say so.
    return ("self",) if connection.features.has_select_for_update_of else ()


def expire_overdue(now: datetime | None = None) -> int:
    """End waiting runs past their deadline as ``expired`` rather than claim them (runs
    whose key may have been delivered are left to delivery); returns how many."""
    return len(_expire(TaskRun.objects.all(), now or timezone.now()))


def _expire(runs: RunQuerySet, now: datetime) -> list[TaskRun]:
    """``expire_overdue`` among ``runs``; returns the runs expired, their tasks completed
    where nothing is left to run."""
    expired: list[TaskRun] = runs.expire_overdue(now, limit=conf.CLAIM_BATCH)
    if expired:
        logger.warning("%d runs expired: their deadline passed before they were sent", len(expired))
        tasks = ScheduledTask.objects.filter(pk__in={run.task_id for run in expired})
        tasks.complete_ended(now)
    return expired


def complete_ended(now: datetime | None = None) -> int:
    """Complete every task whose schedule is exhausted and whose runs have all ended,
    however they ended (``TaskQuerySet.complete_ended``); returns how many."""
    return ScheduledTask.objects.complete_ended(now or timezone.now())


def report_stuck(now: datetime | None = None) -> int:
    """Tell ops, once per run, of runs running longer than ``REMINDERS_RUN_TIMEOUT``;
    returns how many were reported now."""
    reported = TaskRun.objects.report_stuck(now or timezone.now(), limit=conf.CLAIM_BATCH)
    for run in reported:
        logger.error("run %s has been running since %s", run.pk, run.started_at)
    return len(reported)


def next_due(*, only_high: bool = False) -> datetime | None:
    """The earliest moment a task of an active schedule or a waiting run (of a task not
    paused) falls due, past or future; with ``only_high``, of high priority runs only.
    None when nothing waits."""
    return _earliest(*next_moments(only_high=only_high))


def next_moments(*, only_high: bool = False) -> tuple[datetime | None, datetime | None]:
    """``next_due`` in its two parts: the first waiting run's, and the first active
    task's (None where there is none)."""
    runs = TaskRun.objects.filter(status__in=TaskRun.WAITING).exclude(
        task__status=ScheduledTask.Status.PAUSED
    )
    tasks = ScheduledTask.objects.filter(status=ScheduledTask.Status.ACTIVE)
    if only_high:
        runs = runs.filter(priority=Priority.HIGH.rank)
        tasks = tasks.filter(priority=Priority.HIGH)
    return (
        # The first in the order of the index of waiting runs, not MIN() over a join to
        # the tasks: that reads every waiting run (all a morning has planned ahead)
        # each time the scheduler sleeps, where this reads the first few.
        runs.order_by("next_attempt_at").values_list("next_attempt_at", flat=True).first(),
        tasks.aggregate(first=Min("next_run"))["first"],
    )


def _earliest(*moments: datetime | None) -> datetime | None:
    return min((moment for moment in moments if moment is not None), default=None)


def in_flight(owner: str) -> int:
    """Runs ``owner`` claimed that no worker has started yet."""
    return TaskRun.objects.filter(status=TaskRun.Status.QUEUED, lease_owner=owner).count()


def release(owner: str) -> int:
    """Hand back what ``owner`` claimed but no worker started (graceful stop)."""
    return TaskRun.objects.release(owner)
