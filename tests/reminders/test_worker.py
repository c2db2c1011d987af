import os
import socket
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

from reminders.engine import dispatch, planning, wake
from reminders.engine.worker import (
    CLICKS_SECONDS,
    HEARTBEAT_SECONDS,
    MIN_SLEEP_SECONDS,
    ReminderWorker,
)
from reminders.models import RunAction, ScheduledTask, SchedulerHeartbeat, TaskRun
from tests.support.jobs import queued, run_queued

pytestmark = pytest.mark.django_db


def test_tick__materializes_and_claims_due_work(make_task, outbox):
    for _ in range(3):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is False  # all of it fit in one tick
    assert set(TaskRun.objects.values_list("status", "lease_owner")) == {("queued", worker.owner)}
    assert run_queued() == 3
    assert len(outbox) == 3


def test_tick__claims_no_more_than_max_in_flight(make_task, settings):
    settings.REMINDERS_MAX_IN_FLIGHT = 4
    settings.REMINDERS_CLAIM_BATCH = 3
    for _ in range(10):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is True  # a full batch: more may be waiting
    assert worker.tick() is False  # only one more fits under the ceiling
    assert TaskRun.objects.filter(status="queued").count() == 4
    assert worker.tick() is False
    assert TaskRun.objects.filter(status="queued").count() == 4
    run_queued()
    worker.tick()
    assert TaskRun.objects.filter(status="queued").count() == 3


def test_tick__more_due_tasks_than_one_plan_takes_is_more_work_even_under_back_pressure(
    make_task, settings, monkeypatch
):
    monkeypatch.setattr(dispatch, "PLAN_BATCH", 3)
    settings.REMINDERS_MAX_IN_FLIGHT = 1
    for _ in range(5):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is True  # 3 of 5 tasks planned, 1 run claimed: the ceiling
    assert TaskRun.objects.count() == 3
    monkeypatch.setattr(dispatch, "PLAN_BATCH", 1)
    assert worker.tick() is True  # pressed, but a full plan: more may be due
    assert worker._pressed
    assert TaskRun.objects.count() == 4
    monkeypatch.setattr(dispatch, "PLAN_BATCH", 3)
    assert worker.tick() is False  # the last one planned: nothing more to plan
    assert TaskRun.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_shutdown__hands_back_claimed_runs_no_worker_started(make_task):
    make_task()
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    worker.shutdown()
    assert TaskRun.objects.get().status == "scheduled"
    assert len(queued()) == 1  # the job stays; when it runs it finds nothing to start
    assert run_queued() == 0


def test_tick__a_task_of_a_kind_this_process_does_not_know_stops_nothing(make_task, outbox):
    good = [make_task(recipient=f"good{i}") for i in range(2)]
    bad = make_task(recipient="bad")
    ScheduledTask.objects.filter(pk=bad.pk).update(kind="registered_elsewhere")
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    assert sorted(TaskRun.objects.values_list("task", flat=True)) == [t.pk for t in good]
    assert run_queued() == 2
    assert sorted(m.recipient for m in outbox) == ["good0", "good1"]
    assert ScheduledTask.objects.get(pk=bad.pk).status == "error"
    worker.tick()  # and again: the bad task is not retried every tick
    assert not TaskRun.objects.filter(task=bad).exists()


def test_tick__records_the_scheduler_s_heartbeat(db, now):
    worker = ReminderWorker(with_cluster=False)
    worker.tick(now=now)
    beat = SchedulerHeartbeat.objects.get()
    assert (beat.owner, beat.host, beat.pid) == (worker.owner, socket.gethostname(), os.getpid())
    assert (beat.started_at, beat.last_tick_at) == (worker.started_at, now)


def test_tick__writes_the_heartbeat_at_most_every_few_seconds(db, now):
    worker = ReminderWorker(with_cluster=False)
    worker.tick(now=now)
    soon = now + timedelta(seconds=HEARTBEAT_SECONDS - 1)
    worker.tick(now=soon)
    assert SchedulerHeartbeat.objects.get().last_tick_at == now
    later = now + timedelta(seconds=HEARTBEAT_SECONDS)
    worker.tick(now=later)
    assert SchedulerHeartbeat.objects.get().last_tick_at == later


def test_heartbeat__stale_finds_schedulers_that_stopped_ticking(db, now):
    quiet, busy = ReminderWorker(with_cluster=False), ReminderWorker(with_cluster=False)
    busy.owner = "other-host:2"
    quiet.tick(now=now)
    busy.tick(now=now + timedelta(seconds=50))
    stale = SchedulerHeartbeat.objects.stale(now + timedelta(seconds=60), seconds=30)
    assert list(stale.values_list("owner", flat=True)) == [quiet.owner]
    assert SchedulerHeartbeat.objects.count() == 2


def test_heartbeat__comes_back_if_its_row_was_removed(db, now):
    worker = ReminderWorker(with_cluster=False)
    worker.tick(now=now)
    SchedulerHeartbeat.objects.all().delete()  # an operator cleared stale rows
    worker.tick(now=now + timedelta(seconds=HEARTBEAT_SECONDS))
    assert SchedulerHeartbeat.objects.get().owner == worker.owner


@pytest.mark.django_db(transaction=True)
def test_shutdown__removes_the_heartbeat():
    worker = ReminderWorker(with_cluster=False)
    other = ReminderWorker(with_cluster=False)
    other.owner = "other-host:3"
    worker.tick(now=timezone.now())
    other.tick(now=timezone.now())
    worker.shutdown()
    assert list(SchedulerHeartbeat.objects.values_list("owner", flat=True)) == [other.owner]


def test_sleep__wakes_for_a_one_shot_due_before_the_tick(make_task, settings):
    worker = ReminderWorker(tick=30, with_cluster=False)
    assert worker._sleep_seconds() == 30  # nothing waits
    make_task(at=timezone.now() + timedelta(seconds=2))
    assert 1 < worker._sleep_seconds() <= 2


def test_sleep__a_one_shot_due_now_or_past_is_taken_at_once(make_task):
    worker = ReminderWorker(tick=30, with_cluster=False)
    make_task(at=timezone.now() - timedelta(seconds=5))
    assert worker._sleep_seconds() == MIN_SLEEP_SECONDS
    worker.tick()
    assert worker._sleep_seconds() == 30  # claimed: nothing else waits


def test_sleep__under_back_pressure_wakes_only_for_high_work(make_task, settings):
    settings.REMINDERS_MAX_IN_FLIGHT = 1
    make_task(priority="low")
    make_task(priority="low")
    worker = ReminderWorker(tick=30, with_cluster=False)
    worker.tick()
    worker.tick()  # one claimed, one held back
    assert worker._sleep_seconds() == 30
    urgent = make_task("inquiry_timeout", at=timezone.now() + timedelta(seconds=2))
    assert 1 < worker._sleep_seconds() <= 2
    worker.tick(now=timezone.now() + timedelta(seconds=3))  # claimed despite back-pressure
    assert TaskRun.objects.get(task=urgent).status == "queued"


# A tick that knows from before its sleep that nothing is due -------------------------


@pytest.fixture
def spied(monkeypatch):
    """The plans and claims ticks make, counted."""
    made = {"plan": 0, "claim": 0}
    for name in made:
        real = getattr(dispatch, name)

        def spy(*args, real=real, name=name, **kwargs):
            made[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(dispatch, name, spy)
    return made


def test_quiet_tick__neither_plans_nor_claims_what_cannot_be_due(make_task, spied):
    make_task(at=timezone.now() + timedelta(days=2))  # beyond the plan-ahead hour
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    assert spied == {"plan": 1, "claim": 1}
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=1))
    assert spied == {"plan": 1, "claim": 1}
    # The moments are read again before each sleep: what one says is due is taken.
    task = make_task()  # due now, and nothing woke the worker: a raw edit, or SQLite
    worker.tick(now + timedelta(seconds=2))  # knew nothing of it (no sleep since)
    assert spied == {"plan": 2, "claim": 2}
    assert TaskRun.objects.get(task=task).status == "queued"


def test_quiet_tick__a_task_the_moments_read_say_is_due_is_planned_and_claimed(make_task, spied):
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    task = make_task(at=now + timedelta(seconds=0.5))  # unheard of (say on SQLite)
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=1))
    assert spied == {"plan": 2, "claim": 2}
    assert TaskRun.objects.get(task=task).status == "queued"


def test_quiet_tick__a_task_within_the_plan_ahead_is_planned_before_it_is_due(
    make_task, spied, settings
):
    settings.REMINDERS_PLAN_AHEAD_SECONDS = 600
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    task = make_task(at=now + timedelta(minutes=5))
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=1))
    assert spied["plan"] == 2
    assert TaskRun.objects.filter(task=task).exists()  # planned, due in 5 minutes


def test_quiet_tick__a_woken_sleep_looks_for_everything(make_task, spied, monkeypatch):
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    worker._sleep_seconds(now)

    class Woken:
        listening = False

        def wait(self, timeout: float) -> bool:
            worker.stop()  # one loop only
            return True

        def interrupt(self) -> None:
            pass

    worker._stopping.clear()
    monkeypatch.setattr(worker, "_tick_safely", lambda: False)
    monkeypatch.setattr(worker, "_watch_clusters", lambda: None)
    monkeypatch.setattr("reminders.engine.wake.Sleeper", lambda *a, **k: Woken())
    monkeypatch.setattr(worker, "shutdown", lambda: None)
    worker.run()
    assert worker._known is None  # the next tick plans and claims
    worker.tick(now + timedelta(seconds=1))
    assert spied == {"plan": 2, "claim": 2}


def test_quiet_tick__still_claims_every_few_seconds_for_expired_leases(make_task, spied):
    from reminders.engine.worker import CLAIM_SWEEP_SECONDS

    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    for seconds in (1, 2, 3, 4):
        worker._sleep_seconds(now)
        worker.tick(now + timedelta(seconds=seconds))
    assert spied["claim"] == 1
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=CLAIM_SWEEP_SECONDS))
    assert spied["claim"] == 2


def test_tick__the_first_plans_a_small_batch_and_claims_it_before_planning_on(
    make_task, monkeypatch
):
    """A process started on a backlog of due tasks claims a first small plan at once
    (its workers start sending) and plans the rest at full batches right after."""
    from reminders.engine import worker as worker_module

    monkeypatch.setattr(worker_module, "FIRST_PLAN_BATCH", 2)
    monkeypatch.setattr(dispatch, "PLAN_BATCH", 4)
    for _ in range(7):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is True  # a full first plan: more may be due
    assert TaskRun.objects.count() == 2
    assert TaskRun.objects.filter(status="queued").count() == 2
    assert worker.tick() is True  # a full batch of 4 after it
    assert TaskRun.objects.count() == 6
    assert worker.tick() is False
    assert TaskRun.objects.count() == 7
    assert run_queued() == 7


def test_sweeps__go_with_the_claims_a_quiet_tick_makes_every_few_seconds(make_task, monkeypatch):
    """The sweeps for states a run reaches late by minutes (past its deadline, stuck
    running, its digest ended) run before each claim, not every tick: a tick that knows
    nothing is due claims, and sweeps, every ``CLAIM_SWEEP_SECONDS``. With nothing due
    they were a third of an idle scheduler's statements."""
    from reminders.engine import digest_ends
    from reminders.engine.worker import CLAIM_SWEEP_SECONDS

    made: list[str] = []
    spies = ((dispatch, "expire_overdue"), (dispatch, "report_stuck"))
    for module, name in (*spies, (digest_ends, "settle_ended"), (dispatch, "claim")):
        real = getattr(module, name)

        def spy(*args, real=real, name=name, **kwargs):
            made.append(name)
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    sweep_and_claim = ["expire_overdue", "report_stuck", "settle_ended", "claim"]
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    assert made == sweep_and_claim
    for seconds in (1, 2, 3, 4):
        worker._sleep_seconds(now)
        worker.tick(now + timedelta(seconds=seconds))
    assert made == sweep_and_claim
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=CLAIM_SWEEP_SECONDS))
    assert made == sweep_and_claim * 2


def test_sweeps__a_run_due_and_past_its_deadline_is_expired_never_claimed(make_task):
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    worker.tick(now)
    worker._sleep_seconds(now)  # knows nothing is due
    task = make_task(at=now + timedelta(days=2))
    run = TaskRun.objects.create(
        task=task,
        occurrence=now,
        run_date=now.date(),
        due_at=now,
        next_attempt_at=now,
        deadline=now + timedelta(seconds=2),
    )
    worker.tick(now + timedelta(seconds=3))  # quiet: neither claims it nor sweeps
    assert TaskRun.objects.get(pk=run.pk).status == "scheduled"
    worker._known = None  # as after a wake: the next tick claims (swept 4 s ago: no sweep)
    worker.tick(now + timedelta(seconds=4))
    assert TaskRun.objects.get(pk=run.pk).status == "expired"  # by the claim itself


def test_sweeps__a_wave_claims_at_every_tick_and_sweeps_every_few_seconds(make_task, monkeypatch):
    """While work falls due at every tick, the sweeps and the look for runs held under
    an expired lease come with one claim in ``CLAIM_SWEEP_SECONDS``, not with each: each
    reads every index entry the wave left dead."""
    from reminders.engine.worker import CLAIM_SWEEP_SECONDS

    made: list[object] = []
    expire, claim = dispatch.expire_overdue, dispatch.claim
    monkeypatch.setattr(
        dispatch, "expire_overdue", lambda *a, **k: made.append("sweep") or expire(*a, **k)
    )

    def spy(*args, **kwargs):
        made.append(("claim", kwargs.get("abandoned", True)))
        return claim(*args, **kwargs)

    monkeypatch.setattr(dispatch, "claim", spy)
    worker = ReminderWorker(with_cluster=False)
    now = timezone.now()
    seconds = range(2 * int(CLAIM_SWEEP_SECONDS) + 1)
    for second in seconds:
        moment = now + timedelta(seconds=second)
        make_task(at=moment)
        worker.tick(moment)
    swept = [second % CLAIM_SWEEP_SECONDS == 0 for second in seconds]
    assert made == [
        step
        for sweep in swept
        for step in (["sweep", ("claim", True)] if sweep else [("claim", False)])
    ]
    assert TaskRun.objects.filter(status="queued").count() == len(seconds)


def test_tick__counts_its_runs_in_flight_only_when_a_full_claim_might_not_fit(
    make_task, settings, monkeypatch
):
    settings.REMINDERS_MAX_IN_FLIGHT = 7
    settings.REMINDERS_CLAIM_BATCH = 2
    counted: list[int] = []
    real = dispatch.in_flight

    def spy(owner: str) -> int:
        counted.append(real(owner))
        return counted[-1]

    monkeypatch.setattr(dispatch, "in_flight", spy)
    for _ in range(9):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    for _ in range(3):
        worker.tick()  # counts once (0 in flight), then knows 2, then 4: room for 2
    assert counted == [0]
    worker.tick()  # knows at most 6: counts them, and claims the 1 that fits
    assert counted == [0, 6]
    assert TaskRun.objects.filter(status="queued").count() == 7
    worker.tick()  # knows at most 7: counts; all 7 still wait for a worker
    assert counted == [0, 6, 7]
    assert TaskRun.objects.filter(status="queued").count() == 7
    run_queued()  # the workers take them
    worker.tick()
    assert counted == [0, 6, 7, 0]
    assert TaskRun.objects.filter(status="queued").count() == 2


@pytest.mark.django_db(transaction=True)
def test_tick__a_failed_tick_counts_its_runs_in_flight_again(make_task, monkeypatch):
    """Its claim may have committed before the error: what it knew is not trusted."""
    make_task()
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    assert worker._in_flight == 1

    def failed(*args, **kwargs):
        raise DatabaseError("the connection went away")

    monkeypatch.setattr(dispatch, "claim", failed)
    worker._known = None
    assert worker._tick_safely() is False
    assert worker._in_flight is None


# Actions to announce and cards to update ----------------------------------------------


def _untold_action(make_task) -> RunAction:
    """An action on a sent run's card that the CRM has not been told of, written as a
    raw edit would be: no notification."""
    run = planning.new_run(make_task(), timezone.now() - timedelta(minutes=1))
    run.status, run.next_attempt_at = TaskRun.Status.SENT, None
    run.save()
    return RunAction.objects.create(run=run, action="call_back", member="u1", acted_at=run.due_at)


def _told(action: RunAction) -> bool:
    action.refresh_from_db()
    return action.announced_at is not None


@pytest.mark.django_db(transaction=True)
def test_clicks__a_listening_scheduler_looks_at_woken_ticks_and_every_few_seconds(make_task):
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL notifies: elsewhere every tick looks (the test below)")
    worker = ReminderWorker(with_cluster=False)
    worker._sleeper = sleeper = wake.Sleeper()
    try:
        assert sleeper.wait(0) is True and sleeper.listening  # listening from now on
        now = timezone.now()
        worker.tick(now)  # the first tick looks for everything
        action = _untold_action(make_task)
        worker._sleep_seconds(now)  # what it knows, read before a sleep nothing woke
        worker.tick(now + timedelta(seconds=1))
        assert not _told(action)  # nothing woke it: it did not look
        worker._sleep_seconds(now)
        worker.tick(now + timedelta(seconds=CLICKS_SECONDS))  # the net for a lost notification
        assert _told(action)
        later = _untold_action(make_task)
        worker._sleep_seconds(now)
        worker.tick(now + timedelta(seconds=CLICKS_SECONDS + 1))
        assert not _told(later)
        worker._known = None  # a sleep a notification ended
        worker.tick(now + timedelta(seconds=CLICKS_SECONDS + 2))
        assert _told(later)
    finally:
        worker._sleeper = None
        sleeper.close()


def test_clicks__a_scheduler_that_does_not_listen_looks_at_every_tick(make_task):
    worker = ReminderWorker(with_cluster=False)  # no sleeper: SQLite, MariaDB, a broken listen
    now = timezone.now()
    worker.tick(now)
    action = _untold_action(make_task)
    worker._sleep_seconds(now)
    worker.tick(now + timedelta(seconds=1))
    assert _told(action)
