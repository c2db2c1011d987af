"""A job that loses the database writes what it did as soon as the database answers
again: runs it never started go back to their claim's line, what it sent is recorded
``sent``, what it never sent goes back in line with its key's reservation undone. Only
a database away for longer than the job may wait leaves its runs to their lease."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from reminders.engine import delivery, dispatch, outage
from reminders.engine.delivery import deliver
from reminders.engine.job_outage import given_back_when_back
from reminders.engine.jobs import Budget
from reminders.exceptions import TransientSendError
from reminders.models import JobTake, JobTakeQuerySet, SendLog, TaskRun
from reminders.senders import Message, SendResult
from reminders.senders.memory import MemorySender
from tests.support.away import database_away
from tests.support.jobs import tick
from tests.support.locks import Paused, Worker, locking, require_row_locks

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def quick_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "AWAY_POLL_SECONDS", 0.01)


def table(name: str) -> str:
    return connection.ops.quote_name(name)


def claim(count: int) -> dispatch.Claim:
    """Plan the due tasks and claim their runs, as a scheduler's tick does."""
    dispatch.materialize()
    claimed = dispatch.claim("scheduler", 10)
    assert len(claimed.run_ids) == count
    return claimed


def runs() -> list[tuple[str, str, int]]:
    return sorted(TaskRun.objects.values_list("status", "lease_token", "attempts"))


def test_a_job_that_loses_the_database_before_starting_gives_its_runs_back_when_it_answers(
    make_task, outbox
):
    make_task()
    make_task()
    claimed = claim(2)
    with database_away(f"UPDATE {table('reminders_taskrun')}") as away:
        assert deliver(claimed.token, claimed.run_ids) == 0
    assert away.refused, "the database never went away"
    assert runs() == [("scheduled", "", 0), ("scheduled", "", 0)]
    assert (TaskRun.objects.filter(job_failures__gt=0).count(), JobTake.objects.count()) == (0, 0)
    assert outbox == []
    assert tick() == 2  # the next claim takes them at once
    assert len(outbox) == 2


def test_a_start_that_committed_but_whose_answer_was_lost_gives_its_runs_back_too(
    make_task, outbox, monkeypatch
):
    make_task()
    make_task()
    claimed = claim(2)
    really_start = delivery.start

    def start_then_lost(*args: Any, **kwargs: Any) -> list[delivery.Job]:
        really_start(*args, **kwargs)  # committed: the runs are started
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(delivery, "start", start_then_lost)
    assert deliver(claimed.token, claimed.run_ids) == 0
    assert runs() == [("scheduled", "", 0), ("scheduled", "", 0)]
    assert outbox == []


def test_a_take_that_committed_but_whose_answer_was_lost__its_runs_given_back_uncounted(
    make_task, outbox, monkeypatch
):
    make_task()
    claimed = claim(1)
    really_take = JobTakeQuerySet.take

    def take_then_lost(*args: Any, **kwargs: Any) -> None:
        really_take(*args, **kwargs)  # committed: the job's take is recorded
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(JobTakeQuerySet, "take", take_then_lost)
    assert deliver(claimed.token, claimed.run_ids) == 0
    # The database failed the job, not its runs: not counted, and no take left behind.
    assert runs() == [("scheduled", "", 0)]
    assert (TaskRun.objects.get().job_failures, JobTake.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    "where",
    [
        # At the second key's reservation, which would also have recorded the first send.
        ("INSERT INTO", "reminders_sendlog", 1),
        # At the record of the first send itself, its run closed in memory already (the
        # start's UPDATE passes).
        ("UPDATE", "reminders_taskrun", 1),
    ],
)
def test_a_job_that_loses_the_database_after_a_send_records_it_and_gives_back_the_rest(
    make_task, outbox, where
):
    for _ in range(3):
        make_task(channel="memory")  # one message a batch: its record joins the next one's
    claimed = claim(3)
    verb, name, skip = where
    with database_away(f"{verb} {table(name)}", skip=skip) as away:
        assert deliver(claimed.token, claimed.run_ids) == 1
    assert away.refused
    assert len(outbox) == 1
    assert runs() == [("scheduled", "", 0), ("scheduled", "", 0), ("sent", "", 1)]
    assert list(SendLog.objects.values_list("status", "run__status")) == [("sent", "sent")]
    assert tick() == 2
    assert sorted(message.idempotency_key for message in outbox) == sorted(
        SendLog.objects.values_list("key", flat=True)
    )
    assert set(SendLog.objects.values_list("status", flat=True)) == {"sent"}


def test_a_job_that_loses_the_database_recording_a_failure_records_it_when_it_answers(
    make_task, outbox, monkeypatch
):
    make_task(channel="memory")
    make_task(channel="memory")

    def busy(self: MemorySender, message: Message) -> SendResult:
        raise TransientSendError("system busy", code="-1")

    monkeypatch.setattr(MemorySender, "send", busy)
    claimed = claim(2)
    # The first send fails; the database goes away as its failure is recorded (the
    # start's UPDATE passes).
    with database_away(f"UPDATE {table('reminders_taskrun')}", skip=1) as away:
        assert deliver(claimed.token, claimed.run_ids) == 0
    assert away.refused
    assert runs() == [("retrying", "", 1), ("scheduled", "", 0)]
    assert list(SendLog.objects.values_list("status", "reply_code")) == [("failed", "-1")]


def test_a_database_away_longer_than_the_job_may_wait_leaves_the_runs_to_their_lease(
    make_task, outbox, settings
):
    settings.REMINDERS_LEASE_SECONDS = 1  # the job waits for the database 0.6 s at most
    make_task()
    claimed = claim(1)
    began = time.monotonic()
    with (
        database_away(f"UPDATE {table('reminders_taskrun')}", probes=-1),
        pytest.raises(OperationalError),
    ):
        deliver(claimed.token, claimed.run_ids)
    assert time.monotonic() - began < 2
    assert runs() == [("queued", claimed.token, 0)]
    assert outbox == []


@pytest.mark.django_db(transaction=True)
def test_a_job_giving_its_runs_back_as_a_claim_takes_them_over__neither_waits_for_the_other_forever(
    make_task, settings
):
    """A job that lost the database before starting its runs hands them back once it
    answers, late (their lease ran out meanwhile), as a claim takes them over: both
    lock the runs, then the job's take, so the claim never waits for the hand-back. The
    claim counts the runs and deletes the take; the hand-back finds them gone."""
    require_row_locks()
    now = timezone.now()
    task = make_task(at=now)
    dispatch.materialize(now=now)
    claimed = dispatch.claim("test", 10, now=now)
    execution = uuid.uuid4().hex
    JobTake.objects.take(execution, claimed.token, claimed.run_ids)
    later = now + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    taking_over = Paused(
        lambda: dispatch.claim("test", 10, now=later), after=locking("reminders_taskrun")
    )
    taking_over.hold()
    began = time.monotonic()
    budget = Budget(began + 60, began + 60, margin=1)
    away = OperationalError("server closed the connection unexpectedly")
    back = Worker(
        lambda: given_back_when_back(away, budget, claimed.token, execution, claimed.run_ids)
    )
    back.start()
    assert back.blocked_or_done() == "blocked"
    taking_over.resume()
    # Never waiting for the hand-back's lock on the take: no deadlock to lose.
    assert taking_over.blocked_or_done() == "done"
    assert taking_over.outcome().run_ids == claimed.run_ids
    assert back.outcome() is True
    run = task.runs.get()
    assert (run.status, run.job_failures) == ("queued", 1)
    assert run.lease_token != claimed.token
    assert not JobTake.objects.exists()
