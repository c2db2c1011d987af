"""A run past its deadline is not sent late but ``expired``; a run running too long is
reported once. The clock is the tests': every ``now`` is passed explicitly."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import TestCase
from django.utils import timezone

from reminders.engine import dispatch, planning
from reminders.engine.delivery import start
from reminders.engine.worker import ReminderWorker
from reminders.exceptions import InDoubtSendError, TransientSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.schedule.policies import Policy
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued, tick

pytestmark = pytest.mark.django_db

SHANGHAI = ZoneInfo("Asia/Shanghai")


def local(hour: int, minute: int = 0, day: int = 14) -> datetime:
    """A wall-clock time in Shanghai on a day in March 2025."""
    return datetime(2025, 3, day, hour, minute, tzinfo=SHANGHAI)


def tick_at(now: datetime) -> int:
    """Plan, claim and deliver with the tests' clock at ``now``; returns messages sent."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 100, now=now)
        return run_queued(now=now)


def worker_tick(worker: ReminderWorker, now: datetime) -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        worker.tick(now=now)


# The deadline of a run -------------------------------------------------------------------


def test_policy_deadline__send_by_is_that_local_time_on_the_occurrence_s_day():
    policy = Policy(send_by="12:00")
    assert policy.deadline(local(9), local(9), "Asia/Shanghai") == local(12)
    # The local day, not the UTC one: 07:30 in Shanghai is the day before in UTC.
    assert policy.deadline(local(7, 30), local(7, 30), "Asia/Shanghai") == local(12)


def test_policy_deadline__max_lateness_counts_from_the_due_time():
    policy = Policy(max_lateness_seconds=7200)
    assert policy.deadline(local(9), local(9, 3), "Asia/Shanghai") == local(11, 3)


def test_policy_deadline__the_earlier_of_both_or_none():
    both = Policy(send_by="12:00", max_lateness_seconds=3600)
    assert both.deadline(local(9), local(9), "Asia/Shanghai") == local(10)
    assert both.deadline(local(11, 30), local(11, 30), "Asia/Shanghai") == local(12)
    assert Policy().deadline(local(9), local(9), "Asia/Shanghai") is None


def test_new_run__stores_its_kind_s_deadline(make_task):
    task = make_task("birthday", at=local(9), tz="Asia/Shanghai")
    assert planning.new_run(task, local(9)).deadline == local(12)
    report = make_task("daily_report", at=local(9), tz="Asia/Shanghai")
    assert planning.new_run(report, local(9)).deadline is None


# Delivery decides per run ------------------------------------------------------------------


def test_birthday__sent_at_11_59(make_task, outbox, received):
    task = make_task("birthday", at=local(9), tz="Asia/Shanghai")
    dispatch.materialize(now=local(9))  # planned on time, sent late (a backlog, say)
    assert tick_at(local(11, 59)) == 1
    run = task.runs.get()
    assert (run.status, run.deadline) == ("sent", local(12))
    assert len(outbox) == 1


def test_birthday__expired_at_12_01_and_its_key_never_reserved(make_task, outbox, received):
    task = make_task("birthday", at=local(9), tz="Asia/Shanghai")
    dispatch.materialize(now=local(9))
    assert tick_at(local(12, 1)) == 0
    run = task.runs.get()
    assert (run.status, run.error_code, run.next_attempt_at) == ("expired", "deadline", None)
    assert run.finished_at == local(12, 1)
    assert "deadline" in run.error_message
    assert outbox == []
    assert not SendLog.objects.exists()
    assert received == [("run_expired", run.pk, "expired")]


def test_birthday__an_afternoon_occurrence_is_never_sent(make_task, outbox):
    task = make_task("birthday", at=local(13), tz="Asia/Shanghai")
    assert tick_at(local(13)) == 0
    assert task.runs.get().status == "expired"
    assert outbox == []


@pytest.mark.parametrize(("late", "status"), [(119, "sent"), (121, "expired")])
def test_follow_up__sent_within_its_max_lateness_only(make_task, outbox, late, status):
    task = make_task("follow_up", at=local(9), tz="Asia/Shanghai")
    tick_at(local(9) + timedelta(minutes=late))
    assert task.runs.get().status == status
    assert len(outbox) == (status == "sent")


def test_a_retry_that_would_come_after_the_deadline_ends_the_run_expired(
    make_task, outbox, received
):
    # Due 2 h (the follow-up's lateness) less 30 s ago: the first retry, 60 s after the
    # failure, would be too late.
    task = make_task(at=timezone.now() - timedelta(hours=2) + timedelta(seconds=30))
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    assert tick() == 0
    run = task.runs.get()
    assert (run.status, run.error_code, run.next_attempt_at) == ("expired", "deadline", None)
    assert "busy" in run.error_message
    assert SendLog.objects.get().status == "failed"
    assert ScheduledTask.objects.get(pk=task.pk).retry_count == 0
    assert received == [("run_expired", run.pk, "expired")]


def test_a_retry_within_the_deadline_still_waits(make_task):
    task = make_task(at=timezone.now() - timedelta(hours=1))
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    tick()
    assert task.runs.get().status == "retrying"


def test_an_in_doubt_send_whose_retry_would_be_too_late_stays_in_doubt(make_task, received):
    # Expired would claim it was not sent; it may have been.
    task = make_task(
        channel="memory_dedup", at=timezone.now() - timedelta(hours=2) + timedelta(seconds=30)
    )
    MemorySender.script[:] = [InDoubtSendError("no answer", code="timeout")]
    tick()
    run = task.runs.get()
    assert run.status == "unknown"
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]


# The scheduler tick ------------------------------------------------------------------------


def test_tick__expires_overdue_waiting_runs_instead_of_claiming_them(make_task, received):
    late = make_task("follow_up", at=local(9), tz="Asia/Shanghai")
    report = make_task("daily_report", at=local(9), tz="Asia/Shanghai")  # no deadline
    dispatch.materialize(now=local(9))
    worker_tick(ReminderWorker(with_cluster=False), local(11, 1))
    run = late.runs.get()
    assert (run.status, run.error_code, run.lease_token) == ("expired", "deadline", "")
    assert run.finished_at == local(11, 1)
    assert report.runs.get().status == "queued"
    assert received == [("run_expired", run.pk, "expired")]


def test_claim__expires_the_runs_past_their_deadline_it_finds_and_claims_the_others(
    make_task, received
):
    """Without any sweep first: a scheduler sweeps every few seconds, and claims between."""
    late = make_task("follow_up", at=local(9), tz="Asia/Shanghai")
    report = make_task("daily_report", at=local(9), tz="Asia/Shanghai")  # no deadline
    dispatch.materialize(now=local(9))
    with TestCase.captureOnCommitCallbacks(execute=True):
        claim = dispatch.claim("test", 100, now=local(11, 1))
    run = late.runs.get()
    assert (run.status, run.error_code, run.lease_token) == ("expired", "deadline", "")
    assert claim.run_ids == [report.runs.get().pk]
    assert received == [("run_expired", run.pk, "expired")]
    late.refresh_from_db()
    assert late.status == "completed"


@pytest.mark.parametrize("by", ["claim", "tick"])
@pytest.mark.parametrize("ledger", ["sending", "unknown"])
def test_a_run_past_its_deadline_whose_own_ledger_row_is_in_doubt_is_claimed_not_expired(
    make_task, received, ledger, by
):
    # An earlier attempt may have delivered it: delivery decides, as for any such run.
    task = make_task("follow_up", at=local(9), tz="Asia/Shanghai")
    dispatch.materialize(now=local(9))
    run = task.runs.get()
    TaskRun.objects.filter(pk=run.pk).update(status="retrying", attempts=1)
    SendLog.objects.create(
        key=run.ledger_key, task=task, run=run, status=ledger, recipient="u", channel="memory"
    )
    assert TaskRun.objects.expire_overdue(local(12)) == []
    if by == "claim":  # a claim between two sweeps
        assert dispatch.claim("test", 100, now=local(12)).run_ids == [run.pk]
    else:  # a tick that sweeps first
        worker_tick(ReminderWorker(with_cluster=False), local(12))
    run.refresh_from_db()
    assert run.status == "queued"
    assert SendLog.objects.get().status == ledger
    assert received == []


def test_expired_signal_fires_once_however_many_schedulers_and_workers(
    make_task, received, settings
):
    settings.REMINDERS_LEASE_SECONDS = 3600
    in_time = make_task("follow_up", at=local(9), tz="Asia/Shanghai")
    waiting = make_task("follow_up", at=local(9, 30), tz="Asia/Shanghai")
    dispatch.materialize(now=local(9, 30))
    # Claimed in time, delivered too late: a queued run is its holder's to decide.
    dispatch.claim("test", 1, now=local(10, 59))
    first, second = ReminderWorker(with_cluster=False), ReminderWorker(with_cluster=False)
    second.owner = "other-host:1"
    worker_tick(first, local(11, 31))
    worker_tick(second, local(11, 31))
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert run_queued(now=local(11, 32)) == 0
    worker_tick(first, local(12))
    worker_tick(second, local(12))
    assert run_queued(now=local(12)) == 0
    runs = [in_time.runs.get(), waiting.runs.get()]
    assert [run.status for run in runs] == ["expired", "expired"]
    assert sorted(received) == sorted(("run_expired", run.pk, "expired") for run in runs)


# Stuck runs --------------------------------------------------------------------------------


def test_run_stuck__fires_exactly_once_with_two_schedulers(make_task, received, settings):
    settings.REMINDERS_LEASE_SECONDS = 3600  # its worker renews the lease: it is alive
    settings.REMINDERS_RUN_TIMEOUT = 600
    task = make_task("daily_report", at=local(9), tz="Asia/Shanghai")
    began = local(9, 20)  # after the report's stagger
    dispatch.materialize(now=began)
    claim = dispatch.claim("test", 10, now=began)
    [job] = start(claim.token, claim.run_ids, now=began)
    first, second = ReminderWorker(with_cluster=False), ReminderWorker(with_cluster=False)
    second.owner = "other-host:1"
    worker_tick(first, began + timedelta(minutes=9))
    assert received == []
    for worker, minutes in [(first, 11), (second, 11), (second, 12), (first, 30)]:
        worker_tick(worker, began + timedelta(minutes=minutes))
    run = task.runs.get()
    assert received == [("run_stuck", run.pk, "running")]
    # Reported, and otherwise left to its lease.
    assert (run.status, run.lease_token, run.stuck_reported_at) == (
        "running",
        job.run.lease_token,
        began + timedelta(minutes=11),
    )


def test_run_timeout_must_be_a_positive_number(settings):
    from reminders.checks import check_settings

    settings.REMINDERS_RUN_TIMEOUT = "soon"
    [message] = check_settings()
    assert message.id == "reminders.E004"
    assert "REMINDERS_RUN_TIMEOUT" in message.msg
