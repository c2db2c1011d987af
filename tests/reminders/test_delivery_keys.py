"""A re-planned occurrence is never lost, and keys follow the schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reminders import api
from reminders.engine import planning
from reminders.exceptions import RecipientSendError, TransientSendError
from reminders.models import SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

# Reports on the real clock: their keys are under test here, not the calendar.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("reports_every_day")]

MORNING = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)  # 09:00 in Shanghai


def daily(cron: str = "0 9 * * *", tz: str = "Asia/Shanghai", **kwargs):
    return api.schedule("daily_report", "zhangsan", cron=cron, tz=tz, key="daily:1", **kwargs)


def plan_from(task, moment: datetime) -> None:
    """The task as if ``api.schedule`` had planned it at ``moment``."""
    task.plan_first_run(moment)
    task.save(update_fields=["next_run"])


def run_at(moment: datetime) -> int:
    """A tick at ``moment``, past any stagger of a daily report (up to 5 min + 9 batches)."""
    return tick(now=moment + timedelta(minutes=15))


def test_a_transient_failure_then_a_move_later_the_same_day__the_new_run_sends(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    assert run_at(MORNING) == 0
    first = task.runs.get()
    assert (first.status, SendLog.objects.get().status) == ("retrying", "failed")

    moved = daily(cron="0 15 * * *")
    plan_from(moved, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 1

    first.refresh_from_db()
    second = moved.runs.exclude(pk=first.pk).get()
    assert (first.status, second.status) == ("cancelled", "sent")
    log = SendLog.objects.get()
    assert (log.status, log.run_id) == ("sent", second.pk)
    assert len(outbox) == 1


def test_a_permanent_failure_then_a_fix__the_new_run_sends_to_the_fixed_recipient(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    MemorySender.script[:] = [RecipientSendError("no such member", code="81013")]
    run_at(MORNING)
    assert task.runs.get().status == "failed"

    fixed = api.schedule(
        "daily_report", "lisi", cron="0 15 * * *", tz="Asia/Shanghai", key="daily:1"
    )
    plan_from(fixed, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 1
    assert [m.recipient for m in outbox] == ["lisi"]
    assert SendLog.objects.get().recipient == "lisi"


def test_a_key_already_sent_still_makes_a_moved_run_a_duplicate(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    run_at(MORNING)
    moved = daily(cron="0 15 * * *")
    plan_from(moved, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 0
    second = moved.runs.order_by("occurrence").last()
    assert (second.status, second.error_code) == ("skipped", "duplicate")
    assert len(outbox) == 1


def test_twice_daily_changed_to_daily_mid_day__no_second_message_that_day(outbox):
    task = daily(cron="0 9,21 * * *")
    plan_from(task, MORNING - timedelta(hours=1))
    assert run_at(MORNING) == 1
    moved = daily(cron="0 15 * * *")
    plan_from(moved, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 0
    later = moved.runs.order_by("occurrence").last()
    assert (later.status, later.error_code) == ("skipped", "duplicate")
    assert len(outbox) == 1
    # The next day is a day of its own.
    assert run_at(MORNING + timedelta(days=1, hours=6)) == 1


def test_changing_the_zone__the_new_zone_s_day_is_not_a_duplicate(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    assert run_at(MORNING) == 1
    # 10:00 in Shanghai is 21:00 the day before in New York; its 09:00 on Dec 3 comes
    # 13 hours after the Shanghai report, on a day of its own.
    moved = daily(tz="America/New_York")
    plan_from(moved, MORNING + timedelta(hours=1))
    new_york_morning = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)
    assert moved.next_run == new_york_morning
    assert run_at(new_york_morning) == 1
    assert len(outbox) == 2
    assert set(TaskRun.objects.values_list("status", flat=True)) == {"sent"}


def test_changing_to_a_zone_with_the_same_day__is_a_duplicate(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    assert run_at(MORNING) == 1
    moved = daily(cron="0 15 * * *", tz="Asia/Hong_Kong")
    plan_from(moved, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 0
    assert len(outbox) == 1


def test_a_key_held_by_a_live_run__the_other_run_waits_instead_of_skipping(outbox):
    task = daily()
    plan_from(task, MORNING - timedelta(hours=1))
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    run_at(MORNING)
    first = task.runs.get()
    # A second run of the same key while the first still waits to retry (a re-plan
    # that did not cancel it, as the zone database moving a day could).
    second = planning.new_run(task, MORNING + timedelta(hours=2))
    second.ledger_key = first.ledger_key
    second.save()
    assert tick(now=MORNING + timedelta(hours=2, minutes=10)) == 0
    second.refresh_from_db()
    assert (second.status, second.error_code, second.attempts) == ("scheduled", "key_busy", 0)
    assert SendLog.objects.get().run_id == first.pk


def test_a_key_partly_sent_then_daily_mid_day__no_second_message_that_day(outbox, settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "split": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"oversize": "split"},
        },
    }
    # About 5,000 bytes: three parts of a WeCom text.
    text = "".join(f"{n:03d} follow up with the customer about the quote\n" for n in range(100))
    task = daily(cron="0 9,21 * * *", channel="split", payload={"content": text})
    plan_from(task, MORNING - timedelta(hours=1))
    # The first part went, the second was refused for good: the key is partly sent.
    MemorySender.script[:] = [None, RecipientSendError("no such member", code="81013")]
    assert run_at(MORNING) == 0
    first = task.runs.get(occurrence=MORNING)
    assert (first.status, SendLog.objects.get().status) == ("failed", "partly_sent")

    moved = daily(cron="0 15 * * *", channel="split", payload={"content": text})
    plan_from(moved, MORNING + timedelta(hours=1))
    assert run_at(MORNING + timedelta(hours=6)) == 0
    later = moved.runs.order_by("occurrence").last()
    assert (later.status, later.error_code) == ("skipped", "duplicate")
    assert f"Run {first.pk}" in later.error_message
    assert len(outbox) == 1  # the one part that went, not the whole message again
