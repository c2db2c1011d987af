"""The WeCom sandbox for tests: in this process per test, or as a process of its own.

* ``wecom_sandbox`` (fixture): a started ``WeComSandbox`` with the test credentials,
  stopped after the test; ``make_wecom_sandbox`` builds ones with other options.
  Register them with ``pytest_plugins = ["tests.support.sandbox"]`` in the root
  conftest, or use ``running_sandbox()`` in a fixture of your own.
* ``sandbox_process()``: ``manage.py wecom_sandbox --port 0`` as a child process, for
  tests where several processes send; it yields the URL and a ``SandboxClient``.
* ``wecom_settings(base_url)``: the ``WECOM_*`` settings that point a sender at it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ops.sandbox import SandboxClient, WeComSandbox

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


def wecom_settings(base_url: str) -> dict[str, Any]:
    """Settings for ``override_settings`` (or a child's environment, as strings)."""
    return {
        "WECOM_API_BASE": base_url,
        "WECOM_CORP_ID": CORP_ID,
        "WECOM_CORP_SECRET": CORP_SECRET,
        "WECOM_AGENT_ID": str(AGENT_ID),
    }


@contextlib.contextmanager
def running_sandbox(**options: Any) -> Iterator[WeComSandbox]:
    """A sandbox serving on a free port of 127.0.0.1 for the length of the block."""
    sandbox = WeComSandbox(**{**DEFAULTS, **options})
    sandbox.start()
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
            yield SandboxProcess(popen, base_url, client)
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


@contextlib.contextmanager
def _deadline(popen: subprocess.Popen[str], seconds: float) -> Iterator[None]:
    """Kill ``popen`` if the block takes longer than ``seconds`` (a blocking read)."""
    timer = threading.Timer(seconds, popen.kill)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
