"""A job never outlives its lease, a paused task sends nothing, and one bad task or
render never stops the others."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, ClassVar

import pytest
from django.utils import timezone

from reminders import api, kinds, ratelimit
from reminders.engine import actions, dispatch
from reminders.engine.delivery import deliver, reserve, start
from reminders.engine.records import record_failure, record_sent
from reminders.exceptions import TransientSendError
from reminders.models import SendLog, TaskRun
from reminders.senders.base import Message, SendResult
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued, tick

pytestmark = pytest.mark.django_db


class LeaseWatcher(MemorySender):
    """Takes ``delay`` seconds per send and notes the lease of the runs still running."""

    leases: ClassVar[list[list[Any]]] = []

    def send(self, message: Message) -> SendResult:
        time.sleep(float(self.options.get("delay", 0)))
        running = TaskRun.objects.filter(status=TaskRun.Status.RUNNING)
        self.leases.append(list(running.values_list("lease_expires_at", flat=True)))
        return super().send(message)


class Unprepared(MemorySender):
    """A channel whose access token cannot be had right now."""

    def prepare(self) -> None:
        raise TransientSendError("token endpoint down", code="token")


@pytest.fixture
def channels(settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "slow": {
            "BACKEND": f"{__name__}.LeaseWatcher",
            "OPTIONS": {"delay": 0.3},
        },
        "unprepared": {"BACKEND": f"{__name__}.Unprepared"},
    }
    LeaseWatcher.leases.clear()


def claim_all() -> dispatch.Claim:
    dispatch.materialize()
    return dispatch.claim("test", 100)


def test_a_job_stops_taking_runs_when_its_time_is_nearly_up(make_task, channels, settings):
    settings.REMINDERS_LEASE_SECONDS = 10
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "timeout": 1}
    for _ in range(6):
        make_task(channel="slow")
    claim = claim_all()
    assert deliver(claim.token, claim.run_ids) < 6
    statuses = dict(TaskRun.objects.values_list("status", "error_code").distinct())
    # What it had no time for went back in line, its attempt not spent.
    assert statuses == {"sent": "", "scheduled": "job_time"}
    waiting = TaskRun.objects.filter(status="scheduled")
    assert set(waiting.values_list("attempts", "lease_token")) == {(0, "")}
    assert not SendLog.objects.filter(run__in=waiting).exists()


def test_a_job_renews_its_lease_while_it_makes_progress(make_task, channels, settings):
    settings.REMINDERS_LEASE_SECONDS = 1
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "timeout": None}  # E008 aside
    for _ in range(5):
        make_task(channel="slow")
    claim = claim_all()
    started = timezone.now()
    assert deliver(claim.token, claim.run_ids) == 5
    # While the last runs waited their turn, their lease was moved past the first one.
    last_leases = [max(leases) for leases in LeaseWatcher.leases if leases]
    assert max(last_leases) > started + timedelta(seconds=1.5)


def test_a_stale_holder_cannot_close_a_run_another_worker_holds(make_task):
    make_task()
    claim = claim_all()
    [job] = start(claim.token, claim.run_ids)
    later = timezone.now() + timedelta(seconds=400)
    dispatch.claim("other", 10, now=later)  # the lease ran out: another worker's now
    assert job.run.close_attempt(TaskRun.Status.FAILED, code="late") is False
    run = TaskRun.objects.get()
    assert (run.status, run.lease_owner, run.error_code) == ("queued", "other", "")


def test_a_stale_holder_s_send_is_recorded_and_the_new_holder_sends_nothing(make_task, outbox):
    task = make_task(channel="memory_dedup")
    claim = claim_all()
    jobs = start(claim.token, claim.run_ids)
    ready, _ = reserve(jobs)
    later = timezone.now() + timedelta(seconds=400)
    dispatch.claim("other", 10, now=later)
    # The slow first worker's reply arrives after all: the ledger says what happened...
    record_sent([(ready[0], SendResult("m-1"))])
    assert SendLog.objects.get().status == "sent"
    assert task.runs.get().status == "queued"
    # ...and the run's new holder closes it without a second message.
    assert run_queued() == 0
    assert task.runs.get().status == "sent"
    assert outbox == []


def test_a_stale_holder_s_failure_is_left_to_the_run_s_new_holder(make_task, outbox):
    task = make_task(channel="memory_dedup")
    claim = claim_all()
    ready, _ = reserve(start(claim.token, claim.run_ids))
    dispatch.claim("other", 10, now=timezone.now() + timedelta(seconds=400))
    record_failure(ready[0], TransientSendError("busy", code="-1"))
    run = task.runs.get()
    assert (run.status, run.lease_owner, run.error_code) == ("queued", "other", "")
    # Still in doubt, as the new holder will find it: its send may have arrived.
    assert SendLog.objects.get().status == "sending"


def test_a_sender_that_cannot_get_ready_still_waits_for_the_channel_s_pause(
    make_task, channels, outbox
):
    make_task(channel="unprepared")
    ratelimit.pause("unprepared:channel", 60, "45009 from the provider")
    assert tick() == 0
    run = TaskRun.objects.get()
    assert (run.status, run.error_code, run.attempts) == ("scheduled", "rate_limited", 0)
    assert outbox == []


def test_a_paused_task_sends_nothing_even_runs_already_claimed(make_task, outbox):
    task = make_task()
    claim_all()
    actions.pause(task)
    assert run_queued() == 0
    run = task.runs.get()
    assert (run.status, run.attempts, run.error_code) == ("scheduled", 0, "paused")
    assert tick() == 0  # not claimed while paused
    actions.resume(task)
    assert tick() == 1


def test_a_cancelled_task_s_claimed_run_is_cancelled_not_sent(make_task, outbox):
    task = make_task()
    claim_all()
    # Cancelled once the run was claimed (as between a worker's start and its decision).
    task.status = "cancelled"
    task.save(update_fields=["status"])
    run_queued()
    assert task.runs.get().status == "cancelled"
    assert outbox == []


class CrmBug(Exception):
    """What a CRM's own code may raise: nothing the engine knows of."""


# What a builder may meet, beyond the ValueError of a template: any exception at all, or
# a value that is not a message. Each fails its run only, saying what it was.
BREAKAGES = {
    "ValueError": ValueError("template variable 'customer' missing"),
    "KeyError": KeyError("customer"),
    "ZeroDivisionError": ZeroDivisionError("division by zero"),
    "CrmBug": CrmBug("the CRM's database is read-only"),
    "RecursionError": RecursionError("maximum recursion depth exceeded"),
    "returned NoneType": None,
}


@pytest.fixture
def breakable_kind():
    """A CRM kind that renders when its tasks are scheduled; ``break_it(how)`` makes its
    builder raise ``how`` (or return it, if it is not an exception) from then on (a
    deploy that changed it)."""

    def render(task, run):
        if broken:
            if isinstance(broken[0], BaseException):
                raise broken[0]
            return broken[0]
        return kinds.Content("text", {"content": "renewal"})

    broken: list[Any] = []
    kinds.register(kinds.Kind("renewal", "Renewal", render))
    yield broken.append
    kinds._registry.pop("renewal", None)


@pytest.mark.parametrize("said", sorted(BREAKAGES))
def test_a_render_error_fails_its_run_only_and_tells_ops(
    make_task, outbox, received, breakable_kind, said
):
    bad = make_task("renewal")
    good = [make_task() for _ in range(3)]
    breakable_kind(BREAKAGES[said])
    assert tick() == 3
    run = bad.runs.get()
    assert (run.status, run.error_code) == ("failed", "render")
    assert run.error_message.startswith("BuilderFailed: Builder ")
    assert said in run.error_message
    if isinstance(BREAKAGES[said], BaseException):
        assert str(BREAKAGES[said]) in run.error_message
    assert ("task_error", bad.pk, "active") in received  # a one-shot, its run in hand
    assert ("run_failed", run.pk, "failed") in received
    assert {task.runs.get().status for task in good} == {"sent"}


def test_a_recipient_or_content_change_reaches_a_run_waiting_to_retry(make_task, outbox):
    task = make_task(recipient="zhangsan", payload={"content": "Call ACME"}, key="f:1")
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    tick()
    run = task.runs.get()
    api.schedule(
        "follow_up", "lisi", at=task.run_at, payload={"content": "Call ACME today"}, key="f:1"
    )
    run.refresh_from_db()
    assert tick(now=run.next_attempt_at) == 1
    [message] = outbox
    assert message.recipient == "lisi"
    assert "Call ACME today" in message.body["content"]
    log = SendLog.objects.get()
    assert (log.recipient, log.body) == ("lisi", message.rendered)
