"""A builder that hangs until django-q2's job timeout, in a real ``run_reminders``: the
job goes, its runs come back after their lease, the others are sent in jobs of their
own, and the hanging one is failed after ``REMINDERS_MAX_JOB_FAILURES`` lost jobs with
ops told, instead of being claimed forever with nothing counted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ops.models import AlertEvent, AlertType
from reminders.models import ScheduledTask, TaskRun
from tests.support.processes import ReminderProcess, records, state, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.processes
def test_a_builder_that_hangs_until_the_timeout_costs_its_own_run_only(
    spawn: Callable[..., ReminderProcess],
    due_tasks: Callable[[int, str], list[ScheduledTask]],
    record_file,
):
    tasks = due_tasks(4, "recording")
    hanging = tasks[0]
    ScheduledTask.objects.filter(pk=hanging.pk).update(recipient="hang-0")
    # Lease 5 s: django-q2's job timeout is 4 s (0.8 of it). Shorter, a busy machine can
    # let a lease run out mid-send, and a run then ends in doubt instead of sent.
    worker = spawn(
        "worker",
        DJANGO_SETTINGS_MODULE="tests.settings_hanging_builder",
        REMINDERS_LEASE_SECONDS="5",
    )
    others = {task.recipient for task in tasks[1:]}

    def explain() -> str:
        rows = TaskRun.objects.values_list("task__recipient", "status", "job_failures")
        return f"{state(record_file)}; runs: {sorted(rows)}"

    wait_until(
        lambda: {r["to"] for r in records(record_file)} == others,
        timeout=60,
        what="the runs claimed with the hanging one to be sent",
        processes=[worker],
        explain=explain,
    )
    run = wait_until(
        lambda: TaskRun.objects.filter(task=hanging, status="failed").first(),
        timeout=60,
        what="the hanging run to be failed",
        processes=[worker],
        explain=explain,
    )
    assert (run.error_code, run.job_failures) == ("job_failures", 2)
    alerts = wait_until(
        lambda: list(
            AlertEvent.objects.filter(type=AlertType.RUN_FAILED, run_id=run.pk).values_list(
                "code", flat=True
            )
        ),
        timeout=10,
        what="ops to be told",
        processes=[worker],
        explain=explain,
    )
    assert alerts == ["job_failures"]
    # On a busy machine a lease can run out between a send and its record: the run is
    # then taken over and closed by the ledger, a moment later.
    wait_until(
        lambda: (
            set(TaskRun.objects.exclude(pk=run.pk).values_list("status", flat=True)) == {"sent"}
        ),
        timeout=30,
        what="the others to be recorded sent",
        processes=[worker],
        explain=explain,
    )
    # Each of the others delivered once.
    assert sorted(r["to"] for r in records(record_file)) == sorted(others)
