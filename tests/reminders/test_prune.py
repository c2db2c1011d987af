"""``manage.py reminders_prune``: old finished runs and ledger rows go, in small batches;
what the engine still reads stays, so that pruning never changes what it does next."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from reminders import api
from reminders.engine import planning, retention
from reminders.exceptions import RetentionTooShort
from reminders.models import JobTake, PrunedOneShot, ScheduledTask, SendLog, TaskRun
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)
OLD = 100 * DAY  # older than the 90 days the tests prune at
RECENT = 10 * DAY


def prune(*args: str, **options) -> str:
    out = StringIO()
    call_command("reminders_prune", *args, stdout=out, **options)
    return out.getvalue()


def daily_task(key: str = "daily:1", kind: str = "follow_up") -> ScheduledTask:
    return api.schedule(kind, "zhangsan", cron="0 9 * * *", tz="UTC", key=key)


def add_run(
    task: ScheduledTask,
    occurrence: datetime,
    status: str = TaskRun.Status.SENT,
    *,
    key: str | None = None,
    **fields,
) -> TaskRun:
    """A run of ``task`` recorded as it would be by now: created an hour before its
    occurrence, finished a minute after it (if finished), its timestamps in the past."""
    run = planning.new_run(task, occurrence)
    run.status = status
    run.ledger_key = key or run.ledger_key
    run.next_attempt_at = occurrence if status in TaskRun.WAITING else None
    if status in TaskRun.LEASED:
        run.lease_token, run.lease_expires_at = "token", timezone.now() + DAY
    if status in TaskRun.FINISHED and status != TaskRun.Status.SKIPPED:
        run.finished_at = occurrence + timedelta(minutes=1)
    for name, value in fields.items():
        setattr(run, name, value)
    run.save()
    TaskRun.objects.filter(pk=run.pk).update(created_at=occurrence - timedelta(hours=1))
    return run


def add_ledger(
    run: TaskRun | None,
    status: str = SendLog.Status.SENT,
    *,
    at: datetime | None = None,
    key: str | None = None,
    written: datetime | None = None,
) -> SendLog:
    """The ledger row of ``run``'s key, reserved and last written at ``at`` (default: a
    minute after the run's occurrence)."""
    at = at or (run.occurrence + timedelta(minutes=1) if run else timezone.now())
    row = SendLog.objects.create(
        key=key or (run.ledger_key if run else "gone:1"),
        task=run.task if run else None,
        run=run,
        status=status,
        recipient="zhangsan",
        channel="memory",
        body="{}",
    )
    SendLog.objects.filter(pk=row.pk).update(
        created_at=at,
        updated_at=written or at,
        sent_at=(written or at) if status == SendLog.Status.SENT else None,
    )
    return row


def exists(row: TaskRun | SendLog) -> bool:
    return type(row).objects.filter(pk=row.pk).exists()


# What goes, what stays ------------------------------------------------------------------


@pytest.mark.parametrize(
    "status",
    [
        TaskRun.Status.SENT,
        TaskRun.Status.FAILED,
        TaskRun.Status.EXPIRED,
        TaskRun.Status.SKIPPED,
        TaskRun.Status.CANCELLED,
    ],
)
def test_old_finished_runs_go_with_their_ledger_rows_recent_ones_stay(now, status):
    task = daily_task()
    old = add_run(task, now - OLD, status)
    old_row = add_ledger(old)
    recent = add_run(task, now - RECENT, status)
    recent_row = add_ledger(recent)

    assert "Deleted 1 run, 1 ledger row" in prune("--older-than", "90d")

    assert not exists(old)
    assert not exists(old_row)
    assert exists(recent)
    assert exists(recent_row)


@pytest.mark.parametrize(
    "status",
    [
        TaskRun.Status.SCHEDULED,
        TaskRun.Status.RETRYING,
        TaskRun.Status.QUEUED,
        TaskRun.Status.RUNNING,
    ],
)
def test_unfinished_runs_stay_however_old_and_so_do_their_keys(now, status):
    task = daily_task()
    run = add_run(task, now - 2 * OLD, status)
    row = add_ledger(run, SendLog.Status.FAILED)

    assert "Deleted 0 runs, 0 ledger rows" in prune("--older-than", "90d")

    assert exists(run)
    assert exists(row)


def test_a_run_is_old_only_when_everything_about_it_is(now):
    task = daily_task()
    # Finished recently, though due long ago (a retry an operator asked for, say).
    finished_late = add_run(task, now - OLD, finished_at=now - RECENT)
    # Skipped runs have no finishing time: recorded recently for an old occurrence.
    skipped_late = add_run(task, now - OLD - DAY, TaskRun.Status.SKIPPED)
    TaskRun.objects.filter(pk=skipped_late.pk).update(created_at=now - RECENT)
    skipped_old = add_run(task, now - OLD - 2 * DAY, TaskRun.Status.SKIPPED)

    prune("--older-than", "90d")

    assert exists(finished_late)
    assert exists(skipped_late)
    assert not exists(skipped_old)


def test_an_unknown_run_stays_with_its_ledger_row_until_someone_has_handled_it(now):
    task = daily_task()
    in_doubt = add_run(task, now - OLD, TaskRun.Status.UNKNOWN)
    in_doubt_row = add_ledger(in_doubt, SendLog.Status.UNKNOWN)
    handled = add_run(
        task,
        now - OLD - DAY,
        TaskRun.Status.UNKNOWN,
        handled_at=now - OLD,
        handled_by="ops",
    )
    handled_row = add_ledger(handled, SendLog.Status.UNKNOWN)
    handled_lately = add_run(
        task, now - OLD - 2 * DAY, TaskRun.Status.UNKNOWN, handled_at=now - RECENT
    )

    assert "Deleted 1 run, 1 ledger row" in prune("--older-than", "90d")

    assert exists(in_doubt)
    assert exists(in_doubt_row)
    assert not exists(handled)
    assert not exists(handled_row)
    assert exists(handled_lately)


def test_a_sending_ledger_row_stays_however_old(now):
    sending = add_ledger(None, SendLog.Status.SENDING, at=now - OLD, key="gone:1")
    sent = add_ledger(None, SendLog.Status.SENT, at=now - OLD, key="gone:2")
    failed = add_ledger(None, SendLog.Status.FAILED, at=now - OLD, key="gone:3")
    unknown = add_ledger(None, SendLog.Status.UNKNOWN, at=now - OLD, key="gone:4")

    prune("--older-than", "90d")

    assert exists(sending)
    assert not any(exists(row) for row in (sent, failed, unknown))


def test_a_ledger_row_stays_while_a_run_that_stays_carries_its_key(now):
    # A retry of a run long past: its key's row is what its next attempt reads.
    waiting = add_run(daily_task("daily:1"), now - OLD, TaskRun.Status.RETRYING)
    row = add_ledger(waiting, SendLog.Status.FAILED)
    # The key passed to a re-planned run: the old run goes, the row stays with the new.
    task = daily_task("daily:2")
    first = add_run(task, now - OLD - DAY, TaskRun.Status.CANCELLED, key=f"{task.pk}:shared")
    shared = add_ledger(first, SendLog.Status.FAILED)
    add_run(task, now - RECENT, TaskRun.Status.SENT, key=f"{task.pk}:shared")

    prune("--older-than", "90d")

    assert exists(row)
    assert not exists(first)
    assert exists(shared)


def test_a_ledger_row_written_recently_stays_however_old_its_reservation(now):
    # Reserved long ago, sent again a minute ago: inside any duplicate window.
    resent = add_ledger(None, at=now - OLD, written=now - timedelta(minutes=1), key="gone:1")
    old = add_ledger(None, at=now - OLD, key="gone:2")

    prune("--older-than", "90d")

    assert exists(resent)
    assert not exists(old)


def test_a_one_shot_task_keeps_the_runs_of_every_time_it_had(now):
    at = (now - OLD).replace(microsecond=0)
    task = api.schedule("follow_up", "zhangsan", at=at, tz="UTC", key="once:1")
    own = add_run(task, at)
    own_row = add_ledger(own)
    # A time it no longer has (it was moved): moved back, it is planned again, and this
    # run is what says it went.
    moved_from = add_run(task, at - DAY)
    # Cancelled before it went, or made on request: planning never meets them again.
    cancelled = add_run(task, at - 2 * DAY, TaskRun.Status.CANCELLED)
    manual = add_run(task, at - 3 * DAY, is_manual=True)

    prune("--older-than", "90d")

    assert exists(own)
    assert exists(own_row)
    assert exists(moved_from)
    assert not exists(cancelled)
    assert not exists(manual)


def test_a_task_with_an_unfinished_run_that_old_keeps_its_runs(now):
    stuck = daily_task("daily:1")
    waiting = add_run(stuck, now - OLD, TaskRun.Status.SCHEDULED)
    sibling = add_run(stuck, now - OLD - timedelta(hours=2))
    other = add_run(daily_task("daily:2"), now - OLD)

    prune("--older-than", "90d")

    assert exists(waiting)
    assert exists(sibling)
    assert not exists(other)


def test_ops_alerts_keep_the_ids_of_runs_pruned(now):
    from ops.models import AlertEvent

    run = add_run(daily_task(), now - OLD, TaskRun.Status.FAILED)
    event = AlertEvent.objects.record("run_failed", occurred_at=now - OLD, run_id=run.pk)

    prune("--older-than", "90d")

    assert not exists(run)
    event.refresh_from_db()
    assert event.run_id == run.pk


# Dry run, batches, output ---------------------------------------------------------------


def history(now: datetime, count: int) -> None:
    task = daily_task()
    for day in range(count):
        run = add_run(task, now - OLD - day * DAY)
        add_ledger(run)
    add_ledger(add_run(task, now - RECENT))


def test_a_job_s_take_left_behind_goes_once_old_and_a_recent_one_stays(now):
    """A job that ended before starting its runs leaves its take for the claim that
    takes them over; one whose runs ended otherwise is bookkeeping left behind."""
    JobTake.objects.create(job="old", token="a", run_ids=[1])
    JobTake.objects.create(job="new", token="b", run_ids=[2])
    JobTake.objects.filter(job="old").update(taken_at=now - OLD)
    prune("--older-than", "90d", "--dry-run")
    assert set(JobTake.objects.values_list("job", flat=True)) == {"old", "new"}
    prune("--older-than", "90d")
    assert list(JobTake.objects.values_list("job", flat=True)) == ["new"]


def test_dry_run_deletes_nothing_and_reports_what_a_prune_deletes(now):
    history(now, 3)
    # A row only its old run carries: counted, as the prune deletes the run first.
    add_ledger(None, SendLog.Status.FAILED, at=now - OLD, key="gone:1")
    runs, rows = TaskRun.objects.count(), SendLog.objects.count()

    said = prune("--older-than", "90d", "--dry-run")

    assert "Would delete 3 runs, 4 ledger rows" in said
    assert (TaskRun.objects.count(), SendLog.objects.count()) == (runs, rows)
    assert "Deleted 3 runs, 4 ledger rows" in prune("--older-than", "90d")
    assert (TaskRun.objects.count(), SendLog.objects.count()) == (runs - 3, rows - 4)


def test_batches_delete_everything_a_few_rows_at_a_time(now):
    history(now, 5)

    with CaptureQueriesContext(connection) as queries:
        said = prune("--older-than", "90d", "--batch-size", "2", verbosity=2)

    assert "Deleted 5 runs, 5 ledger rows" in said
    assert TaskRun.objects.count() == 1
    assert SendLog.objects.count() == 1
    deletes = [q["sql"] for q in queries if q["sql"].startswith("DELETE")]
    assert sum("reminders_taskrun" in sql for sql in deletes) == 3
    assert sum("reminders_sendlog" in sql for sql in deletes) == 3
    assert said.count("runs: deleted") == 3
    assert said.count("ledger rows: deleted") == 3


def test_the_service_reports_each_batch_and_can_be_given_the_clock(now):
    history(now, 3)
    seen: list[tuple[str, int, int]] = []

    result = retention.prune(
        timedelta(days=90), batch_size=2, now=now, progress=lambda *step: seen.append(step)
    )

    assert (result.runs, result.ledger) == (3, 3)
    assert result.cutoff == now - timedelta(days=90)
    assert seen == [
        ("runs", 2, 2),
        ("runs", 1, 3),
        ("ledger rows", 2, 2),
        ("ledger rows", 1, 3),
    ]


def test_the_default_age_is_the_setting(settings, now):
    history(now, 1)
    settings.REMINDERS_RETENTION_DAYS = 200
    assert "Deleted 0 runs" in prune()
    settings.REMINDERS_RETENTION_DAYS = 30
    assert "Deleted 1 run" in prune()


# Bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["90", "ninety", "90x", "0d", "-1d", "1.5d", "d", ""])
def test_an_older_than_that_is_not_an_age_is_refused_naming_the_option(value):
    with pytest.raises(CommandError, match="--older-than"):
        prune("--older-than", value)


@pytest.mark.parametrize("value", ["0", "-5", "many"])
def test_a_batch_size_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(CommandError, match="--batch-size"):
        prune("--batch-size", value)


@pytest.mark.parametrize(
    ("value", "days"), [("12h", 0.5), ("2w", 14), ("90d", 90), ("48H", 2), (" 3D ", 3)]
)
def test_ages_in_hours_days_and_weeks(value, days):
    assert retention.parse_age(value) == timedelta(days=days)


def test_an_age_inside_what_the_engine_still_reads_is_refused(now):
    history(now, 1)
    # The report kinds make up what failed or was missed up to 7 days back.
    with pytest.raises(CommandError, match=r"--older-than 3d.*7d.*compensate_max_age_seconds"):
        prune("--older-than", "3d")
    assert TaskRun.objects.count() == 2
    with pytest.raises(RetentionTooShort):
        retention.prune(timedelta(days=3))


def test_the_floor_follows_the_kinds_make_up_horizon(settings, now):
    settings.REMINDERS_KINDS = {"daily_report": {"compensate_max_age_seconds": 30 * 86400}}
    task = daily_task()
    add_run(task, now - 31 * DAY)
    kept = add_run(task, now - 29 * DAY)
    with pytest.raises(CommandError, match="daily_report"):
        prune("--older-than", "4w")
    assert TaskRun.objects.count() == 2
    assert "Deleted 1 run" in prune("--older-than", "30d")
    assert list(TaskRun.objects.all()) == [kept]


def test_the_floor_follows_the_longest_duplicate_window(settings, now):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "gateway": {
            "BACKEND": "reminders.senders.http.HttpSender",
            "OPTIONS": {"url": "http://127.0.0.1:9", "duplicate_check_seconds": 10 * 86400},
        },
    }
    task = daily_task()
    add_run(task, now - 11 * DAY)
    kept = add_run(task, now - 9 * DAY)
    with pytest.raises(CommandError, match="duplicate window of channel 'gateway'"):
        prune("--older-than", "9d")
    assert TaskRun.objects.count() == 2
    assert "Deleted 1 run" in prune("--older-than", "10d")
    assert list(TaskRun.objects.all()) == [kept]


def test_a_default_inside_the_floor_names_the_setting(settings):
    settings.REMINDERS_RETENTION_DAYS = 2
    with pytest.raises(CommandError, match="REMINDERS_RETENTION_DAYS"):
        prune()


# Completed one-shot tasks ---------------------------------------------------------------


def one_shot(at: datetime, status: str = TaskRun.Status.SENT, key: str | None = None):
    """A one-shot task at ``at`` that completed, its run ended ``status`` a minute
    after, its ledger row written then; all of it as old as ``at``."""
    task = api.schedule("follow_up", "zhangsan", at=at, tz="UTC", key=key)
    run = add_run(task, at, status)
    ScheduledTask.objects.filter(pk=task.pk).update(
        status=ScheduledTask.Status.COMPLETED, next_run=None, created_at=at, updated_at=at
    )
    row = add_ledger(run) if status in (TaskRun.Status.SENT, TaskRun.Status.UNKNOWN) else None
    return task, run, row


def test_completed_one_shot_tasks_that_old_go_with_their_runs_and_ledger_rows(now):
    old, old_run, old_row = one_shot(now - OLD, key="fu:old")
    unkeyed, _, _ = one_shot(now - OLD - DAY)
    recent, recent_run, _ = one_shot(now - RECENT, key="fu:recent")
    cron = daily_task()
    ScheduledTask.objects.filter(pk=cron.pk).update(
        status=ScheduledTask.Status.COMPLETED, created_at=now - OLD, updated_at=now - OLD
    )

    out = prune("--older-than", "90d")

    assert "Deleted 2 runs, 2 ledger rows, 2 completed one-shot tasks" in out
    assert not ScheduledTask.objects.filter(pk__in=[old.pk, unkeyed.pk]).exists()
    assert not exists(old_run)
    assert not exists(old_row)
    assert ScheduledTask.objects.filter(pk__in=[recent.pk, cron.pk]).count() == 2
    assert exists(recent_run)


@pytest.mark.parametrize(
    "status", [TaskRun.Status.RETRYING, TaskRun.Status.RUNNING, TaskRun.Status.UNKNOWN]
)
def test_a_completed_one_shot_whose_run_is_not_done_with_stays(now, status):
    task, run, _ = one_shot(now - OLD, status)

    prune("--older-than", "90d")

    assert ScheduledTask.objects.filter(pk=task.pk).exists()
    assert exists(run)


def test_a_completed_one_shot_edited_lately_stays(now):
    task, _, _ = one_shot(now - OLD)
    ScheduledTask.objects.filter(pk=task.pk).update(updated_at=now - RECENT)

    prune("--older-than", "90d")

    assert ScheduledTask.objects.filter(pk=task.pk).exists()


def test_a_dry_run_counts_the_tasks_it_would_delete(now):
    one_shot(now - OLD, key="fu:1")

    assert "Would delete 1 run, 1 ledger row, 1 completed one-shot task" in prune(
        "--older-than", "90d", "--dry-run"
    )
    assert ScheduledTask.objects.count() == 1


@pytest.mark.usefixtures("reports_every_day")
def test_a_pruned_one_shot_scheduled_again_by_its_key_is_not_sent_again(now, outbox):
    # A report kind has no deadline: scheduled again, the same time would still be sent.
    at = (now - OLD).replace(microsecond=0)
    schedule = {"tz": "UTC", "key": "once:1"}
    api.schedule("daily_report", "zhangsan", at=at, **schedule)
    assert tick(now=now) == 1
    TaskRun.objects.update(created_at=at, finished_at=at + timedelta(minutes=1))
    SendLog.objects.update(created_at=at, updated_at=at, sent_at=at)
    ScheduledTask.objects.update(created_at=at, updated_at=at)
    assert "1 completed one-shot task" in prune("--older-than", "90d")
    assert not ScheduledTask.objects.exists()

    again = api.schedule("daily_report", "zhangsan", at=at, **schedule)
    assert (again.status, again.next_run) == ("completed", None)
    assert tick(now=now) == 0
    assert len(outbox) == 1
    # Another time under the key is a message of its own.
    api.schedule("daily_report", "zhangsan", at=now - timedelta(minutes=1), **schedule)
    assert tick(now=now + timedelta(minutes=30)) == 1
    assert len(outbox) == 2


@pytest.mark.usefixtures("reports_every_day")
def test_a_pruned_one_shot_is_not_sent_again_at_any_time_it_was_sent(now, outbox):
    # Sent at its time, moved and sent at the new one (a message of its own), then pruned:
    # both times are remembered, not only the last.
    first = (now - OLD).replace(microsecond=0)
    second = first + timedelta(hours=1)
    schedule = {"tz": "UTC", "key": "once:1"}
    for at in (first, second):
        api.schedule("daily_report", "zhangsan", at=at, **schedule)
        assert tick(now=now) == 1
    TaskRun.objects.update(created_at=first, finished_at=second)
    SendLog.objects.update(created_at=first, updated_at=second, sent_at=second)
    ScheduledTask.objects.update(created_at=first, updated_at=second)
    assert "1 completed one-shot task" in prune("--older-than", "90d")
    assert set(PrunedOneShot.objects.values_list("key", "run_at")) == {
        ("once:1", first),
        ("once:1", second),
    }

    for at in (first, second):
        again = api.schedule("daily_report", "zhangsan", at=at, **schedule)
        assert (again.status, again.next_run) == ("completed", None)
        assert tick(now=now) == 0
    assert len(outbox) == 2


def test_a_pruned_one_shot_s_time_is_forgotten_once_its_kind_could_no_longer_send_it(now):
    # Remembered by an earlier prune: a follow-up (at most 2 hours late) and a birthday
    # (by 12:00 on its day) long past, a follow-up of yesterday, and a report (no
    # deadline: scheduled again, it would still be sent).
    old = (now - OLD).replace(microsecond=0)
    recent = now - DAY
    rows = [
        ("follow_up", "fu:old", old),
        ("birthday", "bd:old", old),
        ("follow_up", "fu:recent", recent),
        ("daily_report", "dr:old", old),
        ("gone_kind", "gk:old", old),  # a kind no longer registered: its deadline unknown
    ]
    PrunedOneShot.objects.bulk_create(
        [PrunedOneShot(kind=kind, key=key, run_at=at, timezone="UTC") for kind, key, at in rows]
    )

    assert "Would forget 2 times of pruned one-shot tasks" in prune(
        "--older-than", "90d", "--dry-run"
    )
    assert PrunedOneShot.objects.count() == 5
    assert "Forgot 2 times of pruned one-shot tasks" in prune("--older-than", "90d")

    assert set(PrunedOneShot.objects.values_list("key", flat=True)) == {
        "fu:recent",
        "dr:old",
        "gk:old",
    }


def test_a_pruned_one_shot_whose_time_can_no_longer_be_sent_leaves_no_time_behind(now, outbox):
    at = (now - OLD).replace(microsecond=0)
    api.schedule("follow_up", "zhangsan", at=at, tz="UTC", key="fu:1")
    TaskRun.objects.all().delete()
    ScheduledTask.objects.update(
        status=ScheduledTask.Status.COMPLETED, next_run=None, created_at=at, updated_at=at
    )

    assert "1 completed one-shot task" in prune("--older-than", "90d")

    assert not PrunedOneShot.objects.exists()


# What the engine does next --------------------------------------------------------------


@pytest.mark.usefixtures("reports_every_day")
@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_a_daily_report_goes_on_as_before_once_its_history_is_pruned(pruned, now, outbox):
    task = api.schedule("daily_report", "zhangsan", cron="0 9 * * *", tz="UTC", key="d:1")
    nine = task.next_run
    sent_long_ago = add_run(task, nine - OLD)
    add_ledger(sent_long_ago)
    add_run(task, nine - OLD + DAY, TaskRun.Status.FAILED)
    failed_lately = add_run(task, nine - 3 * DAY, TaskRun.Status.FAILED)
    yesterday = add_run(task, nine - DAY)
    add_ledger(yesterday)
    if pruned:
        assert "Deleted 2 runs, 1 ledger row" in prune("--older-than", "90d")

    # Today's report, and the make-up of the one that failed three days ago (inside the
    # kind's 7 days); nothing for what failed a hundred days ago, pruned or not.
    assert tick(now=nine + timedelta(minutes=15)) == 2
    makeup = task.runs.get(is_compensation=True)
    assert makeup.ledger_key == f"{failed_lately.ledger_key}:makeup"
    assert makeup.status == TaskRun.Status.SENT
    assert task.runs.get(occurrence=nine).status == TaskRun.Status.SENT
    assert len(outbox) == 2


@pytest.mark.usefixtures("reports_every_day")
@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_a_one_shot_sent_long_ago_is_not_sent_again_when_scheduled_again(pruned, now, outbox):
    # A report kind has no deadline: an occurrence planned again would still be sent.
    at = (now - OLD).replace(microsecond=0)
    schedule = {"at": at, "tz": "UTC", "key": "once:1"}
    api.schedule("daily_report", "zhangsan", **schedule)
    assert tick(now=now) == 1
    TaskRun.objects.update(created_at=at, finished_at=at + timedelta(minutes=1))
    SendLog.objects.update(created_at=at, updated_at=at, sent_at=at)
    api.cancel("once:1")
    if pruned:
        assert "Deleted 0 runs, 0 ledger rows" in prune("--older-than", "90d")

    api.schedule("daily_report", "zhangsan", **schedule)  # cancelled: planned again
    assert tick(now=now) == 0
    assert len(outbox) == 1
    assert TaskRun.objects.get().status == TaskRun.Status.SENT


@pytest.mark.usefixtures("reports_every_day")
@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_a_one_shot_moved_away_and_back_is_not_sent_again(pruned, now, outbox):
    at = (now - OLD).replace(microsecond=0)
    schedule = {"tz": "UTC", "key": "once:1"}
    api.schedule("daily_report", "zhangsan", at=at, **schedule)
    assert tick(now=now) == 1
    TaskRun.objects.update(created_at=at, finished_at=at + timedelta(minutes=1))
    SendLog.objects.update(created_at=at, updated_at=at, sent_at=at)
    api.schedule("daily_report", "zhangsan", at=now + DAY, **schedule)  # moved away
    if pruned:
        assert "Deleted 0 runs, 0 ledger rows" in prune("--older-than", "90d")

    api.schedule("daily_report", "zhangsan", at=at, **schedule)  # and back
    assert tick(now=now) == 0
    assert len(outbox) == 1


@pytest.mark.usefixtures("reports_every_day")
@pytest.mark.parametrize("pruned", [False, True], ids=["kept", "pruned"])
def test_a_run_left_waiting_that_long_still_sees_its_day(pruned, now, outbox):
    # Twice a day (a key per occurrence) then once a day (a key per day): the 15:00 run
    # left waiting is the day's second message, which only the 08:00 run says.
    task = api.schedule("daily_report", "zhangsan", cron="0 8 * * *", tz="UTC", key="d:1")
    day = (now - OLD).replace(hour=0, minute=0, second=0, microsecond=0)
    morning = add_run(task, day + timedelta(hours=8), key=f"{task.pk}:morning")
    add_ledger(morning)
    late = add_run(task, day + timedelta(hours=15), TaskRun.Status.RETRYING, next_attempt_at=now)
    if pruned:
        assert "Deleted 0 runs, 0 ledger rows" in prune("--older-than", "90d")

    assert tick(now=now) == 0
    late.refresh_from_db()
    assert (late.status, late.error_code) == ("skipped", "duplicate")
    assert outbox == []


# As cron runs it ------------------------------------------------------------------------


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_the_command_as_a_process(now):
    from tests.support.processes import REPO, database_url

    history(now, 2)
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    command = [sys.executable, "manage.py", "reminders_prune", "--older-than", "90d"]

    dry = subprocess.run(
        [*command, "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert dry.returncode == 0, dry.stderr
    assert "Would delete 2 runs, 2 ledger rows" in dry.stdout
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Deleted 2 runs, 2 ledger rows" in done.stdout
    assert TaskRun.objects.count() == 1

    bad = subprocess.run(
        [*command[:-1], "soon"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode != 0
    assert "--older-than" in bad.stderr


def test_the_command_speaks_chinese_under_zh_hans(settings):
    settings.LANGUAGE_CODE = "zh-hans"
    with translation.override("zh-hans"):
        assert "将删除 0 条运行记录、0 条台账记录" in prune("--dry-run")
        with pytest.raises(CommandError, match="不是有效的时长"):
            prune("--older-than", "soon")
        with pytest.raises(CommandError, match="短于"):
            prune("--older-than", "1h")
