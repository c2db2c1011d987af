"""Recalling a delivered message (``reminders.engine.recall``): what can be, what is
refused before the provider is called, every part of a split message, progress kept
through a refusal or a crash midway, two operators at once, and the signal. Against
MemorySender (WeCom's rules in memory) and against the WeCom sandbox over HTTP."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from reminders import signals
from reminders.engine import recall as recalling
from reminders.engine import reservations
from reminders.engine.jobs import Job
from reminders.exceptions import ActionRefused, PermanentSendError, SendError, TransientSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.senders import get_sender
from reminders.senders.memory import MemorySender
from reminders.senders.wecom import WeComSender
from tests.support.jobs import tick
from tests.support.sandbox import ROBOT_KEY, running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

pytestmark = pytest.mark.django_db

# A text over WeCom's 2,048 bytes: sent in parts by a channel that splits.
LONG = "".join(f"{n:03d} 客户跟进记录\n" for n in range(400))
RECALL_CALLS = "message/recall calls"


@pytest.fixture
def channels(settings: Any) -> None:
    """Memory channels that recall as a WeCom app does (``cards``), one splitting long
    texts in parts, and one that recalls nothing (a group robot)."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "app": {"BACKEND": "reminders.senders.memory.MemorySender", "OPTIONS": {"cards": True}},
        "app_split": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"cards": True, "oversize": "split"},
        },
        "group": {"BACKEND": "reminders.senders.memory.MemorySender"},
    }


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The message ids MemorySender was asked to recall, refused or not, in order."""
    asked: list[str] = []
    real = MemorySender.recall

    def spy(self: MemorySender, message_id: str) -> None:
        asked.append(message_id)
        real(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", spy)
    return asked


@pytest.fixture
def recalled() -> Iterator[list[tuple[int, str, str]]]:
    """What ``message_recalled`` said: (row, by, reason), as receivers got it."""
    heard: list[tuple[int, str, str]] = []

    def receiver(sender: Any, log: SendLog, by: str, reason: str, **kwargs: Any) -> None:
        assert sender is SendLog
        heard.append((log.pk, by, reason))

    signals.message_recalled.connect(receiver, weak=False)
    yield heard
    signals.message_recalled.disconnect(receiver)


@pytest.fixture
def sent(make_task: Callable[..., ScheduledTask], channels: None) -> Callable[..., SendLog]:
    """Factory: a message sent through the engine on ``channel``; its ledger row."""

    def send(channel: str = "app", content: str = "Call ACME", recipient: str = "lisi") -> SendLog:
        task = make_task("follow_up", recipient, channel=channel, payload={"content": content})
        assert tick() == 1
        return SendLog.objects.get(task=task, status="sent")

    return send


def unchanged(log: SendLog) -> tuple[Any, ...]:
    row = SendLog.objects.get(pk=log.pk)
    return (row.recalled_at, row.recalled_by, row.recall_reason, row.recalled_ids, row.recall_error)


NOTHING = (None, "", "", None, "")


# -- what can be recalled ------------------------------------------------------------------


def test_recall__takes_the_message_back_and_records_who_when_and_why(sent, calls):
    log = sent()
    at = log.sent_at + timedelta(minutes=5)
    assert recalling.why_not(log, at) is None

    done = recalling.recall(log, by="wang.fang", reason="  Wrong customer  ", now=at)

    assert calls == [log.provider_message_id]
    assert [m.recipient for m in MemorySender.recalled] == ["lisi"]
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_at, row.recalled_by, row.recall_reason) == (
        at,
        "wang.fang",
        "Wrong customer",
    )
    assert row.recalled_ids == [log.provider_message_id] and row.recall_error == ""
    assert row.recalled and done.recalled_at == at
    assert recalling.why_not(row, at).startswith("it was recalled already, by wang.fang at ")


def test_recall__a_split_message_is_recalled_whole_every_part_in_order(sent, calls):
    log = sent("app_split", LONG)
    parts = log.reply_detail["msgids"]
    assert len(parts) > 2 and parts[0] == log.provider_message_id

    recalling.recall(log, by="ops", reason="sent twice")

    assert calls == parts
    assert [m.rendered for m in MemorySender.recalled] == [m.rendered for m in MemorySender.outbox]
    assert SendLog.objects.get(pk=log.pk).recalled_ids == parts


@pytest.fixture
def partly_sent(make_task: Callable[..., ScheduledTask], channels: None) -> Callable[[], SendLog]:
    """Factory: a long text on ``app_split`` whose first part went and second was
    refused for now (its run waits to retry); its ``partly_sent`` row."""

    def send() -> SendLog:
        task = make_task("follow_up", "lisi", channel="app_split", payload={"content": LONG})
        MemorySender.script[:] = [None, TransientSendError("system busy", code="-1")]
        assert tick() == 0
        return SendLog.objects.get(task=task, status=SendLog.Status.PARTLY_SENT)

    return send


def test_recall__a_partly_sent_message_takes_back_the_parts_that_went(partly_sent, calls):
    log = partly_sent()
    assert len(log.parts_sent) == 1
    assert recalling.why_not(log) is None

    recalling.recall(log, by="wang.fang", reason="wrong customer")

    assert calls == log.parts_sent
    assert [m.rendered for m in MemorySender.recalled] == [m.rendered for m in MemorySender.outbox]
    row = SendLog.objects.get(pk=log.pk)
    assert (row.status, row.recalled_ids, row.recalled_by) == (
        SendLog.Status.PARTLY_SENT,
        log.parts_sent,
        "wang.fang",
    )
    assert recalling.why_not(row).startswith("it was recalled already, by wang.fang at ")


def test_recall__a_partly_sent_message_recalled_its_retry_sends_none_of_the_rest(
    partly_sent, calls
):
    log = partly_sent()
    run = TaskRun.objects.get(pk=log.run_id)
    assert run.status == TaskRun.Status.RETRYING

    recalling.recall(log, by="ops", reason="sent to the wrong member")
    tick(now=timezone.now() + timedelta(hours=1))

    assert len(MemorySender.outbox) == 1  # the first part only, recalled
    run.refresh_from_db()
    assert (run.status, run.error_code) == (TaskRun.Status.CANCELLED, recalling.RECALLED_CODE)
    row = SendLog.objects.get(pk=log.pk)
    assert (row.status, row.parts_sent) == (SendLog.Status.PARTLY_SENT, log.parts_sent)


def test_still_to_come__of_a_partly_sent_message_says_the_parts_not_sent_yet(partly_sent):
    log = partly_sent()
    assert recalling.still_to_come(log) == ["the parts not sent yet"]

    recalling.recall(log, by="ops", reason="sent to the wrong member")

    assert SendLog.objects.get(pk=log.pk).recall_cancelled == "the parts not sent yet"


def test_reserve__a_retry_decided_before_the_recall_does_not_take_the_recalled_row(
    partly_sent,
):
    log = partly_sent()
    as_read = SendLog.objects.get(pk=log.pk)  # the retry read it before the recall
    recalling.recall(log, by="ops", reason="sent to the wrong member")

    job = Job(TaskRun.objects.get(pk=log.run_id), as_read, fresh=False, owner=as_read.run_id)
    taken, lost = reservations.reserve([job])

    assert (taken, lost) == ([], [job])
    assert SendLog.objects.get(pk=log.pk).status == SendLog.Status.PARTLY_SENT


def test_recall__a_partly_sent_message_more_than_24_hours_after_it_was_reserved_is_refused(
    partly_sent, calls
):
    log = partly_sent()
    late = log.created_at + timedelta(hours=24, seconds=1)
    assert recalling.refusal(log, late).code == "too_late"
    with pytest.raises(ActionRefused):
        recalling.recall(log, by="ops", reason="late", now=late)
    assert calls == []


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_recall__without_a_reason_is_a_validation_error_naming_it_and_calls_nothing(
    sent, calls, reason
):
    log = sent()
    with pytest.raises(ValidationError) as caught:
        recalling.recall(log, by="ops", reason=reason)  # type: ignore[arg-type]
    assert caught.value.message_dict == {"reason": ["Say why the message is recalled."]}
    assert calls == [] and unchanged(log) == NOTHING


def test_recall__without_who_is_a_validation_error_naming_it(sent, calls):
    log = sent()
    with pytest.raises(ValidationError) as caught:
        recalling.recall(log, by=" ", reason="wrong customer")
    assert caught.value.message_dict == {"by": ["Say who recalls the message."]}
    assert calls == [] and unchanged(log) == NOTHING


# -- refused before the provider is called --------------------------------------------------


def a_failed_row(log: SendLog) -> SendLog:
    SendLog.objects.filter(pk=log.pk).update(status="failed")
    return log


def a_card_delivered_before(log: SendLog) -> SendLog:
    SendLog.objects.filter(pk=log.pk).update(
        provider_message_id="",
        reply_code="42014",
        reply_detail={"delivered_before": "task_id already used", "task_id": "r1-abc"},
    )
    return log


def a_part_without_an_id(log: SendLog) -> SendLog:
    SendLog.objects.filter(pk=log.pk).update(reply_detail={"parts": 2, "msgids": ["m1", ""]})
    return log


def a_gone_channel(log: SendLog) -> SendLog:
    SendLog.objects.filter(pk=log.pk).update(channel="retired")
    return log


REFUSED = {
    "not sent": ("app", a_failed_row, "not_sent", "it was not delivered (Failed)"),
    "a robot": (
        "group",
        None,
        "cannot_recall",
        "its channel group cannot take a message back (a group robot cannot)",
    ),
    "no message id": (
        "app",
        a_card_delivered_before,
        "no_message_id",
        "the provider gave it no message id to take it back by (a card it delivered before "
        "has none)",
    ),
    "a part without an id": ("app", a_part_without_an_id, "no_message_id", "the provider gave"),
    "the channel gone": (
        "app",
        a_gone_channel,
        "no_channel",
        "its channel retired is no longer configured",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_why_not__and_recall_refuses_it_with_the_same_reason_without_calling_the_provider(
    sent, calls, recalled, case
):
    channel, change, code, words = REFUSED[case]
    log = sent(channel)
    if change is not None:
        change(log)
    log.refresh_from_db()

    assert recalling.why_not(log).startswith(words)
    with pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="ops", reason="wrong customer")

    assert (caught.value.code, caught.value.message) == (code, recalling.why_not(log))
    assert calls == [] and unchanged(log) == NOTHING and recalled == []


def test_why_not__24_hours_after_its_sending_and_not_a_second_later(sent, calls):
    log = sent()
    day = log.sent_at + timedelta(hours=24)
    assert recalling.why_not(log, day) is None
    late = day + timedelta(seconds=1)
    assert recalling.why_not(log, late) == (
        "it was sent more than 24 hours ago: its channel takes a message back within 24 "
        "hours of its sending"
    )
    with pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="ops", reason="wrong customer", now=late)
    assert caught.value.code == "too_late"
    assert calls == [] and unchanged(log) == NOTHING


def test_recall__a_second_time_is_refused_without_a_call(
    sent, calls, recalled, django_capture_on_commit_callbacks
):
    log = sent()
    with django_capture_on_commit_callbacks(execute=True):
        recalling.recall(log, by="alice", reason="wrong customer")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ActionRefused) as caught:
        recalling.recall(SendLog.objects.get(pk=log.pk), by="bob", reason="again")
    assert caught.value.code == "recalled"
    assert "by alice" in caught.value.message
    assert len(calls) == 1
    assert SendLog.objects.get(pk=log.pk).recalled_by == "alice"
    assert len(recalled) == 1


# -- midway ------------------------------------------------------------------------------------


def test_recall__a_refusal_midway_keeps_what_was_recalled_and_says_which_part(sent, calls):
    log = sent("app_split", LONG)
    first, second, *_rest = log.reply_detail["msgids"]
    get_sender("app_split").recall(second)  # gone already: MemorySender refuses it again
    calls.clear()

    with pytest.raises(PermanentSendError) as caught:
        recalling.recall(log, by="ops", reason="wrong customer")

    assert calls == [first, second]  # the rest never asked for
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_at, row.recalled_by, row.recall_reason) == (None, "", "")
    assert row.recalled_ids == [first]
    parts = len(log.reply_detail["msgids"])
    assert row.recall_error == f"part 2 of {parts} ({second}): {caught.value}"
    assert recalling.why_not(row) is None  # it may be tried again


def test_recall__after_a_refusal_midway_a_second_attempt_asks_only_for_the_rest(
    sent, calls, monkeypatch, recalled, django_capture_on_commit_callbacks
):
    log = sent("app_split", LONG)
    parts = log.reply_detail["msgids"]
    spy = MemorySender.recall
    busy = [parts[1]]

    def once_busy(self: MemorySender, message_id: str) -> None:
        if message_id in busy:
            busy.remove(message_id)
            calls.append(message_id)
            raise TransientSendError("WeCom busy (errcode -1)", code="-1")
        spy(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", once_busy)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(TransientSendError):
        recalling.recall(log, by="alice", reason="wrong customer")
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_ids, row.recalled_at) == (parts[:1], None)
    assert row.recall_error.startswith("part 2 of")
    assert recalled == []

    with django_capture_on_commit_callbacks(execute=True):
        recalling.recall(log, by="bob", reason="wrong customer, again")

    assert calls == [parts[0], parts[1], *parts[1:]]
    assert [m.rendered for m in MemorySender.recalled] == [m.rendered for m in MemorySender.outbox]
    row = SendLog.objects.get(pk=log.pk)
    assert row.recalled_ids == parts and row.recall_error == ""
    assert (row.recalled_by, row.recall_reason) == ("bob", "wrong customer, again")
    assert recalled == [(log.pk, "bob", "wrong customer, again")]


def test_recall__a_crash_midway_keeps_progress_and_the_next_attempt_asks_only_for_the_rest(
    sent, calls, monkeypatch
):
    log = sent("app_split", LONG)
    parts = log.reply_detail["msgids"]
    real = MemorySender.recall
    crash = [True]

    def crashing(self: MemorySender, message_id: str) -> None:
        if message_id == parts[2] and crash:
            crash.clear()
            calls.append(message_id)
            raise RuntimeError("worker killed")
        real(self, message_id)  # the spy: counted there

    monkeypatch.setattr(MemorySender, "recall", crashing)
    with pytest.raises(RuntimeError):
        recalling.recall(log, by="ops", reason="wrong customer")
    assert SendLog.objects.get(pk=log.pk).recalled_ids == parts[:2]

    recalling.recall(log, by="ops", reason="wrong customer")

    assert calls == [*parts[:3], *parts[2:]]
    assert SendLog.objects.get(pk=log.pk).recalled_ids == parts


# -- two operators, the signal, no transaction held -------------------------------------------


def test_recall__two_operators_at_once_recall_each_part_once_and_mark_it_once(
    sent, monkeypatch, recalled, django_capture_on_commit_callbacks
):
    """Bob's recall runs whole while Alice's request for the first part is on its way:
    WeCom takes the part back for Bob and refuses Alice, who is told it was recalled."""
    log = sent("app_split", LONG)
    parts = log.reply_detail["msgids"]
    real = MemorySender.recall
    asked: list[tuple[str, str]] = []
    who = ["alice"]

    def racing(self: MemorySender, message_id: str) -> None:
        asked.append((who[-1], message_id))
        if who == ["alice"]:
            who.append("bob")
            recalling.recall(SendLog.objects.get(pk=log.pk), by="bob", reason="duplicate")
        real(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", racing)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="alice", reason="wrong customer")

    assert caught.value.code == "recalled" and "by bob" in caught.value.message
    assert asked == [("alice", parts[0]), *(("bob", part) for part in parts)]
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_by, row.recall_reason, row.recall_error) == ("bob", "duplicate", "")
    assert row.recalled_ids == parts
    assert len(MemorySender.recalled) == len(parts)
    assert recalled == [(log.pk, "bob", "duplicate")]


def test_recall__two_operators_finishing_at_once_mark_it_once_the_first_wins(
    sent, calls, monkeypatch, recalled, django_capture_on_commit_callbacks
):
    """Alice's last part is taken back and recorded; Bob, starting then, finds every
    part recalled and marks the row before Alice does: Alice's mark changes nothing."""
    log = sent("app_split", LONG)
    parts = log.reply_detail["msgids"]
    spy = MemorySender.recall

    def bob_finishes_first(self: MemorySender, message_id: str) -> None:
        spy(self, message_id)
        if message_id == parts[-1]:
            recalling._keep_part(SendLog.objects.get(pk=log.pk), message_id)
            recalling.recall(SendLog.objects.get(pk=log.pk), by="bob", reason="duplicate")

    monkeypatch.setattr(MemorySender, "recall", bob_finishes_first)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="alice", reason="wrong customer")

    assert caught.value.code == "recalled" and "by bob" in caught.value.message
    assert calls == parts  # Bob asked for nothing: every part was recalled
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_by, row.recall_reason, row.recalled_ids) == ("bob", "duplicate", parts)
    assert recalled == [(log.pk, "bob", "duplicate")]


def test_recall__the_signal_is_sent_once_after_the_commit(
    sent, recalled, django_capture_on_commit_callbacks
):
    log = sent()
    with django_capture_on_commit_callbacks(execute=False) as hooks:
        recalling.recall(log, by="ops", reason="wrong customer")
        assert recalled == []
    assert recalled == []  # not before the commit
    for hook in hooks:
        hook()
    assert recalled == [(log.pk, "ops", "wrong customer")]
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ActionRefused):
        recalling.recall(log, by="ops", reason="wrong customer")
    assert len(recalled) == 1


@pytest.mark.django_db(transaction=True)
def test_recall__holds_no_transaction_while_the_provider_is_asked(make_task, channels, monkeypatch):
    task = make_task("follow_up", "lisi", channel="app_split", payload={"content": LONG})
    assert tick() == 1
    log = SendLog.objects.get(task=task)
    real = MemorySender.recall
    inside: list[bool] = []

    def watching(self: MemorySender, message_id: str) -> None:
        inside.append(connection.in_atomic_block)
        real(self, message_id)

    monkeypatch.setattr(MemorySender, "recall", watching)
    recalling.recall(log, by="ops", reason="wrong customer")
    assert inside == [False] * len(log.reply_detail["msgids"])
    assert SendLog.objects.get(pk=log.pk).recalled


# -- against the WeCom sandbox, over HTTP -----------------------------------------------------


@pytest.fixture
def sandbox(settings: Any) -> Iterator[WeComSandbox]:
    """A sandbox, with ``wecom`` (the app, splitting long texts) and ``robot`` on it."""
    with running_sandbox() as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.WECOM_TIMEOUT = 2.0
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {
                "BACKEND": "reminders.senders.wecom.WeComSender",
                "OPTIONS": {"oversize": "split"},
            },
            "robot": {
                "BACKEND": "reminders.senders.robot.WeComRobotSender",
                "OPTIONS": {"key": ROBOT_KEY},
            },
        }
        yield box


def entries_of(box: WeComSandbox, log: SendLog) -> list[Any]:
    ids = recalling.message_ids(log)
    by_id = {entry.msgid: entry for entry in box.ledger() if entry.msgid}
    return [by_id[msgid] for msgid in ids]


def test_sandbox__a_split_message_is_recalled_whole(sent, sandbox):
    log = sent("wecom", LONG, recipient="qianqi")
    parts = log.reply_detail["msgids"]
    assert len(parts) > 2
    assert [entry.recalled for entry in entries_of(sandbox, log)] == [False] * len(parts)

    recalling.recall(log, by="ops", reason="sent to the wrong member")

    assert [entry.recalled for entry in entries_of(sandbox, log)] == [True] * len(parts)
    assert sandbox.stats()[RECALL_CALLS] == len(parts)
    row = SendLog.objects.get(pk=log.pk)
    assert row.recalled_ids == parts and row.recalled_by == "ops"


def test_sandbox__a_robot_message_cannot_be_recalled_and_wecom_is_not_asked(sent, sandbox):
    log = sent("robot", "3 runs failed", recipient="ops")
    assert "cannot take a message back" in recalling.why_not(log)
    with pytest.raises(ActionRefused):
        recalling.recall(log, by="ops", reason="wrong group")
    assert sandbox.stats().get(RECALL_CALLS, 0) == 0
    assert unchanged(log) == NOTHING


def test_sandbox__past_24_hours_is_refused_before_wecom_is_asked(sent, sandbox):
    log = sent("wecom", "Call ACME", recipient="qianqi")
    late = log.sent_at + timedelta(hours=24, seconds=1)
    with pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="ops", reason="wrong customer", now=late)
    assert caught.value.code == "too_late"
    assert sandbox.stats().get(RECALL_CALLS, 0) == 0
    assert unchanged(log) == NOTHING
    assert [entry.recalled for entry in entries_of(sandbox, log)] == [False]


def test_sandbox__wecom_refusing_keeps_its_words_and_marks_nothing(sent, sandbox):
    """Our clock says 23 hours, WeCom's says more than 24: WeCom's refusal is kept."""
    log = sent("wecom", "Call ACME", recipient="qianqi")
    sandbox.advance(24 * 3600 + 60)
    with pytest.raises(SendError) as caught:
        recalling.recall(
            log, by="ops", reason="wrong customer", now=log.sent_at + timedelta(hours=23)
        )
    assert caught.value.code == "40058"
    row = SendLog.objects.get(pk=log.pk)
    assert row.recalled_at is None and row.recalled_ids is None
    assert row.recall_error.startswith(f"part 1 of 1 ({log.provider_message_id}): ")
    assert "40058" in row.recall_error
    assert sandbox.stats()["message/recall errcode 40058"] == 1


def test_sandbox__a_crash_midway_and_the_second_attempt_ask_wecom_once_per_part(
    sent, sandbox, monkeypatch
):
    log = sent("wecom", LONG, recipient="qianqi")
    parts = log.reply_detail["msgids"]
    real = WeComSender.recall
    crash = [True]

    def crashing(self: WeComSender, message_id: str) -> None:
        if message_id == parts[1] and crash:
            crash.clear()
            raise RuntimeError("worker killed")
        real(self, message_id)

    monkeypatch.setattr(WeComSender, "recall", crashing)
    with pytest.raises(RuntimeError):
        recalling.recall(log, by="ops", reason="wrong customer")
    assert [e.recalled for e in entries_of(sandbox, log)] == [True] + [False] * (len(parts) - 1)

    recalling.recall(log, by="ops", reason="wrong customer")

    assert [e.recalled for e in entries_of(sandbox, log)] == [True] * len(parts)
    assert sandbox.stats()[RECALL_CALLS] == len(parts)  # no part asked for twice
    assert timezone.now() - SendLog.objects.get(pk=log.pk).recalled_at < timedelta(minutes=1)


def test_sandbox__a_part_recalled_already_is_refused_midway_and_the_rest_kept(sent, sandbox):
    """WeCom takes a message id back once: a part recalled behind our back is refused,
    the part before it stays recorded, and the row says which part and what WeCom said."""
    log = sent("wecom", LONG, recipient="qianqi")
    first, second, *_rest = log.reply_detail["msgids"]
    get_sender("wecom").recall(second)

    with pytest.raises(SendError) as caught:
        recalling.recall(log, by="ops", reason="wrong customer")

    assert caught.value.code == "40058"
    row = SendLog.objects.get(pk=log.pk)
    assert row.recalled_at is None and row.recalled_ids == [first]
    parts = len(log.reply_detail["msgids"])
    assert row.recall_error.startswith(f"part 2 of {parts} ({second}): ")
    assert "recalled" in row.recall_error
    assert [e.recalled for e in entries_of(sandbox, log)][:3] == [True, True, False]


def test_sandbox__two_operators_at_once_each_part_taken_back_once(
    sent, sandbox, monkeypatch, django_capture_on_commit_callbacks, recalled
):
    """Bob's recall runs whole while Alice's request for the first part is on its way:
    WeCom refuses Alice's (recalled already), which is no error; Bob marks the row."""
    log = sent("wecom", LONG, recipient="qianqi")
    parts = log.reply_detail["msgids"]
    real = WeComSender.recall
    racing = [True]

    def bob_first(self: WeComSender, message_id: str) -> None:
        if racing:
            racing.clear()
            recalling.recall(SendLog.objects.get(pk=log.pk), by="bob", reason="duplicate")
        real(self, message_id)

    monkeypatch.setattr(WeComSender, "recall", bob_first)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(ActionRefused) as caught:
        recalling.recall(log, by="alice", reason="wrong customer")

    assert caught.value.code == "recalled" and "by bob" in caught.value.message
    assert [e.recalled for e in entries_of(sandbox, log)] == [True] * len(parts)
    stats = sandbox.stats()
    assert stats["recalled"] == len(parts)
    assert stats["message/recall errcode 40058"] == 1  # Alice's one request, refused
    row = SendLog.objects.get(pk=log.pk)
    assert (row.recalled_by, row.recall_error, row.recalled_ids) == ("bob", "", parts)
    assert recalled == [(log.pk, "bob", "duplicate")]


def test_sandbox__a_partly_sent_message_s_parts_that_went_are_recalled_there(
    make_task, sandbox, settings
):
    settings.REMINDERS_MAX_PAUSE_SECONDS = 0.2
    sandbox.control(user_limits=["1/60"])  # the member takes one message a minute
    task = make_task("follow_up", "qianqi", channel="wecom", payload={"content": LONG})
    assert tick() == 0
    log = SendLog.objects.get(task=task)
    went = [entry.msgid for entry in sandbox.delivered(to="qianqi")]
    assert (log.status, log.parts_sent) == (SendLog.Status.PARTLY_SENT, went)

    recalling.recall(log, by="ops", reason="sent to the wrong member")

    assert [entry.recalled for entry in sandbox.delivered(to="qianqi")] == [True] * len(went)
    assert sandbox.stats()[RECALL_CALLS] == len(went)
    sandbox.advance(61)  # the member's minute passes: the rest would go now
    tick(now=timezone.now() + timedelta(hours=1))
    assert [entry.msgid for entry in sandbox.delivered(to="qianqi")] == went
