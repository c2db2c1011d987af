"""What idle ``run_reminders`` processes cost the database must not creep back up.

Two real processes with nothing due, their default tick and workers, on PostgreSQL:
the transactions they cause per second (``pg_stat_database``, which counts autocommit
statements too) stay under ``BUDGET``. ``benchmarks/idle.py`` measured about 14 a second
since the sweeps go with the claims (code e2fbf00), 20 before (code 4466ac9); before the
pushers waited for notifications and the ticks skipped what could not be due, about 104
(``docs/explanation/benchmarks.md``). The budget is twice the first: a pusher polling its
empty queue every ``poll`` again (20 transactions a second per process) breaks it; the
ticks sweeping every second again (about 6 a second more) are caught by
``tests/reminders/test_worker.py``.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from reminders.engine import wake
from tests.support.processes import TREE, wait_until, wake_listeners

pytestmark = pytest.mark.processes

PROCESSES = 2
BUDGET = 28.0  # transactions a second, both processes together
SPAN = 6.0  # seconds measured
WARM_UP = 2.0  # seconds after every process listens


def transactions() -> int:
    """Transactions committed or rolled back in the test database so far, as the server
    counts them (an idle backend reports its own up to 10 s late: over a steady span
    the lag at each end cancels out)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def test_idle_processes_stay_under_their_transaction_budget(spawn, on_postgres):
    if not on_postgres:
        pytest.skip(f"{connection.vendor}: the pushers poll there (no LISTEN/NOTIFY)")
    processes = [spawn(f"idle-{n}", REMINDERS_TICK_SECONDS="1") for n in range(PROCESSES)]
    wait_until(
        lambda: (
            all(len(p.tree()) >= TREE for p in processes)
            and len(wake_listeners()) == PROCESSES
            and len(wake_listeners(wake.JOBS_APPLICATION_NAME)) == 2 * PROCESSES
        ),  # the bulk and the high cluster's pushers
        timeout=60,
        what="every tree, its scheduler and its pushers listening",
        processes=processes,
    )
    time.sleep(WARM_UP)
    before, started = transactions(), time.monotonic()
    time.sleep(SPAN)
    rate = (transactions() - before - 3) / (time.monotonic() - started)  # less our own 3
    print(f"{rate:.1f} transactions a second from {PROCESSES} idle processes")
    assert rate < BUDGET, f"{rate:.1f} transactions a second (budget {BUDGET})"
    for process in processes:
        assert process.popen.poll() is None, process.describe()
