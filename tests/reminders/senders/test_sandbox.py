"""End to end over real HTTP: the engine and the WeCom senders against the WeCom sandbox."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests
from django.db import connection
from django.test import TestCase
from django.utils import timezone

from reminders import kinds, signals
from reminders.engine import dispatch
from reminders.exceptions import (
    ConfigurationSendError,
    RecipientSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from reminders.models import ProviderToken, SendLog, TaskRun
from reminders.senders import get_sender
from reminders.senders.base import Message
from reminders.senders.robot import WeComRobotSender
from reminders.senders.wecom import WeComSender
from tests.support.jobs import run_queued
from tests.support.processes import REPO, database_url
from tests.support.sandbox import (
    CORP_SECRET,
    DEFAULTS,
    ROBOT_KEY,
    assert_ledger_matches,
    ledger_mismatches,
    running_sandbox,
    sandbox_process,
    wecom_settings,
)
from wecom_sandbox import WeComSandbox

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox() -> Iterator[WeComSandbox]:
    with running_sandbox(invalid_users=["ghost"], overflow="reject") as box:
        yield box


@pytest.fixture
def channels(sandbox: WeComSandbox, settings: Any) -> None:
    """``wecom`` and ``robot`` channels on the sandbox, configured as ``make run`` would:
    the app sender from the ``WECOM_*`` settings alone."""
    use_sandbox(sandbox, settings)


def use_sandbox(sandbox: WeComSandbox, settings: Any) -> None:
    for name, value in wecom_settings(sandbox.base_url).items():
        setattr(settings, name, value)
    settings.WECOM_TIMEOUT = 1.0
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {"oversize": "split"},
        },
        "robot": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"key": ROBOT_KEY, "allow_mention_all": True},
        },
    }


@pytest.fixture
def failures() -> Iterator[list[SendError]]:
    """The errors ``run_failed`` reported, in order."""
    seen: list[SendError] = []

    def handler(sender: Any, run: TaskRun, error: SendError, **kwargs: Any) -> None:
        seen.append(error)

    signals.run_failed.connect(handler, weak=False)
    yield seen
    signals.run_failed.disconnect(handler)


def tick(now: Any = None) -> int:
    """One scheduler tick and one pass of the workers; returns messages sent."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("sandbox-test", 1000, now=now)
        return run_queued()


def assert_no_secrets() -> None:
    """Neither the secret nor a token in any run or ledger row (what the admin shows)."""
    secrets = [
        CORP_SECRET,
        *ProviderToken.objects.exclude(value="").values_list("value", flat=True),
    ]
    rows = [*TaskRun.objects.values(), *SendLog.objects.values()]
    assert rows
    leaks = [(row, s) for row in rows for s in secrets if s in repr(row)]
    assert leaks == []


def statuses() -> list[tuple[str, int, str]]:
    return list(TaskRun.objects.order_by("pk").values_list("status", "attempts", "error_code"))


# -- through the engine -------------------------------------------------------------------


def test_e2e__token_expiry_mid_run_refreshes_without_a_failed_message(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    for n in range(3):
        make_task(recipient=f"sales{n}", channel="wecom", payload={"content": f"first {n}"})
    assert tick() == 3
    sandbox.control(expire_tokens=True)  # WeCom ends the token while we still trust it
    for n in range(3):
        make_task(recipient=f"sales{n}", channel="wecom", payload={"content": f"second {n}"})

    assert tick() == 3

    assert statuses() == [("sent", 1, "")] * 6
    assert len(sandbox.delivered()) == 6
    stats = sandbox.stats()
    assert stats["tokens issued"] == 2
    assert stats["message/send errcode 42001"] == 1  # one rejected send, then the refresh


def test_e2e__invalid_recipient_fails_at_once_without_retry(
    make_task: Any, channels: None, sandbox: WeComSandbox, failures: list[SendError]
) -> None:
    make_task(recipient="ghost", channel="wecom")

    tick()

    run = TaskRun.objects.get()
    assert (run.status, run.attempts, run.error_code, run.next_attempt_at) == (
        "failed",
        1,
        "81013",
        None,
    )
    assert [type(error) for error in failures] == [RecipientSendError]
    assert sandbox.delivered() == []
    assert sandbox.stats()["message/send calls"] == 1


def test_e2e__ip_not_trusted_is_a_configuration_failure(
    make_task: Any, channels: None, sandbox: WeComSandbox, failures: list[SendError]
) -> None:
    sandbox.control(config_error=1)
    make_task(channel="wecom")

    tick()

    run = TaskRun.objects.get()
    assert (run.status, run.attempts, run.error_code) == ("failed", 1, "60020")
    assert [error.category for error in failures] == ["configuration"]
    assert_no_secrets()


def test_e2e__a_reply_lost_after_delivery_is_resent_and_received_once(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    make_task(recipient="wangwu", channel="wecom", payload={"content": "Inquiry #88 waits"})
    sandbox.control(lost_replies=1)

    tick()
    run = TaskRun.objects.get()
    assert (run.status, run.error_code) == ("retrying", "network")
    tick(now=run.next_attempt_at + timedelta(seconds=1))

    run.refresh_from_db()
    assert (run.status, run.attempts) == ("sent", 2)
    stamp = kinds.stamp(run.task, run)
    assert [e.content for e in sandbox.delivered(to="wangwu")] == [f"Inquiry #88 waits\n{stamp}"]
    assert [entry.status for entry in sandbox.ledger()] == ["delivered", "suppressed"]
    first = sandbox.ledger()[0]
    assert SendLog.objects.get().provider_message_id == first.msgid
    assert_no_secrets()


@pytest.mark.parametrize("fault", [{"busy": 1}, {"http_errors": 1, "http_status": 502}])
def test_e2e__busy_and_5xx_are_retried_and_delivered_once(
    make_task: Any, channels: None, sandbox: WeComSandbox, fault: dict[str, int]
) -> None:
    make_task(recipient="zhaoliu", channel="wecom")
    sandbox.control(**fault)

    tick()
    run = TaskRun.objects.get()
    assert run.status == "retrying"
    tick(now=run.next_attempt_at + timedelta(seconds=1))

    run.refresh_from_db()
    assert (run.status, run.attempts) == ("sent", 2)
    assert len(sandbox.delivered(to="zhaoliu")) == 1


def two_follow_ups_an_hour_apart(make_task: Any) -> None:
    """Two follow-ups the CRM wrote the same text for, to one member, sent an hour apart."""
    now = timezone.now()
    for at in (now, now + timedelta(hours=1)):
        make_task("follow_up", "lisi", at=at, channel="wecom", payload={"content": "Call ACME"})
    assert tick() == 1
    assert tick(now=now + timedelta(hours=1, minutes=1)) == 1


def test_e2e__the_same_text_twice_to_one_member_is_delivered_twice(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    two_follow_ups_an_hour_apart(make_task)

    assert [e.status for e in sandbox.ledger()] == ["delivered", "delivered"]
    assert [e.content.split("\n")[0] for e in sandbox.delivered(to="lisi")] == ["Call ACME"] * 2
    assert_ledger_matches(sandbox)


def test_e2e__without_the_stamp_wecom_merges_them_and_the_ledger_check_says_so(
    make_task: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What render did before it stamped messages: the CRM's text alone.
    monkeypatch.setattr(
        kinds, "render", lambda task, run: kinds.Content("text", dict(task.payload))
    )
    # A bare sandbox: the automatic check would fail this test, which is its point.
    with WeComSandbox(**DEFAULTS) as bare:
        use_sandbox(bare, settings)
        two_follow_ups_an_hour_apart(make_task)

    assert [e.status for e in bare.ledger()] == ["delivered", "suppressed"]
    assert set(SendLog.objects.values_list("status", flat=True)) == {"sent"}  # the lie
    [problem] = ledger_mismatches(bare.ledger())
    assert "recorded as sent by 2 keys" in problem
    with pytest.raises(AssertionError, match="suppressed as duplicates"):
        assert_ledger_matches(bare)


LONG_TEXT = "".join(f"{n:03d} 客户 ACME 的跟进记录 请今天回电\n" for n in range(100))  # ~3.5 KB


def sent_by(now: datetime, expected: int, time_machine: Any) -> int:
    """Ticks at ``now`` on a clock moved there, then a few seconds later each time, until
    ``expected`` messages went: a send the shared limiter holds back for a moment (its
    member's or its channel's bucket) goes at the next tick, as in a scheduler."""
    sent = 0
    for attempt in range(5):
        at = now + timedelta(seconds=5 * attempt)
        time_machine.move_to(at, tick=True)
        sent += tick(now=at)
        if sent >= expected:
            break
    return sent


@pytest.mark.parametrize("how", ["two tasks due together", "two occurrences of one task"])
def test_e2e__every_part_of_the_same_long_text_twice_to_one_member_arrives(
    make_task: Any, channels: None, sandbox: WeComSandbox, how: str, time_machine: Any
) -> None:
    # On a clock of the test's own: the engine's and the limiter's "now" agree.
    now = timezone.now().replace(minute=20, second=0, microsecond=0)
    time_machine.move_to(now, tick=True)
    payload = {"content": LONG_TEXT}
    if how == "two tasks due together":
        for _ in range(2):
            make_task("follow_up", "lisi", at=now, channel="wecom", payload=payload)
        assert sent_by(now, 2, time_machine) == 2
    else:
        hourly = {"cron": "20 * * * *", "tz": "UTC"}
        make_task("follow_up", "lisi", channel="wecom", payload=payload, **hourly)
        assert sent_by(now + timedelta(hours=1), 1, time_machine) == 1
        assert sent_by(now + timedelta(hours=2), 1, time_machine) == 1

    assert TaskRun.objects.filter(status="sent").count() == SendLog.objects.count() == 2
    entries = sandbox.ledger()
    assert [e.status for e in entries] == ["delivered"] * len(entries)
    assert len(entries) == 2 * SendLog.objects.first().reply_detail["parts"] >= 4
    delivered = [e.content for e in sandbox.delivered(to="lisi")]
    assert len(set(delivered)) == len(delivered)
    assert_ledger_matches(sandbox)


def test_ledger_check__fails_on_a_rejected_message_recorded_as_sent(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    task = make_task(recipient="ghost", channel="wecom")
    tick()  # 81013: every recipient invalid, the run failed
    assert ledger_mismatches(sandbox.ledger()) == []

    SendLog.objects.filter(task=task).update(status="sent")

    [problem] = ledger_mismatches(sandbox.ledger())
    assert "which no delivery has" in problem and "rejected 81013" in problem
    SendLog.objects.filter(task=task).update(status="failed")  # for the automatic check


def test_ledger_check__a_split_message_must_claim_each_of_its_parts(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    make_task("follow_up", "lisi", channel="wecom", payload={"content": LONG_TEXT})
    assert tick() == 1
    row = SendLog.objects.get()
    msgids = row.reply_detail["msgids"]
    assert len(msgids) == row.reply_detail["parts"] >= 2
    assert ledger_mismatches(sandbox.ledger()) == []

    # Recorded sent with one part only, then with its parts out of order.
    SendLog.objects.update(reply_detail={**row.reply_detail, "msgids": msgids[:1]})
    [problem] = ledger_mismatches(sandbox.ledger())
    assert f"1 msgid(s) recorded for a text of {len(msgids)} parts" in problem
    SendLog.objects.update(reply_detail={**row.reply_detail, "msgids": msgids[::-1]})
    problems = ledger_mismatches(sandbox.ledger())
    assert any(f"part 1/{len(msgids)}" in p and "other text" in p for p in problems)
    SendLog.objects.update(reply_detail=row.reply_detail)  # for the automatic check


def test_ledger_check__a_message_partly_sent_must_claim_the_parts_it_names(
    make_task: Any, channels: None, sandbox: WeComSandbox
) -> None:
    make_task("follow_up", "lisi", channel="wecom", payload={"content": LONG_TEXT})
    assert tick() == 1
    row = SendLog.objects.get()
    msgids = row.reply_detail["msgids"]
    SendLog.objects.update(status="partly_sent", parts_sent=msgids[:1])
    assert ledger_mismatches(sandbox.ledger()) == []

    # Named with a part that never went, then with its second part as its first.
    SendLog.objects.update(parts_sent=[msgids[0], "no-such-msgid"])
    [problem] = ledger_mismatches(sandbox.ledger())
    assert "'no-such-msgid', which no delivery has" in problem
    SendLog.objects.update(parts_sent=msgids[1:2])
    [problem] = ledger_mismatches(sandbox.ledger())
    assert "part 1/1" in problem and "other text" in problem
    SendLog.objects.update(status="sent", parts_sent=None)  # for the automatic check


# -- the senders alone --------------------------------------------------------------------


def test_e2e__a_paced_batch_asks_for_no_more_slots_than_the_burst(
    make_task: Any, channels: None, sandbox: WeComSandbox, settings: Any
) -> None:
    import re

    from django.test.utils import CaptureQueriesContext

    settings.REMINDERS_CHANNELS["wecom"]["OPTIONS"] = {"rate_limit": 50, "rate_burst": 3}
    for n in range(9):
        make_task(recipient=f"sales{n}", channel="wecom")
    with CaptureQueriesContext(connection) as queries:
        assert tick() == 9
    assert statuses() == [("sent", 1, "")] * 9
    assert sorted(u for e in sandbox.delivered() for u in e.delivered_to) == [
        f"sales{n}" for n in range(9)
    ]
    # Each reservation locks the channel's two shares (one lends to the other) and at
    # most the channel's burst of members: more slots than the burst can never go at
    # one moment, so asking would only lock more rows.
    locked = [
        len(re.search(r"IN \(([^)]*)\)", q["sql"])[1].split(","))
        for q in queries.captured_queries
        if "ratebucket" in q["sql"] and "IN (" in q["sql"] and "SELECT" in q["sql"]
    ]
    assert locked
    assert max(locked) <= 2 + 3


def test_e2e__slow_replies_do_not_cut_a_batch_held_only_by_member_limits(
    make_task: Any, channels: None, sandbox: WeComSandbox, monkeypatch: Any, settings: Any
) -> None:
    from reminders.engine import sending

    settings.WECOM_RATE_LIMIT = 0  # no pace on the channel: only the members' limits

    # Four replies of 0.3 s: later slots are over a second old when their turn comes,
    # but a member's limit (one send every 4 s after its burst) tolerates that.
    monkeypatch.setattr(sending, "STALE_SLOT_SECONDS", 0.5)
    sandbox.control(delay=0.3)
    for n in range(4):
        make_task(recipient=f"sales{n}", channel="wecom")
    assert tick() == 4
    assert statuses() == [("sent", 1, "")] * 4


def test_sandbox__two_senders_share_one_gettoken(channels: None, sandbox: WeComSandbox) -> None:
    senders = [get_sender("wecom"), WeComSender("wecom")]
    try:
        for n, sender in enumerate(senders):
            sender.send(Message(f"u{n}", "text", {"content": "hello"}, f"k{n}"))
    finally:
        senders[1].close()

    assert sandbox.stats()["gettoken calls"] == 1


CHILD = textwrap.dedent(
    """
    import django, sys
    django.setup()
    from reminders.senders.base import Message
    from reminders.senders.wecom import WeComSender
    sys.stdin.readline()  # every child starts sending at the same moment
    sender = WeComSender("wecom")
    for n in range(5):
        sender.send(Message(f"{sys.argv[1]}-{n}", "text", {"content": "hi"}, f"k{n}"))
    """
)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_sandbox__real_processes_fetch_one_token_between_them() -> None:
    with sandbox_process() as box:
        env = {
            **wecom_settings(box.base_url),
            "DATABASE_URL": database_url(connection.settings_dict),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONPATH": str(REPO),
        }
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, f"proc{n}"],
                cwd=REPO,
                env={**os.environ, **env},
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(3)
        ]
        try:
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            errors = [child.communicate(timeout=60)[1] for child in children]
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()

        assert [child.returncode for child in children] == [0, 0, 0], errors
        stats = box.client.stats()
        assert stats["gettoken calls"] == 1
        assert len(box.client.delivered()) == 15


def test_sandbox__member_limit_is_throttling(channels: None, sandbox: WeComSandbox) -> None:
    sandbox.control(user_limits=["2/60"])
    sender = get_sender("wecom")
    for n in range(2):
        sender.send(Message("busy-bee", "text", {"content": f"m{n}"}, f"k{n}"))

    with pytest.raises(ThrottledSendError) as caught:
        sender.send(Message("busy-bee", "text", {"content": "m3"}, "k3"))

    assert caught.value.code == "45009"
    assert caught.value.pause_seconds >= 60


def test_sandbox__split_parts_arrive_whole_and_once_after_a_lost_reply(
    channels: None, sandbox: WeComSandbox
) -> None:
    content = "".join(f"{n:03d} 客户跟进记录\n" for n in range(400))  # about 9 KB
    message = Message("qianqi", "text", {"content": content}, "k")
    sender = get_sender("wecom")
    sandbox.control(lost_replies=1)  # the first part arrives, its reply does not

    with pytest.raises(TransientSendError):
        sender.send(message)
    result = sender.send(message)  # the engine's retry: every part again, same bytes

    delivered = sandbox.delivered(to="qianqi")
    assert len(delivered) == result.detail["parts"] > 1
    assert [e.content.split(" ", 1)[0] for e in delivered] == [
        f"({n}/{len(delivered)})" for n in range(1, len(delivered) + 1)
    ]
    # Each part ends with the last line, where kinds.render puts the stamp.
    last = content.splitlines(keepends=True)[-1]
    pieces = [e.content.split(" ", 1)[1].removesuffix(last) for e in delivered]
    assert "".join(pieces) + last == content
    assert [e.status for e in sandbox.ledger()].count("suppressed") == 1


def test_sandbox__robot_text_mentions_and_markdown(channels: None, sandbox: WeComSandbox) -> None:
    robot = get_sender("robot")
    robot.send(
        Message("ops", "text", {"content": "3 runs failed", "mentioned_list": ["@all"]}, "a")
    )
    robot.send(Message("ops", "markdown", {"content": "**daily** 120 sent"}, "b"))

    text, markdown = sandbox.delivered()
    assert (text.msgtype, text.content, text.mentioned_list) == ("text", "3 runs failed", ("@all",))
    assert (markdown.msgtype, markdown.content) == ("markdown", "**daily** 120 sent")


def test_sandbox__robot_invalid_key_is_configuration(sandbox: WeComSandbox) -> None:
    robot = WeComRobotSender("robot", key="not-a-key", api_base=sandbox.base_url)
    try:
        with pytest.raises(ConfigurationSendError) as caught:
            robot.send(Message("ops", "text", {"content": "hi"}, "a"))
    finally:
        robot.close()

    assert caught.value.code == "93000"
    assert "not-a-key" not in caught.value.message


def test_sandbox__robot_over_twenty_a_minute_is_throttled(
    channels: None, sandbox: WeComSandbox
) -> None:
    robot = get_sender("robot")
    for n in range(20):
        robot.send(Message("ops", "text", {"content": f"alert {n}"}, f"k{n}"))

    with pytest.raises(ThrottledSendError) as caught:
        robot.send(Message("ops", "text", {"content": "one too many"}, "k21"))

    assert caught.value.code == "45009"
    assert caught.value.pause_seconds >= 60


def test_sandbox__a_robot_refuses_a_button_card(sandbox: WeComSandbox) -> None:
    # As WeCom's robots do: text_notice and news_notice cards only, no buttons.
    def post(card: dict[str, Any]) -> dict[str, Any]:
        reply = requests.post(
            f"{sandbox.base_url}/cgi-bin/webhook/send",
            params={"key": ROBOT_KEY},
            json={"msgtype": "template_card", "template_card": card},
            timeout=5,
        )
        return dict(reply.json())

    button = {"card_type": "button_interaction", "task_id": "r7-0123456789"}
    assert post(button)["errcode"] == 40058
    assert post({"card_type": "text_notice", "main_title": {"title": "Daily"}})["errcode"] == 0
    assert [entry.status for entry in sandbox.ledger()] == ["rejected", "delivered"]
