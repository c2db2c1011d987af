"""The database went away (a restart, a crash, a managed failover): notice it, and wait
for it to answer again.

A process that holds runs knows what it did with them: which it sent, which failed,
which it never sent, which no worker started. What it could not write while the
database was away it writes as soon as the database answers again, rather than leave
the runs to their lease (``REMINDERS_LEASE_SECONDS``, 300 s by default): the lease is
for work whose holder died, or whose outcome nobody knows. Both the scheduler
(``reminders.engine.worker``: claims no worker started) and a job (``reminders.engine.delivery``:
what it sent and what it did not) use this module; the pusher of our cluster
(``reminders.engine.cluster``) polls again at ``AWAY_POLL_SECONDS`` instead of dying.

Invariants: waiting is always bounded by the caller's deadline (a job's by its time
and its lease, so that its runs are still its own when it writes); a connection is
never closed inside a transaction (a caller's ``atomic`` block, or a test's).
"""

from __future__ import annotations

import contextlib
import time

from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError, OperationalError
from django.db import connections as django_connections

# How often a process probes a database that went away.
AWAY_POLL_SECONDS = 0.5


def is_away(exc: BaseException) -> bool:
    """Whether ``exc`` is the kind of error a database that went away raises: the
    connection failed or was cut (``OperationalError``, ``InterfaceError`` on a
    connection already closed). A lost deadlock is one too, and is handled the same
    way: the database answers again at once. A constraint or a bad statement is not."""
    return isinstance(exc, OperationalError | InterfaceError)


def answers(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the database answers now; a broken connection is dropped so that the
    next try opens a new one."""
    connection = django_connections[using]
    if not connection.in_atomic_block:
        with contextlib.suppress(DatabaseError):
            connection.close_if_unusable_or_obsolete()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        if not connection.in_atomic_block:
            with contextlib.suppress(DatabaseError):
                connection.close()
        return False
    return True


def wait_until_answers(deadline: float, using: str = DEFAULT_DB_ALIAS) -> bool:
    """Probe the database every ``AWAY_POLL_SECONDS`` until it answers (True) or the
    monotonic ``deadline`` would pass before the next probe (False)."""
    while True:
        if answers(using):
            return True
        if time.monotonic() + AWAY_POLL_SECONDS > deadline:
            return False
        time.sleep(AWAY_POLL_SECONDS)
