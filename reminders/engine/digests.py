"""Digests and throttles: one recipient's occurrences of one kind folded into one message
(``Policy.digest_seconds``, or the recipient's own choice, ``Preference.digest``), and at
most ``Policy.throttle_per_hour`` messages of a kind an hour to one recipient, the excess
folded into the next digest rather than dropped.

How a digest goes (``engine.starting`` asks this module at each step):

1. A run of a digest's kind, never delivered and free to go, waits for the end of its
   window on its task's clock, staggered by recipient as its kind staggers its waves
   (``Rule.release``; a kind with no jitter spreads them over a fifth of the window).
   The planner already makes such runs due then (``engine.planning.due_at`` for a
   kind's policy, ``plan_releases`` for a recipient's own digest), so only a run planned
   before its recipient's choice waits here. A run whose deadline comes before that, or
   for which that moment is inside quiet hours lasting past its deadline, goes at its
   own time, with whatever is ready then: a digest never makes a run expire.
2. A claim takes a recipient's due runs of such a kind whole, and keeps them in one job
   (``engine.dispatch``). Claims running side by side in two processes may still split
   them: each job is told the recipients and kinds it folds, locks their due runs before
   it starts its own (``lock``), and takes in those waiting or queued under another
   claim and not started yet (``pull``); the job that locks second finds its runs gone.
   The take (``JobTake``) of a job that took them names them no more, and a job that
   died with them (its lease ran out) is counted against them, as a claim counts it.
   Each run taken in is decided as any run: paused, opted out, quiet or expired alone.
3. Those free to go, of one recipient, kind and channel, are folded (``fold``): in the
   start's own transaction a digest task and its run (started, under the job's lease)
   are created, listing the items (``messages.digests.entry``), and each item becomes
   ``folded``, naming its digest. One item alone goes as its own message.
4. The digest's run is then a run like any other: its ledger key is reserved before its
   send, and it is retried, decided in doubt and taken over after a crash as any run is;
   but a retry after an attempt that never reached the provider, one of whose items
   changed meanwhile (its task paused, cancelled, re-planned or corrected), sends
   nothing: its items are decided again, each as a run not yet sent
   (``engine.digest_ends.unfold``).
5. Its end is its items' end: ``sent`` with it (the digest's ledger row holds the key and
   the provider's message id), or failed, expired, unknown, with its code and why. The
   record of a sent digest settles its items in the same transaction, any other end
   the scheduler's next tick (``engine.digest_ends``).

Invariants (exactly once, both ways):

* An item is in one digest at most. It is folded only while its job holds it (its lease
  token), in the transaction that creates the digest, and a folded run is never claimed
  again. So a digest sent again after a crash lists the same items in the same bytes
  (its payload, not the items' tasks as they are now), and no item is in two digests.
* An item is never dropped: it ends as its digest does, and stays ``folded`` (unfinished:
  kept by the retention, holding its task's day) until then.
* A task that sends once a local day (``Policy.key_per``, ``keyed_by_day``) is one line
  of one digest that day: its items share no ledger key of their own, so of two of its
  runs of one day ready together the first (by primary key) goes, and the other waits
  (``day_busy``), to end a skipped duplicate once that one is sent (``_once_a_day``).
* A throttle is a ceiling: it counts the messages of the kind that may have reached
  its recipient in the last hour, sent, being sent (started, or the key ``sending``) or
  in doubt (``unknown``); a digest is one, its items none, and each digest a group
  needs counts. Runs beyond the allowance wait, without spending an attempt, until the
  oldest of those is an hour old, and then go as one digest. Two jobs of a recipient
  start one after the other (``lock``: the second waits for the rows the first took),
  so the second counts what the first is sending.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    Min,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)
from django.utils import translation
from django.utils.translation import gettext

from .. import registry
from ..conf import settings as conf
from ..exceptions import UnknownKind
from ..messages import builders
from ..messages import digests as wording
from ..models import (
    DIGEST_CODE,
    DIGEST_KEY,
    THROTTLED_CODE,
    JobTake,
    Preference,
    QuietHours,
    ScheduledTask,
    SendLog,
    TaskRun,
)
from ..schedule import timing
from ..schedule.policies import Policy
from . import holds, planning
from .jobs import BUSY_WAIT_SECONDS, logger, wait, worker_id

# Runs one job takes in beside its claim's, at most (``pull``).
PULL_LIMIT = 200
# What a run held for its digest's window or its throttle says: it folds when it goes,
# whatever its kind's policy (a recipient's own digest).
HELD_CODES = (DIGEST_CODE, THROTTLED_CODE)
# The runs a job may take in: waiting, or queued under another claim (not started).
PULLED = (*TaskRun.WAITING, TaskRun.Status.QUEUED)
NOT_PULLED = tuple(status for status in TaskRun.Status if status not in PULLED)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Rule:
    """How a run's kind goes to its recipient: its digest window in seconds (0: none)
    and its hourly throttle (0: none), with the kind's stagger (``policy``)."""

    window: int
    throttle: int
    policy: Policy

    def release(self, run: TaskRun) -> datetime:
        """When the digest of ``run``'s window goes (``planning.digest_release``)."""
        return planning.digest_release(run.task, run.occurrence, self.window, self.policy)


def rule(task: ScheduledTask, moved: bool) -> Rule | None:
    """The digest and throttle rule of ``task``'s runs; None when they go one by one.
    ``moved``: its recipient moved the kind to a digest (``Preference.digest``). A
    digest itself is never folded again."""
    if wording.is_digest(task):
        return None
    try:
        policy = registry.policy(task.kind)
    except UnknownKind:
        return None
    window = policy.digest_seconds or (conf.DIGEST_SECONDS if moved else 0)
    if not window and not policy.throttle_per_hour:
        return None
    return Rule(window, policy.throttle_per_hour, policy)


def folds(kind: str, code: str = "") -> bool:
    """Whether a run of ``kind`` whose error code is ``code`` folds or is throttled: its
    kind's policy says so for every recipient, or the run was held for a digest or a
    throttle (``HELD_CODES``), as a recipient's own digest holds it."""
    if code in HELD_CODES:
        return True
    try:
        policy = registry.policy(kind)
    except UnknownKind:
        return False
    return bool(policy.digest_seconds or policy.throttle_per_hour)


def tasks_of(pairs: Iterable[tuple[str, str]], *, active: bool = False) -> list[int]:
    """The tasks of these (recipient, kind) pairs (with ``active``, not paused), by their
    index (``reminders_task_recipient_idx``), in one statement; none without pairs."""
    return sorted(pk for pk, (_, paused) in _tasks(pairs).items() if not (active and paused))


def _tasks(pairs: Iterable[tuple[str, str]]) -> dict[int, tuple[tuple[str, str], bool]]:
    """``tasks_of``'s tasks, each with its pair and whether it is paused."""
    wanted = set(pairs)
    if not wanted:
        return {}
    rows = ScheduledTask.objects.filter(
        recipient__in={recipient for recipient, _ in wanted},
        kind__in={kind for _, kind in wanted},
    ).values_list("pk", "recipient", "kind", "status")
    return {
        pk: ((recipient, kind), status == ScheduledTask.Status.PAUSED)
        for pk, recipient, kind, status in rows
        if (recipient, kind) in wanted
    }


def open_runs(
    pairs: Iterable[tuple[str, str]], *fields: str, active: bool = False
) -> QuerySet[TaskRun, tuple[Any, ...]]:
    """The waiting and queued runs (``PULLED``) of these (recipient, kind) pairs, by
    primary key, as rows of ``fields``; with ``active``, of tasks not paused. Two
    statements: the tasks (``tasks_of``), then their runs (``_open_runs_of``)."""
    return _open_runs_of(tasks_of(pairs, active=active), *fields)


def _open_runs_of(tasks: Iterable[int], *fields: str) -> QuerySet[TaskRun, tuple[Any, ...]]:
    """The waiting and queued runs of ``tasks``, by primary key, as rows of ``fields``,
    on the run's own columns.

    Read by task only: the status is excluded (``NOT IN`` the others), which no index
    answers, and the due time is left to the caller, on the rows. When the planner's
    statistics of the runs predate the morning's (a large table, whose morning does not
    reach autovacuum's threshold), a query on the status or the due time takes a plan
    that reads every waiting run for each recipient's handful; this one reads the runs of
    these tasks (each one-off task has one), whatever the statistics say."""
    return (
        TaskRun.objects.filter(task_id__in=sorted(tasks))
        .exclude(status__in=NOT_PULLED)
        .order_by("pk")
        .values_list(*fields)
    )


@dataclass
class Ready:
    """A run free to go whose kind folds or is throttled: its own ledger row (none, or
    ``failed``), its rule and its line in a digest."""

    run: TaskRun
    row: SendLog | None
    rule: Rule
    entry: dict[str, Any]


def hold_for_window(run: TaskRun, found: Rule, now: datetime, own: QuietHours | None) -> bool:
    """True, and ``run`` put back to wait, when its digest's window has not ended; a run
    whose deadline comes first, or that would wait into quiet hours (its recipient's
    ``own``, else its kind's) lasting past it, does not wait."""
    release = _release(run, found, own)
    if release is None or now >= release:
        return False
    wait([run], release, DIGEST_CODE, _waits(run, release))
    return True


def plan_releases(runs: Sequence[TaskRun]) -> None:
    """Runs just planned (unsaved) of a kind that folds are planned due when their digest
    goes, as the start would hold them (``hold_for_window``): the plan shows when they
    go, and no claim is spent on them before.

    * A kind whose policy folds is planned due then by the planner already
      (``engine.planning.due_at``); a kind its recipient moved to a digest
      (``Preference.digest``) is planned due then here, saying so (code ``digest``).
    * Unless that moment falls inside quiet hours lasting past the run's deadline: then
      it is planned due at its own time, as if it did not fold, to go before those quiet
      hours, with whatever of its digest is ready then; so that no run expires for
      having waited for its digest.

    Two queries at most (the recipients' choices, when their digests have a window, and
    their own quiet hours), none without runs of a kind that folds. The start asks again
    (``hold_for_window``): a choice changed since still reaches the run."""
    planned = [run for run in runs if run.status == TaskRun.Status.SCHEDULED]
    moved = _moved(planned) if planned and conf.DIGEST_SECONDS else set()
    found = [
        (run, rule) for run in planned if (rule := _rule_of(run, moved)) is not None and rule.window
    ]
    if not found:
        return
    recipients = {run.task.recipient for run, _ in found}
    own = {row.recipient: row for row in QuietHours.objects.filter(recipient__in=recipients)}
    for run, window in found:
        if (run.task.recipient, run.task.kind) in moved:
            _defer(run, window, own.get(run.task.recipient))
        else:
            _clear_of_quiet(run, window, own.get(run.task.recipient))


def _moved(runs: Sequence[TaskRun]) -> set[tuple[str, str]]:
    """The (recipient, kind) pairs of ``runs`` their recipient moved to a digest."""
    return set(
        Preference.objects.filter(
            recipient__in={run.task.recipient for run in runs},
            kind__in={run.task.kind for run in runs},
            digest=True,
        ).values_list("recipient", "kind")
    )


def _rule_of(run: TaskRun, moved: set[tuple[str, str]]) -> Rule | None:
    return rule(run.task, (run.task.recipient, run.task.kind) in moved)


def _defer(run: TaskRun, found: Rule, own: QuietHours | None) -> None:
    """A run of a kind its recipient moved to a digest, due when that digest goes."""
    release = _release(run, found, own)
    if release is not None and release > run.due_at:
        run.due_at = run.next_attempt_at = release
        run.error_code, run.error_message = DIGEST_CODE, _waits(run, release)


def _clear_of_quiet(run: TaskRun, found: Rule, own: QuietHours | None) -> None:
    """A run of a kind whose policy folds, planned due when its digest goes, due at its
    own time instead when that moment is quiet past its deadline (``_release``)."""
    policy, task = found.policy, run.task
    due = run.occurrence + planning.stagger(task, policy)
    if run.due_at == due or _release(run, found, own) is not None:
        return
    run.due_at = run.next_attempt_at = due
    run.deadline = policy.deadline(run.occurrence, due, task.timezone)


def _release(run: TaskRun, found: Rule, own: QuietHours | None) -> datetime | None:
    """When ``run``'s digest goes; None when it has no window, or its deadline comes
    first, or that moment is inside quiet hours (its recipient's ``own``, else its
    kind's) that end past its deadline: it goes at once, with whatever is ready."""
    if not found.window:
        return None
    release = found.release(run)
    if run.deadline is not None and run.deadline < release:
        return None
    held = holds.quiet(run, release, own)
    if held is not None and run.deadline is not None and held.until > run.deadline:
        return None
    return release


def _waits(run: TaskRun, release: datetime) -> str:
    """Why the run waits, for the admin: in the project's language (``LANGUAGE_CODE``),
    whatever language is active where the run is planned."""
    zone = timing.zone(run.task.timezone)
    with translation.override(django_settings.LANGUAGE_CODE):
        return gettext(
            "Waits for its digest: sent with the other %(kind)s of its window at %(when)s %(zone)s."
        ) % {
            "kind": run.task.kind,
            "when": f"{release.astimezone(zone):%Y-%m-%d %H:%M:%S}",
            "zone": run.task.timezone,
        }


def due(status: str, next_attempt_at: datetime | None, now: datetime) -> bool:
    """Whether a run in ``PULLED`` may be taken in at ``now``: queued under a claim and
    not started, or waiting and due."""
    return status == TaskRun.Status.QUEUED or (
        next_attempt_at is not None and next_attempt_at <= now
    )


# What ``pull`` reads of each run it may take in.
PULL_FIELDS = ("pk", "status", "next_attempt_at", "lease_token", "lease_expires_at")


@dataclass(frozen=True)
class Locked:
    """The open runs ``lock`` locked, of tasks not paused, as rows of ``PULL_FIELDS`` by
    (recipient, kind): the start holds them until it commits, so ``pull`` takes them
    from here rather than read them again."""

    rows: dict[tuple[str, str], list[tuple[Any, ...]]]


def lock(pairs: Sequence[tuple[str, str]]) -> Locked | None:
    """Lock the waiting and queued runs of ``pairs`` (recipient, kind), by primary key,
    in the caller's transaction (the start), before it takes its own: two jobs holding
    runs of one recipient, from claims that ran side by side in two processes, then
    start one after the other, and the first takes the other's runs not started yet
    (``pull``), so that they fold into one digest. Two statements (the tasks, read, then
    the runs, locked, without a join: MariaDB would lock the tasks too; runs not due yet
    are locked too, and left as they are), whose rows ``pull`` takes. None, and no
    statement, without pairs or where the database has no row locks (SQLite: one writer
    at a time)."""
    if not pairs or not connection.features.has_select_for_update:
        return None
    tasks = _tasks(pairs)
    runs = _open_runs_of(tasks, "task_id", *PULL_FIELDS).select_for_update()
    locked = Locked({pair: [] for pair in pairs})
    for task, *row in runs:
        pair, paused = tasks[task]
        if not paused:
            locked.rows[pair].append(tuple(row))
    return locked


def pull(
    runs: Sequence[TaskRun], moved: set[tuple[str, str]], now: datetime, locked: Locked | None
) -> list[int]:
    """The due runs of the recipients and kinds of ``runs`` that fold or are throttled,
    not among ``runs``: waiting, or queued under another claim and not started yet (two
    claims side by side took a recipient's runs in two parts); locked (``locked``, where
    the start locked a pair's already; else skipping those another transaction holds),
    to be started with them (``_take_over``). Empty, without a query, when none of
    ``runs`` folds."""
    pairs = {
        (run.task.recipient, run.task.kind)
        for run in runs
        if rule(run.task, (run.task.recipient, run.task.kind) in moved) is not None
    }
    if not pairs:
        return []
    own = {run.pk for run in runs}
    known = {pair: rows for pair, rows in locked.rows.items() if pair in pairs} if locked else {}
    found = [row for rows in known.values() for row in rows if row[0] not in own]
    if unknown := pairs - known.keys():
        # Pairs not locked: the claim did not see them fold (a recipient's digest
        # chosen since), or the database has no row locks.
        query = open_runs(unknown, *PULL_FIELDS, active=True).exclude(pk__in=own)
        if connection.features.has_select_for_update_skip_locked:
            # A claim taking one now is skipped, not waited for. Elsewhere (SQLite: one
            # writer at a time) the start's UPDATE checks each is still waiting.
            query = query.select_for_update(skip_locked=True)
        found += list(query)
    found.sort(key=lambda row: row[0])
    pulled = [row for row in found if due(row[1], row[2], now)][:PULL_LIMIT]
    _take_over([row for row in pulled if row[1] == TaskRun.Status.QUEUED], now)
    return [pk for pk, *_ in pulled]


def _take_over(queued: list[tuple[Any, ...]], now: datetime) -> None:
    """Runs queued under other claims (rows of ``pull``), taken in by this job: the
    takes of the jobs that took them (``JobTake``) name them no more, and those taken
    by a job whose lease ran out (it died before starting them) are counted
    (``job_failures``), as the claim that takes over a dead job's runs counts them. A
    job whose lease still holds may be alive, to start after this one: not counted."""
    if not queued:
        return
    held = {pk: token for pk, _, _, token, _ in queued}
    lost = JobTake.objects.lost_runs(set(held.values()), held, TaskRun.objects.queued())
    ran_out = [pk for pk, *_, until in queued if pk in lost and until is not None and until <= now]
    if ran_out:
        TaskRun.objects.filter(pk__in=ran_out, status=TaskRun.Status.QUEUED).update(
            job_failures=F("job_failures") + 1
        )


def moved_to_digest(runs: Sequence[TaskRun]) -> set[tuple[str, str]]:
    """The (recipient, kind) pairs of ``runs`` whose recipient moved the kind to a
    digest, from the start's lookups (``holds.lookups``): no query when none did."""
    pks = {pk for run in runs if (pk := getattr(run, "held_digest", None)) is not None}
    if not pks:
        return set()
    return set(Preference.objects.filter(pk__in=pks).values_list("recipient", "kind"))


@dataclass
class Plan:
    """What a job does with its ready runs: send alone, fold together, or wait."""

    alone: list[Ready] = field(default_factory=list)
    folds: list[list[Ready]] = field(default_factory=list)


def plan(ready: Sequence[Ready], now: datetime) -> Plan:
    """Group ``ready`` by recipient, kind, channel and language; a group of a throttled
    kind sends no more messages than its recipient's hour allows, all channels together,
    each digest counted (the rest waits, to go folded as one), and a group of a folding
    kind goes as one digest, or as many as its lines need (``messages.digests.chunks``;
    one run alone: its own message)."""
    groups: dict[tuple[str, str, str, str], list[Ready]] = {}
    for item in _once_a_day(ready, now):
        task = item.run.task
        key = (task.recipient, task.kind, task.channel, builders.language(task))
        groups.setdefault(key, []).append(item)
    throttled = [key[:3] for key, items in groups.items() if items[0].rule.throttle]
    used = _sent_last_hour(throttled, now, [item.run.pk for item in ready])
    result = Plan()
    # In a stable order (by recipient, kind, channel and language): which channel's runs
    # a full hour holds back does not depend on the order the database gave them in.
    for (recipient, kind, _channel, language), items in sorted(groups.items()):
        items.sort(key=lambda item: (item.run.occurrence, item.run.pk))
        allowance = items[0].rule.throttle
        count, oldest = used.get((recipient, kind), (0, None))
        room = allowance - count if allowance else None
        messages = _messages(items, room, kind, language)
        going = messages if room is None else messages[: max(room, 0)]
        if len(going) < len(messages):
            held = [item for message in messages[len(going) :] for item in message]
            _throttled(held, allowance, oldest or now, now)
        for message in going:
            if len(message) == 1:
                result.alone += message
            else:
                result.folds.append(message)
        # The recipient's other channels share the hour's allowance.
        used[(recipient, kind)] = (count + len(going), oldest or now)
    return result


def _messages(items: list[Ready], room: int | None, kind: str, language: str) -> list[list[Ready]]:
    """The messages ``items`` (of one recipient, ``kind``, channel and ``language``) go
    as, in order: each alone (a kind that does not fold, as many as the hour's ``room``
    leaves, one kept for a digest of the rest), then the rest folded, in as many digests
    as their lines need."""
    if items[0].rule.window:
        alone: list[Ready] = []
    elif room is None or len(items) <= room:
        alone = items
    else:
        alone = items[: max(room - 1, 0)]
    rest = items[len(alone) :]
    entries = [item.entry for item in rest]
    chunks = wording.chunks(kind, language, entries) if rest else []
    return [[item] for item in alone] + [[rest[index] for index in chunk] for chunk in chunks]


# What may have reached the recipient: sent, being sent, or in doubt.
COUNTED_RUNS = (TaskRun.Status.SENT, TaskRun.Status.RUNNING, TaskRun.Status.UNKNOWN)
COUNTED_KEYS = (SendLog.Status.SENDING, SendLog.Status.UNKNOWN)


def _once_a_day(ready: Sequence[Ready], now: datetime) -> list[Ready]:
    """``ready`` less the runs of a task that sends once a local day (``keyed_by_day``,
    not made on request) beyond the first of their day, by primary key: those wait (code
    ``day_busy``), as two runs of one day started together do (``engine.starting``), and
    end skipped as duplicates once the first is sent, or go if it is not."""
    days: set[tuple[int, date]] = set()
    busy: list[TaskRun] = []
    for item in sorted(ready, key=lambda item: item.run.pk):
        day = _day(item.run)
        if day is not None and day in days:
            busy.append(item.run)
        elif day is not None:
            days.add(day)
    kept = [item for item in ready if item.run not in busy]
    if busy:
        until = now + timedelta(seconds=BUSY_WAIT_SECONDS)
        wait(busy, until, "day_busy", "Its task sends once a day: another run of its day goes.")
    return kept


def _day(run: TaskRun) -> tuple[int, date] | None:
    """The task and local day ``run`` sends for, when its task sends once a day."""
    if run.is_manual or not run.task.keyed_by_day:
        return None
    return run.task_id, timing.local_date(run.occurrence, run.task.timezone)


def _sent_last_hour(
    keys: list[tuple[str, str, str]], now: datetime, starting: Sequence[int] = ()
) -> dict[tuple[str, str], tuple[int, datetime | None]]:
    """Per (recipient, kind): the messages that may have reached the recipient in the
    hour before ``now`` (a digest is one, its items none): sent, being sent (started, or
    its key ``sending``) or in doubt (``unknown``), by when their sending attempt started
    (the job's clock), and the oldest of them; the runs ``starting`` (the caller's own)
    left out. Two statements (``tasks_of``), none without keys."""
    if not keys:
        return {}
    pairs = [(recipient, kind) for recipient, kind, _ in keys]
    in_flight = SendLog.objects.filter(key=OuterRef("ledger_key"), status__in=COUNTED_KEYS)
    rows = (
        TaskRun.objects.filter(
            Q(status__in=COUNTED_RUNS) | Exists(in_flight),
            task_id__in=tasks_of(pairs),
            digest__isnull=True,
            started_at__gt=now - HOUR,
        )
        .exclude(pk__in=list(starting))
        .values("task__recipient", "task__kind")
        .annotate(count=Count("pk"), oldest=Min("started_at"))
    )
    return {
        (row["task__recipient"], row["task__kind"]): (row["count"], row["oldest"]) for row in rows
    }


def _throttled(items: list[Ready], allowance: int, oldest: datetime, now: datetime) -> None:
    until = max(oldest + HOUR, now + timedelta(seconds=1))
    kind = items[0].run.task.kind
    message = (
        f"Throttled: {kind} may go to its recipient {allowance} times an hour, and the hour "
        f"is full; it goes in one digest with the others held at {until.isoformat()}."
    )
    wait([item.run for item in items], until, THROTTLED_CODE, message[:2000])


def fold(folds: Sequence[list[Ready]], now: datetime) -> list[TaskRun]:
    """Fold each group of ready runs into a digest, in the caller's transaction (the
    job's start): a digest task and its run, started under the job's lease, and each
    item ``folded`` naming it. Returns the digest runs, to send."""
    if not folds:
        return []
    tasks = [_digest_task(items, now) for items in folds]
    _insert(tasks)
    lease = now + timedelta(seconds=conf.LEASE_SECONDS)
    token = folds[0][0].run.lease_token
    digests = [
        TaskRun(
            task=task,
            occurrence=now,
            run_date=timing.local_date(now, task.timezone),
            due_at=now,
            status=TaskRun.Status.RUNNING,
            priority=min(item.run.priority for item in items),
            ledger_key=task.ledger_key(now),
            attempts=1,
            lease_owner=worker_id(),
            lease_token=token,
            lease_expires_at=lease,
            started_at=now,
            deadline=min(
                (item.run.deadline for item in items if item.run.deadline is not None),
                default=None,
            ),
        )
        for task, items in zip(tasks, folds, strict=True)
    ]
    _insert(digests)
    into = {
        item.run.pk: digest.pk
        for digest, items in zip(digests, folds, strict=True)
        for item in items
    }
    TaskRun.objects.filter(pk__in=list(into), lease_token=token).update(
        status=TaskRun.Status.FOLDED,
        digest=Case(*(When(pk=pk, then=Value(digest)) for pk, digest in into.items())),
        error_code="",
        error_message=Case(
            *(When(pk=pk, then=Value(f"In digest run {digest}.")) for pk, digest in into.items())
        ),
        next_attempt_at=None,
        lease_owner="",
        lease_token="",
        lease_expires_at=None,
    )
    for digest, items in zip(digests, folds, strict=True):
        logger.info("folded %d runs into digest run %s", len(items), digest.pk)
    return digests


def _digest_task(items: list[Ready], now: datetime) -> ScheduledTask:
    lead = items[0].run.task
    payload: dict[str, Any] = {DIGEST_KEY: {"items": [item.entry for item in items]}}
    if isinstance(lead.payload, dict) and "lang" in lead.payload:
        payload["lang"] = lead.payload["lang"]
    return ScheduledTask(
        kind=lead.kind,
        recipient=lead.recipient,
        channel=lead.channel,
        run_at=now,
        timezone=lead.timezone,
        payload=payload,
        priority=lead.priority,
        # Nothing left to plan; completed once its run ends (``complete_ended``).
        status=ScheduledTask.Status.ACTIVE,
        calendar="",
        last_run_at=now,
    )


def _insert(rows: Sequence[Model]) -> None:
    """Insert ``rows`` with their primary keys set: in one statement where the database
    returns them, else one by one."""
    if connection.features.can_return_rows_from_bulk_insert:
        type(rows[0])._default_manager.bulk_create(rows)
        return
    for row in rows:
        row.save(force_insert=True)
