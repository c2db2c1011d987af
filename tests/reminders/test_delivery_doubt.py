"""In doubt is not failed, and a worker's death is not a provider failure."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reminders.engine import actions, dispatch
from reminders.engine.delivery import reserve, start
from reminders.exceptions import InDoubtSendError, RecipientSendError, TransientSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.models.choices import CANCELLED_IN_DOUBT
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued, tick

pytestmark = pytest.mark.django_db

TIMEOUT = InDoubtSendError("no answer (read timeout)", code="timeout")
BUSY = TransientSendError("busy", code="-1")


@pytest.fixture
def doubtful_channels(settings):
    """``memory_retry``: no provider de-duplication, but told to retry in doubt."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "memory_retry": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"retry_in_doubt": True},
        },
    }


def later(run: TaskRun) -> object:
    run.refresh_from_db()
    return run.next_attempt_at


def test_in_doubt_with_provider_dedup__resent_byte_identical_and_sent_once(
    make_task, outbox, received
):
    task = make_task(channel="memory_dedup")
    # The provider took it, but the answer was lost.
    MemorySender.script[:] = [TIMEOUT]
    assert tick() == 0
    run = task.runs.get()
    log = SendLog.objects.get()
    assert (run.status, run.error_code, log.status) == ("retrying", "timeout", "unknown")
    body = log.body
    assert tick(now=later(run)) == 1
    run.refresh_from_db()
    log.refresh_from_db()
    assert (run.status, log.status, log.body) == ("sent", "sent", body)
    assert [name for name, *_ in received] == ["run_sent"]


def test_in_doubt_past_the_window_counted_from_the_first_send__unknown_and_ops_told(
    make_task, outbox, received
):
    task = make_task(channel="memory_dedup")
    MemorySender.script[:] = [TIMEOUT]
    tick()
    run = task.runs.get()
    # The retry comes when the first send is older than the provider's window, however
    # recently the key was reserved again.
    window = timedelta(seconds=MemorySender.duplicate_check_seconds)
    SendLog.objects.update(created_at=timezone.now() - window, updated_at=timezone.now())
    assert tick(now=later(run)) == 0
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("unknown", "unknown")
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]
    assert outbox == []


def test_in_doubt_without_provider_dedup__unknown_at_once_and_ops_told(make_task, outbox, received):
    task = make_task(channel="memory")
    MemorySender.script[:] = [TIMEOUT]
    tick()
    run = task.runs.get()
    assert (run.status, run.error_code, run.next_attempt_at) == ("unknown", "timeout", None)
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]
    assert tick(now=timezone.now() + timedelta(hours=1)) == 0


def test_in_doubt_on_a_channel_told_to_retry__retried_as_a_failure(
    make_task, outbox, doubtful_channels
):
    task = make_task(channel="memory_retry")
    MemorySender.script[:] = [TIMEOUT]
    tick()
    run = task.runs.get()
    assert (run.status, SendLog.objects.get().status) == ("retrying", "failed")
    assert tick(now=later(run)) == 1
    assert task.runs.get().status == "sent"


def test_in_doubt_on_the_last_attempt__unknown_not_failed(make_task, outbox, received, settings):
    settings.REMINDERS_RETRY_DELAYS = "60"
    task = make_task(channel="memory_dedup")
    MemorySender.script[:] = [TIMEOUT, TIMEOUT]
    tick()
    run = task.runs.get()
    tick(now=later(run))
    run.refresh_from_db()
    assert (run.status, run.attempts) == ("unknown", 2)
    assert received == [("run_unknown", run.pk, "unknown")]


def test_a_certain_failure_of_an_in_doubt_resend_keeps_the_key_in_doubt(make_task, outbox):
    task = make_task(channel="memory_dedup")
    MemorySender.script[:] = [TIMEOUT, BUSY]
    tick()
    run = task.runs.get()
    tick(now=later(run))
    # "Busy" says the re-send did not arrive; the first attempt may still have.
    assert SendLog.objects.get().status == "unknown"
    assert task.runs.get().status == "retrying"


def test_a_connection_that_never_reached_the_provider__retried_on_any_channel(make_task, outbox):
    task = make_task(channel="memory")
    MemorySender.script[:] = [TransientSendError("connection refused", code="connect")]
    tick()
    run = task.runs.get()
    assert (run.status, SendLog.objects.get().status) == ("retrying", "failed")
    assert tick(now=later(run)) == 1


# A worker's death -----------------------------------------------------------------------


def start_and_die(*, send: bool, now=None) -> None:
    """A worker claims and starts what is due at ``now`` and dies: mid-send (its keys
    ``sending``) or before any send."""
    claim = dispatch.claim("doomed", 10, now=now)
    jobs = start(claim.token, claim.run_ids)
    assert jobs
    if send:
        reserve(jobs)


def after_lease(settings) -> object:
    return timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)


def test_a_death_before_the_send__costs_no_attempt_and_no_death(make_task, outbox, settings):
    task = make_task()
    dispatch.materialize()
    start_and_die(send=False)
    assert task.runs.get().attempts == 1
    dispatch.claim("next", 10, now=after_lease(settings))
    run = task.runs.get()
    assert (run.status, run.attempts, run.crashes) == ("queued", 0, 0)
    run_queued()
    run.refresh_from_db()
    assert (run.status, run.attempts, run.crashes) == ("sent", 1, 0)


def test_provider_retries_are_not_spent_by_worker_deaths(make_task, outbox, settings):
    settings.REMINDERS_RETRY_DELAYS = "60,60"
    task = make_task()
    MemorySender.script[:] = [BUSY, BUSY]
    tick()
    tick(now=later(task.runs.get()))
    run = task.runs.get()
    assert (run.status, run.attempts) == ("retrying", 2)
    # Two workers die holding the run before sending it, then the last attempt goes.
    now = run.next_attempt_at
    for _ in range(2):
        start_and_die(send=False, now=now)
        now += timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert tick(now=now) == 1
    run.refresh_from_db()
    assert (run.status, run.attempts) == ("sent", 3)


def test_deaths_mid_send_are_counted_apart_and_a_run_that_keeps_killing_workers_stops(
    make_task, outbox, received, settings
):
    settings.REMINDERS_MAX_WORKER_DEATHS = 2
    task = make_task(channel="memory_dedup")
    dispatch.materialize()
    start_and_die(send=True)
    now = after_lease(settings)
    claim = dispatch.claim("doomed", 10, now=now)
    jobs = start(claim.token, claim.run_ids)
    run = task.runs.get()
    assert (run.attempts, run.crashes) == (1, 1)  # the resend goes ahead...
    reserve(jobs)  # ...and that worker dies mid-send too
    now += timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert tick(now=now) == 0
    run.refresh_from_db()
    assert (run.status, run.error_code, run.crashes, run.attempts) == (
        "unknown",
        "worker_died",
        2,
        1,
    )
    assert "2 workers died" in run.error_message
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]


def test_a_recipient_refused_on_an_in_doubt_resend__no_attempt_ever_arrived(
    make_task, outbox, received
):
    task = make_task(channel="memory_dedup")
    MemorySender.script[:] = [TIMEOUT, RecipientSendError("no such member", code="81013")]
    tick()
    run = task.runs.get()
    tick(now=later(run))
    # The member does not exist: the first attempt of these bytes cannot have arrived.
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("failed", "81013")
    assert SendLog.objects.get().status == "failed"
    assert received == [("run_failed", run.pk, "failed")]


# A task cancelled while its run was sending ----------------------------------------------


class CancelledMidSend(MemorySender):
    """The task is cancelled while its message is on its way, and the answer is lost."""

    def send(self, message):
        actions.cancel(ScheduledTask.objects.get())
        raise TIMEOUT


@pytest.fixture
def cancelling_channel(settings):
    """``cancelling``: de-duplicated as WeCom's, so a resend in doubt would be safe."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "cancelling": {
            "BACKEND": f"{__name__}.CancelledMidSend",
            "OPTIONS": {"duplicate_check": True},
        },
    }


def test_cancel_mid_send__a_run_whose_worker_died_sending_ends_unknown_and_ops_told(
    make_task, outbox, received, settings
):
    task = make_task(channel="memory_dedup")
    dispatch.materialize()
    start_and_die(send=True)
    assert actions.cancel(task) == 0  # running: not the cancel's to end
    assert tick(now=after_lease(settings)) == 0
    run = task.runs.get()
    assert (run.status, run.error_code) == ("unknown", CANCELLED_IN_DOUBT.code)
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]
    assert outbox == []


def test_cancel_mid_send__an_answer_lost_ends_the_run_unknown_at_once_not_retried(
    make_task, outbox, received, cancelling_channel
):
    task = make_task(channel="cancelling")
    assert tick() == 0
    run = task.runs.get()
    assert (run.status, run.error_code, run.next_attempt_at) == (
        "unknown",
        CANCELLED_IN_DOUBT.code,
        None,
    )
    log = SendLog.objects.get()
    assert (log.status, log.reply_code) == ("unknown", "timeout")
    assert received == [("run_unknown", run.pk, "unknown")]
    assert tick(now=timezone.now() + timedelta(hours=1)) == 0
    assert task.runs.get().status == "unknown"
