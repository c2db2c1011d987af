"""A throwaway PostgreSQL server of the test's own, which it may stop and start.

The suite's shared server must never be stopped, so a fault test that takes the
database away gets a cluster of its own: ``initdb`` into a temporary directory, a free
port on 127.0.0.1, trust authentication, the binaries of the installed PostgreSQL.
PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres``
system user and its commands run as that user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

from tests.support.processes import manage


def binaries() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl``, the newest installed; None if none."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parts)
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    def __init__(self, bin_dir: Path, root: Path) -> None:
        self.bin_dir = bin_dir
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = _free_port()
        self._user = "postgres" if os.geteuid() == 0 else None

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._user:
            command = ["runuser", "-u", self._user, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed: {result.stderr}\n{log}")

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} "
            "-c fsync=off -c max_connections=100"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """A fast shutdown: every session is ended at once, as a restart does.
        ``immediate``: the server is killed outright, as a crash or a failover does, and
        recovers from its log when started again."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[Cluster]:
    bin_dir = binaries()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="reminders-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
    cluster = Cluster(bin_dir, root)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def rows(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    """What ``sql`` returns on the database at ``url``, on a connection of its own."""
    with psycopg.connect(url, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()


def manage_on(url: str, *args: str, **knobs: str) -> None:
    """``manage.py ARGS`` on the database at ``url`` under the test settings, ``knobs``
    in its environment; it must succeed."""
    env = {**knobs, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    result = manage(*args, env=env)
    assert result.returncode == 0, result.stderr
