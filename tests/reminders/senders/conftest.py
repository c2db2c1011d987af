from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from reminders.senders.wecom import WeComSender

from .stub_server import StubServer

SECRET = "s3cr3t-corp-secret"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def wecom_stub(stub: StubServer) -> StubServer:
    stub.wecom(secret=SECRET)
    return stub


@pytest.fixture
def make_wecom(wecom_stub: StubServer) -> Iterator[Callable[..., WeComSender]]:
    """Factory: a WeComSender against the stub; each is one "process" with its own copy."""
    made: list[WeComSender] = []

    def make(**options: Any) -> WeComSender:
        options = {
            "api_base": wecom_stub.url,
            "corp_id": "ww-corp",
            "corp_secret": SECRET,
            "agent_id": "1000002",
            "timeout": 2.0,
            **options,
        }
        sender = WeComSender("wecom", **options)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.close()
