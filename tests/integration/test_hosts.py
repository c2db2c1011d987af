"""Two hosts against one database: two ``run_reminders`` trees with their own
``REMINDERS_WORKER_ID`` and settings share a burst; one host dies (its whole tree
killed at once, as a machine would), and the other finishes every run within a lease
of the death, each message at most once."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter

import pytest
from django.db import connection

from reminders.models import SchedulerHeartbeat, TaskRun
from tests.support.processes import (
    freeze,
    kill_tree,
    records,
    run_statuses,
    state,
    wait_exit,
    wait_until,
)

pytestmark = [
    pytest.mark.processes,
    # A fault of production, which runs on PostgreSQL (the process tests run on every
    # database already); skipped elsewhere with this reason, to keep CI short.
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="the two-host test runs on PostgreSQL"
    ),
]

LEASE_SECONDS = 6
COUNT = 60
UNFINISHED = [*TaskRun.WAITING, *TaskRun.LEASED]


def test_two_hosts__one_dies_and_the_other_finishes_its_runs_within_a_lease(
    spawn, due_tasks, record_file
):
    common = {"REMINDERS_LEASE_SECONDS": str(LEASE_SECONDS), "RECORD_DELAY": "0.3"}
    host_a = spawn(
        "host-a", REMINDERS_WORKER_ID="host-a", Q_WORKERS="2", REMINDERS_RUNS_PER_JOB="4", **common
    )
    host_b = spawn(
        "host-b", REMINDERS_WORKER_ID="host-b", Q_WORKERS="3", REMINDERS_RUNS_PER_JOB="2", **common
    )
    due_tasks(COUNT, "recording_dedup")

    def both_delivered() -> bool:
        pids = Counter(row["pid"] for row in records(record_file))
        return all(any(pid in host.seen for pid in pids) for host in (host_a, host_b))

    wait_until(
        both_delivered,
        timeout=60,
        what="both hosts delivering",
        processes=[host_a, host_b],
        explain=lambda: state(record_file),
    )
    frozen = freeze(host_a)
    held = set(
        TaskRun.objects.filter(
            status__in=TaskRun.LEASED, lease_owner__startswith="host-a:"
        ).values_list("pk", flat=True)
    )
    killed_at = time.monotonic()
    kill_tree(host_a)
    assert frozen and held, f"host-a held nothing at its death: {state(record_file)}"

    wait_until(
        lambda: not TaskRun.objects.filter(status__in=UNFINISHED).exists(),
        timeout=LEASE_SECONDS + 60,
        what="host-b to finish every run",
        processes=[host_b],
        explain=lambda: state(record_file),
    )
    took = time.monotonic() - killed_at
    # What host-a held came back once its lease ran out; the remaining work then takes
    # a few seconds at host-b's pace (3 workers, 0.3 s a send).
    assert took < LEASE_SECONDS + 20, f"{took:.1f}s after the death"

    delivered = Counter(row["key"] for row in records(record_file))
    assert len(delivered) == COUNT and max(delivered.values()) == 1, delivered.most_common(3)
    assert run_statuses() == {"sent": COUNT}
    assert set(TaskRun.objects.filter(pk__in=held).values_list("status", flat=True)) == {"sent"}
    # host-a's heartbeat is left behind, stale; host-b's is fresh and its own.
    owners = set(SchedulerHeartbeat.objects.values_list("owner", flat=True))
    assert {owner.split(":")[0] for owner in owners} == {"host-a", "host-b"}
    print(f"host-a held {len(held)} runs at its death; all {COUNT} finished {took:.1f}s after")
    os.kill(host_b.pid, signal.SIGTERM)
    assert wait_exit(host_b, timeout=30) == 0, host_b.describe()
