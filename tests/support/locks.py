"""Races between real transactions, on threads with connections of their own.

``Paused`` runs a function in a thread and holds its transaction open right after a
statement of interest (say, the planner's INSERT of runs), so that another connection
can act at that exact moment. ``waits_for_lock`` says whether a connection is waiting
for a row lock, as the database itself reports it: a test knows the other side is
blocked, rather than sleeping and hoping. PostgreSQL and MariaDB/MySQL only: SQLite
has one writer at a time, so these races cannot happen there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

TIMEOUT = 20.0
# A statement running this long (ms) in a small test is waiting for a lock (MariaDB).
SLOW_MS = 500


def require_row_locks() -> None:
    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip(f"{connection.vendor} has one writer at a time: no such race")


def backend_id() -> int:
    """This thread's connection, as the database names it."""
    query = (
        "SELECT pg_backend_pid()" if connection.vendor == "postgresql" else "SELECT CONNECTION_ID()"
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return int(cursor.fetchone()[0])


def waits_for_lock(backend: int) -> bool:
    """Whether the connection ``backend`` is waiting for a lock right now."""
    if connection.vendor == "postgresql":
        query = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'"
        params = [backend]
    else:
        # MariaDB lists a statement waiting in its optimizer (a lookup by primary key,
        # state "Statistics") in no lock table: a statement of these small tests still
        # running after a while is waiting for a lock.
        query = (
            "SELECT (SELECT count(*) FROM information_schema.INNODB_TRX "
            "WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT') + "
            "(SELECT count(*) FROM information_schema.PROCESSLIST "
            "WHERE ID = %s AND COMMAND = 'Query' AND TIME_MS > %s)"
        )
        params = [backend, backend, SLOW_MS]
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return bool(cursor.fetchone()[0])


class Worker(threading.Thread):
    """``target()`` on a thread of its own (its own connection, closed at the end);
    what it returned or raised is kept. ``backend`` is its connection's id once known."""

    def __init__(self, target: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._target_call = target
        self.result: Any = None
        self.error: BaseException | None = None
        self.backend: int | None = None
        self.known = threading.Event()

    def run(self) -> None:
        try:
            self.backend = backend_id()
            self.known.set()
            self.result = self._target_call()
        except BaseException as exc:  # reported by outcome()
            self.error = exc
        finally:
            self.known.set()
            connection.close()

    def outcome(self) -> Any:
        self.join(TIMEOUT)
        assert not self.is_alive(), "the thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result

    def blocked_or_done(self) -> str:
        """Wait until the thread is waiting for a lock ("blocked") or has finished
        ("done")."""
        assert self.known.wait(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if not self.is_alive():
                return "done"
            if self.backend is not None and waits_for_lock(self.backend):
                return "blocked"
            time.sleep(0.02)
        raise AssertionError("the thread neither finished nor waited for a lock")


class Paused(Worker):
    """``target()`` on a thread, held still right after the first statement for which
    ``after(sql)`` is true, inside its transaction, until ``resume()``."""

    def __init__(self, target: Callable[[], Any], after: Callable[[str], bool]) -> None:
        self._after = after
        self.reached = threading.Event()
        self._go = threading.Event()
        super().__init__(self._paused(target))

    def _paused(self, target: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with connection.execute_wrapper(self._wrapper):
                return target()

        return call

    def _wrapper(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        result = execute(sql, params, many, context)
        if not self.reached.is_set() and self._after(sql):
            self.reached.set()
            self._go.wait(TIMEOUT)
        return result

    def hold(self) -> None:
        """Start, and wait until the statement of interest has run."""
        self.start()
        assert self.reached.wait(TIMEOUT), "the statement of interest never ran"

    def resume(self) -> None:
        self._go.set()


def statement(verb: str, table: str) -> Callable[[str], bool]:
    """A test for ``Paused``: a statement that starts with ``verb`` and names ``table``."""

    def matches(sql: str) -> bool:
        text = sql.lstrip().lower()
        return text.startswith(verb.lower()) and table.lower() in text

    return matches


def locking(table: str) -> Callable[[str], bool]:
    """A test for ``Paused``: a ``SELECT ... FOR UPDATE`` of ``table``'s rows."""

    def matches(sql: str) -> bool:
        text = sql.lower()
        return statement("select", table)(sql) and "for update" in text

    return matches
