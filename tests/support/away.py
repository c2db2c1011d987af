"""The database going away under code running in this process, and coming back.

``database_away`` makes statements fail as they do on a connection the server cut
(``OperationalError``) from a chosen statement on, until the code has probed the
database (``SELECT 1``: ``reminders.engine.outage.answers``) a given number of times; then it
answers again. Transaction control (``BEGIN``, savepoints, ``COMMIT``, ``ROLLBACK``)
still passes, so that the test's own transaction stays usable; the statement that
fails is never sent, so no server aborts a transaction for it either.

For real processes and a real server stopped hard, see ``tests/support/pgcluster.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import OperationalError, connection

CONTROL = ("BEGIN", "SAVEPOINT", "RELEASE", "ROLLBACK", "COMMIT")
PROBE = "SELECT 1"


@dataclass
class Away:
    marker: str
    skip: int
    probes: int
    started: bool = False
    over: bool = False
    refused: list[str] = field(default_factory=list)  # the statements that failed

    def fails(self, sql: str) -> bool:
        if self.over or sql.lstrip().upper().startswith(CONTROL):
            return False
        if not self.started:
            if self.marker.lower() not in sql.lower():
                return False
            if self.skip:
                self.skip -= 1
                return False
            self.started = True
        if sql.strip() == PROBE:
            if self.probes <= 0:
                self.over = True
                return False
            self.probes -= 1
        self.refused.append(sql)
        return True


@contextlib.contextmanager
def database_away(marker: str = "", *, skip: int = 0, probes: int = 2) -> Iterator[Away]:
    """The database is away from the first statement containing ``marker`` (any, if
    empty; case-insensitive) after ``skip`` such statements, until ``probes`` probes
    have been refused; then it answers again (``probes=-1``: never)."""
    away = Away(marker, skip, probes if probes >= 0 else 10**9)

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if away.fails(sql):
            raise OperationalError("server closed the connection unexpectedly")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield away
