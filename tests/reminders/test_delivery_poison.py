"""One run never poisons its job: a builder's database error fails that run only, and a
run whose job keeps dying before it starts (a builder that hangs until django-q2 kills
the worker) is sent alone and, after ``REMINDERS_MAX_JOB_FAILURES`` such jobs, failed
with ops told."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.test import TestCase
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders import kinds
from reminders.engine import actions, dispatch
from reminders.engine.delivery import deliver
from reminders.models import JobTake, ScheduledTask, TaskRun

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
