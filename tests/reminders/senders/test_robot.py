"""WeComRobotSender over real HTTP against the stub server."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from reminders.exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PayloadSendError,
    ThrottledSendError,
    TransientSendError,
)
from reminders.senders.base import Message, Rate
from reminders.senders.robot import WeComRobotSender

from .stub_server import Canned, StubServer, error, ok

WEBHOOK = "/cgi-bin/webhook/send"
KEY = "693a91f6-7xxx-4bc4-97a0-0ec2sifa5aaa"


@pytest.fixture
def robot(stub: StubServer) -> Iterator[WeComRobotSender]:
    stub.on(WEBHOOK, ok())
    sender = WeComRobotSender("ops", key=KEY, api_base=stub.url, timeout=1.0)
    yield sender
    sender.close()


def test_send__text_with_mentions_from_the_body(stub: StubServer) -> None:
    stub.on(WEBHOOK, ok())
    robot = WeComRobotSender("ops", key=KEY, api_base=stub.url, allow_mention_all=True)
    body = {"content": "2 runs failed today", "mentioned_list": ["wangqing", "@all"]}
    try:
        result = robot.send(Message("ops", "text", body, "alert-1"))
    finally:
        robot.close()

    [request] = stub.calls(WEBHOOK)
    assert request.query == {"key": KEY}
    assert request.json == {"msgtype": "text", "text": body}
    assert result.code == "0"


@pytest.mark.parametrize(
    "mentions",
    [
        pytest.param({"mentioned_list": ["@all"]}, id="everyone"),
        pytest.param({"mentioned_mobile_list": ["@all"]}, id="everyone by mobile"),
        pytest.param({"mentioned_list": ["wangqing|lisi"]}, id="a list in one entry"),
        pytest.param({"mentioned_list": ["wang qing"]}, id="not a member id"),
        pytest.param({"mentioned_list": [42]}, id="not text"),
        pytest.param({"mentioned_list": "wangqing"}, id="not a list"),
    ],
)
def test_send__mentions_are_member_ids_and_never_everyone_by_default(
    robot: WeComRobotSender, stub: StubServer, mentions: dict
) -> None:
    message = Message("ops", "text", {"content": "2 runs failed", **mentions}, "a")

    with pytest.raises(PayloadSendError):
        robot.check_message(message)
    with pytest.raises(PayloadSendError):
        robot.send(message)

    assert stub.calls(WEBHOOK) == []


def test_check_message__a_robot_posts_no_textcard(
    robot: WeComRobotSender, stub: StubServer
) -> None:
    card = {"title": "Daily report", "description": "Submit it", "url": "https://crm.example"}
    message = Message("ops", "textcard", card, "a")

    assert (robot.accepts("textcard"), robot.accepts("markdown")) == (False, True)
    with pytest.raises(PayloadSendError, match="posts no 'textcard'"):
        robot.check_message(message)
    with pytest.raises(PayloadSendError) as caught:
        robot.send(message)
    assert caught.value.code == "msgtype"
    assert stub.calls(WEBHOOK) == []


def test_send__a_mentioned_recipient_is_one_member_too(stub: StubServer) -> None:
    robot = WeComRobotSender("g", key=KEY, api_base=stub.url, mention_recipient=True)
    try:
        with pytest.raises(PayloadSendError, match="@all"):
            robot.send(Message("@all", "text", {"content": "hi"}, "a"))
    finally:
        robot.close()

    assert stub.calls(WEBHOOK) == []


def test_options__allow_mention_all_must_be_true_or_false(stub: StubServer) -> None:
    with pytest.raises(ConfigurationSendError, match="allow_mention_all"):
        WeComRobotSender("ops", key=KEY, api_base=stub.url, allow_mention_all="yes")


def test_send__mention_recipient_adds_it_once(stub: StubServer) -> None:
    stub.on(WEBHOOK, ok())
    robot = WeComRobotSender("g", key=KEY, api_base=stub.url, mention_recipient=True)
    try:
        robot.send(Message("lisi", "text", {"content": "hi", "mentioned_list": ["lisi"]}, "a"))
        robot.send(Message("lisi", "text", {"content": "hi again"}, "b"))
    finally:
        robot.close()

    assert [r.json["text"]["mentioned_list"] for r in stub.calls(WEBHOOK)] == [["lisi"], ["lisi"]]


def test_send__markdown_up_to_4096_bytes(robot: WeComRobotSender, stub: StubServer) -> None:
    robot.send(Message("ops", "markdown", {"content": "#" * 4096}, "a"))

    with pytest.raises(PayloadSendError, match=r"4097 bytes.*4096"):
        robot.send(Message("ops", "markdown", {"content": "#" * 4097}, "b"))

    assert len(stub.calls(WEBHOOK)) == 1


def test_send__invalid_key_is_configuration_and_the_key_stays_secret(
    robot: WeComRobotSender, stub: StubServer
) -> None:
    stub.on(WEBHOOK, error(93000, f"invalid webhook url, key {KEY}"))

    with pytest.raises(ConfigurationSendError) as caught:
        robot.send(Message("ops", "text", {"content": "hi"}, "a"))

    assert caught.value.code == "93000"
    assert KEY not in str(caught.value)
    assert KEY not in repr(robot)


def test_send__frequency_limit_is_throttled_for_a_minute(
    robot: WeComRobotSender, stub: StubServer
) -> None:
    stub.on(WEBHOOK, error(45009, "api freq out of limit"))

    with pytest.raises(ThrottledSendError) as caught:
        robot.send(Message("ops", "text", {"content": "hi"}, "a"))

    assert caught.value.pause_seconds >= 60


def test_send__a_connection_dropped_after_the_post_is_in_doubt_without_the_key(
    robot: WeComRobotSender, stub: StubServer
) -> None:
    # The robot may have posted it; it has no duplicate check, so it is never re-sent.
    stub.on(WEBHOOK, Canned(drop=True))

    with pytest.raises(InDoubtSendError) as caught:
        robot.send(Message("ops", "text", {"content": "hi"}, "a"))

    assert (caught.value.code, caught.value.category) == ("network", "in_doubt")
    assert len(stub.calls(WEBHOOK)) == 1
    assert robot.resends(Message("ops", "text", {"content": "hi"}, "a")) is False
    assert KEY not in str(caught.value)


def test_send__a_refused_connection_is_passing_and_certain(stub: StubServer) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{unused.getsockname()[1]}"
    robot = WeComRobotSender("ops", key=KEY, api_base=closed, timeout=1.0)

    with pytest.raises(TransientSendError) as caught:
        robot.send(Message("ops", "text", {"content": "hi"}, "a"))

    assert not isinstance(caught.value, InDoubtSendError)
    assert (caught.value.code, caught.value.category) == ("connect", "passing")
    assert KEY not in str(caught.value)


def test_rate_limits__twenty_a_minute_per_robot_not_per_alias(stub: StubServer) -> None:
    one = WeComRobotSender("a", key=KEY, api_base=stub.url)
    same_robot = WeComRobotSender("b", key=KEY, api_base=stub.url)
    other = WeComRobotSender("c", key="another-key", api_base=stub.url)

    message = Message("ops", "text", {"content": "x"}, "k")
    assert one.channel_rate() == Rate.at_most(20, 60)
    names = [limit.name for limit in one.limits(message)]
    assert names == [limit.name for limit in same_robot.limits(message)]
    assert not set(names) & {limit.name for limit in other.limits(message)}
    assert not any(KEY in name for name in names)
    assert one.supports_duplicate_check is False


def test_send__without_a_key_is_configuration(stub: StubServer) -> None:
    robot = WeComRobotSender("ops", api_base=stub.url)

    with pytest.raises(ConfigurationSendError, match="no robot key"):
        robot.send(Message("ops", "text", {"content": "hi"}, "a"))

    assert stub.requests == []


@pytest.mark.django_db
def test_engine__an_unknown_errcode_from_a_robot_is_unknown_not_retried(
    stub: StubServer, settings, make_task, received
) -> None:
    # A robot has no duplicate check: a code we do not know proves nothing was
    # delivered, so sending again could post twice. Ops decide.
    from reminders.models import SendLog
    from tests.support.jobs import tick

    stub.on(WEBHOOK, error(99999, "something new"))
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "robot": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"key": KEY, "api_base": stub.url, "timeout": 1.0},
        },
    }
    task = make_task(channel="robot")
    tick()
    run = task.runs.get()
    assert (run.status, run.error_code) == ("unknown", "99999")
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]
    assert len(stub.calls(WEBHOOK)) == 1


def test_check_message__a_robot_posts_no_button_card(
    robot: WeComRobotSender, stub: StubServer
) -> None:
    # A CRM's builder may return a button card for a robot channel: WeCom's robots take
    # text_notice and news_notice cards only, and have no callback for the clicks.
    card = {
        "card_type": "button_interaction",
        "main_title": {"title": "Follow-up"},
        "task_id": "r7-0123456789",
        "button_list": [{"key": "done", "text": "Done"}],
    }
    message = Message("ops", "template_card", card, "a")

    with pytest.raises(PayloadSendError, match="text_notice and news_notice only") as caught:
        robot.send(message)
    assert caught.value.code == "msgtype"
    assert stub.calls(WEBHOOK) == []
    notice = {"card_type": "text_notice", "main_title": {"title": "Daily report"}}
    robot.send(Message("ops", "template_card", notice, "b"))
    assert len(stub.calls(WEBHOOK)) == 1
