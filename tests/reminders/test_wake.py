"""Waking the schedulers: ``reminders.engine.wake`` on a real database.

Notifications exist on PostgreSQL only; the tests that need them are skipped elsewhere,
where the tick is the bound. ``interrupt`` works on every database.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from reminders import api
from reminders.callback.events import TemplateCardEvent
from reminders.engine import actions, planning, wake
from reminders.engine.worker import ReminderWorker
from reminders.intake import clicks
from reminders.models import ScheduledTask, TaskRun
from reminders.models.acting import card_id
from tests.support.processes import wake_listeners

# Well under a tick of the tests below (which wait up to 5 s or 30 s), well over the
# latency of a notification on a local server.
PROMPTLY = 1.0


@pytest.fixture
def postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip(f"{connection.vendor} has no LISTEN/NOTIFY: the tick is the bound there")


@pytest.fixture
def sleeper(transactional_db: None) -> Iterator[wake.Sleeper]:
    """A sleeper already listening where the database can notify."""
    sleeper = wake.Sleeper()
    # The first wait starts listening and says so: a scan is due, since nothing heard
    # what was notified before.
    assert sleeper.wait(0) is (connection.vendor == "postgresql")
    yield sleeper
    sleeper.close()


def timed(wait: Callable[[], bool]) -> tuple[bool, float]:
    started = time.monotonic()
    woken = wait()
    return woken, time.monotonic() - started


def in_a_thread(action: Callable[[], None], *, after: float) -> threading.Thread:
    """Run ``action`` in a thread of its own (its own database connection) after
    ``after`` seconds; join the thread returned."""

    def body() -> None:
        time.sleep(after)
        try:
            action()
        finally:
            connections.close_all()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def _terminate(pids: list[int]) -> None:
    """End these database sessions, as a server restart or an admin would."""
    with connection.cursor() as cursor:
        for pid in pids:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            assert cursor.fetchone()[0] is True


def test_wait__a_notify_committed_by_another_connection_ends_it_at_once(postgres, sleeper):
    committed_at: list[float] = []

    def schedule_in_a_transaction() -> None:
        with transaction.atomic():
            wake.notify()
            time.sleep(0.5)  # nobody is woken before the commit
            committed_at.append(time.monotonic())

    thread = in_a_thread(schedule_in_a_transaction, after=0.2)
    woken, took = timed(lambda: sleeper.wait(5))
    thread.join()
    woken_at = time.monotonic()
    print(f"woken {woken_at - committed_at[0]:.3f} s after the commit")
    assert woken is True
    assert 0.6 < took < PROMPTLY
    assert committed_at[0] <= woken_at


def test_wait__a_notify_rolled_back_wakes_nobody(postgres, sleeper):
    with transaction.atomic():
        wake.notify()
        transaction.set_rollback(True)
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint
                wake.notify()
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert sleeper.wait(0.5) is False
    wake.notify()  # autocommit: at once
    woken, took = timed(lambda: sleeper.wait(5))
    assert woken is True
    assert took < PROMPTLY


def test_wait__notifications_sent_while_no_one_waits_end_the_next_wait(postgres, sleeper):
    for _ in range(3):
        wake.notify()
    time.sleep(0.1)
    woken, took = timed(lambda: sleeper.wait(5))
    assert (woken, took < PROMPTLY) == (True, True)
    assert sleeper.wait(0.3) is False  # all of them were read at once


def test_notify__a_connection_that_broke_is_logged_not_raised(postgres, sleeper, caplog):
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    in_a_thread(lambda: _terminate([pid]), after=0).join()
    try:
        wake.notify()  # autocommit: sent at once, on the broken connection
    finally:
        connection.close()
    assert "could not wake the schedulers" in caplog.text
    assert sleeper.wait(0.3) is False
    wake.notify()  # on a fresh connection
    assert sleeper.wait(5) is True


def test_interrupt__ends_a_wait_at_once(sleeper):
    thread = threading.Thread(target=lambda: (time.sleep(0.2), sleeper.interrupt()))
    thread.start()
    woken, took = timed(lambda: sleeper.wait(10))
    thread.join()
    assert woken is True
    assert 0.15 < took < PROMPTLY
    sleeper.interrupt()  # before the wait: it ends the next one
    sleeper.interrupt()
    woken, took = timed(lambda: sleeper.wait(10))
    assert (woken, took < 0.1) == (True, True)
    assert sleeper.wait(0.2) is False  # both were taken by that wait


def test_wait__on_other_databases_lasts_its_timeout(sleeper):
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL wakes on notifications")
    wake.notify()  # nothing to send, and nothing raised
    woken, took = timed(lambda: sleeper.wait(0.3))
    assert woken is False
    assert 0.25 < took < PROMPTLY


def test_wait__a_listening_connection_that_breaks_is_replaced(postgres, sleeper, caplog):
    listeners = wake_listeners()
    assert len(listeners) == 1
    _terminate(listeners)
    woken, took = timed(lambda: sleeper.wait(0.5))  # does not raise: waits on, deaf
    assert woken is False
    assert 0.4 < took < PROMPTLY
    assert "the connection listening for due work broke" in caplog.text
    assert sleeper.wait(5) is True  # listening again: a scan is due at once
    wake.notify()
    woken, took = timed(lambda: sleeper.wait(5))
    assert (woken, took < PROMPTLY) == (True, True)
    assert "listening for due work again" in caplog.text


@pytest.fixture
def listening(postgres: None, sleeper: wake.Sleeper) -> Callable[[float], bool]:
    """Whether the schedulers were woken within the seconds given."""
    return sleeper.wait


def test_schedule__a_one_shot_due_now_wakes_the_schedulers(listening):
    api.schedule("follow_up", "u1", at=timezone.now())
    assert listening(5) is True


def test_schedule__work_due_within_a_tick_wakes_them_later_work_does_not(listening, settings):
    settings.REMINDERS_TICK_SECONDS = 10
    api.schedule("follow_up", "u1", at=timezone.now() + timedelta(hours=1))
    assert listening(0.5) is False
    api.schedule("follow_up", "u2", at=timezone.now() + timedelta(seconds=5))
    assert listening(5) is True


def test_schedule__a_paused_task_due_now_wakes_nobody(listening):
    task = api.schedule("follow_up", "u1", at=timezone.now() + timedelta(hours=1), key="k")
    actions.pause(task)
    api.schedule("follow_up", "u1", at=timezone.now(), key="k")
    assert ScheduledTask.objects.get().status == "paused"
    assert listening(0.5) is False
    api.schedule("follow_up", "u2", at=timezone.now())  # an active one does
    assert listening(5) is True


def test_resume__wakes_the_schedulers(listening):
    task = api.schedule("follow_up", "u1", at=timezone.now() + timedelta(hours=1))
    assert listening(0.2) is False
    actions.pause(task)
    assert actions.resume(task) is True
    assert listening(5) is True
    assert actions.resume(task) is False  # nothing changed: nobody is woken
    assert listening(0.3) is False


def test_retry_now__wakes_the_schedulers(listening):
    task = api.schedule("follow_up", "u1", at=timezone.now() + timedelta(hours=1))
    run = planning.new_run(task, timezone.now())
    run.status = TaskRun.Status.FAILED
    run.next_attempt_at = None
    run.save()
    assert listening(0.2) is False
    assert actions.retry_now(run) is True
    assert listening(5) is True
    TaskRun.objects.filter(pk=run.pk).update(status=TaskRun.Status.SENT, next_attempt_at=None)
    run.refresh_from_db()
    assert actions.retry_now(run) is False  # sent: nothing changed, nobody is woken
    assert listening(0.3) is False


def _event(run: TaskRun, key: str) -> TemplateCardEvent:
    return TemplateCardEvent(
        to_user_name="ww-corp",
        from_user_name=run.task.recipient,
        create_time=int(time.time()),
        agent_id=1,
        event_key=key,
        task_id=card_id(run),
        card_type="button_interaction",
        response_code="rc-1",
    )


def _clicked(run: TaskRun, key: str, nonce: str) -> None:
    applied = clicks.apply(_event(run, key), nonce=nonce, timestamp=int(time.time()))
    assert applied.outcome.value == "acted"


def test_click__every_click_kept_wakes_the_schedulers_a_replay_does_not(listening):
    """A listening scheduler looks for actions and cards only when woken (or every few
    seconds): a click on a CRM's own button too has an action to announce."""
    task = api.schedule("follow_up", "u1", at=timezone.now() + timedelta(hours=1))
    runs = []
    for minute in (1, 2):
        run = planning.new_run(task, timezone.now() - timedelta(minutes=minute))
        run.status, run.next_attempt_at = TaskRun.Status.SENT, None
        run.save()
        runs.append(run)
    assert listening(0.2) is False
    _clicked(runs[0], "call_back", "n-1")  # a CRM's own button: no card, an announcement
    assert listening(5) is True
    _clicked(runs[1], "done", "n-2")  # a card to update
    assert listening(5) is True
    replayed = clicks.apply(_event(runs[1], "done"), nonce="n-2", timestamp=int(time.time()))
    assert replayed.outcome.value == "replayed"
    assert listening(0.3) is False


# The scheduler loop ----------------------------------------------------------------------


def test_run__a_one_shot_scheduled_elsewhere_is_claimed_without_waiting_for_the_tick(
    postgres, transactional_db
):
    worker = ReminderWorker(tick=30, with_cluster=False)
    claimed_at: list[float] = []

    def schedule_then_watch() -> None:
        listening_by = time.monotonic() + 10
        while not wake_listeners() and time.monotonic() < listening_by:
            time.sleep(0.01)
        time.sleep(0.3)  # its first listen was followed by a tick: it sleeps 30 s now
        task = api.schedule("follow_up", "u1", at=timezone.now())
        scheduled = time.monotonic()
        deadline = scheduled + 10
        while time.monotonic() < deadline:
            if TaskRun.objects.filter(task=task, status="queued").exists():
                claimed_at.append(time.monotonic() - scheduled)
                break
            time.sleep(0.01)
        worker.stop()

    thread = in_a_thread(schedule_then_watch, after=0)
    worker.run()
    thread.join()
    assert claimed_at, "the run was not claimed within 10 s"
    print(f"claimed {claimed_at[0]:.3f} s after it was scheduled")
    assert claimed_at[0] < PROMPTLY


def test_run__sigterm_ends_the_sleep_at_once(transactional_db):
    worker = ReminderWorker(tick=30, with_cluster=False)

    def terminate() -> None:
        while worker._sleeper is None:  # its SIGTERM handler is installed before
            time.sleep(0.01)
        time.sleep(0.5)  # asleep by now
        os.kill(os.getpid(), signal.SIGTERM)

    thread = in_a_thread(terminate, after=0)
    _, took = timed(lambda: worker.run() or True)
    thread.join()
    assert took < 0.5 + PROMPTLY + 1
    assert worker._sleeper is None  # closed
