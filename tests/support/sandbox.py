"""The WeCom sandbox for tests: in this process per test, or as a process of its own.

* ``wecom_sandbox`` (fixture): a started ``WeComSandbox`` with the test credentials,
  stopped after the test; ``make_wecom_sandbox`` builds ones with other options.
  The root conftest registers this module as a plugin (``pytest_plugins``), which also
  installs the ledger check below; or use ``running_sandbox()`` in a fixture of your own.
* ``sandbox_process()``: ``manage.py wecom_sandbox --port 0`` as a child process, for
  tests where several processes send; it yields the URL and a ``SandboxClient``.
* ``wecom_settings(base_url)``: the ``WECOM_*`` settings that point a sender at it, the
  callback's included (cards go with buttons only where clicks can come back).
* ``assert_ledger_matches(box)``: our ledger (``SendLog`` rows ``sent``) against the
  sandbox's own. A test double is never more forgiving than the provider: every sandbox
  started with ``running_sandbox()`` or ``sandbox_process()`` (and the fixtures built on
  them) is checked this way when a test that uses the database returns, so a message
  the sandbox suppressed or rejected but the engine recorded as sent fails the test. A
  bare ``WeComSandbox`` is not watched.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Generator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reminders.models import SendLog
from reminders.senders.parts import CONTENT_LIMIT, split_content
from wecom_sandbox import LedgerEntry, SandboxClient, WeComSandbox
from wecom_sandbox.ledger import DELIVERED

REPO = Path(__file__).resolve().parents[2]

CORP_ID = "ww-test-corp"
CORP_SECRET = "test-secret-7d1f0c"
AGENT_ID = 1000017
ROBOT_KEY = "test-robot-5b2e"

DEFAULTS: dict[str, Any] = {
    "corp_id": CORP_ID,
    "corp_secret": CORP_SECRET,
    "agent_id": AGENT_ID,
    "robot_keys": [ROBOT_KEY],
}


# The callback's credentials, as ``make run`` sets them: with them the app channel's
# follow-ups and inquiry alerts are cards with buttons (``messages.cards.carried``).
CALLBACK_TOKEN = "sandbox-callback-token"
CALLBACK_AES_KEY = "sandboxCallbackKeyForLocalDevelopment000000"


def wecom_settings(base_url: str) -> dict[str, Any]:
    """Settings for ``override_settings`` (or a child's environment, as strings): the
    app's credentials on the sandbox at ``base_url``, and the callback's for that app."""
    return {
        "WECOM_API_BASE": base_url,
        "WECOM_CORP_ID": CORP_ID,
        "WECOM_CORP_SECRET": CORP_SECRET,
        "WECOM_AGENT_ID": str(AGENT_ID),
        "WECOM_CALLBACK_TOKEN": CALLBACK_TOKEN,
        "WECOM_CALLBACK_AES_KEY": CALLBACK_AES_KEY,
    }


# -- our ledger against the sandbox's ---------------------------------------------------

APP_SEND = "message/send"
# The channel the tests point at a sandbox (tests/settings.py declares it for processes).
SANDBOX_CHANNELS = ("wecom",)


def ledger_mismatches(
    entries: Iterable[LedgerEntry], *, channels: Collection[str] = SANDBOX_CHANNELS
) -> list[str]:
    """What our ledger claims that the sandbox's contradicts, one line each.

    Each ``sent`` row of ``channels`` must name (in ``provider_message_id``, or every part
    in ``reply_detail["msgids"]``, or for a card WeCom said was delivered before the
    ``task_id`` of a delivered card) a delivery to its recipient, and no delivery may be
    claimed by two rows with different keys: a message the sandbox suppressed as a
    duplicate answers with the msgid of the earlier delivery it was merged into. A text
    the sender splits (``split_content``) must claim one delivery per part, each of
    which carried that part's text: a part merged into another's delivery, or never
    sent, is not hidden by the others. A text ``partly_sent`` must so claim the parts it
    names (``parts_sent``), its first ones.
    """
    entries = [e for e in entries if e.endpoint == APP_SEND]
    delivered = {e.msgid: e for e in entries if e.status == DELIVERED and e.msgid}
    # A card re-sent after its first reply was lost is answered "task_id taken" (42014):
    # the row names no msgid, but the card's task_id, whose first send was delivered.
    cards = {_card_task_id(e): e.msgid for e in delivered.values() if _card_task_id(e)}
    problems: list[str] = []
    claimed: dict[str, set[str]] = defaultdict(set)
    claims = (SendLog.Status.SENT, SendLog.Status.PARTLY_SENT)
    rows = SendLog.objects.filter(status__in=claims, channel__in=channels)
    columns = ("key", "recipient", "provider_message_id", "reply_detail", "body", "status")
    for key, recipient, msgid, detail, body, status, parts_sent in rows.order_by("pk").values_list(
        *columns, "parts_sent"
    ):
        msgids = (detail or {}).get("msgids") or [msgid]
        if (detail or {}).get("delivered_before"):
            msgids = [cards.get(str(detail.get("task_id")), "")]
        texts = _parts(body)
        if status == SendLog.Status.PARTLY_SENT:  # its first parts, as many as went
            msgids = parts_sent
            texts = texts[: len(msgids)] if texts is not None else None
        if texts is not None and len(texts) != len(msgids):
            problems.append(
                f"{key} to {recipient}: {len(msgids)} msgid(s) recorded for a text "
                f"of {len(texts)} parts"
            )
        for index, part in enumerate(msgids):
            claimed[part].add(key)
            entry = delivered.get(part)
            sent_text = _sent_text(entry)
            in_step = texts is not None and len(texts) == len(msgids)
            if in_step and sent_text is not None and sent_text != texts[index]:
                problems.append(
                    f"{key} to {recipient}: part {index + 1}/{len(msgids)} names msgid "
                    f"{part!r}, whose delivery carried other text"
                )
            if entry is None:
                problems.append(
                    f"{key} to {recipient}: recorded sent with msgid {part!r}, "
                    f"which no delivery has ({_outcomes(entries, recipient)})"
                )
            elif recipient not in entry.delivered_to:
                problems.append(
                    f"{key} to {recipient}: msgid {part!r} was delivered to "
                    f"{list(entry.delivered_to)} only"
                )
    for part, keys in claimed.items():
        if len(keys) > 1 and part:
            problems.append(
                f"one delivery ({part!r}) is recorded as sent by {len(keys)} keys: "
                f"{sorted(keys)}; the others were suppressed as duplicates"
            )
    return problems


def _card_task_id(entry: LedgerEntry) -> str:
    card = (entry.request or {}).get("template_card")
    return str(card.get("task_id") or "") if isinstance(card, dict) else ""


def _parts(body: str) -> list[str] | None:
    """The texts a WeCom app sender sends ``body`` (a ledger row's) as, one per request:
    its parts when it is over the limit; None for a type without a text content."""
    try:
        message = json.loads(body)
        content = message[message["msgtype"]]["content"]
    except (ValueError, KeyError, TypeError):
        return None
    if message["msgtype"] not in ("text", "markdown") or not isinstance(content, str):
        return None
    return split_content(content) if len(content.encode()) > CONTENT_LIMIT else [content]


def _sent_text(entry: LedgerEntry | None) -> str | None:
    """The text content of the request behind ``entry``, as the sender wrote it."""
    request = entry.request if entry is not None else None
    if not isinstance(request, dict):
        return None
    content = (request.get(str(request.get("msgtype"))) or {}).get("content")
    return content if isinstance(content, str) else None


def _outcomes(entries: list[LedgerEntry], recipient: str) -> str:
    mine = [e for e in entries if recipient in e.touser]
    return "the sandbox's entries to them: " + (
        ", ".join(f"#{e.id} {e.status} {e.errcode} msgid={e.msgid!r}" for e in mine) or "none"
    )


def assert_ledger_matches(
    box: WeComSandbox | SandboxClient | Iterable[LedgerEntry],
    *,
    channels: Collection[str] = SANDBOX_CHANNELS,
) -> None:
    """Fail if a ``sent`` row is not a delivery of the sandbox (see ``ledger_mismatches``)."""
    entries = box.ledger() if isinstance(box, WeComSandbox | SandboxClient) else list(box)
    problems = ledger_mismatches(entries, channels=channels)
    assert not problems, "the ledger says sent what the sandbox did not deliver:\n" + "\n".join(
        problems
    )


@dataclass
class Watched:
    """A sandbox started in the current test, and how to read its ledger then."""

    name: str
    read: Callable[[], list[LedgerEntry]]


_watched: list[Watched] = []


def _watch(name: str, read: Callable[[], list[LedgerEntry]]) -> Watched:
    watched = Watched(name, read)
    _watched.append(watched)
    return watched


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _watched.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """After a test's body returns, and before any teardown (the database still holds
    its rows, the sandboxes still run): the ledger of every sandbox it started agrees
    with ours. A failed test is left to its own failure."""
    try:
        result = yield
        if "_django_db_helper" in item.fixturenames:
            for watched in _watched:
                problems = ledger_mismatches(watched.read())
                if problems:
                    pytest.fail(
                        f"{watched.name}: the ledger says sent what the sandbox did not "
                        "deliver:\n" + "\n".join(problems),
                        pytrace=False,
                    )
        return result
    finally:
        _watched.clear()


# -- sandboxes ---------------------------------------------------------------------------


@contextlib.contextmanager
def running_sandbox(**options: Any) -> Iterator[WeComSandbox]:
    """A sandbox serving on a free port of 127.0.0.1 for the length of the block;
    watched (``assert_ledger_matches``) when the test returns."""
    sandbox = WeComSandbox(**{**DEFAULTS, **options})
    sandbox.start()
    _watch(repr(sandbox), sandbox.ledger)
    try:
        yield sandbox
    finally:
        sandbox.stop()


@pytest.fixture
def wecom_sandbox() -> Iterator[WeComSandbox]:
    with running_sandbox() as sandbox:
        yield sandbox


@pytest.fixture
def make_wecom_sandbox() -> Iterator[Callable[..., WeComSandbox]]:
    """Factory: ``make_wecom_sandbox(rate_limit=5)``; every one is stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda **options: stack.enter_context(running_sandbox(**options))


@dataclass
class SandboxProcess:
    popen: subprocess.Popen[str]
    base_url: str
    client: SandboxClient

    @property
    def pid(self) -> int:
        return self.popen.pid


@contextlib.contextmanager
def sandbox_process(
    *args: str,
    env: dict[str, str] | None = None,
    credentials: bool = True,
    timeout: float = 30.0,
) -> Iterator[SandboxProcess]:
    """``manage.py wecom_sandbox --port 0 ARGS``, stopped with SIGTERM after the block.

    With ``credentials`` it gets the test ones (``CORP_ID`` ...); without, the settings
    (``env``) decide, as under `make run`.
    """
    command = [sys.executable, "manage.py", "wecom_sandbox", "--port", "0", *args]
    if credentials:
        command += ["--corp-id", CORP_ID, "--corp-secret", CORP_SECRET]
        command += ["--agent-id", str(AGENT_ID), "--robot-key", ROBOT_KEY]
    popen = subprocess.Popen(
        command,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert popen.stdout is not None and popen.stderr is not None
    try:
        with _deadline(popen, timeout):
            line = popen.stdout.readline()
        if not line.startswith("WECOM_API_BASE="):
            popen.kill()
            raise RuntimeError(f"the sandbox did not start: {line!r}\n{popen.stderr.read()}")
        base_url = line.strip().partition("=")[2]
        with SandboxClient(base_url) as client:
            watched = _watch(f"sandbox process {base_url}", client.ledger)
            try:
                yield SandboxProcess(popen, base_url, client)
            finally:
                _keep_ledger(watched, client)
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        popen.stdout.close()
        popen.stderr.close()


def _keep_ledger(watched: Watched, client: SandboxClient) -> None:
    """Read the ledger of a sandbox process before it stops, for the check at the end."""
    try:
        entries = client.ledger()
    except Exception as exc:  # a sandbox that died: the check says so
        error = exc

        def unreadable() -> list[LedgerEntry]:
            raise AssertionError(f"{watched.name}: its ledger could not be read: {error!r}")

        watched.read = unreadable
    else:
        watched.read = lambda: entries


@contextlib.contextmanager
def _deadline(popen: subprocess.Popen[str], seconds: float) -> Iterator[None]:
    """Kill ``popen`` if the block takes longer than ``seconds`` (a blocking read)."""
    timer = threading.Timer(seconds, popen.kill)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
