"""WeComSender over real HTTP against the stub server: bodies, tokens, classification."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from django.db import connection
from django.test import override_settings

from reminders import kinds
from reminders.exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PayloadSendError,
    RecipientSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from reminders.models import ProviderToken, SendLog
from reminders.senders.base import Message
from reminders.senders.wecom import (
    CONFIGURATION_CODES,
    CONTENT_LIMIT,
    PASSING_CODES,
    PAYLOAD_CODES,
    RECIPIENT_CODES,
    WeComSender,
    split_content,
)
from tests.support.jobs import tick

from .conftest import SECRET
from .stub_server import Canned, StubServer, error, ok

pytestmark = pytest.mark.django_db

SEND = "/cgi-bin/message/send"
GETTOKEN = "/cgi-bin/gettoken"
Make = Callable[..., WeComSender]


def text(content: str = "Please submit your daily report.", to: str = "zhangsan") -> Message:
    return Message(to, "text", {"content": content}, "task-1:2026-12-02")


def canonical(body: bytes) -> bytes:
    data = json.loads(body)
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


# -- bodies -------------------------------------------------------------------------------


def test_send__posts_text_to_the_user_with_duplicate_check(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    result = make_wecom().send(text())

    [request] = wecom_stub.calls(SEND)
    assert request.method == "POST"
    assert request.json == {
        "touser": "zhangsan",
        "msgtype": "text",
        "text": {"content": "Please submit your daily report."},
        "agentid": 1000002,
        "enable_duplicate_check": 1,
        "duplicate_check_interval": 14400,
    }
    assert result.message_id == "msg-1"
    assert result.code == "0"
    assert (result.message_id, result.code, result.detail) == ("msg-1", "0", {})


def test_send__same_message_is_byte_identical_from_any_sender(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    message = text("日报提醒 请提交今天的日报")
    make_wecom().send(message)
    make_wecom().send(Message.from_rendered("zhangsan", message.rendered, "other-key"))

    first, second = (request.body for request in wecom_stub.calls(SEND))
    assert first == second
    assert first == canonical(first)  # sorted keys, no spaces, UTF-8 not escaped
    assert "日报".encode() in first


@pytest.mark.parametrize(
    ("msgtype", "body"),
    [
        ("markdown", {"content": "**Daily report** due at <font color='warning'>18:00</font>"}),
        (
            "textcard",
            {
                "title": "Follow-up due",
                "description": "Customer ACME waits for your call.",
                "url": "https://crm.example/customers/7",
                "btntxt": "Open",
            },
        ),
    ],
)
def test_send__markdown_and_textcard_bodies_are_sent_as_given(
    make_wecom: Make, wecom_stub: StubServer, msgtype: str, body: dict[str, str]
) -> None:
    make_wecom().send(Message("lisi", msgtype, body, "k"))

    [request] = wecom_stub.calls(SEND)
    assert request.json["msgtype"] == msgtype
    assert request.json[msgtype] == body
    assert request.json["touser"] == "lisi"


def test_duplicate_check__interval_option_sets_body_and_capability(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom(duplicate_check_interval=3600)
    sender.send(text())

    assert wecom_stub.calls(SEND)[0].json["duplicate_check_interval"] == 3600
    assert sender.supports_duplicate_check is True
    assert sender.duplicate_check_seconds == 3600


@pytest.mark.parametrize("interval", [0, 14401])
def test_duplicate_check__interval_outside_wecoms_range_is_configuration(
    make_wecom: Make, interval: int
) -> None:
    with pytest.raises(ConfigurationSendError, match="duplicate_check_interval"):
        make_wecom(duplicate_check_interval=interval)


# -- the access token ---------------------------------------------------------------------


def test_token__fetched_once_then_used_without_a_database_read(
    make_wecom: Make, wecom_stub: StubServer, django_assert_num_queries: Callable
) -> None:
    sender = make_wecom()
    sender.send(text())
    with django_assert_num_queries(0):
        sender.send(text("second"))

    assert len(wecom_stub.calls(GETTOKEN)) == 1
    tokens = {request.query["access_token"] for request in wecom_stub.calls(SEND)}
    assert len(tokens) == 1


def test_token__two_processes_share_one_gettoken(make_wecom: Make, wecom_stub: StubServer) -> None:
    # Two sender instances hold separate in-process copies, like two processes.
    make_wecom().send(text())
    make_wecom().send(text("from the other process"))

    assert len(wecom_stub.calls(GETTOKEN)) == 1
    [row] = ProviderToken.objects.filter(name__startswith="wecom:", value__startswith="TOKEN-")
    assert SECRET not in row.name


@pytest.mark.django_db(transaction=True)
def test_token__concurrent_processes_do_not_stampede_gettoken(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.gettoken_delay = 0.3  # a slow gettoken widens the race
    senders = [make_wecom() for _ in range(6)]
    barrier = threading.Barrier(len(senders))
    failures: list[BaseException] = []

    def run(sender: WeComSender) -> None:
        try:
            barrier.wait()
            sender.send(text())
        except BaseException as exc:
            failures.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(sender,)) for sender in senders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert failures == []
    assert wecom_stub.tokens_issued == 1
    assert len(wecom_stub.calls(SEND)) == len(senders)


def test_token__refreshed_before_it_expires(make_wecom: Make, wecom_stub: StubServer) -> None:
    wecom_stub.token_lifetime = 1  # used until 0.9 s, a tenth before WeCom's expiry
    sender = make_wecom()
    sender.send(text())
    time.sleep(1.0)
    sender.send(text("later"))

    assert len(wecom_stub.calls(GETTOKEN)) == 2
    assert [r.query["access_token"][:10] for r in wecom_stub.calls(SEND)] == [
        "TOKEN-0001",
        "TOKEN-0002",
    ]


def test_token__expired_mid_run_is_refreshed_and_the_same_bytes_resent(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    sender.send(text("before"))
    wecom_stub.expire_tokens()  # WeCom invalidates the token early

    result = sender.send(text("after"))

    assert result.code == "0"
    assert len(wecom_stub.calls(GETTOKEN)) == 2
    rejected, accepted = wecom_stub.calls(SEND)[1:]
    assert rejected.body == accepted.body
    assert rejected.query["access_token"] != accepted.query["access_token"]


@pytest.mark.parametrize("errcode", [40014, 42001, 41001])
def test_token__each_token_code_refreshes_and_retries_once(
    make_wecom: Make, wecom_stub: StubServer, errcode: int
) -> None:
    sender = make_wecom()
    sender.send(text())
    wecom_stub.on(SEND, error(errcode), ok(msgid="after-refresh"))

    result = sender.send(text("again"))

    assert result.message_id == "after-refresh"
    assert len(wecom_stub.calls(GETTOKEN)) == 2


def test_token__rejected_again_after_refresh_is_passing(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, error(42001))

    with pytest.raises(TransientSendError) as caught:
        make_wecom().send(text())

    assert caught.value.code == "42001"
    assert len(wecom_stub.calls(SEND)) == 2  # one retry, not a loop
    assert len(wecom_stub.calls(GETTOKEN)) == 2


def test_token__another_process_refresh_is_reused_not_fetched_again(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    first, second = make_wecom(), make_wecom()
    first.send(text())
    second.send(text())
    wecom_stub.expire_tokens()

    first.send(text("first refreshes"))
    second.send(text("second finds the new token in the database"))

    assert len(wecom_stub.calls(GETTOKEN)) == 2
    assert first.token.local_value == second.token.local_value


@pytest.mark.parametrize("errcode", [40001, 40013, 40091])
def test_gettoken__credential_errors_are_configuration(
    make_wecom: Make, wecom_stub: StubServer, errcode: int
) -> None:
    wecom_stub.on(GETTOKEN, error(errcode, f"invalid credential, corpsecret {SECRET}"))

    with pytest.raises(ConfigurationSendError) as caught:
        make_wecom().send(text())

    assert caught.value.code == str(errcode)
    assert caught.value.category == "configuration"
    assert SECRET not in str(caught.value)
    assert wecom_stub.calls(SEND) == []


def test_gettoken__throttled_is_throttled(make_wecom: Make, wecom_stub: StubServer) -> None:
    wecom_stub.on(GETTOKEN, error(45009, "api freq out of limit"))

    with pytest.raises(ThrottledSendError) as caught:
        make_wecom().send(text())

    assert caught.value.pause_seconds >= 60


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (Canned(raw=b"bad gateway", status=502), "http-502"),
        (Canned(ok(access_token="T" * 40).json, delay=1.5), "timeout"),
        (Canned(drop=True), "network"),
        (Canned(raw=b"<html>proxy login</html>"), "bad-reply"),
        (error(99999, "something new"), "99999"),
    ],
    ids=["5xx", "read timeout", "connection dropped", "not WeCom's JSON", "unknown errcode"],
)
def test_gettoken__a_failure_sent_no_message_so_it_is_plain_not_in_doubt(
    make_wecom: Make, wecom_stub: StubServer, answer: Canned, code: str
) -> None:
    # Whatever gettoken met, no message left: the run may retry without any doubt.
    wecom_stub.on(GETTOKEN, answer)

    with pytest.raises(TransientSendError) as caught:
        make_wecom(timeout=0.5).send(text())

    assert not isinstance(caught.value, InDoubtSendError)
    assert caught.value.code == code
    assert caught.value.category == "passing"
    assert wecom_stub.calls(SEND) == []


# -- classification -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("codes", "error_class", "category"),
    [
        (sorted(PASSING_CODES), TransientSendError, "passing"),
        (sorted(CONFIGURATION_CODES), ConfigurationSendError, "configuration"),
        (sorted(RECIPIENT_CODES), RecipientSendError, "recipient"),
        (sorted(PAYLOAD_CODES), PayloadSendError, "payload"),
    ],
)
def test_send__errcodes_are_classified_as_wecom_md_says(
    make_wecom: Make,
    wecom_stub: StubServer,
    codes: list[int],
    error_class: type[SendError],
    category: str,
) -> None:
    sender = make_wecom()
    for errcode in codes:
        wecom_stub.on(SEND, error(errcode, "some message"))
        with pytest.raises(SendError) as caught:
            sender.send(text())
        assert type(caught.value) is error_class, errcode
        assert caught.value.code == str(errcode)
        assert caught.value.category == category
        assert f"errcode {errcode}" in caught.value.message


@pytest.mark.parametrize(("errcode", "low", "high"), [(45009, 60, 3600), (45033, 1, 59)])
def test_send__throttling_codes_pause_the_channel(
    make_wecom: Make, wecom_stub: StubServer, errcode: int, low: float, high: float
) -> None:
    wecom_stub.on(SEND, error(errcode, "api freq out of limit"))

    with pytest.raises(ThrottledSendError) as caught:
        make_wecom().send(text())

    assert caught.value.code == str(errcode)
    assert caught.value.category == "throttled"
    assert caught.value.retryable
    assert low <= caught.value.pause_seconds <= high


def test_send__an_unknown_errcode_leaves_delivery_in_doubt(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, error(99999, "something new"))

    with pytest.raises(InDoubtSendError) as caught:
        make_wecom().send(text())

    assert caught.value.code == "99999"


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_send__http_5xx_is_passing(make_wecom: Make, wecom_stub: StubServer, status: int) -> None:
    wecom_stub.on(SEND, Canned(raw=b"<html>Bad gateway</html>", status=status))

    with pytest.raises(InDoubtSendError) as caught:
        make_wecom().send(text())

    # The request reached a server that failed while handling it: maybe delivered.
    assert caught.value.code == f"http-{status}"


def test_send__a_reply_that_is_not_wecom_json_is_passing(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, Canned(raw=b"<html>captive portal</html>"))

    with pytest.raises(TransientSendError) as caught:
        make_wecom().send(text())

    assert caught.value.code == "bad-reply"


def test_send__slow_reply_times_out_as_passing(make_wecom: Make, wecom_stub: StubServer) -> None:
    sender = make_wecom(timeout=0.3)
    sender.send(text())  # token fetched and connection open
    wecom_stub.on(SEND, Canned({"errcode": 0}, delay=2.0))

    started = time.monotonic()
    with pytest.raises(TransientSendError) as caught:
        sender.send(text("slow"))

    assert time.monotonic() - started < 1.5
    assert caught.value.code == "timeout"
    assert "read timeout after 0.3 s" in caught.value.message


def test_send__connection_lost_before_the_reply_is_passing(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    sender.send(text())
    wecom_stub.on(SEND, Canned(drop=True))

    with pytest.raises(TransientSendError) as caught:
        sender.send(text("lost"))

    assert caught.value.code == "network"


def test_send__server_down_is_passing_and_certainly_not_delivered(make_wecom: Make) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    sender = make_wecom(api_base=f"http://127.0.0.1:{port}")

    with pytest.raises(TransientSendError) as caught:
        sender.send(text())

    # Refused before a byte left: safe to retry on any channel.
    assert not isinstance(caught.value, InDoubtSendError)
    assert caught.value.code == "connect"
    assert SECRET not in caught.value.message
    assert "corpsecret=***" in caught.value.message


def test_send__every_recipient_invalid_with_errcode_0_is_a_recipient_failure(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, ok(invaliduser="ZhangSan", msgid="m1"))

    with pytest.raises(RecipientSendError) as caught:
        make_wecom().send(text(to="zhangsan"))

    assert caught.value.code == "invaliduser"
    assert "zhangsan" in caught.value.message


def test_send__unlicensed_recipient_is_a_recipient_failure(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, ok(unlicenseduser="zhangsan", msgid="m1"))

    with pytest.raises(RecipientSendError):
        make_wecom().send(text(to="zhangsan"))


def test_send__other_users_the_reply_lists_invalid_are_recorded(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    wecom_stub.on(SEND, ok(invaliduser="ghost", msgid="m7"))

    result = make_wecom().send(text(to="zhangsan"))

    assert (result.message_id, result.detail) == ("m7", {"invaliduser": "ghost"})


@pytest.mark.parametrize(
    "recipient",
    [
        pytest.param("@all", id="everyone"),
        pytest.param("zhangsan|lisi", id="a list of members"),
        pytest.param("zhangsan\n", id="a newline"),
        pytest.param("", id="nobody"),
        pytest.param("x" * 65, id="65 bytes"),
        pytest.param("_zhangsan", id="not starting with a letter or digit"),
    ],
)
def test_send__a_recipient_that_is_not_one_member_is_refused_and_never_sent(
    make_wecom: Make, wecom_stub: StubServer, recipient: str
) -> None:
    with pytest.raises(RecipientSendError) as caught:
        make_wecom().send(text(to=recipient))

    assert (caught.value.retryable, caught.value.code) == (False, "recipient")
    assert wecom_stub.calls(SEND) == []


def test_check_message__refuses_what_send_would_refuse_without_a_request(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    sender.check_message(text("x" * CONTENT_LIMIT))

    for content in ("x" * (CONTENT_LIMIT + 1), "  "):
        with pytest.raises(PayloadSendError):
            sender.check_message(text(content))
    make_wecom(oversize="split").check_message(text("x" * (3 * CONTENT_LIMIT)))
    assert wecom_stub.requests == []


def test_check_message__refuses_a_type_wecom_has_not_and_a_link_over_its_limit(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    card = {"title": "Follow-up", "description": "Call ACME", "btntxt": "View"}
    sender.check_message(
        Message("lisi", "textcard", {**card, "url": "https://x/" + "a" * 2038}, "k")
    )

    with pytest.raises(PayloadSendError, match="url is 2049 bytes"):
        sender.check_message(
            Message("lisi", "textcard", {**card, "url": "https://x/" + "a" * 2039}, "k")
        )
    with pytest.raises(PayloadSendError, match="no type 'telegram'") as caught:
        sender.send(Message("lisi", "telegram", {"content": "hi"}, "k"))
    assert (caught.value.code, sender.accepts("textcard")) == ("msgtype", True)
    assert wecom_stub.calls(SEND) == []


# -- secrets never leak -------------------------------------------------------------------


def _leaks(sender: WeComSender, *texts: str) -> list[str]:
    secrets = [SECRET, sender.token.local_value]
    return [t for t in texts for secret in secrets if secret and secret in t]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda req: Canned(delay=2.0), id="timeout"),
        pytest.param(lambda req: Canned(drop=True), id="connection-lost"),
        pytest.param(
            lambda req: Canned({"echo": req.query["access_token"]}, status=500), id="5xx-echo"
        ),
        pytest.param(
            lambda req: error(81013, f"user invalid, token {req.query['access_token']}"),
            id="errmsg-echo",
        ),
        pytest.param(
            lambda req: Canned({"echo": req.query["access_token"]}, status=302), id="redirect"
        ),
    ],
)
def test_secrets__never_in_errors_logs_or_repr(
    make_wecom: Make,
    wecom_stub: StubServer,
    caplog: pytest.LogCaptureFixture,
    answer: Callable,
) -> None:
    caplog.set_level(logging.DEBUG)
    sender = make_wecom(timeout=0.3)
    sender.send(text())
    token = sender.token.local_value
    assert token
    wecom_stub.on(SEND, answer)

    with pytest.raises(SendError) as caught:
        sender.send(text("fails"))

    exc = caught.value
    rendered = "".join(traceback.format_exception(exc))
    assert _leaks(sender, str(exc), repr(exc), exc.message, rendered, caplog.text) == []
    assert _leaks(sender, repr(sender), str(sender.options), repr(sender.token)) == []
    assert exc.__cause__ is None


def test_secrets__not_in_the_send_result(make_wecom: Make, wecom_stub: StubServer) -> None:
    sender = make_wecom()
    result = sender.send(text())

    assert _leaks(sender, repr(result), json.dumps(result.detail)) == []


# -- content limits -----------------------------------------------------------------------


def test_oversize__rejected_by_default_with_size_and_limit(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    content = "报" * 683  # 2,049 bytes in UTF-8: one over

    with pytest.raises(PayloadSendError) as caught:
        make_wecom().send(text(content))

    assert "2049 bytes" in caught.value.message
    assert str(CONTENT_LIMIT) in caught.value.message
    assert wecom_stub.requests == []  # not even a token: nothing was sent, nothing cut


def test_oversize__content_of_exactly_the_limit_is_sent_whole(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    content = "a" * 2 + "报" * 682  # 2,048 bytes
    make_wecom().send(text(content))

    assert wecom_stub.calls(SEND)[0].json["text"]["content"] == content


def test_oversize__split_sends_numbered_parts_within_the_limit(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    content = "".join(f"第{i}行 客户跟进记录 内容较长\n" for i in range(200))
    sender = make_wecom(oversize="split")

    result = sender.send(text(content))

    sent = [request.json["text"]["content"] for request in wecom_stub.calls(SEND)]
    assert len(sent) == result.detail["parts"] > 1
    assert all(len(part.encode()) <= CONTENT_LIMIT for part in sent)
    assert [part.split(" ", 1)[0] for part in sent] == [
        f"({i}/{len(sent)})" for i in range(1, len(sent) + 1)
    ]
    # The last line (where kinds.render puts the stamp) ends every part.
    last = content.splitlines(keepends=True)[-1]
    assert all(part.endswith(last) for part in sent)
    assert "".join(part.split(" ", 1)[1].removesuffix(last) for part in sent) + last == content
    assert result.detail["msgids"] == [f"msg-{i}" for i in range(1, len(sent) + 1)]


def test_oversize__split_failure_names_the_part_and_a_retry_resends_identical_parts(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    content = "x" * 5000
    sender = make_wecom(oversize="split")
    sender.send(text("warm up the token"))
    wecom_stub.on(SEND, ok(msgid="p1"), error(-1, "system busy"), ok(msgid="again"))

    with pytest.raises(TransientSendError) as caught:
        sender.send(text(content))
    sender.send(text(content))  # the engine's retry: the same message again

    assert "part 2/3, 1 delivered before it" in caught.value.message
    first_try, second_try = wecom_stub.calls(SEND)[1:3], wecom_stub.calls(SEND)[3:5]
    assert [r.body for r in first_try] == [r.body for r in second_try]


def test_oversize__a_part_that_fails_names_the_parts_delivered_before_it(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom(oversize="split")
    wecom_stub.on(SEND, ok(msgid="p1"), ok(msgid="p2"), error(81013, "user not found"))

    with pytest.raises(RecipientSendError) as caught:
        sender.send(text("x" * 5000))

    assert caught.value.delivered_parts == ("p1", "p2")


def test_oversize__a_part_refused_first_names_no_part_delivered(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom(oversize="split")
    wecom_stub.on(SEND, error(-1, "system busy"))

    with pytest.raises(TransientSendError) as caught:
        sender.send(text("x" * 5000))

    assert caught.value.delivered_parts == ()


def test_oversize__a_message_with_parts_delivered_sends_only_the_rest(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom(oversize="split")
    sender.send(text("warm up the token"))
    wecom_stub.on(SEND, ok(msgid="p2"), ok(msgid="p3"))
    whole = text("x" * 5000)

    result = sender.send(replace(whole, sent_parts=("p1",)))

    sent = [request.json["text"]["content"] for request in wecom_stub.calls(SEND)[1:]]
    assert sent == split_content("x" * 5000)[1:]
    assert result.message_id == "p1"
    assert result.detail == {"parts": 3, "msgids": ["p1", "p2", "p3"]}
    # Only the parts to send spend the member's and the app's limits.
    assert {limit.cost for limit in sender.limits(replace(whole, sent_parts=("p1",)))} == {2}


def test_oversize__split_parts_never_look_alike(make_wecom: Make, wecom_stub: StubServer) -> None:
    content = ("同样的一行内容重复出现。" * 20 + "\n") * 20

    make_wecom(oversize="split").send(text(content))

    bodies = [request.body for request in wecom_stub.calls(SEND)]
    assert len(bodies) == len(set(bodies)) > 1


def stamped_text(content: str, stamp: str, key: str) -> Message:
    """A message as ``kinds.render`` makes it: the text, then the occurrence's stamp."""
    return Message("zhangsan", "text", {"content": f"{content}\n{stamp}"}, key)


def test_oversize__no_part_of_one_occurrence_looks_like_a_part_of_another(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    # Two occurrences (or two tasks) with the same long text to one member: WeCom's
    # duplicate check would drop any part of the second identical to one of the first.
    content = "".join(f"第{i}行 客户跟进记录 内容较长\n" for i in range(150))
    first = stamped_text(content, "— 2026-12-03 09:00 · #42", "42:2026-12-03")
    second = stamped_text(content, "— 2026-12-04 09:00 · #42", "42:2026-12-04")
    sender = make_wecom(oversize="split")

    sender.send(first)
    sender.send(second)
    sender.send(first)  # a re-send of the first occurrence: the same bytes again

    bodies = [request.body for request in wecom_stub.calls(SEND)]
    parts = len(bodies) // 3
    assert parts > 1
    assert len(set(bodies[: 2 * parts])) == 2 * parts
    assert bodies[2 * parts :] == bodies[:parts]
    for request in wecom_stub.calls(SEND)[:parts]:
        part = request.json["text"]["content"]
        assert part.endswith("\n— 2026-12-03 09:00 · #42")  # every part names its occurrence
        assert len(part.encode()) <= CONTENT_LIMIT


def test_oversize__every_part_carries_the_stamp_and_the_text_reads_back_whole(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    stamp = "— 2026-12-03 09:00 · #42"
    content = "".join(f"{n:03d} 客户跟进记录\n" for n in range(300)) + "€" * 1500

    result = make_wecom(oversize="split").send(stamped_text(content, stamp, "k"))

    sent = [request.json["text"]["content"] for request in wecom_stub.calls(SEND)]
    assert len(sent) == result.detail["parts"] > 2
    assert all(len(part.encode()) <= CONTENT_LIMIT for part in sent)
    assert [part.split(" ", 1)[0] for part in sent] == [
        f"({i}/{len(sent)})" for i in range(1, len(sent) + 1)
    ]
    assert all(part.endswith(f"\n{stamp}") for part in sent)
    text = "".join(part.split(" ", 1)[1].removesuffix(f"\n{stamp}") for part in sent)
    # Line breaks aside (a part cut inside the long run of euros ends that line early).
    assert text.replace("\n", "") == content.replace("\n", "")


def test_split_content__never_cuts_inside_a_character() -> None:
    content = "€" * 3000  # 3 bytes each, no line breaks at all

    parts = split_content(content)

    assert all(len(part.encode()) <= CONTENT_LIMIT for part in parts)
    assert "".join(part.split(" ", 1)[1] for part in parts) == content


@pytest.mark.parametrize(("field", "size"), [("title", 129), ("description", 513)])
def test_oversize__textcard_fields_over_their_limits_are_rejected(
    make_wecom: Make, wecom_stub: StubServer, field: str, size: int
) -> None:
    body = {"title": "t", "description": "d", "url": "https://crm.example/", field: "a" * size}

    with pytest.raises(PayloadSendError, match=f"{field} is {size} bytes"):
        make_wecom(oversize="split").send(Message("lisi", "textcard", body, "k"))

    assert wecom_stub.requests == []


def test_send__empty_content_is_a_payload_error(make_wecom: Make, wecom_stub: StubServer) -> None:
    with pytest.raises(PayloadSendError):
        make_wecom().send(text("   "))

    assert wecom_stub.requests == []


# -- configuration ------------------------------------------------------------------------


def test_config__missing_credentials_name_the_settings_and_send_nothing(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    with pytest.raises(ConfigurationSendError) as caught:
        make_wecom(corp_secret="", agent_id="").send(text())

    assert "WECOM_CORP_SECRET" in caught.value.message
    assert "WECOM_AGENT_ID" in caught.value.message
    assert wecom_stub.requests == []


def test_config__agent_id_must_be_an_integer(make_wecom: Make) -> None:
    with pytest.raises(ConfigurationSendError, match="integer"):
        make_wecom(agent_id="app-one").send(text())


def test_config__unknown_oversize_policy_is_refused(make_wecom: Make) -> None:
    with pytest.raises(ConfigurationSendError, match="oversize"):
        make_wecom(oversize="truncate")


def test_config__defaults_come_from_the_wecom_settings(wecom_stub: StubServer) -> None:
    with override_settings(
        WECOM_API_BASE=wecom_stub.url + "/",
        WECOM_CORP_ID="ww-from-settings",
        WECOM_CORP_SECRET=SECRET,
        WECOM_AGENT_ID="42",
        WECOM_TIMEOUT=3,
    ):
        sender = WeComSender("wecom")
    try:
        sender.send(text())
    finally:
        sender.close()

    assert wecom_stub.calls(GETTOKEN)[0].query["corpid"] == "ww-from-settings"
    assert wecom_stub.calls(SEND)[0].json["agentid"] == 42
    assert sender.client.timeout == (3.0, 3.0)


# -- connections --------------------------------------------------------------------------


def test_session__one_kept_alive_connection_for_many_messages(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    for n in range(5):
        sender.send(text(f"message {n}"))

    assert len({request.client_port for request in wecom_stub.requests}) == 1


def test_session__closed_by_close_and_reopened_on_the_next_send(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    sender.send(text())
    sender.close()
    sender.send(text("after close"))

    first, second = wecom_stub.calls(SEND)
    assert first.client_port != second.client_port


def test_session__a_forked_child_opens_its_own_and_leaves_the_parents_alone(
    make_wecom: Make, wecom_stub: StubServer
) -> None:
    sender = make_wecom()
    sender.send(text("parent"))
    with warnings.catch_warnings():
        # Python 3.12+ warns about fork() with threads (the stub's); the child only
        # sends one request and leaves with os._exit.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: its token copy is valid, so it needs no database
        code = 1
        try:
            sender.send(text("child"))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    sender.send(text("parent again"))

    assert os.waitstatus_to_exitcode(status) == 0
    parent, child, parent_again = wecom_stub.calls(SEND)
    assert child.json["text"]["content"] == "child"
    assert child.client_port != parent.client_port
    assert parent_again.client_port == parent.client_port


def test_session__proxy_settings_from_the_environment_are_honoured(
    make_wecom: Make, wecom_stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, wecom_stub.url)
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    # An address nobody resolves: only the proxy (the stub) can answer.
    make_wecom(api_base="http://wecom.invalid").send(text())

    assert [request.path for request in wecom_stub.requests] == [GETTOKEN, SEND]
    assert wecom_stub.requests[1].headers["Host"] == "wecom.invalid"


def test_limits__per_app_channel_rate_and_per_member_rate(settings) -> None:
    from reminders.senders.base import UNLIMITED, Message, Rate, shares

    settings.WECOM_RATE_LIMIT = 40
    one = WeComSender("a", api_base="http://127.0.0.1:9", corp_id="c", corp_secret="s", agent_id=1)
    same_app = WeComSender(
        "b", api_base="http://127.0.0.1:9", corp_id="c", corp_secret="s", agent_id=1
    )
    assert one.channel_rate() == Rate(40.0 * 0.97, 4)  # paced a little under the limit
    channel, share, member = one.limits(Message("alice", "text", {"content": "x"}, "k"), "low")
    # The channel carries pauses; its pace is its shares' (the run's, or the other's).
    assert channel.rate == UNLIMITED
    split = shares(one.channel_rate())
    assert split is not None
    assert (share.name, share.rate) == ("wecom:c:1:channel:bulk", split["bulk"])
    assert share.lender is not None and share.lender.rate == split["high"]
    assert member.rate == Rate.at_most(30, 60)
    assert member.name == "wecom:c:1:to:alice"
    assert channel.name == same_app.limits(Message("bob", "text", {}, "k"))[0].name


@pytest.mark.parametrize(
    ("options", "content", "cost"),
    [
        ({"oversize": "split"}, "short", 1),
        ({"oversize": "split"}, "".join(f"{n:03d} 客户跟进记录\n" for n in range(400)), None),
        ({"oversize": "reject"}, "x" * 5000, 1),  # refused by the send, not the limiter
        ({"oversize": "split"}, "", 1),  # empty: refused by the send
    ],
)
def test_limits__a_split_message_spends_one_slot_per_part(settings, options, content, cost) -> None:
    from reminders.senders.base import Message
    from reminders.senders.wecom import split_content

    settings.WECOM_RATE_LIMIT = 40
    sender = WeComSender(
        "a", api_base="http://127.0.0.1:9", corp_id="c", corp_secret="s", agent_id=1, **options
    )
    expected = cost or len(split_content(content))
    limits = sender.limits(Message("alice", "text", {"content": content}, "k"))
    assert [(limit.name, limit.cost) for limit in limits] == [
        ("wecom:c:1:channel", expected),
        ("wecom:c:1:channel:high", expected),  # or the bulk share's slots, as many
        ("wecom:c:1:to:alice", expected),
    ]
    assert expected > 1 or cost == 1


# -- message types without a field for the stamp -------------------------------------------

UNSTAMPED = {
    "news": {"articles": [{"title": "Q4 plan", "url": "https://crm.example/q4"}]},
    "template_card": {"card_type": "text_notice", "main_title": {"title": "Follow-up due"}},
    "file": {"media_id": "1Yv-zXfHjSjU-7LH-GwtYqDGS-zz6w22KmWAT5COgP7o"},
    "image": {"media_id": "MEDIA_ID"},
}


@pytest.mark.parametrize("msgtype", sorted(UNSTAMPED))
def test_send__a_type_without_a_field_for_the_stamp_goes_without_duplicate_check(
    make_wecom: Make, wecom_stub: StubServer, msgtype: str
) -> None:
    # Two occurrences of such a message are the same bytes: with WeCom's check on, the
    # second would be dropped. So it goes unchecked, and the engine may not re-send it.
    sender = make_wecom()
    message = Message("lisi", msgtype, UNSTAMPED[msgtype], "k")

    sender.send(message)

    [request] = wecom_stub.calls(SEND)
    assert request.json[msgtype] == UNSTAMPED[msgtype]
    assert "enable_duplicate_check" not in request.json
    assert "duplicate_check_interval" not in request.json
    assert (sender.deduplicates(message), sender.resends(message)) == (False, False)
    assert make_wecom(retry_in_doubt=True).resends(message) is True
    assert sender.deduplicates(text()) is True


@pytest.fixture
def news_kind() -> Iterator[str]:
    def render(task, run):
        return kinds.Content("news", UNSTAMPED["news"])

    kinds.register(kinds.Kind("crm_news", "CRM news", render))
    yield "crm_news"
    kinds._registry.pop("crm_news", None)


def test_engine__a_news_message_whose_reply_is_lost_is_unknown_not_resent(
    wecom_stub: StubServer, settings, make_task, received, news_kind
) -> None:
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {
                "api_base": wecom_stub.url,
                "corp_id": "ww-corp",
                "corp_secret": SECRET,
                "agent_id": "1000002",
                "timeout": 1.0,
            },
        },
    }
    wecom_stub.on(SEND, Canned(drop=True))  # delivered, perhaps; the reply never comes
    task = make_task(news_kind, "lisi", channel="wecom")

    tick()

    run = task.runs.get()
    assert (run.status, run.error_code) == ("unknown", "network")
    assert SendLog.objects.get().status == "unknown"
    assert ("run_unknown", run.pk, "unknown") in received
    assert len(wecom_stub.calls(SEND)) == 1
