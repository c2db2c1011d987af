"""``TaskRun``'s QuerySet verbs, reused by the scheduler, delivery, the admin and the
commands: due and claimable runs, planned runs added (a cancelled one revived), the
pending cancelled (a run in doubt, or partly sent, ended ``unknown``), the overdue
expired, the stuck reported, the abandoned given back.

Each verb is one or a few statements over the selected rows, never a query per run; a
verb that tells ops (``signals``) does so once its transaction commits.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, cast

from django.db import connection, connections, models, transaction
from django.db.models import Q
from django.utils import timezone

from .. import signals
from ..conf import settings as conf
from ..schedule import timing
from . import sql
from .choices import (
    CANCELLED_IN_DOUBT,
    CANCELLED_PARTLY_SENT,
    CANCELLED_WITH_TASK_IN_DOUBT,
    CANCELLED_WITH_TASK_PARTLY_SENT,
    EXPIRED_CODE,
    LEASED,
    MADE_UP_WITH,
    MAKEUP_CANCELLED,
    MAKEUP_SUFFIX,
    MISSED_CODES,
    UNSENT_ENDS,
    WAITING,
    RunStatus,
    SkipReason,
    _saying,
)
from .ledger import JobTake, SendLog
from .tasks import ScheduledTask

logger = logging.getLogger("reminders.models.runs")


@dataclass(frozen=True)
class StartValues:
    """What a job's start writes to its runs (``RunQuerySet.start``): its lease token
    (``execution``), owner and end, the start time, and the job failures at which a run
    is given up (``MAX_JOB_FAILURES``), whose count a start keeps."""

    execution: str
    owner: str
    expires_at: datetime
    now: datetime
    max_job_failures: int


@lru_cache(maxsize=128)
def _start_sql(model: Any, alias: str, n: int, statuses: int, with_token: bool) -> str:
    """``RunQuerySet.start``'s UPDATE of ``n`` runs. Its parameters: status, lease
    token, owner and end, the job failures a run is given up at, the start time; the
    ``n`` runs, the ``statuses``; the token, if ``with_token``. Each assignment reads
    only its own column: MySQL and MariaDB evaluate a SET's assignments left to right,
    each seeing the ones before it."""
    quote = connections[alias].ops.quote_name
    column = sql.quoted_columns(model, alias)
    attempts, failures = column("attempts"), column("job_failures")
    sets = ", ".join(
        [
            f"{column('status')} = %s",
            f"{column('lease_token')} = %s",
            f"{column('lease_owner')} = %s",
            f"{column('lease_expires_at')} = %s",
            f"{attempts} = {attempts} + 1",
            f"{failures} = CASE WHEN {failures} >= %s THEN {failures} ELSE 0 END",
            f"{column('started_at')} = %s",
            f"{column('finished_at')} = NULL",
        ]
    )
    # The status is tested through a CASE that no index matches: PostgreSQL would
    # otherwise read the runs through the partial index of every leased run, and filter
    # them for these, on statistics that undercount a wave planned since the last
    # ANALYZE (4,000 rows read for 20, 1.6 ms a job); by primary key it reads its own.
    where = f"{column('id')} IN ({', '.join(['%s'] * n)})"
    where += (
        f" AND CASE WHEN {column('status')} IN ({', '.join(['%s'] * statuses)})"
        " THEN 1 ELSE 0 END = 1"
    )
    if with_token:
        where += f" AND {column('lease_token')} = %s"
    return f"UPDATE {quote(model._meta.db_table)} SET {sets} WHERE {where}"  # noqa: S608


# What a re-planned occurrence takes from its new run when its cancelled run is revived.
REPLANNED_FIELDS = [
    "status",
    "due_at",
    "next_attempt_at",
    "priority",
    "ledger_key",
    "attempts",
    "error_code",
    "error_message",
    "finished_at",
    "is_compensation",
    "deadline",
    "day_source",
    "day_note",
]


# What a run in doubt ends with when cancelled (``RunQuerySet.cancel_pending``), besides
# its error and when it finished.
ENDED_IN_DOUBT: dict[str, Any] = {
    "status": RunStatus.UNKNOWN,
    "next_attempt_at": None,
    "lease_owner": "",
    "lease_token": "",
    "lease_expires_at": None,
}


def _say_of_makeups(runs: RunQuerySet, says: dict[tuple[int, str], str]) -> None:
    """Make the skipped runs of each (task, ledger key) say ``says[...]`` of their
    make-up instead of what they said."""
    if not says:
        return
    which = Q()
    for task_id, key in says:
        which |= Q(task_id=task_id, ledger_key=key)
    skipped = runs.model.objects.filter(
        which, status=RunStatus.SKIPPED, error_code__in=MISSED_CODES, is_compensation=False
    ).only("pk", "task_id", "ledger_key", "error_message")
    changed = []
    for run in skipped:
        message = _saying(run.error_message, says[(run.task_id, run.ledger_key)])
        if message != run.error_message:
            run.error_message = message
            changed.append(run)
    runs.model.objects.bulk_update(changed, ["error_message"])


def _due(now: datetime) -> Q:
    return Q(status__in=WAITING, next_attempt_at__lte=now)


def _abandoned(now: datetime) -> Q:
    return Q(status__in=LEASED, lease_expires_at__lt=now)


class RunQuerySet(models.QuerySet[Any]):
    # Of ``TaskRun`` (``self.model``), which is defined over this module and imports it:
    # its rows are typed ``Any`` here rather than the module importing its model back.

    def claimable(self, now: datetime, *, abandoned: bool = True) -> RunQuerySet:
        """Runs a scheduler may claim: due and waiting (their task not paused), or (with
        ``abandoned``) held under an expired lease."""
        waiting = _due(now) & ~Q(task__status=ScheduledTask.Status.PAUSED)
        return self.filter((waiting | _abandoned(now)) if abandoned else waiting)

    def due_or_abandoned(self, now: datetime) -> RunQuerySet:
        """``claimable`` on the run's own columns: what a claim's UPDATE re-checks. It
        reads no other table: on MariaDB an UPDATE joined to the tasks locks run rows
        well beyond the claim, and deadlocks with workers starting theirs."""
        return self.filter(_due(now) | _abandoned(now))

    def add_planned(self, runs: Sequence[Any]) -> None:
        """Save newly planned runs. One another scheduler created first is left as it is
        (one run per task and occurrence), and an occurrence planned again gets its
        cancelled run back (looked for only when a row was left out)."""
        if sql.insert(runs, ignore_conflicts=True) < len(runs):
            self._revive_cancelled(runs)
        self._say_made_up(runs)

    def _say_made_up(self, runs: Sequence[Any]) -> None:
        """The skipped runs that these make-ups cover say which occurrence's run they
        go with (one planned earlier may have said its make-up was cancelled)."""
        says: dict[tuple[int, str], str] = {}
        # A make-up is due with the run it goes with (``new_makeup``).
        owns = {(run.task_id, run.due_at): run for run in runs if not run.is_compensation}
        for makeup in runs:
            if not makeup.is_compensation:
                continue
            own = owns.get((makeup.task_id, makeup.due_at))
            if own is not None:
                local = own.occurrence.astimezone(timing.zone(own.task.timezone))
                when = MADE_UP_WITH.format(when=f"{local:%Y-%m-%d %H:%M}")
                says[(makeup.task_id, makeup.ledger_key.removesuffix(MAKEUP_SUFFIX))] = when
        _say_of_makeups(self, says)

    def _revive_cancelled(self, runs: Sequence[Any]) -> None:
        """A schedule moved away and back (09:00 → 10:00 → 09:00) plans an occurrence whose
        run was cancelled; the unique (task, occurrence) makes ``bulk_create`` drop the new
        one, so the old row is put back in line instead."""
        wanted = {(run.task_id, run.occurrence): run for run in runs if run.status == "scheduled"}
        if not wanted:
            return
        cancelled = self.model.objects.filter(
            status=RunStatus.CANCELLED,
            task_id__in={task_id for task_id, _ in wanted},
            occurrence__in={occurrence for _, occurrence in wanted},
        )
        revived = []
        for old in cancelled:
            new = wanted.get((old.task_id, old.occurrence))
            if new is None:
                continue
            for field in REPLANNED_FIELDS:
                setattr(old, field, getattr(new, field))
            revived.append(old)
        self.model.objects.bulk_update(revived, REPLANNED_FIELDS)

    def skip_all_but_latest_due(
        self, now: datetime, skip: SkipReason, *, keep_latest_since: datetime | None
    ) -> int:
        """Record the waiting runs due by ``now`` as skipped for ``skip``, but the latest
        occurrence when it is at or after ``keep_latest_since`` (None: none is left);
        returns how many were skipped. Make-up runs and runs made on request are left
        to run (their deadline decides)."""
        due = self.filter(status__in=WAITING, next_attempt_at__lte=now).exclude(
            Q(is_compensation=True) | Q(is_manual=True)
        )
        latest = due.order_by("-occurrence").values_list("occurrence", flat=True).first()
        if latest is None:
            return 0
        if keep_latest_since is not None and latest >= keep_latest_since:
            due = due.filter(occurrence__lt=latest)
        return due.update(
            status=RunStatus.SKIPPED,
            error_code=skip.code,
            error_message=skip.message,
            next_attempt_at=None,
            finished_at=now,
        )

    def queued(self) -> RunQuerySet:
        """Claimed, not started yet."""
        return self.filter(status=RunStatus.QUEUED)

    def pending(self) -> RunQuerySet:
        return self.filter(status__in=(*WAITING, RunStatus.QUEUED))

    def cancel_pending(self) -> int:
        """Cancel these runs that have not started; returns how many ended so.

        A run in doubt (waiting to send again what an earlier attempt may have
        delivered: its own ledger row ``sending`` or ``unknown``) is not cancelled but
        ends ``unknown``, its row too, and ops are told (``run_unknown``) once the
        transaction commits. Cancelled, it would say nothing went out, and the run that
        replaces it, a duplicate of its key or its day, would be skipped pointing to a
        run no one can retry; ``unknown``, it is the open question ops settle by
        retrying it or marking it handled (its task cancelled, which refuses a retry:
        by asking the recipient, or the provider's statistics, and marking it handled,
        as its message says). A run waiting to send the rest of a text sent in parts
        (its own row ``partly_sent``) ends ``unknown`` too, its row left as it is, its
        message naming the parts delivered (``CANCELLED_PARTLY_SENT``), and ops told:
        parts reached the recipient, and the re-planned run skipped as a duplicate of
        its key says to retry it. A make-up cancelled no longer covers its
        occurrence, and the skipped run it was for says so (``MAKEUP_CANCELLED``). The
        take (``JobTake``) of a job that took runs cancelled here and holds no other
        goes with them."""
        now = timezone.now()
        pending = self.pending()
        own_row = SendLog.objects.filter(
            run=models.OuterRef("pk"), key=models.OuterRef("ledger_key")
        )
        # Parts delivered (``partly_sent``) are as far from "nothing went" as a doubt.
        may_have_gone = (SendLog.Status.SENDING, SendLog.Status.UNKNOWN, SendLog.Status.PARTLY_SENT)
        # One read of the few that need more than a status: runs in doubt, make-ups, and
        # the claimed (a job that took them and died leaves its take to delete).
        special = list(
            pending.annotate(in_doubt=models.Exists(own_row.filter(status__in=may_have_gone)))
            .filter(Q(in_doubt=True) | Q(is_compensation=True) | Q(status=RunStatus.QUEUED))
            .values_list("pk", "in_doubt", "is_compensation", "status", "lease_token")
        )
        doubtful = [pk for pk, in_doubt, *_ in special if in_doubt]
        makeups = [pk for pk, in_doubt, makeup, *_ in special if makeup and not in_doubt]
        claims = {token for *_, status, token in special if status == RunStatus.QUEUED}
        ended = 0
        if doubtful:
            ended = self._end_in_doubt(doubtful, now)
        ended += pending.exclude(pk__in=doubtful).update(
            status=RunStatus.CANCELLED,
            next_attempt_at=None,
            lease_token="",
            lease_expires_at=None,
            finished_at=now,
        )
        if claims:
            JobTake.objects.ended(claims, self.model.objects.filter(status=RunStatus.QUEUED))
        if makeups:
            cancelled = self.model.objects.filter(
                pk__in=makeups, status=RunStatus.CANCELLED, finished_at=now
            ).values_list("task_id", "ledger_key")
            _say_of_makeups(
                self,
                {
                    (task, key.removesuffix(MAKEUP_SUFFIX)): MAKEUP_CANCELLED
                    for task, key in cancelled
                },
            )
        return ended

    def _end_in_doubt(self, doubtful: list[int], now: datetime) -> int:
        """``cancel_pending``'s end of runs in doubt: ``unknown``, and ops told what they
        may do: retry it, or, its task cancelled (which refuses a retry), ask whether it
        arrived and mark it handled."""
        partly: dict[int, list[str] | None] = dict(
            SendLog.objects.filter(
                run_id__in=doubtful,
                key=models.F("run__ledger_key"),
                status=SendLog.Status.PARTLY_SENT,
            ).values_list("run_id", "parts_sent")
        )
        ended = self._end_partly_sent(partly, now) if partly else 0
        pending = self.model.objects.filter(pk__in=doubtful).exclude(pk__in=partly).pending()
        cancelled = Q(task__status=ScheduledTask.Status.CANCELLED)
        for which, reason in (
            (cancelled, CANCELLED_WITH_TASK_IN_DOUBT),
            (~cancelled, CANCELLED_IN_DOUBT),
        ):
            ended += pending.filter(which).update(
                **ENDED_IN_DOUBT,
                error_code=reason.code,
                error_message=reason.message,
                finished_at=now,
            )
        SendLog.objects.filter(run_id__in=doubtful, status=SendLog.Status.SENDING).update(
            status=SendLog.Status.UNKNOWN, updated_at=now
        )
        told = self.model.objects.filter(
            pk__in=doubtful, status=RunStatus.UNKNOWN, finished_at=now
        ).select_related("task")
        for run in told:
            signals.after_commit(signals.run_unknown, self.model, run=run)
        return ended

    def _end_partly_sent(self, partly: dict[int, list[str] | None], now: datetime) -> int:
        """``_end_in_doubt``'s end of runs whose own row is ``partly_sent`` (``partly``:
        the parts delivered, by run): ``unknown``, their message naming those parts, and
        what ops may do with the rest: retry it, or, its task cancelled, mark it
        handled. The rows are locked first, so that a job starting one waits, then
        finds it ended."""
        with transaction.atomic(using=self.db):
            runs = list(self.model.objects.filter(pk__in=partly).pending().select_for_update())
            stopped = set(
                ScheduledTask.objects.filter(
                    pk__in={run.task_id for run in runs}, status=ScheduledTask.Status.CANCELLED
                ).values_list("pk", flat=True)
            )
            for run in runs:
                reason = (
                    CANCELLED_WITH_TASK_PARTLY_SENT
                    if run.task_id in stopped
                    else CANCELLED_PARTLY_SENT
                )
                for field, value in ENDED_IN_DOUBT.items():
                    setattr(run, field, value)
                run.error_code = reason.code
                run.error_message = reason.message.format(parts=", ".join(partly[run.pk] or ()))
                run.finished_at = now
            fields = [*ENDED_IN_DOUBT, "error_code", "error_message", "finished_at"]
            return self.model.objects.bulk_update(runs, fields)

    def failed(self) -> RunQuerySet:
        return self.filter(status=RunStatus.FAILED)

    def mark_handled(self, by: str, now: datetime) -> int:
        """Record that ``by`` (a username) looked after these runs at ``now``: those that
        ended unsent and nobody handled yet; returns how many."""
        return self.filter(status__in=UNSENT_ENDS, handled_at__isnull=True).update(
            handled_at=now, handled_by=by[:150]
        )

    def overdue(self, now: datetime) -> RunQuerySet:
        """Waiting runs past their deadline that no worker may have sent: none whose own
        ledger row is ``sending`` or ``unknown`` (delivery decides those)."""
        in_doubt = SendLog.objects.filter(
            run=models.OuterRef("pk"),
            status__in=(SendLog.Status.SENDING, SendLog.Status.UNKNOWN),
        )
        return self.filter(status__in=WAITING, deadline__lt=now).exclude(models.Exists(in_doubt))

    def expire_overdue(self, now: datetime, limit: int = 500) -> list[Any]:
        """End ``overdue`` runs as ``expired`` (up to ``limit``) and tell ops through
        ``signals.run_expired`` once the transaction commits; returns them.

        The rows are locked (``SKIP LOCKED``) and the UPDATE re-checks their state, so a
        run is expired, and told, once however many schedulers tick; it reads only the
        run's own columns, never the ledger, so that it locks no more than it changes.
        """
        with transaction.atomic():
            candidates = self.overdue(now).order_by("deadline").values_list("pk", flat=True)
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            ids = list(candidates[:limit])
            if not ids:
                return []
            self.model.objects.filter(pk__in=ids, status__in=WAITING, deadline__lt=now).update(
                status=RunStatus.EXPIRED,
                error_code=EXPIRED_CODE,
                error_message="Its deadline passed before it could be sent.",
                next_attempt_at=None,
                finished_at=now,
            )
            expired = list(
                self.model.objects.filter(
                    pk__in=ids, status=RunStatus.EXPIRED, finished_at=now
                ).select_related("task")
            )
            for run in expired:
                signals.after_commit(signals.run_expired, self.model, run=run)
        return expired

    def stuck(self, now: datetime, timeout: float) -> RunQuerySet:
        """Runs ``running`` for more than ``timeout`` seconds, not yet reported."""
        return self.filter(
            status=RunStatus.RUNNING,
            started_at__lt=now - timedelta(seconds=timeout),
            stuck_reported_at__isnull=True,
        )

    def report_stuck(self, now: datetime, limit: int = 500) -> list[Any]:
        """Record and tell (``signals.run_stuck``) the runs running for longer than
        ``REMINDERS_RUN_TIMEOUT``, each once: a compare-and-set on the attempt in hand,
        so several schedulers report it once. The run is otherwise left to its lease."""
        reported = []
        for run in self.stuck(now, conf.RUN_TIMEOUT).select_related("task")[:limit]:
            if run.mark_stuck(now):
                reported.append(run)
        return reported

    def release(self, owner: str) -> int:
        """Hand back runs this owner claimed but no worker started yet."""
        return self.filter(lease_owner=owner).give_back()

    def start(
        self,
        pks: Sequence[int],
        statuses: Sequence[str],
        values: StartValues,
        *,
        token: str | None = None,
    ) -> int:
        """Start the runs of ``pks`` still in one of ``statuses`` (and under the lease
        ``token``, if given): ``running`` under the job's lease (``values``), an attempt
        counted, their job failures forgotten unless they are to be given up now (at
        ``MAX_JOB_FAILURES``); returns how many. Every job starts its runs so, hence one
        statement written once per shape (``_start_sql``), not built through the ORM
        (1.3 ms of a job's CPU), sent prepared where the connection prepares
        (``sql.cursor_of``). Of the runs ``pks`` alone, whatever this queryset's filters."""
        if not pks:
            return 0
        alias = self.db
        connection_ = connections[alias]
        meta = self.model._meta
        prepared = [
            sql.for_save(meta.get_field(name), value, connection_)
            for name, value in (
                ("status", RunStatus.RUNNING),
                ("lease_token", values.execution),
                ("lease_owner", values.owner),
                ("lease_expires_at", values.expires_at),
                ("job_failures", values.max_job_failures),
                ("started_at", values.now),
            )
        ]
        status, pk, lease = meta.get_field("status"), meta.pk, meta.get_field("lease_token")
        params = [
            *prepared,
            *(sql.for_filter(pk, value, connection_) for value in pks),
            *(sql.for_filter(status, value, connection_) for value in statuses),
            *([sql.for_filter(lease, token, connection_)] if token is not None else []),
        ]
        text = _start_sql(cast(Any, self.model), alias, len(pks), len(statuses), token is not None)
        with sql.cursor_of(connection_) as cursor:
            cursor.execute(text, params)
            return int(cursor.rowcount)

    def give_back(self) -> int:
        """Put these runs, where claimed and not started (``queued``), back in line as
        they were before the claim; returns how many. Narrow the selection to the
        holder's (its owner, or its claim's token) first.

        A job that took them (``JobTake``) and ended before starting them is counted in
        each one's ``job_failures``, and its take deleted, as the claim after their
        lease would (``JobTakeQuerySet.lost_runs``): a builder that kills its worker
        before each graceful stop is given up all the same."""
        queued = self.queued()
        with transaction.atomic(using=self.db):
            # Locked first, as a claim locks its runs before the takes.
            held = dict(queued.select_for_update().values_list("pk", "lease_token"))
            everyone = self.model.objects.queued()
            lost = JobTake.objects.lost_runs(set(held.values()), held, everyone) if held else set()
            return queued.update(
                job_failures=models.Case(
                    models.When(pk__in=lost, then=models.F("job_failures") + 1),
                    default=models.F("job_failures"),
                    output_field=models.PositiveSmallIntegerField(),
                ),
                status=models.Case(
                    models.When(attempts=0, then=models.Value(RunStatus.SCHEDULED)),
                    default=models.Value(RunStatus.RETRYING),
                ),
                lease_owner="",
                lease_token="",
                lease_expires_at=None,
            )
