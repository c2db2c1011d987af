import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from reminders import signals
from reminders.engine import actions, dispatch
from reminders.models import ScheduledTask, TaskRun
from tests.support.jobs import queued, run_queued

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("reports_every_day")
def test_materialize__creates_the_run_and_advances_a_cron_task(make_task):
    task = make_task("weekly_report", cron="0 9 * * 1", tz="Asia/Shanghai")
    occurrence = task.next_run
    assert dispatch.materialize(now=occurrence) == 1
    run = task.runs.get()
    assert run.occurrence == occurrence
    assert (
        run.run_date.isoformat()
        == occurrence.astimezone(timezone.get_fixed_timezone(480)).date().isoformat()
    )
    # weekly_report staggers by up to five minutes, deterministically.
    assert occurrence <= run.due_at < occurrence + timedelta(minutes=5)
    assert run.next_attempt_at == run.due_at
    task.refresh_from_db()
    assert task.next_run == occurrence + timedelta(days=7)
    assert task.status == "active"


def test_materialize__leaves_a_one_shot_active_until_its_run_ends(make_task):
    task = make_task()
    dispatch.materialize()
    task.refresh_from_db()
    assert (task.status, task.next_run) == ("active", None)
    assert task.runs.get().status == "scheduled"


def test_materialize__twice_for_the_same_occurrence_creates_one_run(make_task):
    task = make_task("daily_report", cron="0 9 * * *")
    due = task.next_run
    dispatch.materialize(now=due)
    # A second scheduler that read the task before the first one advanced it.
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=due)
    dispatch.materialize(now=due)
    assert task.runs.count() == 1


def test_materialize__looks_for_a_cancelled_run_to_revive_only_when_a_row_was_left_out(
    make_task,
):
    """A wave whose runs all go in sends no SELECT of cancelled runs; an occurrence
    planned again after its run was cancelled (a schedule moved away and back) gets that
    run back in line."""
    # A follow-up: no working-day calendar, so no day of the week plans it skipped.
    task = make_task(at=timezone.now() + timedelta(minutes=10))
    due = task.next_run
    with CaptureQueriesContext(connection) as queries:
        dispatch.materialize(now=due)
    cancelled_reads = [q["sql"] for q in queries.captured_queries if "'cancelled'" in q["sql"]]
    assert cancelled_reads == []
    run = task.runs.get()
    TaskRun.objects.filter(pk=run.pk).update(status=TaskRun.Status.CANCELLED, next_attempt_at=None)
    ScheduledTask.objects.filter(pk=task.pk).update(next_run=due)
    dispatch.materialize(now=due)
    run.refresh_from_db()
    assert (task.runs.count(), run.status) == (1, "scheduled")


def test_materialize__after_downtime_runs_the_latest_and_records_the_missed(make_task):
    task = make_task("follow_up", cron="0 * * * *", tz="UTC")
    first = task.next_run
    dispatch.materialize(now=first + timedelta(hours=4, minutes=30))
    runs = list(task.runs.order_by("occurrence").values_list("status", "error_code"))
    # The past: the latest runs, the missed recorded; then the next hour, planned ahead.
    assert runs == [("skipped", "missed")] * 4 + [("scheduled", "")] * 2
    task.refresh_from_db()
    assert task.next_run == first + timedelta(hours=6)


def test_materialize__plans_the_next_hour_ahead_and_not_beyond(make_task, settings):
    task = make_task("follow_up", cron="*/15 * * * *", tz="UTC")
    first = task.next_run
    now = first - timedelta(minutes=20)
    dispatch.materialize(now=now)
    runs = list(task.runs.order_by("occurrence"))
    assert [run.occurrence for run in runs] == [first + timedelta(minutes=15 * n) for n in range(3)]
    assert {run.status for run in runs} == {"scheduled"}
    # Planned, not due: nothing is claimed before its time.
    assert dispatch.claim("test", 10, now=now).run_ids == []
    assert dispatch.materialize(now=now) == 0  # already planned
    settings.REMINDERS_PLAN_AHEAD_SECONDS = 0
    other = make_task("follow_up", cron="*/15 * * * *", tz="UTC")
    dispatch.materialize(now=now)
    assert not other.runs.exists()


def test_materialize__a_09_00_wave_is_planned_and_spread_before_it_comes(make_task):
    tasks = [make_task("daily_report", f"member{n}", cron="0 9 * * *", tz="UTC") for n in range(40)]
    nine = tasks[0].next_run
    dispatch.materialize(now=nine - timedelta(minutes=30))
    runs = TaskRun.objects.filter(task__in=tasks)
    assert runs.count() == 40
    offsets = sorted((run.due_at - nine).total_seconds() for run in runs)
    assert offsets[0] >= 0 and offsets[-1] < 15 * 60
    assert len({int(offset // 60) for offset in offsets}) >= 8  # spread over the minutes


def test_materialize__ignores_paused_tasks(make_task):
    task = make_task()
    actions.pause(task)
    assert dispatch.materialize() == 0
    assert not TaskRun.objects.exists()


def test_claim__takes_due_runs_in_priority_order_up_to_the_limit(make_task):
    low = make_task(priority="low")
    normal = make_task()
    high = make_task(priority="high")
    dispatch.materialize()
    first = dispatch.claim("a", 2)
    claimed_tasks = set(TaskRun.objects.filter(pk__in=first.run_ids).values_list("task", flat=True))
    assert claimed_tasks == {high.pk, normal.pk}
    second = dispatch.claim("b", 10)
    assert TaskRun.objects.get(pk__in=second.run_ids).task_id == low.pk
    assert dispatch.claim("c", 10).run_ids == []


def test_claim__leases_and_enqueues_in_jobs_of_runs_per_job(make_task, settings):
    settings.REMINDERS_RUNS_PER_JOB = 3
    for _ in range(7):
        make_task()
    dispatch.materialize()
    claim = dispatch.claim("owner-1", 100)
    assert len(claim.run_ids) == 7
    assert [len(job["args"][1]) for job in queued()] == [3, 3, 1]
    runs = TaskRun.objects.all()
    assert {(r.status, r.lease_owner, r.lease_token) for r in runs} == {
        ("queued", "owner-1", claim.token)
    }
    assert all(r.lease_expires_at > timezone.now() + timedelta(seconds=290) for r in runs)


def test_claim__and_its_enqueue_roll_back_together(make_task):
    make_task()
    dispatch.materialize()
    with pytest.raises(RuntimeError), transaction.atomic():
        dispatch.claim("owner", 10)
        raise RuntimeError("the scheduler died before commit")
    assert not OrmQ.objects.exists()
    assert TaskRun.objects.get().status == "scheduled"


def test_claim__leaves_runs_not_yet_due(make_task):
    make_task(at=timezone.now() + timedelta(minutes=5))
    dispatch.materialize(now=timezone.now() + timedelta(minutes=5))
    assert dispatch.claim("owner", 10).run_ids == []


def test_claim__skips_runs_of_paused_tasks(make_task):
    task = make_task("daily_report", cron="* * * * *")
    dispatch.materialize(now=task.next_run)
    actions.pause(task)
    assert dispatch.claim("owner", 10, now=task.next_run + timedelta(minutes=10)).run_ids == []


def test_claim__reclaims_a_run_whose_lease_expired_and_the_stale_job_sends_nothing(
    make_task, outbox, settings
):
    make_task()
    dispatch.materialize()
    stale = dispatch.claim("dead-worker", 10)
    OrmQ.objects.all().delete()  # the dead worker's job is lost with it
    later = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    fresh = dispatch.claim("live-worker", 10, now=later)
    assert fresh.run_ids == stale.run_ids
    from reminders.engine.delivery import deliver

    assert deliver(stale.token, stale.run_ids) == 0
    assert run_queued() == 1
    assert len(outbox) == 1


def test_release__hands_back_only_the_owners_unstarted_runs(make_task):
    for _ in range(3):
        make_task()
    dispatch.materialize()
    mine = dispatch.claim("me", 2)
    dispatch.claim("other", 10)
    assert dispatch.in_flight("me") == 2
    assert dispatch.release("me") == 2
    statuses = dict(TaskRun.objects.values_list("pk", "status"))
    assert [statuses[pk] for pk in mine.run_ids] == ["scheduled", "scheduled"]
    assert sorted(statuses.values()) == ["queued", "scheduled", "scheduled"]
    assert dispatch.claim("me", 10).run_ids == mine.run_ids


@pytest.mark.django_db(transaction=True)
def test_claim__skips_rows_locked_by_another_worker(make_task):
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip(f"{connection.vendor} has no SKIP LOCKED; claims rely on compare-and-set")
    locked, free = make_task(), make_task()
    dispatch.materialize()
    holding, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with transaction.atomic():
            list(TaskRun.objects.select_for_update().filter(task=locked))
            holding.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=hold_lock)
    thread.start()
    try:
        assert holding.wait(10)
        claim = dispatch.claim("owner", 10)
        assert list(
            TaskRun.objects.filter(pk__in=claim.run_ids).values_list("task", flat=True)
        ) == [free.pk]
    finally:
        release.set()
        thread.join()


def test_materialize__an_occurrence_planned_again_gets_its_cancelled_run_back(make_task, outbox):
    at = timezone.now() + timedelta(minutes=1)
    task = make_task(at=at, key="fu")
    dispatch.materialize(now=at)
    make_task(at=at + timedelta(hours=1), key="fu")  # moved away: the run is cancelled
    make_task(at=at, key="fu")  # and back
    dispatch.materialize(now=at)
    run = task.runs.get(occurrence=at)
    assert (run.status, run.next_attempt_at) == ("scheduled", run.due_at)
    dispatch.claim("test", 10, now=at)
    assert run_queued() == 1
    assert len(outbox) == 1


# One bad task never stops the rest ---------------------------------------------------


@pytest.mark.parametrize(
    ("bad_fields", "code"),
    [
        ({"kind": "removed_by_a_deploy"}, "unknown_kind"),
        ({"cron": "61 * * * *"}, "invalid_cron"),
        ({"timezone": "Mars/Olympus"}, "invalid_timezone"),
    ],
    ids=["unknown kind", "bad stored cron", "bad stored zone"],
)
def test_materialize__a_task_that_cannot_be_planned_is_marked_and_the_others_get_their_runs(
    make_task, django_capture_on_commit_callbacks, bad_fields, code
):
    first, bad, last = (make_task("daily_report", cron="0 9 * * *", tz="UTC") for _ in range(3))
    ScheduledTask.objects.filter(pk=bad.pk).update(**bad_fields)  # bulk update, raw SQL…
    due = first.next_run
    told = []

    def receiver(sender, **kwargs):
        told.append(kwargs)

    signals.task_error.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert dispatch.materialize(now=due) == 2
    finally:
        signals.task_error.disconnect(receiver)
    assert set(TaskRun.objects.values_list("task", flat=True)) == {first.pk, last.pk}
    bad.refresh_from_db()
    assert (bad.status, bad.error_code) == ("error", code)
    assert bad.error_message and bad.error_at is not None
    assert [(t["task"].pk, t["code"]) for t in told] == [(bad.pk, code)]
    assert told[0]["message"] == bad.error_message
    # Out of the due set: the next tick does not try it again, nor tell ops twice.
    with django_capture_on_commit_callbacks(execute=True):
        dispatch.materialize(now=due + timedelta(days=1))
    assert len(told) == 1
    assert not bad.runs.exists()


def test_materialize__anything_raised_while_planning_one_task_is_confined_to_it(
    make_task, monkeypatch
):
    good, bad = make_task(), make_task()
    planned = ScheduledTask.occurrence_after

    def occurrence_after(task, moment):
        if task.pk == bad.pk:
            raise ZeroDivisionError("a bug in one schedule")
        return planned(task, moment)

    monkeypatch.setattr(ScheduledTask, "occurrence_after", occurrence_after)
    dispatch.materialize()
    assert list(TaskRun.objects.values_list("task", flat=True)) == [good.pk]
    bad.refresh_from_db()
    assert (bad.status, bad.error_code) == ("error", "planning_failed")
    assert "a bug in one schedule" in bad.error_message


def test_claim__enqueues_high_runs_apart_on_the_high_cluster_s_queue(make_task, settings):
    settings.REMINDERS_RUNS_PER_JOB = 2
    low = [make_task(priority="low") for _ in range(3)]
    high = [make_task("inquiry_timeout") for _ in range(3)]
    dispatch.materialize()
    claim = dispatch.claim("owner-1", 100)
    jobs = [(row.key, SignedPackage.loads(row.payload)) for row in OrmQ.objects.order_by("id")]
    by_queue: dict[str, list[int]] = {}
    for key, job in jobs:
        assert job["args"][0] == claim.token
        by_queue.setdefault(key, []).extend(job["args"][1])
    runs = dict(TaskRun.objects.values_list("pk", "task_id"))
    assert sorted(runs[pk] for pk in by_queue[dispatch.high_queue()]) == [t.pk for t in high]
    assert sorted(runs[pk] for pk in by_queue[dispatch.bulk_queue()]) == [t.pk for t in low]
    assert dispatch.high_queue() != dispatch.bulk_queue()
    assert [len(job["args"][1]) for _, job in jobs] == [2, 1, 2, 1]  # high first


def test_claim__without_a_high_cluster_high_runs_share_the_bulk_queue(make_task, settings):
    settings.REMINDERS_HIGH_WORKERS = 0
    make_task("inquiry_timeout")
    make_task(priority="low")
    dispatch.materialize()
    dispatch.claim("owner-1", 100)
    assert set(OrmQ.objects.values_list("key", flat=True)) == {dispatch.bulk_queue()}


def test_claim__only_high_leaves_bulk_runs_waiting(make_task):
    make_task(priority="low")
    urgent = make_task("inquiry_timeout")
    dispatch.materialize()
    claim = dispatch.claim("owner-1", 100, only_high=True)
    assert list(TaskRun.objects.filter(pk__in=claim.run_ids).values_list("task", flat=True)) == [
        urgent.pk
    ]


def test_claim__without_abandoned_leaves_runs_under_an_expired_lease(make_task, settings):
    """A scheduler looks for runs whose holder died only when it sweeps (every few
    seconds), not at each claim of a wave."""
    make_task()
    dispatch.materialize()
    stale = dispatch.claim("dead-worker", 10)
    OrmQ.objects.all().delete()  # the dead worker's job is lost with it
    later = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert dispatch.claim("live-worker", 10, now=later, abandoned=False).run_ids == []
    assert dispatch.claim("live-worker", 10, now=later).run_ids == stale.run_ids


def test_claim__its_update_returns_the_runs_it_leased_where_it_can_none_read_back(make_task):
    for priority in ("low", "high", "normal", "low"):
        make_task(priority=priority)
    dispatch.materialize()
    with CaptureQueriesContext(connection) as queries:
        claim = dispatch.claim("owner", 10)
    statements = [query["sql"] for query in queries.captured_queries]
    update = next(
        at
        for at, statement in enumerate(statements)
        if statement.startswith("UPDATE") and "reminders_taskrun" in statement
    )
    read_back = [s for s in statements[update + 1 :] if s.startswith("SELECT") and "taskrun" in s]
    assert len(read_back) == (0 if connection.vendor == "postgresql" else 1)
    # Enqueued as before: by priority, then due time.
    ranks = dict(TaskRun.objects.values_list("pk", "priority"))
    assert [ranks[pk] for pk in claim.run_ids] == sorted(ranks.values())
    assert sorted(pk for job in queued() for pk in job["args"][1]) == sorted(ranks)


def test_claim__a_run_its_worker_died_with_is_claimed_again_beside_due_ones(make_task, settings):
    make_task()
    dispatch.materialize()
    dead = dispatch.claim("dead-worker", 10)
    # Its worker started it (no due time left) and died.
    TaskRun.objects.update(status="running", next_attempt_at=None, attempts=1)
    due = make_task()
    later = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    dispatch.materialize(now=later)
    claim = dispatch.claim("live-worker", 10, now=later)
    assert sorted(claim.run_ids) == sorted([*dead.run_ids, due.runs.get().pk])
    taken_over = TaskRun.objects.get(pk=dead.run_ids[0])
    assert (taken_over.status, taken_over.attempts) == ("queued", 0)  # a death is no attempt
