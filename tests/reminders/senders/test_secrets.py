"""Secrets never reach a row, a page or a log, whatever field of a channel holds them.

A secret is planted in every configurable field of every channel that can carry a
credential, each channel is made to fail in a way whose error text would quote it
(``InvalidHeader`` repeats a header value, a URL error repeats the URL, a gateway
echoes its request, a sender raises something unexpected), and the runs are delivered
through the engine. Then the ledger, the runs, the admin's pages and every log record
are searched for it.
"""

from __future__ import annotations

import json
import logging
import re
import socket
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from django.urls import reverse

from reminders.models import SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

from .stub_server import Canned, StubServer

pytestmark = pytest.mark.django_db

SECRET = "Pl4nted-S3cret-9f2c"
# A secret the settings name only as ${H2_GATEWAY_ACCOUNT}: read from the environment.
ENV_SECRET = "Env-Acc0unt-5e1d"
ENV_KEY = "Env-K3y-0c4b"


def closed_port() -> int:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return int(unused.getsockname()[1])


def channels(stub: StubServer) -> dict[str, dict[str, Any]]:
    down = f"http://127.0.0.1:{closed_port()}"
    gateway = {"BACKEND": "reminders.senders.http.HttpSender"}
    return {
        "header": {
            **gateway,
            # requests refuses the value and quotes it (repr, newline escaped).
            "OPTIONS": {"url": stub.url + "/send", "headers": {"X-Custom": f"{SECRET}\n"}},
        },
        "url": {
            **gateway,
            "OPTIONS": {"url": f"{down}/send?apikey={SECRET}&user=u:{SECRET}"},
        },
        # A server that answers, so that urllib3 logs the request line, query and all;
        # the secret sits under a name that says nothing of it.
        "url_live": {**gateway, "OPTIONS": {"url": f"{stub.url}/nowhere?appid=crm&u={SECRET}"}},
        "userinfo": {**gateway, "OPTIONS": {"url": f"http://user:{SECRET}@127.0.0.1:0/send"}},
        "body": {
            **gateway,
            "OPTIONS": {
                "url": stub.url + "/echo",
                "body": {"to": "{recipient}", "text": "{content}", "password": SECRET},
                "success_field": "code",
                "success_values": [0],
                "error_field": "msg",
            },
        },
        # ${ENV} values, expanded into a request the gateway echoes in its error.
        "env": {
            **gateway,
            "OPTIONS": {
                "url": stub.url + "/echo",
                "headers": {"X-Key": "${H2_GATEWAY_KEY}"},
                "body": {"to": "{recipient}", "text": "{content}", "from": "${H2_GATEWAY_ACCOUNT}"},
                "success_field": "code",
                "success_values": [0],
                "error_field": "msg",
            },
        },
        "login": {
            **gateway,
            "OPTIONS": {
                "url": stub.url + "/send",
                "login_url": stub.url + "/login",
                "login_headers": {"X-Login": SECRET},
                "login_body": {"user": "crm", "pwd": SECRET},
                "token_header": "Authorization",
            },
        },
        "wecom": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {
                "api_base": down,
                "corp_id": "ww-corp",
                "corp_secret": SECRET,
                "agent_id": 1000002,
                "timeout": 1,
            },
        },
        "robot": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"api_base": down, "key": SECRET, "timeout": 1},
        },
        "buggy": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"api_key": SECRET},
        },
    }


def echo(request: Any) -> Canned:
    """A gateway that refuses the message and repeats the request in its error."""
    return Canned({"code": 1, "msg": f"refused: {request.body.decode()}"})


def login_failure(request: Any) -> Canned:
    return Canned({"error": f"bad login {request.body.decode()} {request.headers}"}, status=500)


@pytest.fixture
def planted(settings, stub: StubServer, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("H2_GATEWAY_ACCOUNT", ENV_SECRET)
    monkeypatch.setenv("H2_GATEWAY_KEY", ENV_KEY)
    stub.on("/echo", echo)
    stub.on("/login", login_failure)
    configured = channels(stub)
    settings.REMINDERS_CHANNELS = {**settings.REMINDERS_CHANNELS, **configured}
    return list(configured)


def test_a_secret_in_any_channel_field_never_reaches_rows_pages_or_logs(
    planted, stub, make_task, admin_client, caplog
):
    caplog.set_level(logging.DEBUG)
    tasks = [make_task(channel=alias, recipient=f"user-{alias}") for alias in planted]
    MemorySender.script[:] = [RuntimeError(f"auth failed with {SECRET}")]
    tick()

    runs = TaskRun.objects.filter(task__in=tasks)
    # Every channel failed, and said something about why.
    assert all(run.status != "sent" and run.error_message for run in runs), [
        (run.task.channel, run.status, run.error_message) for run in runs
    ]
    texts = [run.error_message for run in runs]
    texts += [f"{row.error_message} {row.reply_detail}" for row in SendLog.objects.all()]
    texts.append(caplog.text)
    for name in ("taskrun", "sendlog"):
        texts.append(admin_client.get(reverse(f"admin:reminders_{name}_changelist")).text)
    for run in runs:
        url = reverse("admin:reminders_taskrun_change", args=[run.pk])
        texts.append(admin_client.get(url).text)
    # Each channel met its failure: the live URL was requested (and logged by urllib3),
    # the echo gateway got the expanded ${ENV} value and said it back.
    assert any("/nowhere?" in record.getMessage() for record in caplog.records)
    assert any(ENV_SECRET.encode() in request.body for request in stub.calls("/echo"))
    leaks = [text for text in texts if any(s in text for s in (SECRET, ENV_SECRET, ENV_KEY))]
    assert not leaks, leaks
    # The masking is visible where a secret was quoted.
    assert any("***" in text for text in texts)


# A secret with what each escaping changes: a slash, a plus and letters beyond ASCII.
ODD_SECRET = "Se/cr+et-密钥-7"


def _lower_escapes(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda found: found[0].lower(), text)


# How a gateway may quote the request it refuses: JSON-escaped (ASCII only, solidus
# escaped or not, hex in either case), percent-encoded (as a path, as a query value, as
# a form; hex in either case).
ECHOES = {
    "json_ascii": lambda body: json.dumps(json.loads(body)),
    "json_solidus": lambda body: json.dumps(json.loads(body)).replace("/", "\\/"),
    "json_upper_hex": lambda body: re.sub(
        r"\\u[0-9a-f]{4}",
        lambda found: found[0][:2] + found[0][2:].upper(),
        json.dumps(json.loads(body)),
    ),
    "percent_path": lambda body: quote(body),
    "percent_value": lambda body: quote(body, safe=""),
    "percent_lower": lambda body: _lower_escapes(quote(body, safe="")),
    "percent_form": lambda body: quote_plus(body),
    "percent_gbk": lambda body: quote(body, safe="", encoding="gbk"),
}


def forms_of(secret: str) -> set[str]:
    """``secret`` as each echo above spells it."""
    quoted = json.dumps(secret, ensure_ascii=False)
    return {
        echo(quoted)[1:-1] if name.startswith("json") else echo(secret)
        for name, echo in ECHOES.items()
    }


@pytest.mark.parametrize("spelling", list(ECHOES))
def test_a_secret_a_gateway_echoes_escaped__is_masked_in_every_spelling(
    spelling, settings, stub, make_task, caplog
):
    caplog.set_level(logging.DEBUG)
    respell = ECHOES[spelling]
    stub.on(
        "/echo",
        lambda request: Canned({"code": 1, "msg": f"refused: {respell(request.body.decode())}"}),
    )
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "gateway": {
            "BACKEND": "reminders.senders.http.HttpSender",
            "OPTIONS": {
                "url": stub.url + "/echo",
                "body": {"to": "{recipient}", "text": "{content}", "password": ODD_SECRET},
                "success_field": "code",
                "success_values": [0],
                "error_field": "msg",
            },
        },
    }
    task = make_task(channel="gateway", recipient="lisi")
    tick()

    run = TaskRun.objects.get(task=task)
    assert run.status == "failed" and "refused" in run.error_message
    texts = [run.error_message, caplog.text]
    texts += [f"{row.error_message} {row.reply_detail}" for row in SendLog.objects.all()]
    spelled = forms_of(ODD_SECRET)
    leaks = [(form, text) for text in texts for form in spelled if form in text]
    assert not leaks, leaks
    assert "***" in run.error_message
