"""Starting a claim's runs: take those still under the claim's token, and decide from
the ledger and the task's other runs which may be sent, and with which ledger row
(``Job``); finish the others, or put them back to wait.

Invariants:

* A run is started only by the holder of the claim's token, and starting it swaps that
  token for a fresh one (the job's ``execution``), under which every later write to it
  is guarded (``reminders.engine.jobs``).
* A worker's death is not a provider failure: the claim that takes over a dead
  worker's run gives the attempt back, and a death while a send was in hand is counted
  apart (``crashes``). A run whose message keeps killing its worker is given up as
  ``unknown`` after ``REMINDERS_MAX_WORKER_DEATHS``.
* One run never poisons its job. A builder that raises fails its run alone, and what
  it wrote is undone: a start calls its runs' builders without savepoints (two
  statements a run that a builder which raises nothing never needs), and once one
  raises, the start is rolled back and done again with each builder in a savepoint of
  its own (PostgreSQL would abort the job's whole transaction). A job records that it took
  its runs (``JobTake``, one row) in a commit of its own before it prepares any
  (``reminders.engine.delivery``), and the start deletes it (after it took its runs:
  every transaction locks the runs before the takes): runs still ``queued``
  under such a row when their lease runs out were taken by a job that ended before
  starting them (a builder that hangs until django-q2's timeout kills the worker). The
  claim that takes them over, or the scheduler that hands them back
  (``RunQuerySet.give_back``), or the job that takes them in (``digests.pull``, once
  their lease ran out), counts each (``job_failures``) once, whatever share of that
  job's runs it takes, and the claim sends it in a job of its own; a start clears the
  count, and after ``REMINDERS_MAX_JOB_FAILURES`` such jobs in a row it is failed
  without being prepared again, and ops told. A
  builder that outlives its connection (slower than PostgreSQL's
  ``idle_in_transaction_session_timeout``, or killed) takes the start's transaction
  with it too, and is such a job (``BuilderBrokeConnection``), not an outage: its
  ``JobTake`` stays, for its runs to be counted as they are handed back. A run that only
  waited in a long queue past its lease (a burst, a database back from an outage) was
  never taken: not counted.
* A key belongs to one run at a time. A key whose row never reached ``sent`` passes to
  the run of a re-planned occurrence; one that did makes that run a ``skipped``
  duplicate. A task that fires at most once a day never sends twice on one local day,
  whatever its keys (a schedule changed from twice a day to daily); a run made on
  request (run now) is an extra message, outside that rule. A run whose own key is
  ``partly_sent`` holds its day as a sent one does, however it ended: parts of the
  day's message went. A duplicate skipped for a run that may have delivered its
  message, in doubt or in part, says to retry that run (``HELD_AS``): a cancel ends such
  a run ``unknown``, never ``cancelled`` (``RunQuerySet.cancel_pending``).
* A key ``partly_sent`` (a text sent in parts, a later part failed) sends only the
  parts missing, of the very body the others went in, never rendered again; not after
  the run's deadline, nor inside quiet hours. A re-planned occurrence does not take it.
* A run is never sent after its deadline (its kind's ``send_by`` and lateness): a key
  never tried or ``failed`` is left as it is and the run ends ``expired``. A key in
  doubt is decided as ``reminders.engine.retries`` says, never expired: that would say
  the message was not sent.
* A paused task sends nothing, even runs already claimed; they wait without spending an
  attempt. A cancelled task's runs end ``cancelled``, but never one whose own key may
  have gone: ``sent`` if it was, ``unknown`` (code ``cancelled_in_doubt``, ops told) if
  it is in doubt, as a run whose task was cancelled while it was being sent, and
  ``unknown`` (code ``cancelled_partly_sent``, ops told, its row left as it is) if
  parts of it went.
* A message due inside its quiet hours (its recipient's own, else its kind's:
  ``Policy.quiet_hours``, its ``quiet_calendar``'s rest days) waits for their end,
  staggered by recipient, without spending an attempt, and says so (code
  ``quiet_hours``: from when to when, and why); one whose deadline comes first ends
  ``expired``, saying so. A kind that ``breaks_quiet_hours`` goes at once.
* A run of a kind its recipient opted out of (``reminders.preferences``), not mandatory,
  is ``skipped`` with code ``opted_out`` and never sent: read when the run starts, so a
  choice reaches every run not sent yet. Only a message never delivered is skipped so: a
  key in doubt is decided as any other (it may have reached the recipient).
* A run of a kind that folds into digests or is throttled (``reminders.engine.digests``),
  free to go, goes with its recipient's other ready runs of the kind: the job takes in
  those that are due, and folds them into one digest, created in this very transaction,
  under the job's lease; a folded run is never started again, and holds its task's day
  and its key as a running one does. A digest retried after an attempt that never
  reached the provider first asks whether its items changed (``digest_ends.unfold``):
  if so it sends nothing, and they wait again as runs not yet sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, OperationalError, connection, router, transaction
from django.db.models import (
    Exists,
    F,
    OuterRef,
    Q,
)
from django.utils import timezone

from .. import kinds, signals
from ..conf import settings as conf
from ..exceptions import BuilderFailed, PermanentSendError, RemindersError, UnknownKind
from ..messages import digests as digest_wording
from ..models import (
    CANCELLED_MID_SEND,
    CANCELLED_WITH_TASK_PARTLY_SENT,
    EXPIRED_CODE,
    QUIET_CODE,
    JobTake,
    QuietHours,
    ScheduledTask,
    SendLog,
    StartValues,
    TaskRun,
    sql,
)
from ..schedule import timing
from ..senders.base import render_body
from . import digest_ends, digests, holds
from .jobs import BUSY_WAIT_SECONDS, Job, logger, wait, worker_id
from .recall import RECALLED_CODE
from .records import give_up_in_doubt
from .retries import resend_is_safe

LIVE = (*TaskRun.WAITING, *TaskRun.LEASED, TaskRun.Status.FOLDED)
# The runs that hold their task's day (a task that fires at most once a day), besides
# those whose own key is partly sent.
# What a re-planned run skipped as a duplicate says of the run that holds its key or its
# day: one that may have delivered it, in doubt or in part, ended so that ops may retry
# it (a cancel ends it ``unknown``: ``RunQuerySet.cancel_pending``).
HELD_AS: dict[str, str] = {
    SendLog.Status.SENT: "sent",
    SendLog.Status.UNKNOWN: "in doubt (retry that run)",
    SendLog.Status.PARTLY_SENT: "partly sent (retry that run)",
}


# A run whose message went in part and was recalled: the rest is never sent.
RECALLED_REST = "Its parts delivered were recalled: the rest is not sent."

HOLD_THE_DAY = (
    TaskRun.Status.SENT,
    TaskRun.Status.UNKNOWN,
    TaskRun.Status.RUNNING,
    TaskRun.Status.FOLDED,
)


def start(
    token: str,
    run_ids: Sequence[int],
    now: datetime | None = None,
    *,
    execution: str = "",
    taken: bool = False,
    folding: Sequence[tuple[str, str]] = (),
) -> list[Job]:
    """Take the claimed runs that are still ours and decide, from the ledger and the
    task's other runs, which may be sent; finish or put back the others. ``execution``:
    the lease token the started runs take (default: a new one); ``taken``: the job
    recorded its ``JobTake`` under it, which the start deletes; ``folding``: the
    recipients and kinds of its runs that fold, whose runs it locks first
    (``digests.lock``)."""
    now = now or timezone.now()
    execution = execution or uuid.uuid4().hex
    bare = _Builders(careful=False)
    try:
        return _start(token, run_ids, now, execution, taken, folding, bare)
    except Exception:
        if not bare.called:
            raise
    # Something failed once a builder had run without a savepoint: the builder itself, or
    # a statement after a builder that outlived the connection. The start was rolled
    # back, the builders' writes with it; it is done again, each builder in a savepoint
    # of its own, which tells a builder's failure from the database's.
    return _start(token, run_ids, now, execution, taken, folding, _Builders(careful=True))


@dataclass
class _Builders:
    """How a start calls its runs' builders: ``careful``, each in a savepoint of its
    own; else bare, ``called`` once one was."""

    careful: bool
    called: bool = False


def _start(
    token: str,
    run_ids: Sequence[int],
    now: datetime,
    execution: str,
    taken: bool,
    folding: Sequence[tuple[str, str]],
    builders: _Builders,
) -> list[Job]:
    with transaction.atomic():
        locked = digests.lock(folding)
        _take(run_ids, [TaskRun.Status.QUEUED], execution, now, token=token)
        if taken:
            # After its runs: the runs, then the takes, in every transaction that locks
            # both (a claim taking them over, a hand-back, a pull), or two wait forever.
            JobTake.objects.filter(job=execution).delete()
        # In the order they were claimed: by priority, then by how long they waited.
        runs = _taken(run_ids, execution)
        moved = digests.moved_to_digest(runs)
        # The recipients' other due runs of a kind that folds go with them.
        pulled = digests.pull(runs, moved, now, locked)
        if pulled:
            _take(pulled, digests.PULLED, execution, now)
            more = _taken(pulled, execution)
            moved |= digests.moved_to_digest(more)
            runs += more
        ledger = SendLog.objects.in_bulk([run.ledger_key for run in runs], field_name="key")
        others = Others.read(runs, ledger)
        chosen = holds.read(runs)
        prepared = [
            _prepare(run, ledger.get(run.ledger_key), others, chosen, moved, now, builders)
            for run in runs
        ]
        jobs = [item for item in prepared if isinstance(item, Job)]
        ready = [item for item in prepared if isinstance(item, digests.Ready)]
        return jobs + _folded(ready, now, builders) if ready else jobs


def _take(
    run_ids: Sequence[int],
    statuses: Sequence[str],
    execution: str,
    now: datetime,
    *,
    token: str | None = None,
) -> None:
    """Start the runs of ``run_ids`` still in ``statuses`` (and under the claim's lease
    ``token``, if given): running under the job's lease token ``execution``, an attempt
    counted, no job lost them since (``RunQuerySet.start``)."""
    values = StartValues(
        execution=execution,
        owner=worker_id(),
        expires_at=now + timedelta(seconds=conf.LEASE_SECONDS),
        now=now,
        max_job_failures=conf.MAX_JOB_FAILURES,
    )
    TaskRun.objects.start(run_ids, statuses, values, token=token)


def _taken(run_ids: Sequence[int], execution: str) -> list[TaskRun]:
    """The runs of ``run_ids`` this job started, with their tasks and what their
    recipients chose (``holds.lookups``), by priority, then by how long they waited."""
    alias = router.db_for_read(TaskRun)
    return sql.select_joined(
        TaskRun,
        "task",
        run_ids,
        {"lease_token": execution},
        holds.lookups(alias),
        ("priority", "next_attempt_at"),
    )


def _folded(ready: list[digests.Ready], now: datetime, builders: _Builders) -> list[Job]:
    """The jobs of runs whose kind folds or is throttled: alone, or folded into digests
    (``engine.digests``), the runs over their throttle put back to wait."""
    plan = digests.plan(ready, now)
    alone = [_fresh_job(item.run, item.row, builders) for item in plan.alone]
    folded = [_fresh_job(run, None, builders) for run in digests.fold(plan.folds, now)]
    return [job for job in (*alone, *folded) if job is not None]


@dataclass
class Others:
    """What a job's runs must know of other runs: who holds the keys they need, and
    what their tasks' days already had (tasks that fire at most once a day)."""

    holders: dict[int, TaskRun] = field(default_factory=dict)
    same_day: list[TaskRun] = field(default_factory=list)
    # Run pk -> its local day (start, end) in its task's zone as it is now.
    days: dict[int, tuple[datetime, datetime]] = field(default_factory=dict)

    @classmethod
    def read(cls, runs: Sequence[TaskRun], ledger: dict[str, SendLog]) -> Others:
        ours = {run.pk for run in runs}
        held = {row.run_id for row in ledger.values() if row.run_id not in ours}
        holders = TaskRun.objects.in_bulk([pk for pk in held if pk is not None])
        # A run made on request is an extra message: outside the day's rule both ways.
        days = {
            run.pk: timing.local_day(run.occurrence, run.task.timezone)
            for run in runs
            if run.task.keyed_by_day and not run.is_manual
        }
        same_day: list[TaskRun] = []
        if days:
            around = Q()
            for run in runs:
                if run.pk in days:
                    begin, end = days[run.pk]
                    around |= Q(task_id=run.task_id, occurrence__gte=begin, occurrence__lt=end)
            # A key partly sent holds the day as a sent one does, however its run ended:
            # parts of the day's message reached the recipient.
            partly = SendLog.objects.filter(
                run=OuterRef("pk"), key=OuterRef("ledger_key"), status=SendLog.Status.PARTLY_SENT
            )
            same_day = list(
                TaskRun.objects.filter(around)
                .annotate(partly_sent=Exists(partly))
                .filter(Q(status__in=HOLD_THE_DAY) | Q(partly_sent=True))
                .exclude(pk__in=ours)
                .exclude(is_manual=True)
            )
        return cls(holders, same_day, days)

    def day_of(self, run: TaskRun) -> list[TaskRun]:
        """Other runs of ``run``'s task on its local day, for a task that fires at most
        once a day (in the task's zone as it is now)."""
        if run.pk not in self.days:
            return []
        begin, end = self.days[run.pk]
        return [
            other
            for other in self.same_day
            if other.task_id == run.task_id and begin <= other.occurrence < end
        ]


def _prepare(
    run: TaskRun,
    row: SendLog | None,
    others: Others,
    chosen: holds.Chosen,
    moved: set[tuple[str, str]],
    now: datetime,
    builders: _Builders,
) -> Job | digests.Ready | None:
    """Decide whether ``run`` may be sent now and with which ledger row; finish it, or
    put it back to wait, if not. A run of a kind that folds or is throttled is
    ``Ready``: the job decides how its recipient's ready runs go together."""
    task = run.task
    if task.status == ScheduledTask.Status.PAUSED:
        wait([run], now, "paused", "The task is paused: the run waits until it is resumed.")
        return None
    if task.status == ScheduledTask.Status.CANCELLED:
        _end_cancelled(run, row, now)
        return None
    if run.job_failures >= conf.MAX_JOB_FAILURES:
        _give_up_lost_jobs(run, row, now)
        return None
    if not _day_is_free(run, others, now):
        return None
    if row is not None and row.run_id != run.pk and not _key_passes(run, row, others, now):
        return None
    if row is None or row.status == SendLog.Status.FAILED:
        if digest_wording.is_digest(task) and digest_ends.unfold(run, now):
            return None  # its runs go again, each as its task says now
        choice = chosen.opted_out.get((task.recipient, task.kind))
        if choice is not None:
            holds.skip_opted_out(run, choice)
            return None
        if _expired(run, now) or _quiet(run, now, chosen.quiet.get(task.recipient)):
            return None
        # A run made on request (run now) goes now, on its own.
        found = None if run.is_manual else digests.rule(task, (task.recipient, task.kind) in moved)
        if found is not None:
            return _ready(run, row, found, now, chosen.quiet.get(task.recipient))
        # Never delivered: the message as the task says it now (a corrected recipient
        # or text reaches every run not yet sent).
        return _fresh_job(run, row, builders)
    if row.status == SendLog.Status.SENT:
        run.close_attempt(TaskRun.Status.SENT)  # recorded by a worker whose lease ran out
        return None
    if row.status == SendLog.Status.PARTLY_SENT:
        if row.recalled_at is not None:
            run.close_attempt(TaskRun.Status.CANCELLED, code=RECALLED_CODE, message=RECALLED_REST)
            return None
        if _expired(run, now) or _quiet(run, now, chosen.quiet.get(task.recipient)):
            return None
        # The parts missing, of the very body the others went in: never rendered again.
        return Job(run, row, fresh=False, owner=row.run_id)
    return _in_doubt_job(run, row, now)


def _quiet(run: TaskRun, now: datetime, own: QuietHours | None) -> bool:
    """True, and the run put back to wait for the end of its quiet hours (its
    recipient's ``own``, else its kind's; or ended ``expired`` when its deadline comes
    first), when ``now`` is inside them."""
    held = holds.quiet(run, now, own)
    if held is None:
        return False
    if run.deadline is not None and held.until > run.deadline:
        _expire(run, held.past_deadline(run.deadline), now)
    else:
        wait([run], held.until, QUIET_CODE, held.message)
    return True


JOB_FAILURES_CODE = "job_failures"


class BuilderBrokeConnection(OperationalError):
    """The connection ended while a run's builder ran: slower than the database keeps a
    transaction idle (PostgreSQL's ``idle_in_transaction_session_timeout``), or killed.
    The start's transaction went with it, as with a worker killed at the job's timeout:
    a lost job, counted against its runs (``JobTake``), not an outage."""

    def __init__(self, run: int) -> None:
        super().__init__(f"The connection ended while the builder of run {run} ran.")


def _give_up_lost_jobs(run: TaskRun, row: SendLog | None, now: datetime) -> None:
    """End a run whose jobs kept ending before they started it
    (``REMINDERS_MAX_JOB_FAILURES``), without preparing it again: what broke them is
    most likely its own message (a builder that hangs until the job's timeout, or
    kills its worker). ``failed``, and ops told, unless its own key is in doubt
    (``unknown``) or was sent."""
    message = (
        f"Stopped after the jobs that held it ended before starting it, "
        f"{run.job_failures} in a row (failed, timed out or lost with their worker): "
        "preparing its message, its builder above all, may be what breaks them."
    )
    if _own_key_settles(run, row, now, JOB_FAILURES_CODE, message):
        return
    error = PermanentSendError(message, code=JOB_FAILURES_CODE)
    logger.error("run %s: %s", run.pk, message)
    if run.close_attempt(TaskRun.Status.FAILED, code=JOB_FAILURES_CODE, message=message, now=now):
        signals.after_commit(
            signals.task_error,
            ScheduledTask,
            task=run.task,
            code=JOB_FAILURES_CODE,
            message=message,
        )
        signals.after_commit(signals.run_failed, TaskRun, run=run, error=error)


def _end_cancelled(run: TaskRun, row: SendLog | None, now: datetime) -> None:
    """End a run of a cancelled task: as its own key says when it may have gone
    (``_own_key_settles``); ``unknown`` naming the parts delivered, ops told, when parts
    of it went (``partly_sent``: the rest is never sent); else ``cancelled``."""
    if _own_key_settles(run, row, now, CANCELLED_MID_SEND.code, CANCELLED_MID_SEND.message):
        return
    if row is None or row.run_id != run.pk or row.status != SendLog.Status.PARTLY_SENT:
        run.close_attempt(TaskRun.Status.CANCELLED, code="cancelled", message="Task cancelled.")
        return
    reason = CANCELLED_WITH_TASK_PARTLY_SENT
    message = reason.message.format(parts=", ".join(row.parts_sent or ()))
    if run.close_attempt(TaskRun.Status.UNKNOWN, code=reason.code, message=message, now=now):
        signals.after_commit(signals.run_unknown, TaskRun, run=run)


def _own_key_settles(
    run: TaskRun, row: SendLog | None, now: datetime, code: str, message: str
) -> bool:
    """True, and the run ended as its own key says, when that key may have gone: ``sent``
    if it was, ``unknown`` (with ``code`` and ``message``, ops told) if it is in doubt. A
    run that is to end unsent ends so only when its key was never delivered."""
    if row is None or row.run_id != run.pk:
        return False
    if row.status == SendLog.Status.SENT:
        run.close_attempt(TaskRun.Status.SENT)
        return True
    if row.status in (SendLog.Status.SENDING, SendLog.Status.UNKNOWN):
        give_up_in_doubt(run, row, now, code, message)
        return True
    return False


def _day_is_free(run: TaskRun, others: Others, now: datetime) -> bool:
    """False (and the run finished or put back) when its task already sent, or may
    have sent, on the run's local day under another key, or is sending right now."""
    day = others.day_of(run)
    done = [o for o in day if o.status not in (TaskRun.Status.RUNNING, TaskRun.Status.FOLDED)]
    if done:
        first = done[0]
        status = (
            SendLog.Status.PARTLY_SENT if getattr(first, "partly_sent", False) else first.status
        )
        what = HELD_AS.get(status, status)
        run.close_attempt(
            TaskRun.Status.SKIPPED,
            code="duplicate",
            message=f"Run {first.pk} of this task was {what} on the same local day.",
        )
        return False
    # Two runs of one day starting at once: the older one goes first; one in a digest
    # goes with it.
    if any(o.pk < run.pk or o.status == TaskRun.Status.FOLDED for o in day):
        until = now + timedelta(seconds=BUSY_WAIT_SECONDS)
        wait([run], until, "day_busy", "Another run of this task's day is being sent.")
        return False
    return True


def _expired(run: TaskRun, now: datetime) -> bool:
    """True, and the run ended ``expired``, when its deadline has passed: a message
    never delivered is not sent late. Its ledger key is left as it is."""
    if run.deadline is None or now <= run.deadline:
        return False
    _expire(run, f"Not sent by its deadline, {run.deadline.isoformat()}.", now)
    return True


def _expire(run: TaskRun, message: str, now: datetime) -> bool:
    """End the attempt in hand as ``expired`` and tell ops, while the run is ours."""
    if not run.close_attempt(TaskRun.Status.EXPIRED, code=EXPIRED_CODE, message=message, now=now):
        return False
    signals.after_commit(signals.run_expired, TaskRun, run=run)
    return True


def _key_passes(run: TaskRun, row: SendLog, others: Others, now: datetime) -> bool:
    """Whether the key held by another run's row passes to ``run`` (a re-planned
    occurrence): only once that run is finished, and only if its row never reached
    ``sent`` nor ended in doubt or partly sent. Otherwise ``run`` waits or is a skipped
    duplicate."""
    holder = others.holders.get(row.run_id) if row.run_id is not None else None
    if holder is not None and holder.status in LIVE:
        until = holder.next_attempt_at or holder.lease_expires_at or now
        until = min(max(until, now + timedelta(seconds=1)), now + timedelta(minutes=15))
        wait([run], until, "key_busy", f"Key {row.key} is in use by run {holder.pk}.")
        return False
    if row.status in (SendLog.Status.SENT, SendLog.Status.UNKNOWN, SendLog.Status.PARTLY_SENT):
        what = HELD_AS[row.status]
        run.close_attempt(
            TaskRun.Status.SKIPPED,
            code="duplicate",
            message=f"Key {row.key} was {what} by run {row.run_id}.",
        )
        return False
    return True


def _ready(
    run: TaskRun, row: SendLog | None, found: digests.Rule, now: datetime, own: QuietHours | None
) -> digests.Ready | None:
    """``run``, free to go, as an item of its recipient's digest or throttle; None when
    it waits for its window's end, or its line cannot be written (then it fails alone).
    ``own``: its recipient's own quiet hours."""
    if digests.hold_for_window(run, found, now, own):
        return None
    try:
        entry = digest_wording.entry(run.task, run)
    except Exception as exc:  # a payload its own message would refuse: this run only
        _render_failed(run, exc)
        return None
    return digests.Ready(run, row, found, entry)


def _fresh_job(run: TaskRun, row: SendLog | None, builders: _Builders) -> Job | None:
    """The job of a run never delivered: its message as its task says it now. A careful
    start calls the builder in a savepoint of its own, so that a builder's database
    error rolls back its work alone, not the job's transaction (PostgreSQL aborts it
    until a rollback), and fails its run alone; a bare one lets what it raises end the
    start (``start`` does it again carefully)."""
    task = run.task
    if not builders.careful:
        builders.called = True
        content = kinds.render(task, run)
    else:
        try:
            with transaction.atomic():
                content = kinds.render(task, run)
        except Exception as exc:  # a CRM's builder may raise anything: it fails this run only
            if isinstance(exc, DatabaseError) and not connection.is_usable():
                raise BuilderBrokeConnection(run.pk) from exc
            _render_failed(run, exc)
            return None
    body = render_body(content.msgtype, content.body)
    if row is None:
        ledger = SendLog(
            key=run.ledger_key,
            task=task,
            run=run,
            recipient=task.recipient,
            channel=task.channel,
            body=body,
        )
        return Job(run, ledger)
    owner = row.run_id
    row.run, row.task, row.body = run, task, body
    row.recipient, row.channel = task.recipient, task.channel
    return Job(run, row, fresh=False, owner=owner)


def _in_doubt_job(run: TaskRun, row: SendLog, now: datetime) -> Job | None:
    """A row ``sending`` or ``unknown``: an earlier attempt may have delivered it."""
    if row.status == SendLog.Status.SENDING and row.run_id == run.pk:
        # Our own reservation never recorded: the worker died with the send in hand.
        run.crashes += 1
        TaskRun.objects.filter(pk=run.pk, lease_token=run.lease_token).update(
            crashes=F("crashes") + 1
        )
        if run.crashes >= conf.MAX_WORKER_DEATHS:
            give_up_in_doubt(
                run,
                row,
                now,
                "worker_died",
                f"Stopped after {run.crashes} workers died sending it; the provider may "
                "or may not have it.",
            )
            return None
    if resend_is_safe(row, now):
        # The same bytes again: the provider drops them if the first one arrived.
        return Job(run, row, fresh=False, owner=row.run_id, in_doubt=True)
    give_up_in_doubt(
        run,
        row,
        now,
        "unknown",
        "An earlier attempt may have delivered it, and sending again could deliver it twice.",
    )
    return None


def _render_failed(run: TaskRun, exc: Exception) -> None:
    code = "kind" if isinstance(exc, UnknownKind) else "render"
    # A builder's own bug (what it raised, the cause of BuilderFailed) gets its traceback.
    unexpected = exc.__cause__ if isinstance(exc, BuilderFailed) else exc
    if unexpected is not None and not isinstance(unexpected, RemindersError):
        logger.exception("task %s: rendering its message failed", run.task_id)
    error = PermanentSendError(f"{type(exc).__name__}: {exc}", code=code)
    if run.close_attempt(TaskRun.Status.FAILED, code=code, message=error.message):
        signals.after_commit(
            signals.task_error, ScheduledTask, task=run.task, code=code, message=error.message
        )
        signals.after_commit(signals.run_failed, TaskRun, run=run, error=error)
