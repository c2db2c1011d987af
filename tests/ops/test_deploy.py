"""The deployment files in ``ops/deploy/`` agree with the engine: every way of stopping
the scheduler gives it longer than ``REMINDERS_SHUTDOWN_GRACE`` (a stop timeout that
is shorter kills workers mid-send: in doubt, or ``unknown``), and the image's
entrypoint execs the command, so that SIGTERM reaches ``run_reminders`` itself."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from django.db import connection

from reminders.engine.worker import HEARTBEAT_SECONDS
from tests.support.processes import REPO, ReminderProcess, kill_tree, wait_exit, wait_until

DEPLOY = REPO / "ops" / "deploy"
# After the grace the scheduler kills what is left of its clusters and waits up to 5 s
# (reminders.engine.worker); handing back unstarted work and the last tick come on top.
MARGIN_SECONDS = 15.0
# The engine's default, which a unit or container that does not set the grace gets.
DEFAULT_GRACE = 30.0


def unit(path: Path) -> dict[str, list[str]]:
    """A systemd unit's ``[Service]`` keys (a key may repeat: each value is kept)."""
    section, found = "", {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def seconds(value: str) -> float:
    """A systemd or compose duration: ``60``, ``60s``, ``1min 30s``, ``1m30s``."""
    units = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value.strip())
    assert parts and "".join(n + u for n, u in parts) == re.sub(r"\s", "", value), value
    return sum(float(number) * units[unit] for number, unit in parts)


def unit_grace(service: dict[str, list[str]]) -> float:
    grace = DEFAULT_GRACE
    for value in service.get("Environment", []):
        for name, setting in re.findall(r"(\w+)=(\S+)", value):
            if name == "REMINDERS_SHUTDOWN_GRACE":
                grace = float(setting)
    return grace


def assert_stops_in_time(service: dict[str, list[str]]) -> None:
    timeout = seconds(service["TimeoutStopSec"][-1])
    assert timeout >= unit_grace(service) + MARGIN_SECONDS


def how_to_unit(tmp_path: Path) -> Path:
    """The systemd unit docs/how-to/add-to-crm.md gives a CRM, as a file."""
    page = (REPO / "docs" / "how-to" / "add-to-crm.md").read_text()
    [block] = re.findall(r"```ini\n(.*?)```", page, re.DOTALL)
    path = tmp_path / "crm-reminders.service"
    path.write_text(textwrap.dedent(block))
    return path


@pytest.mark.parametrize("where", ["ops/deploy", "docs/how-to/add-to-crm.md"])
def test_systemd_unit__stop_timeout_exceeds_the_grace(where, tmp_path):
    path = DEPLOY / "reminders.service" if where == "ops/deploy" else how_to_unit(tmp_path)
    service = unit(path)
    assert service["ExecStart"][0].endswith("manage.py run_reminders")
    assert_stops_in_time(service)
    # SIGTERM to every process, which the clusters are built for; SIGKILL only after.
    assert service["KillSignal"] == ["SIGTERM"]
    assert service.get("KillMode", ["control-group"])[-1] == "control-group"
    assert service["Restart"] == ["always"]


def test_systemd_unit__the_check_refuses_a_timeout_no_longer_than_the_grace(tmp_path):
    text = (DEPLOY / "reminders.service").read_text()
    short = tmp_path / "reminders.service"
    short.write_text(text + "\n[Service]\nTimeoutStopSec=30s\n")  # the last one counts
    with pytest.raises(AssertionError):
        assert_stops_in_time(unit(short))
    longer = tmp_path / "longer.service"
    longer.write_text(text + "\n[Service]\nEnvironment=REMINDERS_SHUTDOWN_GRACE=50\n")
    with pytest.raises(AssertionError):
        assert_stops_in_time(unit(longer))


def test_alerts_unit_runs_the_alert_loop():
    service = unit(DEPLOY / "reminders-alerts.service")
    assert service["ExecStart"][0].endswith("manage.py ops_alerts --loop")
    assert service["Restart"] == ["always"]


def test_compose__every_scheduler_gets_longer_than_its_grace():
    """compose.yaml without a YAML parser: each service's block, read by indentation."""
    text = (DEPLOY / "compose.yaml").read_text()
    default = float(re.search(r'REMINDERS_SHUTDOWN_GRACE: "(\d+)"', text)[1])  # type: ignore[index]
    blocks = re.split(r"\n  (?=[\w-]+:\n)", text.split("\nservices:\n", 1)[1])
    schedulers = [block for block in blocks if '["scheduler"]' in block]
    assert len(schedulers) == 2
    for block in schedulers:
        period = re.search(r"stop_grace_period: (\S+)", block)
        assert period, block
        grace = re.search(r"REMINDERS_SHUTDOWN_GRACE: \"?(\d+)", block)
        assert seconds(period[1]) >= (float(grace[1]) if grace else default) + MARGIN_SECONDS


def test_dockerfile__matches_the_entrypoint_and_the_tree():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^STOPSIGNAL SIGTERM$", text, re.M)
    assert '"/app/ops/deploy/entrypoint.sh"' in text
    for source in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in source.split():
            assert (REPO / path).exists(), path
    entrypoint = DEPLOY / "entrypoint.sh"
    assert entrypoint.stat().st_mode & stat.S_IXUSR


@pytest.mark.processes
@pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="the entrypoint makes a SQLite database of its own: once per suite is enough",
)
def test_entrypoint__migrates_then_execs_the_scheduler_which_stops_on_sigterm(tmp_path):
    database = tmp_path / "entrypoint.sqlite3"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("REMINDERS_", "DJANGO_"))},
        "REMINDERS_APP_DIR": str(REPO),
        "PYTHON": sys.executable,
        "MIGRATE_ON_START": "1",
        "DATABASE_URL": f"sqlite:///{database}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "REMINDERS_SHUTDOWN_GRACE": "5",
        "PYTHONUNBUFFERED": "1",
    }
    stderr_path = tmp_path / "entrypoint.stderr"
    with stderr_path.open("wb") as err:
        popen = subprocess.Popen(
            [str(DEPLOY / "entrypoint.sh"), "scheduler"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=err,
            stderr=err,
            start_new_session=True,
        )
    process = ReminderProcess("entrypoint", popen, stderr_path, env)
    process.seen[popen.pid] = psutil.Process(popen.pid)

    def beating() -> int:
        if not database.exists():
            return 0
        with sqlite3.connect(database) as db:
            try:
                return db.execute("SELECT count(*) FROM reminders_schedulerheartbeat").fetchone()[0]
            except sqlite3.OperationalError:  # not migrated yet
                return 0

    try:
        wait_until(beating, timeout=60 + HEARTBEAT_SECONDS, what="a heartbeat", processes=[process])
        # exec: the entrypoint's pid is run_reminders now, not a shell waiting for it.
        assert "run_reminders" in psutil.Process(popen.pid).cmdline()
        popen.send_signal(signal.SIGTERM)
        assert wait_exit(process, timeout=5 + MARGIN_SECONDS) == 0
        assert beating() == 0  # a graceful stop removes its heartbeat
    finally:
        if popen.poll() is None or process.descendants_seen():
            kill_tree(process)


def test_entrypoint__any_other_command_is_a_manage_py_command(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
        "REMINDERS_APP_DIR": str(REPO),
        "PYTHON": sys.executable,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'none.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    result = subprocess.run(
        [str(DEPLOY / "entrypoint.sh"), "help", "run_reminders"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "--no-cluster" in result.stdout
    assert not Path(tmp_path / "none.sqlite3").exists()  # no MIGRATE_ON_START: no migrate
