"""The queries a morning of digests runs many times read a handful of runs, not every
run due: when the planner's statistics of the runs predate the morning's (a large
table whose morning never reaches autovacuum's threshold; here, analyzed when every
run was history), a query on the run's status joined to the tasks takes a plan that
reads every waiting run for each recipient's three. Counted from PostgreSQL's own plans
(``tests.support.plans``), at a frozen Thursday morning: 400 members with three
follow-ups each, folded in 09:00-09:15, and a day of history before it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from reminders import api
from reminders.engine import digest_ends, digests, dispatch
from reminders.models import TaskRun
from tests.support.digests import THURSDAY, TZ, at
from tests.support.jobs import run_queued
from tests.support.plans import analyze, require_postgresql, rows_read

MEMBERS = [f"m{n:03d}" for n in range(400)]
NOW = at(THURSDAY, 9, 20)  # every member's digest is due
# Three members' runs, give or take an index's probes: a plan reading the morning's
# 1,200 due runs is far past it.
FEW = 60


@pytest.fixture
def morning(settings: Any) -> None:
    require_postgresql()
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }
    yesterday = THURSDAY - timedelta(days=1)
    _follow_ups(lambda minute: at(yesterday, 9, minute))
    _plan(at(yesterday, 9, 20))
    TaskRun.objects.update(status=TaskRun.Status.SENT, finished_at=at(yesterday, 9, 20))
    analyze("reminders_taskrun", "reminders_scheduledtask")  # every run is history
    _follow_ups(lambda minute: at(THURSDAY, 9, minute))
    _plan(at(THURSDAY, 9))


def _follow_ups(when: Any) -> None:
    api.schedule_many(
        [
            {
                "kind": "follow_up",
                "recipient": member,
                "at": when(minute),
                "tz": TZ,
                "channel": "memory",
                "payload": {"customer": f"{member}-{minute}", "url": "https://crm.example/c"},
            }
            for member in MEMBERS
            for minute in (0, 5, 10)
        ]
    )


def _plan(now: Any) -> None:
    while dispatch.plan(now).tasks == dispatch.PLAN_BATCH:
        pass


def _due_of(members: list[str]) -> tuple[list[TaskRun], list[TaskRun]]:
    """The waiting runs of ``members``: the first of each, and the others."""
    runs = (
        TaskRun.objects.filter(task__recipient__in=members, status__in=TaskRun.WAITING)
        .select_related("task")
        .order_by("pk")
    )
    first: dict[str, TaskRun] = {}
    for run in runs:
        first.setdefault(run.task.recipient, run)
    return list(first.values()), [run for run in runs if run not in first.values()]


pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("morning")]


def test_claim__the_rest_of_a_recipients_runs_reads_their_runs_only() -> None:
    first, others = _due_of(MEMBERS[:3])
    rows = [
        (run.pk, run.status, run.lease_token, run.error_code, run.task.recipient, run.task.kind)
        for run in first
    ]
    with rows_read("reminders_taskrun") as reads:
        rest = dispatch._recipients_rest(rows, NOW)
    assert sorted(pk for pk, *_ in rest) == sorted(run.pk for run in others)
    assert reads.rows <= FEW, str(reads)


def test_start__lock_and_pull_read_the_recipients_runs_only() -> None:
    first, others = _due_of(MEMBERS[:3])
    pairs = [(member, "follow_up") for member in MEMBERS[:3]]
    with rows_read("reminders_taskrun") as reads:
        locked = digests.lock(pairs)
        pulled = digests.pull(first, set(), NOW, locked)
    assert sorted(pulled) == sorted(run.pk for run in others)
    assert reads.rows <= FEW, str(reads)


@pytest.mark.parametrize("locked_pairs", [3, 1, 0])
def test_start__pull_takes_the_runs_lock_locked_and_reads_only_the_pairs_it_did_not(
    locked_pairs: int,
) -> None:
    """The start locked the runs of the pairs its claim saw fold: ``pull`` takes those
    from what ``lock`` read, and reads only the others (two statements); where nothing
    is locked (SQLite), it reads them all."""
    first, others = _due_of(MEMBERS[:3])
    pairs = [(member, "follow_up") for member in MEMBERS[:locked_pairs]]
    locked = digests.lock(pairs)
    with CaptureQueriesContext(connection) as queries:
        pulled = digests.pull(first, set(), NOW, locked)
    assert sorted(pulled) == sorted(run.pk for run in others)
    reads = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT")]
    everything_locked = locked is not None and locked_pairs == 3
    assert len(reads) == (0 if everything_locked else 2), reads


def test_throttle__the_hours_count_reads_the_recipients_runs_only() -> None:
    keys = [(member, "follow_up", "memory") for member in MEMBERS[:3]]
    with rows_read("reminders_taskrun") as reads:
        assert digests._sent_last_hour(keys, NOW) == {}
    assert reads.rows <= FEW, str(reads)


def test_scheduler__when_work_is_next_due_reads_the_first_waiting_run() -> None:
    with rows_read("reminders_taskrun") as reads:
        first = dispatch.next_due()
    assert first is not None and at(THURSDAY, 9, 15) <= first < at(THURSDAY, 9, 18)
    assert reads.rows <= FEW, str(reads)


def test_scheduler__settling_ended_digests_reads_the_folded_runs_only() -> None:
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.claim("test", 9, now=NOW)
        run_queued(now=NOW)
    with rows_read("reminders_taskrun") as reads:
        assert digest_ends.settle_ended(NOW) == 0
    assert reads.rows <= FEW, str(reads)
