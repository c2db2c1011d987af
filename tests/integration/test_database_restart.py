"""The database goes away mid-burst and comes back: PostgreSQL stopped for 10 s (a fast
shutdown, every session cut) and started again, under two ``run_reminders`` trees.

Every process recovers by itself, none restarted by the test: the schedulers tick
again, the workers send again. Nothing is duplicated, lost or left ``sending`` or
``running``: a run whose record the outage cut off is taken over once its lease runs
out and settled by the ledger (re-sent where the provider drops a repeated body, as
WeCom does; ``unknown`` where it might have been delivered and cannot be re-sent).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from datetime import UTC, datetime

import pytest
from django.db import connection

from tests.support.pgcluster import manage_on, rows
from tests.support.processes import records, wait_exit, wait_until

pytestmark = [
    pytest.mark.processes,
    # The test brings a PostgreSQL server of its own, so one run of the suite is enough:
    # the one on PostgreSQL. Skipped elsewhere with this reason.
    pytest.mark.skipif(
        connection.vendor != "postgresql",
        reason="the database restart test runs once, in the suite on PostgreSQL",
    ),
]

COUNT = 400  # half on each channel
DEDUP, PLAIN = CHANNELS = ("recording_dedup", "recording")
LEASE_SECONDS = 6
OUTAGE_SECONDS = 10
MAKE_TASKS = """
from django.conf import settings
from django.utils import timezone
from reminders.models import Priority, ScheduledTask
now = timezone.now()
tasks = []
for number in range({count}):
    task = ScheduledTask(kind="follow_up", recipient=f"{channel}-{{number}}", run_at=now,
        timezone=settings.TIME_ZONE, channel="{channel}", priority=Priority.NORMAL)
    task.plan_first_run(now)
    tasks.append(task)
ScheduledTask.objects.bulk_create(tasks, batch_size=500)
"""


RUNS = "SELECT status, count(*) FROM reminders_taskrun GROUP BY status"
LEDGER = "SELECT status, count(*) FROM reminders_sendlog GROUP BY status"
RUNS_BY_CHANNEL = (
    "SELECT r.ledger_key, r.status, t.channel FROM reminders_taskrun r"
    " JOIN reminders_scheduledtask t ON t.id = r.task_id"
)


def statuses(url: str, query: str) -> Counter[str]:
    return Counter(dict(rows(url, query)))


def test_postgresql_stopped_for_10s_mid_burst__every_process_recovers_and_nothing_is_duplicated(
    own_postgres, spawn, record_file
):
    """One burst on two channels, one that drops a repeated body (as WeCom does) and one
    that does not: the same outage tests how each settles its doubts."""
    url = own_postgres.create_database("reminders")
    manage_on(url, "migrate", "-v0")
    for channel in CHANNELS:
        manage_on(url, "shell", "-c", MAKE_TASKS.format(count=COUNT // 2, channel=channel))
    knobs = {
        "DATABASE_URL": url,
        "REMINDERS_LEASE_SECONDS": str(LEASE_SECONDS),
        "RECORD_DELAY": "0.05",
        "REMINDERS_RUNS_PER_JOB": "5",
    }
    hosts = [spawn(name, REMINDERS_WORKER_ID=name, **knobs) for name in ("host-a", "host-b")]
    wait_until(
        lambda: len(records(record_file)) >= COUNT // 4,
        timeout=60,
        what="a quarter of the burst delivered",
        processes=hosts,
    )
    own_postgres.stop()
    # Nothing can be written from here until the server is back: a heartbeat stamped
    # after this moment was written after the restart. (Stamped after ``start()``
    # returned, it missed ticks made at once on the restart, then none came before a
    # fast burst ended: heartbeats are written once per HEARTBEAT_SECONDS.)
    stopped = datetime.now(UTC)
    time.sleep(OUTAGE_SECONDS)
    own_postgres.start()
    at_restart = len(records(record_file))
    assert at_restart < COUNT, "the burst was over before the outage"

    def finished() -> bool:
        runs = statuses(url, RUNS)
        return sum(runs.values()) == COUNT and set(runs) <= {"sent", "unknown"}

    wait_until(
        finished,
        timeout=LEASE_SECONDS + 90,
        what="every run to finish after the restart",
        processes=hosts,  # none may exit: each recovers by itself
        explain=lambda: f"runs {statuses(url, RUNS)}, ledger {statuses(url, LEDGER)}",
    )
    # Both schedulers ticked again after the restart, on their own.
    beats = dict(rows(url, "SELECT owner, last_tick_at FROM reminders_schedulerheartbeat"))
    assert {owner.split(":")[0] for owner, at in beats.items() if at > stopped} == {
        "host-a",
        "host-b",
    }, beats
    for host in hosts:
        os.kill(host.pid, signal.SIGTERM)
        assert wait_exit(host, timeout=45) == 0, host.describe()

    delivered = Counter(row["key"] for row in records(record_file))
    assert max(delivered.values()) == 1, delivered.most_common(3)
    runs = {key: (status, channel) for key, status, channel in rows(url, RUNS_BY_CHANNEL)}
    ledger = dict(rows(url, "SELECT key, status FROM reminders_sendlog"))
    assert len(runs) == COUNT
    assert set(delivered) <= set(runs)
    assert {key: ledger[key] for key in runs if key in ledger} == {
        key: status for key, (status, _) in runs.items() if key in ledger
    }
    assert set(ledger.values()) <= {"sent", "unknown"}  # none left sending
    sent_after = len(records(record_file)) - at_restart
    print(
        f"{at_restart} delivered before the restart, {sent_after} after; runs "
        f"{Counter(runs.values())}"
    )
    assert sent_after > 0
    dedup = {key: status for key, (status, channel) in runs.items() if channel == DEDUP}
    plain = {key: status for key, (status, channel) in runs.items() if channel == PLAIN}
    # The provider drops a repeated body: every doubt is settled by sending again.
    assert set(dedup.values()) == {"sent"}
    assert set(dedup) <= set(delivered)
    # Elsewhere every run never handed to the provider is sent; only doubtful ones are
    # unknown, and none was delivered twice (above).
    assert not set(plain) - set(ledger)
    assert all(delivered[key] == 1 for key, status in plain.items() if status == "sent")
