"""The WeCom sandbox over real HTTP: WeCom's answers, its limits, the faults and the ledger."""

from __future__ import annotations

import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.sandbox import (
    AGENT_ID,
    CORP_ID,
    CORP_SECRET,
    REPO,
    ROBOT_KEY,
    running_sandbox,
    sandbox_process,
)
from wecom_sandbox import (
    DEV_AGENT_ID,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    DEV_ROBOT_KEY,
    FaultRates,
    LedgerEntry,
    SandboxClient,
    WeComSandbox,
)


class Api:
    """A WeCom API caller as a sender would be: one kept-alive session."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.session = requests.Session()
        self._token = ""

    def gettoken(self, corpid: str | None = CORP_ID, corpsecret: str | None = CORP_SECRET) -> Any:
        params = {
            k: v for k, v in (("corpid", corpid), ("corpsecret", corpsecret)) if v is not None
        }
        return self.session.get(f"{self.base_url}/cgi-bin/gettoken", params=params).json()

    @property
    def token(self) -> str:
        if not self._token:
            self._token = self.gettoken()["access_token"]
        return self._token

    def post(self, path: str, body: Any, **params: str) -> requests.Response:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.session.post(f"{self.base_url}{path}", params=params, data=data, timeout=10)

    def send(self, body: Any, token: str | None = None) -> Any:
        return self.post(
            "/cgi-bin/message/send", body, access_token=self.token if token is None else token
        ).json()

    def robot(self, body: Any, key: str = ROBOT_KEY) -> Any:
        return self.post("/cgi-bin/webhook/send", body, key=key).json()

    def close(self) -> None:
        self.session.close()


def text(content: str = "Call ACME back", touser: str = "zhangsan", **extra: Any) -> dict[str, Any]:
    return {
        "touser": touser,
        "msgtype": "text",
        "agentid": AGENT_ID,
        "text": {"content": content},
        **extra,
    }


def deduplicated(content: str = "Call ACME back", **extra: Any) -> dict[str, Any]:
    return text(content, enable_duplicate_check=1, duplicate_check_interval=600, **extra)


@pytest.fixture
def sandbox() -> Iterator[WeComSandbox]:
    with running_sandbox() as sandbox:
        yield sandbox


@pytest.fixture
def api(sandbox: WeComSandbox) -> Iterator[Api]:
    api = Api(sandbox.base_url)
    yield api
    api.close()


def only(entries: list[LedgerEntry]) -> LedgerEntry:
    assert len(entries) == 1, entries
    return entries[0]


# gettoken ------------------------------------------------------------------------------


def test_gettoken__returns_a_token_the_send_accepts(api: Api, sandbox: WeComSandbox) -> None:
    reply = api.gettoken()

    assert reply["errcode"] == 0
    assert reply["expires_in"] == 7200
    assert 0 < len(reply["access_token"]) <= 512
    assert api.send(text(), token=reply["access_token"])["errcode"] == 0
    assert only(sandbox.delivered()).delivered_to == ("zhangsan",)


@pytest.mark.parametrize(
    ("corpid", "corpsecret", "errcode"),
    [
        (CORP_ID, "wrong-secret", 40001),
        ("ww-other-corp", CORP_SECRET, 40013),
        ("ww-other-corp", "wrong-secret", 40013),
        (None, CORP_SECRET, 41002),
        (CORP_ID, None, 41004),
    ],
)
def test_gettoken__bad_credentials_are_configuration_errors(
    api: Api, corpid: str | None, corpsecret: str | None, errcode: int
) -> None:
    reply = api.gettoken(corpid, corpsecret)

    assert reply["errcode"] == errcode
    assert "access_token" not in reply


def test_gettoken__answers_the_same_token_until_it_expires(api: Api, sandbox: WeComSandbox) -> None:
    first = api.gettoken()
    sandbox.advance(7000)
    again = api.gettoken()
    sandbox.advance(201)
    renewed = api.gettoken()

    assert again["access_token"] == first["access_token"]
    assert again["expires_in"] == 200
    assert renewed["access_token"] != first["access_token"]
    assert renewed["expires_in"] == 7200
    assert sandbox.stats()["tokens issued"] == 2


def test_gettoken__token_ttl_is_configurable() -> None:
    with running_sandbox(token_ttl=30) as sandbox:
        api = Api(sandbox.base_url)
        try:
            assert api.gettoken()["expires_in"] == 30
        finally:
            api.close()


# Tokens on use -------------------------------------------------------------------------


def test_send__expired_token_is_42001_and_a_fresh_one_passes(
    api: Api, sandbox: WeComSandbox
) -> None:
    old = api.token
    sandbox.advance(7201)

    assert api.send(text(), token=old)["errcode"] == 42001
    fresh = api.gettoken()["access_token"]
    assert fresh != old
    assert api.send(text(), token=fresh)["errcode"] == 0
    assert [e.errcode for e in sandbox.ledger()] == [42001, 0]


def test_send__unknown_token_is_40014_and_missing_token_41001(api: Api) -> None:
    unknown = "not-a-token"
    assert api.send(text(), token=unknown)["errcode"] == 40014
    assert api.post("/cgi-bin/message/send", text()).json()["errcode"] == 41001


# message/send: validation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "errcode"),
    [
        ({"agentid": AGENT_ID + 1}, 40056),
        ({"agentid": None}, 41011),
        ({"msgtype": "voice"}, 40008),
        ({"text": {"content": ""}}, 44004),
        ({"text": None}, 44004),
        ({"touser": ""}, 40058),
    ],
)
def test_send__invalid_request_is_answered_with_wecom_errcode(
    api: Api, sandbox: WeComSandbox, change: dict[str, Any], errcode: int
) -> None:
    body = {k: v for k, v in {**text(), **change}.items() if v is not None}

    reply = api.send(body)

    assert reply["errcode"] == errcode
    assert only(sandbox.ledger()).status == "rejected"
    assert sandbox.delivered() == []


def test_send__agentid_as_numeric_string_is_accepted(api: Api) -> None:
    assert api.send(text(agentid=str(AGENT_ID)))["errcode"] == 0


def test_send__body_that_is_not_json_is_47001(api: Api) -> None:
    assert api.send(b"{not json")["errcode"] == 47001


def test_send__get_is_43002(api: Api) -> None:
    reply = api.session.get(
        f"{api.base_url}/cgi-bin/message/send", params={"access_token": api.token}
    )

    assert reply.json()["errcode"] == 43002


def test_send__markdown_and_textcard_are_delivered(api: Api, sandbox: WeComSandbox) -> None:
    markdown = {**text(), "msgtype": "markdown", "markdown": {"content": "**Due** today"}}
    textcard = {
        **text(),
        "msgtype": "textcard",
        "textcard": {"title": "Birthday", "description": "Say hello", "url": "https://crm/1"},
    }

    assert api.send(markdown)["errcode"] == 0
    assert api.send(textcard)["errcode"] == 0
    assert [(e.msgtype, e.content) for e in sandbox.delivered()] == [
        ("markdown", "**Due** today"),
        ("textcard", "Birthday\n\nSay hello"),
    ]


def test_send__textcard_without_title_is_44004_and_without_url_40058(api: Api) -> None:
    card = {"title": "", "description": "d", "url": "https://crm/1"}
    no_title = {**text(), "msgtype": "textcard", "textcard": card}
    no_url = {**no_title, "textcard": {**card, "title": "t", "url": ""}}

    assert api.send(no_title)["errcode"] == 44004
    assert api.send(no_url)["errcode"] == 40058


# message/send: content limits ----------------------------------------------------------


def test_send__text_of_exactly_2048_bytes_is_delivered_whole(
    api: Api, sandbox: WeComSandbox
) -> None:
    content = "订" * 682 + "ab"  # 3 bytes a character: 2,048 bytes

    assert api.send(text(content))["errcode"] == 0
    entry = only(sandbox.delivered())
    assert (entry.content, entry.truncated) == (content, False)


def test_send__text_over_2048_bytes_is_cut_like_wecom_and_marked_truncated(
    api: Api, sandbox: WeComSandbox
) -> None:
    content = "订" * 683  # 2,049 bytes

    reply = api.send(text(content))

    assert reply["errcode"] == 0
    entry = only(sandbox.delivered())
    assert entry.truncated
    assert entry.content == "订" * 682  # cut at 2,048 bytes, never inside a character


def test_send__text_over_2048_bytes_is_45002_when_the_sandbox_rejects_overflow() -> None:
    with running_sandbox(overflow="reject") as sandbox:
        api = Api(sandbox.base_url)
        try:
            assert api.send(text("x" * 2049))["errcode"] == 45002
            assert api.send(text("x" * 2048))["errcode"] == 0
        finally:
            api.close()


def test_send__markdown_over_2048_bytes_is_45002(api: Api, sandbox: WeComSandbox) -> None:
    body = {**text(), "msgtype": "markdown", "markdown": {"content": "x" * 2049}}

    assert api.send(body)["errcode"] == 45002
    assert sandbox.delivered() == []


@pytest.mark.parametrize(
    ("title", "description"), [("t" * 129, "d"), ("t", "d" * 513)], ids=["title", "description"]
)
def test_send__textcard_over_its_limits(title: str, description: str) -> None:
    card = {"title": title, "description": description, "url": "https://crm/1"}
    body = {**text(), "msgtype": "textcard", "textcard": card}
    with running_sandbox(overflow="reject") as rejecting, running_sandbox() as cutting:
        api, other = Api(rejecting.base_url), Api(cutting.base_url)
        try:
            assert api.send(body)["errcode"] == 45002
            assert other.send(body)["errcode"] == 0
        finally:
            api.close()
            other.close()
        entry = only(cutting.delivered())
    assert entry.truncated
    assert entry.content == f"{title[:128]}\n\n{description[:512]}"


# message/send: recipients --------------------------------------------------------------


def test_send__invalid_users_are_listed_and_the_valid_ones_delivered(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(invalid_users=["ghost", "left"])

    reply = api.send(text(touser="zhangsan|ghost|lisi|left"))

    assert reply["errcode"] == 0
    assert reply["invaliduser"] == "ghost|left"
    entry = only(sandbox.delivered())
    assert entry.delivered_to == ("zhangsan", "lisi")
    assert entry.invaliduser == ("ghost", "left")


def test_send__all_users_invalid_is_81013_and_nothing_delivered(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(invalid_users="ghost|left")

    reply = api.send(text(touser="ghost|left"))

    assert reply["errcode"] == 81013
    assert reply["invaliduser"] == "ghost|left"
    assert sandbox.delivered() == []


def test_control__valid_users_takes_a_user_back(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(invalid_users=["ghost"])
    sandbox.control(valid_users=["ghost"])

    assert api.send(text(touser="ghost"))["errcode"] == 0


def test_send__invalid_users_given_at_start_are_invalid() -> None:
    with running_sandbox(invalid_users=["ghost"]) as sandbox:
        api = Api(sandbox.base_url)
        try:
            assert api.send(text(touser="ghost"))["errcode"] == 81013
        finally:
            api.close()


# message/send: duplicate check ---------------------------------------------------------


def test_send__identical_body_inside_the_interval_is_accepted_but_not_delivered(
    api: Api, sandbox: WeComSandbox
) -> None:
    first = api.send(deduplicated())
    second = api.send(deduplicated())

    assert (first["errcode"], second["errcode"]) == (0, 0)
    assert second["msgid"] == first["msgid"]
    delivered, suppressed = sandbox.ledger()
    assert delivered.status == "delivered"
    assert suppressed.status == "suppressed"
    assert suppressed.duplicate_of == delivered.id
    assert suppressed.suppressed_to == ("zhangsan",)
    assert len(sandbox.delivered(to="zhangsan")) == 1


def test_send__identical_body_after_the_interval_is_delivered_again(
    api: Api, sandbox: WeComSandbox
) -> None:
    api.send(deduplicated())
    sandbox.advance(601)
    api.send(deduplicated())

    assert len(sandbox.delivered(to="zhangsan")) == 2


def test_send__duplicate_check_compares_bytes_so_a_reordered_body_is_delivered_again(
    api: Api, sandbox: WeComSandbox
) -> None:
    body = deduplicated()
    api.send(body)
    api.send(dict(reversed(body.items())))

    assert len(sandbox.delivered(to="zhangsan")) == 2


def test_send__duplicate_check_is_per_recipient(api: Api, sandbox: WeComSandbox) -> None:
    api.send(deduplicated(touser="zhangsan"))
    api.send(deduplicated(touser="lisi"))

    assert [e.delivered_to for e in sandbox.delivered()] == [("zhangsan",), ("lisi",)]


def test_send__without_duplicate_check_an_identical_body_is_delivered_twice(
    api: Api, sandbox: WeComSandbox
) -> None:
    api.send(text())
    api.send(text())

    assert len(sandbox.delivered(to="zhangsan")) == 2


def test_send__duplicate_check_interval_over_four_hours_is_40058(api: Api) -> None:
    body = text(enable_duplicate_check=1, duplicate_check_interval=4 * 3600 + 1)

    assert api.send(body)["errcode"] == 40058


# Limits --------------------------------------------------------------------------------


def test_send__31st_message_to_a_member_in_a_minute_is_45009(
    api: Api, sandbox: WeComSandbox
) -> None:
    codes = [api.send(text(f"message {i}"))["errcode"] for i in range(31)]
    other_member = api.send(text(touser="lisi"))["errcode"]

    assert codes == [0] * 30 + [45009]
    assert other_member == 0
    assert len(sandbox.delivered(to="zhangsan")) == 30


def test_send__member_over_the_minute_limit_is_blocked_for_a_minute(
    api: Api, sandbox: WeComSandbox
) -> None:
    first_half = [api.send(text(f"a{i}"))["errcode"] for i in range(15)]
    sandbox.advance(30)
    second_half = [api.send(text(f"b{i}"))["errcode"] for i in range(15)]
    over = api.send(text("over"))["errcode"]
    sandbox.advance(31)  # the first half left the window, but the block holds
    blocked = api.send(text("blocked"))["errcode"]
    sandbox.advance(30)
    after_block = api.send(text("after"))["errcode"]

    assert first_half + second_half == [0] * 30
    assert (over, blocked, after_block) == (45009, 45009, 0)


def test_send__member_over_the_hour_limit_is_45009() -> None:
    with running_sandbox(user_limits=["3/60", "5/3600"]) as sandbox:
        api = Api(sandbox.base_url)
        try:
            codes = []
            for i in range(6):
                codes.append(api.send(text(f"m{i}"))["errcode"])
                sandbox.advance(61)  # never over the minute limit
        finally:
            api.close()

    assert codes == [0] * 5 + [45009]


def test_send__over_a_member_limit_delivers_to_nobody_in_the_request(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(user_limits=["1/60"])
    api.send(text(touser="zhangsan"))

    assert api.send(text("again", touser="lisi|zhangsan"))["errcode"] == 45009
    assert sandbox.delivered(to="lisi") == []
    assert api.send(text("again", touser="lisi"))["errcode"] == 0


def test_send__a_message_to_several_members_counts_for_each(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(user_limits=["1/60"])

    assert api.send(text(touser="lisi|zhangsan"))["errcode"] == 0
    assert api.send(text("again", touser="zhangsan"))["errcode"] == 45009
    assert api.send(text("again", touser="lisi"))["errcode"] == 45009


def test_send__per_second_limit_is_a_token_bucket_with_a_second_of_burst() -> None:
    with running_sandbox(rate_limit=5) as sandbox:
        api = Api(sandbox.base_url)
        try:
            burst = [api.send(text(f"m{i}", touser=f"u{i}"))["errcode"] for i in range(6)]
            sandbox.advance(0.4)  # two tokens back
            refill = [api.send(text(f"r{i}", touser=f"v{i}"))["errcode"] for i in range(3)]
        finally:
            api.close()
        rejected = sandbox.ledger(status="rejected")

    assert burst == [0] * 5 + [45009]
    assert refill == [0, 0, 45009]
    assert len(sandbox.delivered()) == 7
    assert [e.errcode for e in rejected] == [45009, 45009]


def test_control__rate_limit_can_be_set_and_lifted_at_run_time(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(rate_limit=1)
    limited = [api.send(text(f"m{i}", touser=f"u{i}"))["errcode"] for i in range(2)]
    sandbox.control(rate_limit=None)
    unlimited = [api.send(text(f"n{i}", touser=f"u{i}"))["errcode"] for i in range(5)]

    assert limited == [0, 45009]
    assert unlimited == [0] * 5


# Robot ---------------------------------------------------------------------------------


def test_robot__text_with_mentions_is_delivered(api: Api, sandbox: WeComSandbox) -> None:
    body = {"msgtype": "text", "text": {"content": "Daily report", "mentioned_list": ["@all"]}}

    assert api.robot(body) == {"errcode": 0, "errmsg": "ok"}
    entry = only(sandbox.delivered())
    assert (entry.endpoint, entry.content, entry.mentioned_list) == (
        "webhook/send",
        "Daily report",
        ("@all",),
    )
    assert ROBOT_KEY not in json.dumps(entry.as_dict())


def test_robot__unknown_or_missing_key_is_93000(api: Api, sandbox: WeComSandbox) -> None:
    body = {"msgtype": "text", "text": {"content": "x"}}

    assert api.robot(body, key="unknown")["errcode"] == 93000
    assert api.post("/cgi-bin/webhook/send", body).json()["errcode"] == 93000
    assert sandbox.delivered() == []


def test_robot__markdown_up_to_4096_bytes_passes_and_beyond_is_40058(api: Api) -> None:
    def markdown(size: int) -> dict[str, Any]:
        return {"msgtype": "markdown", "markdown": {"content": "x" * size}}

    assert api.robot(markdown(4096))["errcode"] == 0
    assert api.robot(markdown(4097))["errcode"] == 40058


def test_robot__21st_message_in_a_minute_is_45009(api: Api, sandbox: WeComSandbox) -> None:
    codes = [api.robot({"msgtype": "text", "text": {"content": f"{i}"}}) for i in range(21)]
    sandbox.advance(61)
    later = api.robot({"msgtype": "text", "text": {"content": "later"}})

    assert [c["errcode"] for c in codes] == [0] * 20 + [45009]
    assert later["errcode"] == 0


# Recall --------------------------------------------------------------------------------


def test_recall__marks_the_message_recalled(api: Api, sandbox: WeComSandbox) -> None:
    msgid = api.send(text())["msgid"]

    reply = api.post("/cgi-bin/message/recall", {"msgid": msgid}, access_token=api.token)
    unknown = api.post("/cgi-bin/message/recall", {"msgid": "nope"}, access_token=api.token)

    assert reply.json()["errcode"] == 0
    assert unknown.json()["errcode"] == 40058
    assert only(sandbox.delivered()).recalled


# Fault switches ------------------------------------------------------------------------


def test_fault__busy_answers_minus_one_for_the_next_n_sends(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(busy=2)

    codes = [api.send(text(f"m{i}"))["errcode"] for i in range(3)]

    assert codes == [-1, -1, 0]
    assert [e.status for e in sandbox.ledger()] == ["rejected", "rejected", "delivered"]


@pytest.mark.parametrize("status", [500, 502])
def test_fault__http_errors_answer_5xx_for_the_next_n_sends(
    api: Api, sandbox: WeComSandbox, status: int
) -> None:
    sandbox.control(http_errors=1, http_status=status)

    failed = api.post("/cgi-bin/message/send", text(), access_token=api.token)
    passed = api.post("/cgi-bin/message/send", text(), access_token=api.token)

    assert failed.status_code == status
    assert (passed.status_code, passed.json()["errcode"]) == (200, 0)
    assert sandbox.ledger()[0].http_status == status
    assert len(sandbox.delivered()) == 1


def test_fault__slow_replies_wait_the_delay_after_delivering(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(delay=0.5, slow=1)

    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        api.session.post(
            f"{api.base_url}/cgi-bin/message/send",
            params={"access_token": api.token},
            json=text(),
            timeout=0.2,
        )
    timed_out = time.monotonic() - started
    started = time.monotonic()
    fast = api.send(text("next"))
    fast_seconds = time.monotonic() - started

    assert timed_out < 0.45
    assert fast["errcode"] == 0
    assert fast_seconds < 0.4
    slow_entry, fast_entry = sandbox.delivered()
    assert (slow_entry.reply_delay, fast_entry.reply_delay) == (0.5, 0.0)


def test_fault__delay_without_count_slows_every_reply(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(delay=0.3)

    started = time.monotonic()
    api.send(text("a"))
    api.send(text("b"))

    assert time.monotonic() - started >= 0.6


def test_fault__lost_reply_closes_the_connection_unanswered_but_delivers(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(lost_replies=1)

    with pytest.raises(requests.ConnectionError):
        api.send(deduplicated())
    lost = only(sandbox.delivered())
    retry = api.send(deduplicated())  # the same bytes, as a sender must retry

    assert lost.reply_lost
    assert lost.delivered_to == ("zhangsan",)
    assert retry["errcode"] == 0
    assert retry["msgid"] == lost.msgid
    assert sandbox.ledger()[-1].status == "suppressed"
    assert len(sandbox.delivered(to="zhangsan")) == 1


def test_fault__lost_reply_gives_no_status_line_at_all(sandbox: WeComSandbox) -> None:
    sandbox.control(lost_replies=1)
    host, port = sandbox.base_url.removeprefix("http://").split(":")
    body = b"{}"
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(
            b"POST /cgi-bin/webhook/send?key=%s HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (ROBOT_KEY.encode(), len(body), body)
        )
        assert conn.recv(1024) == b""


def test_fault__expire_tokens_makes_every_token_42001(api: Api, sandbox: WeComSandbox) -> None:
    token = api.token
    sandbox.control(expire_tokens=True)

    assert api.send(text(), token=token)["errcode"] == 42001
    assert api.gettoken()["access_token"] != token


def test_fault__invalidate_tokens_makes_every_token_40014(api: Api, sandbox: WeComSandbox) -> None:
    token = api.token
    sandbox.control(invalidate_tokens=True)

    assert api.send(text(), token=token)["errcode"] == 40014


def test_fault__config_error_answers_60020_for_the_next_n(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(config_error=2)

    codes = [api.send(text(f"m{i}"))["errcode"] for i in range(3)]

    assert codes == [60020, 60020, 0]


def test_fault__errcodes_are_answered_in_order(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(errcodes=[45033, 6000])

    codes = [api.send(text(f"m{i}"))["errcode"] for i in range(3)]
    robot = api.robot({"msgtype": "text", "text": {"content": "x"}})

    assert codes == [45033, 6000, 0]
    assert robot["errcode"] == 0


def test_fault__gettoken_errcodes(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(gettoken_errcodes=[-1])

    assert api.gettoken()["errcode"] == -1
    assert api.gettoken()["errcode"] == 0


def test_fault__switches_act_on_robot_sends_too(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(busy=1)

    assert api.robot({"msgtype": "text", "text": {"content": "x"}})["errcode"] == -1


# Random faults --------------------------------------------------------------------------


def outcomes(api: Api, count: int) -> list[Any]:
    """What each of ``count`` sends met: an errcode, an HTTP status, or "lost"."""
    seen: list[Any] = []
    for n in range(count):
        try:
            reply = api.post("/cgi-bin/message/send", text(f"m{n}"), access_token=api.token)
        except requests.ConnectionError:
            seen.append("lost")
            continue
        seen.append(reply.json()["errcode"] if reply.status_code == 200 else reply.status_code)
    return seen


def test_random_faults__strike_at_their_rates_and_are_recorded(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(busy_rate=0.2, http_error_rate=0.1, lost_reply_rate=0.1, seed=7)

    seen = outcomes(api, 400)

    share = {o: seen.count(o) / len(seen) for o in set(seen)}
    assert 0.12 < share[-1] < 0.28  # busy: 20% of the 90% that got past the 5xx
    assert 0.05 < share[500] < 0.15
    assert 0.05 < share["lost"] < 0.15
    entries = sandbox.ledger()
    assert len(entries) == 400
    lost = [e for e in entries if e.reply_lost]
    assert len(lost) == seen.count("lost")
    # A lost reply is lost after the send took effect: most of them were delivered.
    assert {e.status for e in lost} <= {"delivered", "rejected"}
    assert sandbox.stats()["lost replies"] == len(lost)


def test_random_faults__the_same_seed_meets_the_same_faults() -> None:
    runs = []
    for seed in (11, 11, 12):
        with running_sandbox() as sandbox:
            sandbox.control(busy_rate=0.3, http_error_rate=0.2, seed=seed)
            api = Api(sandbox.base_url)
            try:
                runs.append(outcomes(api, 60))
            finally:
                api.close()

    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_random_faults__a_new_seed_restarts_the_sequence(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(busy_rate=0.5, seed=3)
    first = outcomes(api, 30)
    sandbox.control(seed=3)

    assert outcomes(api, 30) == first


def test_random_faults__a_lost_reply_is_delivered_and_a_retry_suppressed(
    api: Api, sandbox: WeComSandbox
) -> None:
    sandbox.control(lost_reply_rate=1.0)

    with pytest.raises(requests.ConnectionError):
        api.send(deduplicated())
    sandbox.control(lost_reply_rate=0)
    retry = api.send(deduplicated())

    lost = only(sandbox.delivered())
    assert (lost.reply_lost, retry["msgid"]) == (True, lost.msgid)
    assert sandbox.ledger()[-1].status == "suppressed"


def test_random_faults__slow_replies_come_late_by_the_delay(
    api: Api, sandbox: WeComSandbox
) -> None:
    api.token  # noqa: B018 - fetched first: gettoken is never slowed
    sandbox.control(slow_reply_rate=1.0, slow_reply_delay=0.3)

    started = time.monotonic()
    assert api.send(text())["errcode"] == 0
    took = time.monotonic() - started

    assert took >= 0.3
    assert only(sandbox.delivered()).reply_delay == 0.3
    assert sandbox.stats()["slow replies"] == 1


def test_random_faults__given_at_start_come_back_with_a_reset() -> None:
    with running_sandbox(fault_rates=FaultRates(busy=1.0, seed=5)) as sandbox:
        api = Api(sandbox.base_url)
        try:
            assert outcomes(api, 2) == [-1, -1]
            sandbox.control(busy_rate=0)
            assert outcomes(api, 1) == [0]
            sandbox.reset()
            assert outcomes(api, 1) == [-1]
            assert sandbox.control()["faults"]["rates"]["busy"] == 1.0
        finally:
            api.close()


@pytest.mark.parametrize(
    "switches",
    [{"busy_rate": 1.5}, {"lost_reply_rate": -0.1}, {"http_error_rate": "often"}, {"seed": 1.5}],
)
def test_random_faults__bad_rates_and_seeds_are_refused(api: Api, switches: Any) -> None:
    reply = api.post("/sandbox/control", switches)

    assert reply.status_code == 400
    assert api.send(text())["errcode"] == 0


@pytest.mark.processes
def test_random_faults__from_the_command_line() -> None:
    with sandbox_process("--busy-rate", "1", "--seed", "3", "--verbosity", "0") as process:
        api = Api(process.base_url)
        try:
            assert outcomes(api, 3) == [-1, -1, -1]
        finally:
            api.close()
        rates = process.client.control()["faults"]["rates"]

    assert (rates["busy"], rates["seed"]) == (1.0, 3)


def test_control__over_http_sets_and_reports_switches(api: Api, sandbox: WeComSandbox) -> None:
    reply = api.post("/sandbox/control", {"busy": 1, "invalid_users": ["ghost"]})
    state = api.session.get(f"{api.base_url}/sandbox/control").json()

    assert reply.status_code == 200
    assert state["faults"]["busy"] == 1
    assert state["invalid_users"] == ["ghost"]
    assert api.send(text())["errcode"] == -1


@pytest.mark.parametrize(
    "switches", [{"nonsense": 1}, {"busy": -1}, {"busy": "two"}, {"http_status": 404}, [1]]
)
def test_control__rejects_a_bad_switch_with_400(api: Api, switches: Any) -> None:
    reply = api.post("/sandbox/control", switches)

    assert reply.status_code == 400
    assert reply.json()["error"]


def test_control__with_one_bad_switch_changes_nothing(api: Api, sandbox: WeComSandbox) -> None:
    token = api.token

    reply = api.post("/sandbox/control", {"busy": 1, "invalidate_tokens": True, "http_status": 404})

    assert reply.status_code == 400
    assert api.send(text(), token=token)["errcode"] == 0
    assert sandbox.control()["faults"]["busy"] == 0


def test_reset__clears_ledger_tokens_faults_and_limits(api: Api, sandbox: WeComSandbox) -> None:
    token = api.token
    api.send(text())
    sandbox.control(busy=3, invalid_users=["zhangsan"], rate_limit=1)
    last_id = sandbox.ledger()[-1].id

    reset = api.post("/sandbox/reset", {})

    assert reset.status_code == 200
    assert sandbox.ledger() == []
    assert api.send(text(), token=token)["errcode"] == 40014
    fresh = api.gettoken()["access_token"]
    assert [api.send(text(f"m{i}"), token=fresh)["errcode"] for i in range(2)] == [0, 0]
    assert sandbox.ledger()[-1].id > last_id  # ids go on, so pollers stay right


# Ledger and page -----------------------------------------------------------------------


def test_messages__since_id_returns_only_newer_entries(api: Api, sandbox: WeComSandbox) -> None:
    for i in range(3):
        api.send(text(f"m{i}"))
    first_id = sandbox.ledger()[0].id

    page = api.session.get(f"{api.base_url}/sandbox/messages", params={"since_id": first_id})

    data = page.json()
    assert [m["content"] for m in data["messages"]] == ["m1", "m2"]
    assert data["last_id"] == first_id + 2
    assert "request" in data["messages"][0]


def test_messages__status_and_limit_filter(api: Api, sandbox: WeComSandbox) -> None:
    sandbox.control(busy=1)
    for i in range(3):
        api.send(text(f"m{i}"))

    url = f"{api.base_url}/sandbox/messages"
    rejected = api.session.get(url, params={"status": "rejected"}).json()["messages"]
    first = api.session.get(url, params={"status": "delivered", "limit": 1}).json()["messages"]

    assert [(m["errcode"], m["content"]) for m in rejected] == [(-1, "")]
    assert [m["content"] for m in first] == ["m1"]


def test_client__reads_and_controls_over_http(api: Api, sandbox: WeComSandbox) -> None:
    with SandboxClient(sandbox.base_url) as client:
        client.control(busy=1)
        api.send(text("a"))
        api.send(text("b"))

        assert [e.content for e in client.delivered(to="zhangsan")] == ["b"]
        assert client.ledger() == sandbox.ledger()
        assert client.stats()["delivered"] == 1
        with pytest.raises(ValueError, match="unknown switches"):
            client.control(bogus=1)


def test_page__shows_what_arrived_escaped(api: Api, sandbox: WeComSandbox) -> None:
    api.send(text("<script>alert(1)</script> follow up", touser="zhangsan|ghost"))
    sandbox.control(busy=1)
    api.send(text("second"))

    page = api.session.get(f"{api.base_url}/sandbox/")

    assert page.headers["Content-Type"].startswith("text/html")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; follow up" in page.text
    assert "<script>" not in page.text
    assert "zhangsan|ghost" in page.text
    assert "rejected -1" in page.text
    assert 'http-equiv="refresh"' in page.text


def test_secret_and_tokens_never_appear_in_ledger_page_control_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="wecom_sandbox")
    with running_sandbox(verbose=True) as sandbox:
        api = Api(sandbox.base_url)
        try:
            api.gettoken(corpsecret="a-wrong-guess")
            token = api.token
            api.send(text())
            api.send(text(), token=token + "x")
            api.robot({"msgtype": "text", "text": {"content": "x"}})
            shown = [
                api.session.get(f"{api.base_url}{path}").text
                for path in ("/sandbox/", "/sandbox/messages", "/sandbox/stats", "/sandbox/control")
            ]
        finally:
            api.close()

    assert "POST /cgi-bin/message/send" in caplog.text  # verbose logging did run
    for text_shown in [*shown, caplog.text]:
        for secret in (CORP_SECRET, "a-wrong-guess", token, ROBOT_KEY):
            assert secret not in text_shown


# Lifecycle -----------------------------------------------------------------------------


def test_stop__ends_kept_alive_connections_and_frees_the_port() -> None:
    sandbox = WeComSandbox(corp_id=CORP_ID, corp_secret=CORP_SECRET, agent_id=AGENT_ID)
    base_url = sandbox.start()
    api = Api(base_url)
    try:
        assert api.gettoken()["errcode"] == 0  # a connection now kept alive
        threads = threading.active_count()
        sandbox.stop()

        assert threading.active_count() <= threads - 2  # server loop and connection
        with pytest.raises(requests.ConnectionError):
            api.gettoken()
    finally:
        api.close()
        sandbox.stop()


@pytest.mark.processes
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_command__serves_as_a_process_and_stops_cleanly_on_a_signal(signum: int) -> None:
    with sandbox_process("--rate-limit", "2", "--token-ttl", "60") as process:
        api = Api(process.base_url)
        try:
            token = api.gettoken()
            codes = [api.send(text(f"m{i}", touser=f"u{i}"))["errcode"] for i in range(3)]
        finally:
            api.close()
        delivered = process.client.delivered()
        process.popen.send_signal(signum)
        assert process.popen.wait(10) == 0
        output = process.popen.stdout.read() if process.popen.stdout else ""

    assert token["expires_in"] == 60
    assert codes == [0, 0, 45009]
    assert [e.content for e in delivered] == ["m0", "m1"]
    assert "stopped (2 messages delivered)" in output
    assert CORP_SECRET not in output


@pytest.mark.parametrize(
    ("env", "credentials"),
    [
        (
            {
                "WECOM_CORP_ID": "ww-from-settings",
                "WECOM_CORP_SECRET": "secret-from-settings",
                "WECOM_AGENT_ID": "4242",
                "WECOM_ROBOT_KEY": "",
            },
            ("ww-from-settings", "secret-from-settings", 4242),
        ),
        (
            {
                "WECOM_CORP_ID": "",
                "WECOM_CORP_SECRET": "",
                "WECOM_AGENT_ID": "",
                "WECOM_ROBOT_KEY": "",
            },
            (DEV_CORP_ID, DEV_CORP_SECRET, DEV_AGENT_ID),
        ),
    ],
    ids=["settings", "development-defaults"],
)
@pytest.mark.processes
def test_command__takes_credentials_from_settings_else_development_values(
    env: dict[str, str], credentials: tuple[str, str, int]
) -> None:
    corp_id, secret, agent_id = credentials
    with sandbox_process(env=env, credentials=False) as process:
        api = Api(process.base_url)
        try:
            token = api.gettoken(corp_id, secret)["access_token"]
            reply = api.send(text(agentid=agent_id), token=token)
            robot = api.robot({"msgtype": "text", "text": {"content": "x"}}, key=DEV_ROBOT_KEY)
        finally:
            api.close()

    assert reply["errcode"] == 0
    assert robot["errcode"] == 0


@pytest.mark.processes
def test_command__port_in_use_is_a_clear_error(sandbox: WeComSandbox) -> None:
    port = sandbox.base_url.rsplit(":", 1)[1]
    result = subprocess.run(
        [sys.executable, "manage.py", "wecom_sandbox", "--port", port],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "cannot run the WeCom sandbox" in result.stderr
