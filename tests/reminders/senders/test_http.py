"""HttpSender: a third-party gateway configured in OPTIONS, over real HTTP to the stub."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reminders.exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PermanentSendError,
    RecipientSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from reminders.senders.base import Message
from reminders.senders.http import HttpSender

from .stub_server import Canned, Request, StubServer
from .tls_server import TlsServer, certificate

SEND = "/api/send"
LOGIN = "/api/login"
API_KEY = "gw-api-key-7f3a9c"
PASSWORD = "gw-password-42xyz"

Make = Callable[..., HttpSender]


@pytest.fixture(autouse=True)
def _gateway_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_KEY", API_KEY)
    monkeypatch.setenv("GATEWAY_PASSWORD", PASSWORD)


@pytest.fixture
def make_http(stub: StubServer) -> Iterator[Make]:
    made: list[HttpSender] = []

    def make(**options: Any) -> HttpSender:
        options = {
            "url": stub.url + SEND,
            "headers": {"X-Api-Key": "${GATEWAY_KEY}"},
            "body": {
                "account": "sales",
                "to": "{recipient}",
                "text": "{content}",
                "meta": {"key": "{key}", "type": "{msgtype}", "version": 2},
            },
            "success_field": "result.code",
            "success_values": [0],
            "error_field": "result.msg",
            "message_id_field": "result.id",
            "timeout": 1.0,
            **options,
        }
        sender = HttpSender("gateway", **options)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.close()


def message(content: str = "Follow up with ACME today") -> Message:
    return Message("wx-zhangsan", "text", {"content": content}, "task-9:2026-12-02")


def accepted(message_id: str = "g-1") -> Canned:
    return Canned({"result": {"code": 0, "id": message_id}})


def test_send__fills_the_body_template_and_env_headers(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, accepted("g-77"))

    result = make_http().send(message())

    [request] = stub.calls(SEND)
    assert request.json == {
        "account": "sales",
        "to": "wx-zhangsan",
        "text": "Follow up with ACME today",
        "meta": {"key": "task-9:2026-12-02", "type": "text", "version": 2},
    }
    assert request.headers["X-Api-Key"] == API_KEY
    assert (result.message_id, result.code) == ("g-77", "0")


def test_send__braces_in_content_are_not_a_template(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, accepted())

    make_http().send(message("{recipient} owes {{0}} ${GATEWAY_KEY}"))

    assert stub.calls(SEND)[0].json["text"] == "{recipient} owes {{0}} ${GATEWAY_KEY}"


def test_send__a_textcard_is_sent_as_its_text(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, accepted())
    card = {"title": "Follow-up", "description": "ACME waits", "url": "https://crm.example/7"}

    make_http().send(Message("u", "textcard", card, "k"))

    assert stub.calls(SEND)[0].json["text"] == "Follow-up\nACME waits\nhttps://crm.example/7"


def test_send__failure_code_is_permanent_with_the_gateways_reason(
    make_http: Make, stub: StubServer
) -> None:
    stub.on(SEND, Canned({"result": {"code": 1003, "msg": "account offline"}}))

    with pytest.raises(PermanentSendError) as caught:
        make_http().send(message())

    assert caught.value.code == "1003"
    assert "account offline" in caught.value.message


def test_send__transient_values_are_retried(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, Canned({"result": {"code": "BUSY"}}))

    with pytest.raises(TransientSendError) as caught:
        make_http(transient_values=["BUSY"]).send(message())

    assert caught.value.code == "BUSY"


def test_send__success_values_compare_as_text(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, Canned({"result": {"code": "0", "id": 5}}))

    result = make_http().send(message())

    assert (result.code, result.message_id) == ("0", "5")


@pytest.mark.parametrize("status", [500, 502, 503])
def test_send__a_server_error_is_in_doubt(make_http: Make, stub: StubServer, status: int) -> None:
    # The request reached a server that failed while handling it: it may have passed
    # the message on first.
    stub.on(SEND, Canned(raw=b"oops", status=status))

    with pytest.raises(InDoubtSendError) as caught:
        make_http().send(message())

    assert (caught.value.code, caught.value.category) == (f"http-{status}", "in_doubt")


def test_send__408_is_passing_and_certain(make_http: Make, stub: StubServer) -> None:
    # The server gave up waiting for our request: it never took it.
    stub.on(SEND, Canned(raw=b"request timeout", status=408))

    with pytest.raises(TransientSendError) as caught:
        make_http().send(message())

    assert not isinstance(caught.value, InDoubtSendError)
    assert (caught.value.code, caught.value.category) == ("http-408", "passing")


def test_send__429_pauses_for_retry_after(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, Canned({"msg": "slow down"}, status=429, headers={"Retry-After": "7"}))

    with pytest.raises(ThrottledSendError) as caught:
        make_http().send(message())

    assert caught.value.pause_seconds == 7


def test_send__a_non_json_page_is_passing_when_a_field_decides(
    make_http: Make, stub: StubServer
) -> None:
    stub.on(SEND, Canned(raw=b"<html>proxy</html>"))

    with pytest.raises(TransientSendError, match="not JSON"):
        make_http().send(message())
    assert make_http(success_field="").send(message()).code == "0"  # status alone decides


def test_send__a_missing_env_var_is_configuration_and_nothing_is_sent(
    make_http: Make, stub: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GATEWAY_KEY")

    with pytest.raises(ConfigurationSendError, match="GATEWAY_KEY"):
        make_http().send(message())

    assert stub.requests == []


def test_send__timeout_is_passing(make_http: Make, stub: StubServer) -> None:
    stub.on(SEND, Canned({"result": {"code": 0}}, delay=1.5))

    with pytest.raises(TransientSendError) as caught:
        make_http(timeout=0.3).send(message())

    assert caught.value.code == "timeout"


def test_recipient_pattern__narrows_the_recipients_never_widens_them(
    make_http: Make, stub: StubServer
) -> None:
    stub.on(SEND, Canned({"result": {"code": 0, "id": "m1"}}))
    sender = make_http(recipient_pattern=r"1[3-9][0-9]{9}")
    sender.validate_recipient("13800138000")
    sender.send(Message("13800138000", "text", {"content": "hi"}, "k"))

    for recipient in ("zhangsan", "+8613800138000", "13800138000|13900139000"):
        with pytest.raises(RecipientSendError):
            sender.validate_recipient(recipient)
    with pytest.raises(RecipientSendError):
        sender.send(Message("zhangsan", "text", {"content": "hi"}, "k2"))
    with pytest.raises(RecipientSendError, match="@all"):
        make_http(recipient_pattern=".*").validate_recipient("@all")
    assert len(stub.calls(SEND)) == 1


def test_recipient_pattern__must_be_a_regular_expression(make_http: Make) -> None:
    with pytest.raises(ConfigurationSendError, match="recipient_pattern"):
        make_http(recipient_pattern="1[3-9")


def test_duplicate_check__only_when_configured(make_http: Make) -> None:
    assert make_http().supports_duplicate_check is False
    sender = make_http(duplicate_check_seconds=600)
    assert (sender.supports_duplicate_check, sender.duplicate_check_seconds) == (True, 600)


# -- TLS: what an SSLError says was sent ----------------------------------------------------


@pytest.fixture(scope="module")
def tls_certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return certificate(tmp_path_factory.mktemp("tls"))


def test_send__tls_broken_while_reading_the_reply_is_in_doubt(
    make_http: Make, tls_certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    # urllib3 raises SSLError for a bad record in the reply too: the request had arrived.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_certificate[0]))
    server = TlsServer("break-reply", *tls_certificate)
    with server, pytest.raises(InDoubtSendError) as caught:
        make_http(url=server.url + SEND).send(message())

    assert server.requests == 1
    assert caught.value.code == "network"


@pytest.mark.parametrize("trusted", [True, False], ids=["handshake refused", "untrusted"])
def test_send__tls_failing_in_the_handshake_sent_nothing(
    make_http: Make,
    tls_certificate: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    trusted: bool,
) -> None:
    if trusted:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls_certificate[0]))
    mode = "plain" if trusted else "break-reply"
    server = TlsServer(mode, *tls_certificate)
    with server, pytest.raises(TransientSendError) as caught:
        make_http(url=server.url + SEND).send(message())

    assert server.requests == 0
    assert not isinstance(caught.value, InDoubtSendError)
    assert caught.value.code == "connect"


# -- login --------------------------------------------------------------------------------

LOGIN_OPTIONS = {
    "login_body": {"user": "crm", "password": "${GATEWAY_PASSWORD}"},
    "token_field": "data.token",
    "token_ttl_field": "data.expires_in",
    "token_header": "Authorization",
    "token_format": "Bearer {token}",
}


@pytest.fixture
def gateway(stub: StubServer) -> StubServer:
    """A gateway whose login issues numbered tokens and whose send checks the latest."""
    issued: list[str] = []

    def login(request: Request) -> Canned:
        if request.json.get("password") != PASSWORD:
            return Canned({"msg": "bad password"}, status=401)
        issued.append(f"session-{len(issued) + 1}-abcdef")
        return Canned({"data": {"token": issued[-1], "expires_in": 3600}})

    def send(request: Request) -> Canned:
        header = request.headers.get("Authorization", "")
        body_token = request.json.get("auth", {}).get("token", "")
        if f"Bearer {issued[-1]}" != header and body_token != issued[-1]:
            return Canned({"msg": "login expired"}, status=401)
        return accepted()

    stub.on(LOGIN, login)
    stub.on(SEND, send)
    stub.issued = issued  # type: ignore[attr-defined]
    return stub


@pytest.mark.django_db
def test_login__the_token_is_shared_by_every_process(make_http: Make, gateway: StubServer) -> None:
    options = {"login_url": gateway.url + LOGIN, **LOGIN_OPTIONS}
    make_http(**options).send(message())
    make_http(**options).send(message())

    assert len(gateway.calls(LOGIN)) == 1
    assert [r.headers["Authorization"] for r in gateway.calls(SEND)] == [
        "Bearer session-1-abcdef"
    ] * 2
    assert gateway.calls(LOGIN)[0].json == {"user": "crm", "password": PASSWORD}


@pytest.mark.django_db
def test_login__a_401_logs_in_again_once(make_http: Make, gateway: StubServer) -> None:
    sender = make_http(login_url=gateway.url + LOGIN, **LOGIN_OPTIONS)
    sender.send(message())
    gateway.issued.append("session-revoked")  # type: ignore[attr-defined]

    sender.send(message())

    assert len(gateway.calls(LOGIN)) == 2
    assert [r.headers["Authorization"][-16:] for r in gateway.calls(SEND)] == [
        "session-1-abcdef",
        "session-1-abcdef",
        "session-3-abcdef",
    ]


@pytest.mark.django_db
def test_login__the_token_can_go_in_a_body_field(make_http: Make, gateway: StubServer) -> None:
    options = {**LOGIN_OPTIONS, "token_header": "", "token_body_field": "auth.token"}
    make_http(login_url=gateway.url + LOGIN, **options).send(message())

    assert gateway.calls(SEND)[0].json["auth"] == {"token": "session-1-abcdef"}


@pytest.mark.django_db
def test_login__a_code_in_the_reply_can_mean_log_in_again(
    make_http: Make, gateway: StubServer
) -> None:
    gateway.on(SEND, Canned({"result": {"code": 40101}}), accepted("after-login"))
    sender = make_http(login_url=gateway.url + LOGIN, token_invalid_values=[40101], **LOGIN_OPTIONS)

    assert sender.send(message()).message_id == "after-login"
    assert len(gateway.calls(LOGIN)) == 2


@pytest.mark.django_db
def test_login__refused_credentials_are_configuration(
    make_http: Make, gateway: StubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_PASSWORD", "wrong-password")

    with pytest.raises(ConfigurationSendError, match="credentials refused"):
        make_http(login_url=gateway.url + LOGIN, **LOGIN_OPTIONS).send(message())

    assert gateway.calls(SEND) == []


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (Canned({"msg": "upstream down"}, status=503), "http-503"),
        (Canned({"data": {"token": "late"}}, delay=1.5), "timeout"),
        (Canned(drop=True), "network"),
    ],
    ids=["5xx", "read timeout", "connection dropped"],
)
def test_login__a_failure_sent_no_message_so_it_is_plain_not_in_doubt(
    make_http: Make, gateway: StubServer, answer: Canned, code: str
) -> None:
    gateway.on(LOGIN, answer)

    with pytest.raises(TransientSendError) as caught:
        make_http(login_url=gateway.url + LOGIN, timeout=0.5, **LOGIN_OPTIONS).send(message())

    assert not isinstance(caught.value, InDoubtSendError)
    assert caught.value.code == code
    assert gateway.calls(SEND) == []


@pytest.mark.django_db
def test_secrets__never_in_gateway_errors(make_http: Make, gateway: StubServer) -> None:
    def echo(request: Request) -> Canned:
        return Canned(
            {"result": {"code": 9, "msg": json.dumps([request.headers, request.json])}},
        )

    sender = make_http(login_url=gateway.url + LOGIN, **LOGIN_OPTIONS)
    sender.send(message())
    gateway.on(SEND, echo)

    with pytest.raises(SendError) as caught:
        sender.send(message())

    text = str(caught.value)
    assert "result.code=9" in text
    for secret in (API_KEY, PASSWORD, "session-1-abcdef"):
        assert secret not in text
        assert secret not in repr(sender)
