"""The engine's signals, from real runs, become alert events, then alerts that reach the
admins by mail and a group robot."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import TestCase

from ops.models import Alert, AlertDelivery, AlertEvent, AlertType
from reminders import calendars
from reminders.engine import dispatch
from reminders.engine.delivery import start
from reminders.engine.worker import ReminderWorker
from reminders.exceptions import ConfigurationSendError, PermanentSendError
from reminders.models import ScheduledTask, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

SHANGHAI = ZoneInfo("Asia/Shanghai")


def events() -> list[tuple[str, str, str, str]]:
    return list(AlertEvent.objects.order_by("pk").values_list("type", "kind", "channel", "code"))


def in_hooks(action) -> None:  # type: ignore[no-untyped-def]
    with TestCase.captureOnCommitCallbacks(execute=True):
        action()


def test_a_final_failure_reaches_the_admins_by_mail(make_task, admins, clock, mailoutbox):
    task = make_task("follow_up", payload={"content": "Call ACME"})
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    tick()
    run = task.runs.get()
    assert run.status == "failed"
    [event] = AlertEvent.objects.all()
    assert (event.type, event.kind, event.channel, event.code, event.run_id, event.task_id) == (
        "run_failed",
        "follow_up",
        "memory",
        "81013",
        run.pk,
        task.pk,
    )
    assert mailoutbox == []  # the receiver only records
    result = clock.step()
    [alert] = result.opened
    assert (alert.type, alert.event_count, alert.seq) == ("run_failed", 1, 1)
    assert result.sent == 1
    [mail] = mailoutbox
    assert mail.to == ["ops@example.com"]
    assert "1 run of Follow-up reminder failed on channel memory" in mail.subject
    assert f"run {run.pk}" in mail.body and "81013" in mail.body
    delivery = AlertDelivery.objects.get()
    assert (delivery.channel, delivery.target, delivery.status, delivery.attempts) == (
        "admins",
        "ADMINS",
        "sent",
        1,
    )
    assert delivery.sent_at == clock.now


def test_a_configuration_error_is_its_channel_s_alert(make_task, robot, clock, outbox):
    for kind in ("follow_up", "inquiry_timeout"):
        make_task(kind)
    MemorySender.script[:] = [ConfigurationSendError("bad secret", code="40001")] * 2
    tick()
    assert sorted(events()) == [
        ("configuration", "follow_up", "memory", "40001"),
        ("configuration", "inquiry_timeout", "memory", "40001"),
    ]
    outbox.clear()
    [alert] = clock.step().opened  # grouped by channel, whatever the kinds
    assert (alert.type, alert.channel, alert.event_count) == ("configuration", "memory", 2)
    [message] = outbox
    assert message.recipient == "ops"
    assert message.body["content"].startswith(
        "[reminders] Channel memory is misconfigured: 2 runs failed"
    )
    assert "40001: 2" in message.body["content"]


def test_an_unknown_outcome_is_recorded(make_task):
    task = make_task()
    MemorySender.script[:] = [ZeroDivisionError("bug in a sender")]
    tick()
    assert task.runs.get().status == "unknown"
    assert events() == [("run_unknown", "follow_up", "memory", "exception")]


def test_an_expired_and_a_stuck_run_are_recorded(make_task, settings):
    settings.REMINDERS_LEASE_SECONDS = 3600
    nine = datetime(2025, 3, 14, 9, tzinfo=SHANGHAI)
    late = make_task("follow_up", at=nine, tz="Asia/Shanghai")
    slow = make_task("inquiry_timeout", at=nine, tz="Asia/Shanghai")
    dispatch.materialize(now=nine)
    claim = dispatch.claim("test", 1, now=nine, only_high=True)  # the inquiry alert
    start(claim.token, claim.run_ids, now=nine)
    worker = ReminderWorker(with_cluster=False)
    in_hooks(lambda: worker.tick(now=nine + timedelta(hours=2, minutes=1)))
    assert late.runs.get().status == "expired"
    assert slow.runs.get().stuck_reported_at is not None
    assert sorted(events()) == [
        ("run_expired", "follow_up", "memory", "deadline"),
        ("run_stuck", "inquiry_timeout", "memory", "stuck"),
    ]


def test_a_task_error_is_recorded(make_task):
    task = make_task()
    ScheduledTask.objects.filter(pk=task.pk).update(kind="registered_elsewhere")
    in_hooks(dispatch.materialize)
    event = AlertEvent.objects.get()
    assert (event.type, event.kind, event.code, event.task_id) == (
        "task_error",
        "registered_elsewhere",
        "unknown_kind",
        task.pk,
    )


def test_a_year_the_calendar_does_not_cover_is_one_alert_per_calendar_and_year(
    make_task, admins, clock, mailoutbox, settings
):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "skip"}
    }
    year = max(calendars.get("cn").years()) + 1
    monday = datetime(year, 1, 4, 9, tzinfo=SHANGHAI)
    assert monday.date() == date(year, 1, 4)
    for who in ("a1", "a2", "a3"):
        make_task("daily_report", who, cron="0 9 * * *", tz="Asia/Shanghai")
    ScheduledTask.objects.update(next_run=monday)
    in_hooks(lambda: dispatch.materialize(now=monday + timedelta(minutes=1)))
    assert set(TaskRun.objects.values_list("error_code", flat=True)) == {"calendar_uncovered"}
    assert AlertEvent.objects.filter(type="calendar_uncovered").count() == 3
    event = AlertEvent.objects.filter(type="calendar_uncovered").first()
    assert "the fallback rule 'skip' decided the day" in event.message
    [alert] = clock.step().opened
    assert (alert.scope, alert.event_count) == (f"cn {year}", 3)
    assert (
        f"Calendar cn {year} is not covered: 3 occurrences left to the fallback rule"
        in mailoutbox[0].subject
    )


def test_a_sent_run_is_not_an_event(make_task, outbox, clock):
    make_task()
    assert tick() == 1
    assert AlertEvent.objects.count() == 0
    assert clock.step().opened == []
    assert Alert.objects.count() == 0


def test_every_alert_type_has_its_words(clock):
    from ops.alert_texts import DAILY_QUOTA, _advice, _titles
    from ops.morning import SUMMARY

    # The quota alert's type, until ops.models' AlertType has it as a member; the
    # morning summary is no problem, written from its figures by ops.morning.
    assert set(_titles()) == set(_advice()) == {*AlertType.values, DAILY_QUOTA} - {SUMMARY}


def test_a_receiver_costs_one_insert(make_task):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from ops import receivers
    from reminders.exceptions import PermanentSendError as Error

    task = make_task()
    dispatch.materialize()
    with_task = TaskRun.objects.select_related("task").get(task=task)
    alone = TaskRun.objects.get(task=task)
    with CaptureQueriesContext(connection) as loaded:
        receivers.run_failed(TaskRun, run=with_task, error=Error("x", code="1"))
    with CaptureQueriesContext(connection) as unloaded:
        receivers.run_failed(TaskRun, run=alone, error=Error("x", code="1"))
    assert [q["sql"].split()[0] for q in loaded.captured_queries] == ["INSERT"]
    assert [q["sql"].split()[0] for q in unloaded.captured_queries] == ["SELECT", "INSERT"]
