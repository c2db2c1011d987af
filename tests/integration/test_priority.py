"""High priority runs have workers of their own: a real ``run_reminders`` process whose
bulk workers are all busy with slow sends still delivers a high priority run at once."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.utils import timezone

from reminders import api
from tests.support.processes import TREE, records, state, wait_exit, wait_until

pytestmark = pytest.mark.processes

SEND_SECONDS = 3.0  # every send takes this long (RECORD_DELAY)


def test_a_high_run_is_delivered_while_every_bulk_worker_is_busy(spawn, due_tasks, record_file):
    process = spawn(
        "busy", Q_WORKERS="2", REMINDERS_RUNS_PER_JOB="1", RECORD_DELAY=str(SEND_SECONDS)
    )
    wait_until(
        lambda: len(process.tree()) >= TREE, timeout=60, what="the whole tree", processes=[process]
    )
    due_tasks(6, "recording")  # three sends each for the two bulk workers: 9 s of work
    wait_until(
        lambda: len(records(record_file)) >= 2,
        timeout=30,
        what="both bulk workers to be sending",
        processes=[process],
    )

    due = time.time()
    api.schedule("inquiry_timeout", "urgent", at=timezone.now(), channel="recording")
    found = wait_until(
        lambda: [r for r in records(record_file) if r["to"] == "urgent"],
        timeout=30,
        what="the high priority run to be delivered",
        processes=[process],
        explain=lambda: state(record_file),
    )
    took = found[0]["at"] - due
    bulk_before = [
        r for r in records(record_file) if r["to"] != "urgent" and r["at"] < found[0]["at"]
    ]
    print(
        f"high run delivered {took:.2f} s after it fell due; "
        f"{len(bulk_before)} bulk sends before it"
    )
    # The bulk workers each finish a send in SEND_SECONDS: a high run waiting for one
    # of them would take that long at least, and the two would have sent more.
    assert took < SEND_SECONDS - 0.5, state(record_file)
    assert len(bulk_before) <= 4

    os.kill(process.pid, signal.SIGTERM)
    assert wait_exit(process, timeout=60) == 0, process.describe()
