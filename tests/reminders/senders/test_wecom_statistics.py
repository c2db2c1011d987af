"""``WeComSender.message_statistics``: WeCom's ``message/get_statistics`` for the app,
over real HTTP, against the stub (what WeCom may answer) and the sandbox."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reminders.exceptions import ConfigurationSendError, TransientSendError
from reminders.senders.base import Message
from reminders.senders.wecom import WeComSender
from tests.ops.test_statistics_sandbox import seconds_to_noon
from tests.support.sandbox import AGENT_ID, CORP_ID, CORP_SECRET, running_sandbox
from wecom_sandbox import WeComSandbox

from .stub_server import StubServer, error, ok

pytestmark = pytest.mark.django_db

PATH = "/cgi-bin/message/get_statistics"
APPS = [
    {"agentid": 1000003, "app_name": "Other app", "count": 7},
    {"agentid": 1000002, "app_name": "Reminders", "count": 101},
]


def test_message_statistics__posts_the_time_type_and_picks_our_app(
    wecom_stub: StubServer, make_wecom: Callable[..., WeComSender]
) -> None:
    wecom_stub.on(PATH, ok(statistics=APPS))
    sender = make_wecom()
    assert sender.message_statistics() == {
        "agentid": 1000002,
        "app_name": "Reminders",
        "count": 101,
    }
    sender.message_statistics(0)
    bodies = [call.body for call in wecom_stub.calls(PATH)]
    assert bodies == [b'{"time_type":1}', b'{"time_type":0}']
    assert all(call.query["access_token"].startswith("TOKEN-") for call in wecom_stub.calls(PATH))


def test_message_statistics__an_app_wecom_does_not_list_sent_nothing(
    wecom_stub: StubServer, make_wecom: Callable[..., WeComSender]
) -> None:
    wecom_stub.on(PATH, ok(statistics=APPS[:1]))
    assert make_wecom().message_statistics()["count"] == 0


def test_message_statistics__an_expired_token_is_fetched_again(
    wecom_stub: StubServer, make_wecom: Callable[..., WeComSender]
) -> None:
    wecom_stub.on(PATH, error(42001, "access_token expired"), ok(statistics=APPS))
    assert make_wecom().message_statistics()["count"] == 101
    assert len(wecom_stub.calls("/cgi-bin/gettoken")) == 2


@pytest.mark.parametrize(
    ("answer", "raised"),
    [
        (error(60020, "not allow to access from your ip"), ConfigurationSendError),
        (ok(), TransientSendError),
        (ok(statistics=[{"agentid": 1000002, "count": "many"}]), TransientSendError),
    ],
)
def test_message_statistics__errors_are_send_errors(
    wecom_stub: StubServer,
    make_wecom: Callable[..., WeComSender],
    answer: object,
    raised: type[Exception],
) -> None:
    wecom_stub.on(PATH, answer)  # type: ignore[arg-type]
    with pytest.raises(raised):
        make_wecom().message_statistics()


def test_message_statistics__only_today_or_yesterday(
    make_wecom: Callable[..., WeComSender],
) -> None:
    with pytest.raises(ValueError, match="time_type"):
        make_wecom().message_statistics(2)


def test_message_statistics__against_the_sandbox() -> None:
    box: WeComSandbox
    with running_sandbox() as box:
        box.advance(seconds_to_noon(box.state.wall()))  # clear of Beijing midnight
        sender = WeComSender(
            "wecom",
            api_base=box.base_url,
            corp_id=CORP_ID,
            corp_secret=CORP_SECRET,
            agent_id=AGENT_ID,
            timeout=2.0,
        )
        try:
            sender.send(Message("lisi", "text", {"content": "hi"}, "k1"))
            today = sender.message_statistics(0)
            assert today["agentid"] == AGENT_ID
            assert today["count"] == 1
        finally:
            sender.close()
