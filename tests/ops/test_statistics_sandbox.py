"""The sandbox's ``message/get_statistics`` over real HTTP: what the app delivered per
Beijing day, as WeCom counts it (each part of a split text is a message; a suppressed
duplicate, a rejected send and a robot's message are none)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import requests

from reminders.senders.base import Message
from reminders.senders.parts import CONTENT_LIMIT
from reminders.senders.wecom import WeComSender
from tests.support.sandbox import AGENT_ID, CORP_ID, CORP_SECRET, ROBOT_KEY, running_sandbox
from wecom_sandbox import WeComSandbox
from wecom_sandbox.state import APP_NAME, WECOM_TIME_ZONE

pytestmark = pytest.mark.django_db

DAY = 24 * 3600


@pytest.fixture
def box() -> Iterator[WeComSandbox]:
    """A sandbox whose clock is at the next noon in Beijing: the test's sends and its
    day-to-day moves stay clear of midnight whatever the real time."""
    with running_sandbox(invalid_users=["ghost"]) as sandbox:
        sandbox.advance(seconds_to_noon(sandbox.state.wall()))
        yield sandbox


@pytest.fixture
def sender(box: WeComSandbox) -> Iterator[WeComSender]:
    sender = WeComSender(
        "wecom",
        api_base=box.base_url,
        corp_id=CORP_ID,
        corp_secret=CORP_SECRET,
        agent_id=AGENT_ID,
        oversize="split",
        timeout=2.0,
    )
    yield sender
    sender.close()


def seconds_to_noon(wall: float) -> float:
    here = datetime.fromtimestamp(wall, WECOM_TIME_ZONE)
    noon = here.replace(hour=12, minute=0, second=0, microsecond=0)
    if noon <= here:
        noon += timedelta(days=1)
    return (noon - here).total_seconds()


def token(box: WeComSandbox) -> str:
    reply = requests.get(
        f"{box.base_url}/cgi-bin/gettoken",
        params={"corpid": CORP_ID, "corpsecret": CORP_SECRET},
        timeout=5,
    ).json()
    return str(reply["access_token"])


def statistics(box: WeComSandbox, body: Any = None, *, access_token: str | None = None) -> Any:
    response = requests.post(
        f"{box.base_url}/cgi-bin/message/get_statistics",
        params={"access_token": access_token or token(box)},
        json={"time_type": 0} if body is None else body,
        timeout=5,
    )
    assert response.status_code == 200
    return response.json()


def count(box: WeComSandbox, time_type: int) -> int:
    reply = statistics(box, {"time_type": time_type})
    assert reply["errcode"] == 0, reply
    (app,) = reply["statistics"]
    assert app["agentid"] == AGENT_ID
    assert app["app_name"] == APP_NAME
    return int(app["count"])


def text(n: int, content: str = "") -> Message:
    return Message(f"member{n}", "text", {"content": content or f"hello {n}"}, f"k{n}")


def test_statistics__a_quiet_day_lists_the_app_with_zero(box: WeComSandbox) -> None:
    assert statistics(box) == {
        "errcode": 0,
        "errmsg": "ok",
        "statistics": [{"agentid": AGENT_ID, "app_name": APP_NAME, "count": 0}],
    }
    assert count(box, 1) == 0


def test_statistics__counts_each_delivery_and_each_part_of_a_split_text(
    box: WeComSandbox, sender: WeComSender
) -> None:
    sender.send(text(1))
    sender.send(text(2))
    long = "x" * (CONTENT_LIMIT + 10)
    result = sender.send(text(3, long))
    assert result.detail["parts"] == 2
    assert count(box, 0) == 4


def test_statistics__a_suppressed_duplicate_or_a_refused_send_is_no_message(
    box: WeComSandbox, sender: WeComSender
) -> None:
    sender.send(text(1))
    sender.send(text(1))  # the same bytes: WeCom's duplicate check drops it
    with pytest.raises(Exception, match="81013"):
        sender.send(Message("ghost", "text", {"content": "boo"}, "k-ghost"))
    requests.post(
        f"{box.base_url}/cgi-bin/webhook/send",
        params={"key": ROBOT_KEY},
        json={"msgtype": "text", "text": {"content": "robot"}},
        timeout=5,
    ).raise_for_status()
    assert [e.status for e in box.ledger()] == ["delivered", "suppressed", "rejected", "delivered"]
    assert count(box, 0) == 1


def test_statistics__today_becomes_yesterday_at_beijing_midnight(
    box: WeComSandbox, sender: WeComSender
) -> None:
    sender.send(text(1))
    sender.send(text(2))
    assert (count(box, 0), count(box, 1)) == (2, 0)
    box.advance(11.5 * 3600)  # 23:30 in Beijing: still the same day
    sender.send(text(3))
    assert (count(box, 0), count(box, 1)) == (3, 0)
    box.advance(3600)  # 00:30 the next day
    sender.send(text(4))
    assert (count(box, 0), count(box, 1)) == (1, 3)
    box.advance(DAY)
    assert (count(box, 0), count(box, 1)) == (0, 1)


def test_statistics__a_recalled_message_still_counts(
    box: WeComSandbox, sender: WeComSender
) -> None:
    result = sender.send(text(1))
    sender.recall(result.message_id)
    assert count(box, 0) == 1


def test_statistics__a_reset_forgets_the_counts(box: WeComSandbox, sender: WeComSender) -> None:
    sender.send(text(1))
    box.reset()
    assert statistics(box)["statistics"][0]["count"] == 0


@pytest.mark.parametrize(
    ("body", "errcode"),
    [({"time_type": 2}, 40058), ({"time_type": True}, 40058), ([0], 47001)],
)
def test_statistics__a_bad_time_type_is_refused(box: WeComSandbox, body: Any, errcode: int) -> None:
    assert statistics(box, body)["errcode"] == errcode


def test_statistics__without_time_type_is_today(box: WeComSandbox, sender: WeComSender) -> None:
    sender.send(text(1))
    reply = statistics(box, {})
    assert reply["statistics"][0]["count"] == 1


def test_statistics__needs_a_valid_token_and_a_post(box: WeComSandbox) -> None:
    assert statistics(box, access_token="nope")["errcode"] == 40014
    reply = requests.get(
        f"{box.base_url}/cgi-bin/message/get_statistics",
        params={"access_token": token(box)},
        timeout=5,
    ).json()
    assert reply["errcode"] == 43002
