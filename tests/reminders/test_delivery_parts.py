"""A text split into parts (``oversize: "split"``) that fails on a later part is partly
sent: its ledger row says so (``partly_sent``) and names the parts that went, and a
retry sends only the parts missing, of the very body the first ones went in."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from reminders import api
from reminders.engine import actions
from reminders.exceptions import InDoubtSendError, RecipientSendError, TransientSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick
from tests.support.sandbox import running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

pytestmark = pytest.mark.django_db

BUSY = TransientSendError("system busy", code="-1")
TIMEOUT = InDoubtSendError("no answer (read timeout)", code="timeout")
# About 5,000 bytes: three parts of a WeCom text.
LONG = "".join(f"{n:03d} follow up with the customer about the quote\n" for n in range(100))


@pytest.fixture
def split_channels(settings):
    """``split``: a memory channel that splits as the WeCom app does, without WeCom's
    duplicate check (a part sent again arrives again); ``split_dedup``: with it."""
    backend = "reminders.senders.memory.MemorySender"
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "split": {"BACKEND": backend, "OPTIONS": {"oversize": "split"}},
        "split_dedup": {
            "BACKEND": backend,
            "OPTIONS": {"oversize": "split", "duplicate_check": True},
        },
    }


def later(run: TaskRun) -> object:
    run.refresh_from_db()
    return run.next_attempt_at


def parts_arrived(outbox) -> list[str]:
    return [message.body["content"].split(" ", 1)[0] for message in outbox]


def test_partly_sent__a_later_part_that_fails_leaves_the_row_partly_sent_naming_what_went(
    make_task, outbox, split_channels
):
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, BUSY]  # the first part goes, the second is refused
    assert tick() == 0
    run = task.runs.get()
    log = SendLog.objects.get()
    assert parts_arrived(outbox) == ["(1/3)"]
    assert (run.status, run.error_code) == ("retrying", "-1")
    assert (log.status, log.parts_sent) == ("partly_sent", ["memory-1"])
    assert log.status == SendLog.Status.PARTLY_SENT


def test_partly_sent__a_retry_sends_only_the_missing_parts(make_task, outbox, split_channels):
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, BUSY]
    tick()
    run = task.runs.get()
    assert tick(now=later(run)) == 1
    run.refresh_from_db()
    log = SendLog.objects.get()
    # Each part arrived once, in order, though the channel would deliver a part twice.
    assert parts_arrived(outbox) == ["(1/3)", "(2/3)", "(3/3)"]
    assert run.status == "sent"
    assert log.status == "sent"
    assert log.reply_detail["msgids"] == ["memory-1", "memory-2", "memory-3"]
    assert log.provider_message_id == "memory-1"


def test_partly_sent__the_rest_is_of_the_body_the_first_parts_went_in(
    make_task, outbox, split_channels
):
    """The parts must fit together: the task's text changed meanwhile reaches runs not
    sent yet, never the rest of a message half delivered."""
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, BUSY]
    tick()
    body = SendLog.objects.get().body
    task.payload = {"content": LONG.replace("quote", "price")}
    task.save(update_fields=["payload"])
    tick(now=later(task.runs.get()))
    assert SendLog.objects.get().body == body
    assert all("quote" in message.body["content"] for message in outbox)


def test_partly_sent__a_failure_for_good_ends_the_run_failed_and_the_row_partly_sent(
    make_task, outbox, split_channels, received
):
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, None, RecipientSendError("no such member", code="81013")]
    assert tick() == 0
    run = task.runs.get()
    log = SendLog.objects.get()
    assert (run.status, run.error_code) == ("failed", "81013")
    assert (log.status, log.parts_sent) == ("partly_sent", ["memory-1", "memory-2"])
    assert received == [("run_failed", run.pk, "failed")]


def test_partly_sent__a_later_part_in_doubt_is_sent_again_with_the_rest(
    make_task, outbox, split_channels
):
    task = make_task(channel="split_dedup", payload={"content": LONG})
    # The second part reached WeCom, its reply did not.
    MemorySender.script[:] = [None, TIMEOUT]
    assert tick() == 0
    run = task.runs.get()
    log = SendLog.objects.get()
    assert (run.status, log.status, log.parts_sent) == ("retrying", "unknown", ["memory-1"])
    assert tick(now=later(run)) == 1
    # The first part was not sent again; the second, sent again, was the same bytes.
    assert parts_arrived(outbox) == ["(1/3)", "(2/3)", "(3/3)"]
    assert SendLog.objects.get().reply_detail["parts"] == 3


def test_partly_sent__a_later_part_in_doubt_on_a_channel_that_cannot_resend__unknown(
    make_task, outbox, split_channels, received
):
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, TIMEOUT]
    tick()
    run = task.runs.get()
    log = SendLog.objects.get()
    assert (run.status, log.status, log.parts_sent) == ("unknown", "unknown", ["memory-1"])
    assert received == [("run_unknown", run.pk, "unknown")]


def test_partly_sent__a_key_held_partly_sent_by_another_run_is_not_sent_again(
    make_task, outbox, split_channels, reports_every_day
):
    hour = (timezone.now() + timedelta(hours=2)).hour
    schedule = {"tz": "UTC", "key": "report:1", "channel": "split", "payload": {"content": LONG}}
    task = api.schedule("daily_report", "zhangsan", cron=f"0 {hour} * * *", **schedule)
    first = task.next_run
    MemorySender.script[:] = [None, RecipientSendError("no such member", code="81013")]
    tick(now=first + timedelta(minutes=15))
    partly = task.runs.get()
    # The schedule moves within the day: the re-planned run does not send it again.
    api.schedule("daily_report", "zhangsan", cron=f"30 {hour} * * *", **schedule)
    assert tick(now=first + timedelta(minutes=45)) == 0
    moved = task.runs.get(occurrence=first + timedelta(minutes=30))
    assert (moved.status, moved.error_code) == ("skipped", "duplicate")
    assert f"{partly.pk}" in moved.error_message
    assert parts_arrived(outbox) == ["(1/3)"]


def test_partly_sent__ops_retrying_a_part_in_doubt_send_the_rest_of_the_same_body(
    make_task, outbox, split_channels
):
    task = make_task(channel="split", payload={"content": LONG})
    MemorySender.script[:] = [None, TIMEOUT]
    tick()
    run = task.runs.get()
    assert run.status == "unknown"
    task.payload = {"content": LONG.replace("quote", "price")}
    task.save(update_fields=["payload"])
    # Ops' word that the second part did not arrive: the first one did.
    assert actions.retry_now(run) is True
    log = SendLog.objects.get()
    assert (log.status, log.parts_sent) == ("partly_sent", ["memory-1"])
    assert tick() == 1
    assert parts_arrived(outbox) == ["(1/3)", "(2/3)", "(3/3)"]
    assert all("quote" in message.body["content"] for message in outbox)
    assert SendLog.objects.get().status == "sent"


# On WeCom (the sandbox) ------------------------------------------------------------------


@pytest.fixture
def member_of_one_a_minute(settings) -> Iterator[WeComSandbox]:
    """A WeCom whose members take one message a minute (errcode 45009 past it), and a
    ``wecom`` channel that splits; the channel's pause on 45009 kept short."""
    with running_sandbox(user_limits=["1/60"]) as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.WECOM_TIMEOUT = 1.0
        settings.REMINDERS_MAX_PAUSE_SECONDS = 0.2
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {
                "BACKEND": "reminders.senders.wecom.WeComSender",
                "OPTIONS": {"oversize": "split"},
            },
        }
        yield box


def test_partly_sent__on_wecom_a_member_s_limit_met_mid_message_the_rest_arrives_once(
    make_task, member_of_one_a_minute
):
    box = member_of_one_a_minute
    task = make_task(channel="wecom", recipient="qianqi", payload={"content": LONG})
    went = []
    for _ in range(3):
        assert tick() == (1 if len(went) == 2 else 0)
        log = SendLog.objects.get()
        went = [e.msgid for e in box.delivered(to="qianqi")]
        if log.status != "sent":
            # Throttled, not failed: the run waits without spending its attempt.
            assert (log.status, log.parts_sent) == ("partly_sent", went)
            assert (task.runs.get().attempts, task.runs.get().error_code) == (0, "rate_limited")
        box.advance(61)  # the member's minute passes
        time.sleep(0.3)  # and the channel's pause
    assert [e.content[:6] for e in box.delivered(to="qianqi")] == ["(1/3) ", "(2/3) ", "(3/3) "]
    log = SendLog.objects.get()
    assert (log.status, log.reply_detail["msgids"]) == ("sent", went)
    assert task.runs.get().status == "sent"


# Cancelled with parts delivered ----------------------------------------------------------


def partly_sent_and_waiting(task) -> TaskRun:
    """``task``'s run, its first part delivered and the second refused for now: it
    waits to send the rest."""
    MemorySender.script[:] = [None, BUSY]
    assert tick(now=task.next_run + timedelta(minutes=15)) == 0
    run = task.runs.get()
    assert (run.status, SendLog.objects.get().status) == ("retrying", "partly_sent")
    return run


def test_partly_sent__a_cancelled_task_s_run_waiting_for_the_rest_ends_unknown_ops_told(
    make_task, outbox, split_channels, received
):
    task = make_task(channel="split", payload={"content": LONG})
    run = partly_sent_and_waiting(task)
    with TestCase.captureOnCommitCallbacks(execute=True):
        assert actions.cancel(task) == 1
    run.refresh_from_db()
    # Not "cancelled": a part reached the recipient, and ops are told which.
    assert (run.status, run.error_code) == ("unknown", "cancelled_partly_sent")
    assert "memory-1" in run.error_message
    assert "mark it handled" in run.error_message
    assert received[-1] == ("run_unknown", run.pk, "unknown")
    log = SendLog.objects.get()
    assert (log.status, log.parts_sent) == ("partly_sent", ["memory-1"])
    assert actions.retry_now(run) is False  # its task is cancelled: nothing more goes
    assert tick(now=timezone.now() + timedelta(hours=1)) == 0
    assert parts_arrived(outbox) == ["(1/3)"]


def test_partly_sent__a_run_a_moved_schedule_cancels__retried_it_sends_the_rest(
    make_task, outbox, split_channels, received, reports_every_day
):
    hour = (timezone.now() + timedelta(hours=2)).hour
    schedule = {"tz": "UTC", "key": "report:1", "channel": "split", "payload": {"content": LONG}}
    task = api.schedule("daily_report", "zhangsan", cron=f"0 {hour} * * *", **schedule)
    first = task.next_run
    partly = partly_sent_and_waiting(task)
    # The schedule moves within the day: the waiting run is no longer wanted...
    with TestCase.captureOnCommitCallbacks(execute=True):
        api.schedule("daily_report", "zhangsan", cron=f"30 {hour} * * *", **schedule)
    partly.refresh_from_db()
    assert (partly.status, partly.error_code) == ("unknown", "cancelled_partly_sent")
    assert ("run_unknown", partly.pk, "unknown") in received
    # ...and the re-planned run does not send the message again: it names the run to
    # retry, which ops can retry.
    assert tick(now=first + timedelta(minutes=45)) == 0
    moved = task.runs.get(occurrence=first + timedelta(minutes=30))
    assert (moved.status, moved.error_code) == ("skipped", "duplicate")
    assert f"Run {partly.pk} " in moved.error_message
    assert "partly sent (retry that run)" in moved.error_message
    assert actions.retry_now(partly) is True
    assert tick(now=first + timedelta(minutes=50)) == 1
    assert parts_arrived(outbox) == ["(1/3)", "(2/3)", "(3/3)"]
    assert SendLog.objects.get().status == "sent"


class CancelledWhileSending(MemorySender):
    """Its task is cancelled while its message is on its way."""

    def send(self, message):
        actions.cancel(ScheduledTask.objects.get())
        return super().send(message)


def test_partly_sent__a_task_cancelled_while_its_parts_went__its_run_ends_unknown_ops_told(
    make_task, outbox, settings, received
):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "cancelling": {
            "BACKEND": f"{__name__}.CancelledWhileSending",
            "OPTIONS": {"oversize": "split"},
        },
    }
    task = make_task(channel="cancelling", payload={"content": LONG})
    MemorySender.script[:] = [None, BUSY]
    tick()
    run = task.runs.get()
    assert (run.status, SendLog.objects.get().status) == ("retrying", "partly_sent")
    # Its retry finds its task cancelled: the rest is not sent, and ops are told.
    tick(now=timezone.now() + timedelta(hours=1))
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("unknown", "cancelled_partly_sent")
    assert "memory-1" in run.error_message
    assert SendLog.objects.get().status == "partly_sent"
    assert ("run_unknown", run.pk, "unknown") in received
    assert parts_arrived(outbox) == ["(1/3)"]
