"""One run never poisons its job: a builder's database error fails that run only, and a
run whose job keeps dying before it starts (a builder that hangs until django-q2 kills
the worker) is sent alone and, after ``REMINDERS_MAX_JOB_FAILURES`` such jobs, failed
with ops told."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from django.test import TestCase
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders import kinds
from reminders.engine import actions, dispatch
from reminders.engine.delivery import deliver
from reminders.engine.starting import start
from reminders.models import JobTake, ScheduledTask, TaskRun
from tests.support.locks import Paused, Worker, locking, require_row_locks

pytestmark = pytest.mark.django_db


class WorkerKilled(BaseException):
    """What a builder that hangs never returns from: django-q2 kills the worker at the
    job's timeout, and its transaction goes with it."""


def broken_query() -> None:
    # A real database error: on PostgreSQL it aborts the transaction it runs in.
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reminders_no_such_table")


def hang() -> None:
    raise WorkerKilled


@pytest.fixture
def crm_kind() -> Iterator[Callable[[str, Callable[[], None]], None]]:
    """A CRM kind, ``crm_lookup``, whose builder renders until ``breaks(recipient, how)``
    makes it do ``how`` for that recipient's tasks (and for no other recipient's any
    more); ``calls`` counts renders by recipient."""
    broken: dict[str, Callable[[], None]] = {}
    calls: dict[str, int] = {}

    def render(task: ScheduledTask, run: TaskRun) -> kinds.Content:
        calls[task.recipient] = calls.get(task.recipient, 0) + 1
        if task.recipient in broken:
            broken[task.recipient]()
        return kinds.Content("text", {"content": f"Customer of {task.recipient}"})

    def breaks(recipient: str, how: Callable[[], None]) -> None:
        broken.clear()
        broken[recipient] = how
        calls.clear()

    breaks.calls = calls  # type: ignore[attr-defined]
    kinds.register(kinds.Kind("crm_lookup", "CRM lookup", render))
    yield breaks
    kinds._registry.pop("crm_lookup", None)


def run_jobs() -> int:
    """Run every queued job as django-q2's workers would, each in a worker of its own:
    a job whose worker is killed is gone, and the others still run."""
    sent = 0
    for row in list(OrmQ.objects.order_by("id")):
        job = SignedPackage.loads(row.payload)
        with contextlib.suppress(WorkerKilled):
            sent += deliver(*job["args"], **job["kwargs"])
        row.delete()
    return sent


def tick_at(now: datetime) -> int:
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 1000, now=now)
        return run_jobs()


def test_a_builder_s_database_error_fails_its_run_only_and_tells_ops(
    make_task, crm_kind, outbox, received
):
    now = timezone.now()
    # The bad run sorts first in the job.
    bad = make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    good = [make_task("crm_lookup", at=now) for _ in range(3)]
    crm_kind("bad", broken_query)
    assert tick_at(now) == 3
    run = bad.runs.get()
    assert (run.status, run.error_code) == ("failed", "render")
    assert "reminders_no_such_table" in run.error_message
    assert ("run_failed", run.pk, "failed") in received
    assert ("task_error", bad.pk, "active") in received
    assert {task.runs.get().status for task in good} == {"sent"}
    assert sorted(m.recipient for m in outbox) == sorted(t.recipient for t in good)


@pytest.mark.parametrize("raised", [ValueError, "database"])
def test_a_builder_that_wrote_then_raised__its_writes_undone_its_run_alone_failed(
    make_task, crm_kind, outbox, raised
):
    """Builders are called without savepoints until one raises: then what it wrote goes
    with the rolled-back start, and the start done again fails its run alone."""
    now = timezone.now()
    good = [make_task("crm_lookup", at=now - timedelta(minutes=2))]
    bad = make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    good += [make_task("crm_lookup", at=now) for _ in range(2)]

    def writes_then_raises() -> None:
        ScheduledTask.objects.filter(pk=bad.pk).update(payload={"written": "by the builder"})
        if raised == "database":
            broken_query()
        raise ValueError("the CRM's object is gone")

    crm_kind("bad", writes_then_raises)
    assert tick_at(now) == 3
    bad.refresh_from_db()
    assert "written" not in bad.payload
    run = bad.runs.get()
    assert (run.status, run.error_code) == ("failed", "render")
    assert {task.runs.get().status for task in good} == {"sent"}
    assert sorted(m.recipient for m in outbox) == sorted(t.recipient for t in good)
    # Once bare (the start then rolled back), once in a savepoint of its own.
    assert crm_kind.calls["bad"] == 2  # type: ignore[attr-defined]


def test_a_run_whose_job_keeps_dying_is_sent_alone_then_failed_and_ops_told(
    make_task, crm_kind, outbox, received, settings
):
    settings.REMINDERS_MAX_JOB_FAILURES = 3
    now = timezone.now()
    bad = make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    good = [make_task("crm_lookup", at=now) for _ in range(3)]
    crm_kind("bad", hang)
    lease = timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    # The first job took all four and died rendering the bad run, which it prepared
    # first: nothing sent.
    assert tick_at(now) == 0
    assert set(TaskRun.objects.values_list("status", "job_failures")) == {("queued", 0)}
    assert JobTake.objects.count() == 1
    # Claimed again after the lease: every run the dead job took is counted once and
    # goes in a job of its own, so the others are sent.
    assert tick_at(now + lease) == 3
    assert {task.runs.get().status for task in good} == {"sent"}
    run = bad.runs.get()
    assert (run.status, run.job_failures) == ("queued", 1)
    assert tick_at(now + 2 * lease) == 0
    # The third job lost: the run is failed without being rendered again.
    assert tick_at(now + 3 * lease) == 0
    run.refresh_from_db()
    assert (run.status, run.error_code, run.job_failures) == ("failed", "job_failures", 3)
    assert "3 in a row" in run.error_message
    assert crm_kind.calls["bad"] == 3  # type: ignore[attr-defined]
    assert ("run_failed", run.pk, "failed") in received
    assert ("task_error", bad.pk, "active") in received
    # Told once, however many ticks come after.
    told = [name for name, pk, _ in received if name.startswith("run_") and pk == run.pk]
    assert told == ["run_failed"]
    assert len(outbox) == 3
    assert tick_at(now + 4 * lease) == 0
    assert [name for name, pk, _ in received if name.startswith("run_") and pk == run.pk] == told


def test_a_job_that_starts_its_runs_clears_their_count(make_task, crm_kind, outbox, settings):
    now = timezone.now()
    task = make_task("crm_lookup", recipient="flaky", at=now)
    crm_kind("flaky", hang)
    assert tick_at(now) == 0  # the job took the run, and its worker was killed
    crm_kind("nobody", hang)
    lease = timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    dispatch.claim("test", 10, now=now + lease)
    assert task.runs.get().job_failures == 1
    assert run_jobs() == 1
    assert (task.runs.get().status, task.runs.get().job_failures) == ("sent", 0)
    assert not JobTake.objects.exists()  # the claim deleted the dead job's, the start its own


@pytest.mark.parametrize("value", [0, -1, "many", 1.5])
def test_max_job_failures_must_be_a_whole_number_of_at_least_one(settings, value):
    from reminders.checks import check_settings

    settings.REMINDERS_MAX_JOB_FAILURES = value
    errors = [e for e in check_settings() if "REMINDERS_MAX_JOB_FAILURES" in e.msg]
    assert [e.id for e in errors] == ["reminders.E004"]


def test_a_run_given_up_for_its_lost_jobs_is_sent_when_ops_retry_it(
    make_task, crm_kind, outbox, settings
):
    settings.REMINDERS_MAX_JOB_FAILURES = 1
    now = timezone.now()
    task = make_task("crm_lookup", recipient="bad", at=now)
    crm_kind("bad", hang)
    lease = timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    tick_at(now)
    tick_at(now + lease)
    run = task.runs.get()
    assert (run.status, run.error_code) == ("failed", "job_failures")
    # The CRM's builder is mended, and ops retry the run: a fresh count, and it goes.
    crm_kind("nobody", hang)
    assert actions.retry_now(run, now + 2 * lease)
    assert tick_at(now + 2 * lease) == 1
    run.refresh_from_db()
    assert (run.status, run.job_failures) == ("sent", 0)
    assert [m.recipient for m in outbox] == ["bad"]


def test_a_run_that_waits_in_the_queue_past_its_lease_is_not_counted_as_a_lost_job(
    make_task, crm_kind, outbox, settings
):
    """A backlog (a burst, a database back from an outage) can keep a job waiting in
    django-q2's queue past its runs' lease: no job took them, so none failed them. Each
    claim after the lease makes another job; only the last one's token still holds."""
    settings.REMINDERS_MAX_JOB_FAILURES = 1
    now = timezone.now()
    task = make_task("crm_lookup", at=now)
    lease = timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    dispatch.materialize(now=now)
    for waited in range(4):
        dispatch.claim("busy", 10, now=now + waited * lease)
    run = task.runs.get()
    assert (run.status, run.job_failures) == ("queued", 0)
    assert OrmQ.objects.count() == 4
    # The workers get to the queue at last: the three stale jobs find nothing of theirs.
    assert run_jobs() == 1
    run.refresh_from_db()
    assert (run.status, run.job_failures) == ("sent", 0)
    assert [m.recipient for m in outbox] == [task.recipient]
    assert not JobTake.objects.exists()  # each job deleted its own as it started


def test_claim__counts_every_run_of_a_dead_job_whatever_its_limit(make_task, crm_kind, settings):
    now = timezone.now()
    make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    for _ in range(3):
        make_task("crm_lookup", at=now)
    crm_kind("bad", hang)
    assert tick_at(now) == 0  # one job took the four runs and died on the first
    took = set(JobTake.objects.get().run_ids)
    assert len(took) == 4
    lease = timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    # Claims smaller than the dead job: each counts its own share, and the take keeps
    # what is not counted yet.
    first = dispatch.claim("test", 2, now=now + lease)
    assert len(first.run_ids) == 2
    assert set(JobTake.objects.get().run_ids) == took - set(first.run_ids)
    second = dispatch.claim("test", 2, now=now + lease)
    assert len(second.run_ids) == 2
    assert dict(TaskRun.objects.values_list("pk", "job_failures")) == dict.fromkeys(took, 1)
    assert not JobTake.objects.exists()


# Handing runs back after their job died ---------------------------------------------------


def test_release__after_a_job_died_counts_its_runs_and_deletes_its_job_take(
    make_task, crm_kind, outbox, received, settings
):
    """A scheduler that stops (or finds the database again) hands back what it claimed
    and no worker started: a job that took those runs and died is counted as the claim
    after their lease would count it, or a builder that kills its worker before every
    graceful stop would never be given up."""
    settings.REMINDERS_MAX_JOB_FAILURES = 2
    now = timezone.now()
    bad = make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    good = make_task("crm_lookup", at=now)
    crm_kind("bad", hang)
    assert tick_at(now) == 0
    assert dispatch.release("test") == 2
    assert set(TaskRun.objects.values_list("status", "job_failures")) == {("scheduled", 1)}
    assert not JobTake.objects.exists()
    # Each run in a job of its own now: the good one goes, the bad one's job dies again.
    assert tick_at(now) == 1
    assert dispatch.release("test") == 1
    run = bad.runs.get()
    assert (run.status, run.job_failures) == ("scheduled", 2)
    assert not JobTake.objects.exists()
    assert tick_at(now) == 0
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("failed", "job_failures")
    assert crm_kind.calls["bad"] == 2  # type: ignore[attr-defined]
    assert ("run_failed", run.pk, "failed") in received
    assert [m.recipient for m in outbox] == [good.recipient]


def test_give_back__after_a_job_died_counts_its_runs_and_deletes_its_job_take(make_task, crm_kind):
    now = timezone.now()
    task = make_task("crm_lookup", recipient="bad", at=now)
    crm_kind("bad", hang)
    dispatch.materialize(now=now)
    claim = dispatch.claim("test", 10, now=now)
    run_jobs()
    assert TaskRun.objects.filter(lease_token=claim.token).give_back() == 1
    assert (task.runs.get().status, task.runs.get().job_failures) == ("scheduled", 1)
    assert not JobTake.objects.exists()


def test_give_back__runs_no_job_took_are_not_counted(make_task):
    make_task()
    dispatch.materialize()
    claim = dispatch.claim("test", 10)
    assert TaskRun.objects.filter(lease_token=claim.token).give_back() == 1
    assert TaskRun.objects.get().job_failures == 0


def test_cancel__a_dead_job_s_job_take_goes_with_the_runs_it_took(make_task, crm_kind):
    now = timezone.now()
    task = make_task("crm_lookup", recipient="bad", at=now)
    crm_kind("bad", hang)
    assert tick_at(now) == 0
    assert actions.cancel(task) == 1
    assert task.runs.get().status == "cancelled"
    assert not JobTake.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_job_starting_as_a_claim_takes_its_runs_over__neither_waits_for_the_other_forever(
    make_task, settings
):
    """A job late to start (it waited past its lease) and the claim that takes its runs
    over lock the runs, then the job's take, in that order: the claim counts the runs
    and deletes the take, and the job finds its runs gone."""
    require_row_locks()
    now = timezone.now()
    task = make_task(at=now)
    dispatch.materialize(now=now)
    claim = dispatch.claim("test", 10, now=now)
    execution = uuid.uuid4().hex
    JobTake.objects.take(execution, claim.token, claim.run_ids)
    later = now + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    taking_over = Paused(
        lambda: dispatch.claim("test", 10, now=later), after=locking("reminders_taskrun")
    )
    taking_over.hold()
    late = Worker(lambda: start(claim.token, claim.run_ids, later, execution=execution, taken=True))
    late.start()
    assert late.blocked_or_done() == "blocked"
    taking_over.resume()
    assert taking_over.outcome().run_ids == claim.run_ids
    assert late.outcome() == []
    run = task.runs.get()
    assert (run.status, run.job_failures) == ("queued", 1)
    assert not JobTake.objects.exists()


# A builder that breaks its connection ----------------------------------------------------

# How long a transaction may sit idle, and how long the builder takes: PostgreSQL counts
# milliseconds, MariaDB whole seconds.
IDLE_TIMEOUTS = {
    "postgresql": ("SET idle_in_transaction_session_timeout = 500", 1.5),
    "mysql": ("SET SESSION idle_transaction_timeout = 1", 2.5),
}


def idle_past_the_timeout() -> None:
    """A builder slower than the database keeps a transaction idle: the server ends the
    connection under it, and the start's transaction with it."""
    time.sleep(IDLE_TIMEOUTS[connection.vendor][1])


def killed() -> None:
    """A builder whose connection is killed while it runs (by ops, by a proxy)."""
    if connection.vendor == "postgresql":
        sql, params = "SELECT pg_terminate_backend(%s)", [connection.connection.info.backend_pid]
    else:
        sql, params = "KILL CONNECTION %s", [connection.connection.thread_id()]
    other = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        with other.cursor() as cursor:
            cursor.execute(sql, params)
    finally:
        other.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("breaks", [idle_past_the_timeout, killed], ids=lambda how: how.__name__)
def test_a_builder_that_breaks_its_connection__counted_as_a_lost_job_not_an_outage(
    make_task, crm_kind, outbox, received, settings, breaks, request
):
    if connection.vendor not in IDLE_TIMEOUTS:
        pytest.skip("SQLite has no server to end a connection under a builder")
    settings.REMINDERS_MAX_JOB_FAILURES = 2
    now = timezone.now()
    bad = make_task("crm_lookup", recipient="bad", at=now - timedelta(minutes=1))
    good = make_task("crm_lookup", at=now)
    crm_kind("bad", breaks)

    def timeout_set(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
        with connection.cursor() as cursor:
            cursor.execute(IDLE_TIMEOUTS[connection.vendor][0])

    # On every connection, as the server's or the role's setting would be: the start that
    # is done again after the first broke (each builder in a savepoint then) has it too.
    connection_created.connect(timeout_set)
    request.addfinalizer(lambda: connection_created.disconnect(timeout_set))

    def tick_timed_out() -> int:
        timeout_set(None, connection)  # the connection open now
        return tick_at(now)

    # The job that took both broke with the connection: both are counted, as when a
    # builder hangs until django-q2's timeout, and its take goes.
    assert tick_timed_out() == 0
    assert set(TaskRun.objects.values_list("status", "job_failures")) == {("scheduled", 1)}
    assert not JobTake.objects.exists()
    # Each in a job of its own: the good one goes, the bad one breaks its job again.
    assert tick_timed_out() == 1
    run = bad.runs.get()
    assert (run.status, run.job_failures) == ("scheduled", 2)
    # Each broken job called it twice: bare, then each builder in a savepoint.
    assert crm_kind.calls["bad"] == 4  # type: ignore[attr-defined]
    # Given up without calling its builder again, and ops told.
    assert tick_timed_out() == 0
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("failed", "job_failures")
    assert crm_kind.calls["bad"] == 4  # type: ignore[attr-defined]
    assert ("run_failed", run.pk, "failed") in received
    assert [m.recipient for m in outbox] == [good.recipient]
