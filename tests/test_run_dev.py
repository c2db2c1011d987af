"""``make run`` (bin/run-dev) stopped as asked: Ctrl-C (SIGINT to the terminal's whole
process group) or SIGTERM stops the processes it started and exits 0, so that make
reports no error; a process that dies on its own still fails it.

The script runs from a copy of the repository's layout whose ``.venv/bin/python`` is a
stand-in for ``manage.py``: ``migrate`` passes, the scheduler and the web server wait
until stopped (killed by its SIGTERM). ``WECOM_API_BASE`` is set, so
no sandbox or demo data is started."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import REPO

pytestmark = pytest.mark.processes

# manage.py's stand-in: "$1" is the command. FAIL_AFTER makes run_reminders die, once.
MANAGE = """#!/usr/bin/env bash
case "$2" in
    migrate) exit 0 ;;
    run_reminders) [[ -n ${FAIL_AFTER:-} ]] && { sleep "$FAIL_AFTER"; exit 3; } ;;
esac
exec sleep 60
"""


@pytest.fixture
def started_groups() -> Iterator[list[int]]:
    """The process groups a test started, killed after it whatever it left running."""
    groups: list[int] = []
    yield groups
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def start(tmp_path: Path, groups: list[int], **env: str) -> subprocess.Popen[str]:
    (tmp_path / "bin").mkdir()
    shutil.copy2(REPO / "bin" / "run-dev", tmp_path / "bin" / "run-dev")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(MANAGE)
    python.chmod(0o755)
    environ = {**os.environ, "WECOM_API_BASE": "http://127.0.0.1:9", "PORT": "1", **env}
    process = subprocess.Popen(
        ["bash", str(tmp_path / "bin" / "run-dev")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )
    groups.append(process.pid)
    return process


def started(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if "Ctrl-C stops everything" in line:
            return
    pytest.fail(f"run-dev never started: {process.stderr.read() if process.stderr else ''}")


@pytest.mark.parametrize(
    ("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)], ids=["ctrl-c", "term"]
)
def test_run_dev__stopped_as_asked__stops_everything_and_exits_0(
    tmp_path, started_groups, signum, group
):
    process = start(tmp_path, started_groups)
    started(process)
    if group:
        os.killpg(process.pid, signum)  # what Ctrl-C does: the whole foreground group
    else:
        process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "run-dev: stopped" in err


def test_run_dev__a_process_that_dies_on_its_own__fails_it(tmp_path, started_groups):
    process = start(tmp_path, started_groups, FAIL_AFTER="1")
    started(process)
    _, err = process.communicate(timeout=30)
    assert process.returncode == 3, err
    assert "run-dev: a process exited (status 3)" in err
