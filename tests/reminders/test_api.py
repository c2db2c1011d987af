from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from reminders import api, dispatch
from reminders.models import ScheduledTask, TaskRun
from reminders.timing import next_occurrence

pytestmark = pytest.mark.django_db


def error_fields(excinfo: pytest.ExceptionInfo[ValidationError]) -> set[str]:
    return set(excinfo.value.message_dict)


def test_schedule__cron_task_plans_its_next_run_in_its_zone():
    task = api.schedule("daily_report", "alice", cron="0 9 * * *", tz="Asia/Shanghai")
    assert task.status == "active"
    assert task.next_run.astimezone(timing_zone("Asia/Shanghai")).hour == 9
    assert task.next_run > timezone.now()
    assert task.channel == "memory"  # REMINDERS_DEFAULT_CHANNEL
    assert task.priority == "normal"


def timing_zone(name):
    from reminders.timing import zone

    return zone(name)


def test_schedule__defaults_to_the_kinds_priority_and_the_project_time_zone(settings):
    task = api.schedule("birthday", "bob", at=timezone.now())
    assert task.priority == "high"
    assert task.timezone == settings.TIME_ZONE


def test_schedule__naive_at_is_read_in_tz():
    task = api.schedule("follow_up", "c", at=datetime(2026, 7, 1, 9, 0), tz="Europe/Berlin")
    assert task.run_at == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"kind": "no_such_kind", "cron": "0 9 * * *"}, "kind"),
        ({"cron": "0 9 * * *", "at": datetime(2026, 1, 1, tzinfo=UTC)}, "cron"),
        ({}, "at"),
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "0 9 * * *", "tz": "Mars/Olympus"}, "tz"),
        ({"cron": "0 9 * * *", "payload": ["not", "an", "object"]}, "payload"),
        ({"cron": "0 9 * * *", "recipient": ""}, "recipient"),
        ({"cron": "0 9 * * *", "recipient": "   "}, "recipient"),
        ({"cron": "0 9 * * *", "recipient": "x" * 65}, "recipient"),
        ({"cron": "0 9 * * *", "channel": "carrier_pigeon"}, "channel"),
        ({"cron": "0 9 * * *", "priority": "urgent"}, "priority"),
    ],
)
def test_schedule__bad_input_names_the_field_and_saves_nothing(kwargs, field):
    args = {"kind": "daily_report", "recipient": "alice", **kwargs}
    with pytest.raises(ValidationError) as excinfo:
        api.schedule(args.pop("kind"), args.pop("recipient"), **args)
    assert field in error_fields(excinfo)
    assert not ScheduledTask.objects.exists()


def test_schedule__with_key_twice_updates_and_never_duplicates():
    first = api.schedule("daily_report", "alice", cron="0 9 * * *", key="crm:report:alice")
    second = api.schedule(
        "daily_report", "alice", cron="0 10 * * *", key="crm:report:alice", payload={"a": 1}
    )
    assert first.pk == second.pk
    assert ScheduledTask.objects.count() == 1
    second.refresh_from_db()
    assert second.cron == "0 10 * * *"
    assert second.payload == {"a": 1}


def test_schedule__invalid_update_leaves_the_task_as_it_was():
    api.schedule("daily_report", "alice", cron="0 9 * * *", key="k")
    with pytest.raises(ValidationError):
        api.schedule("daily_report", "alice", cron="nonsense", key="k")
    assert ScheduledTask.objects.get(key="k").cron == "0 9 * * *"


def test_schedule__same_one_shot_again_after_it_ran_creates_no_second_run():
    at = timezone.now() - timedelta(seconds=1)
    api.schedule("follow_up", "alice", at=at, key="fu:1")
    dispatch.materialize()
    again = api.schedule("follow_up", "alice", at=at, key="fu:1")
    dispatch.materialize()
    assert again.status == "completed"
    assert TaskRun.objects.count() == 1
    assert TaskRun.objects.get().status == "scheduled"


def test_schedule__moving_a_one_shot_cancels_its_pending_run_and_plans_the_new_time():
    api.schedule("follow_up", "alice", at=timezone.now(), key="fu:2")
    dispatch.materialize()
    later = timezone.now() + timedelta(hours=2)
    task = api.schedule("follow_up", "alice", at=later, key="fu:2")
    assert task.status == "active"
    assert task.next_run == later
    assert list(task.runs.values_list("status", flat=True)) == ["cancelled"]


def test_cancel__stops_the_task_and_its_pending_runs():
    api.schedule("follow_up", "alice", at=timezone.now(), key="fu:3")
    dispatch.materialize()
    assert api.cancel("fu:3") is True
    task = ScheduledTask.objects.get(key="fu:3")
    assert (task.status, task.next_run) == ("cancelled", None)
    assert list(task.runs.values_list("status", flat=True)) == ["cancelled"]
    assert api.cancel("fu:3") is False
    assert api.cancel("no-such-key") is False


def test_schedule__a_cancelled_task_scheduled_again_is_active_again():
    api.schedule("daily_report", "alice", cron="0 9 * * *", key="r")
    api.cancel("r")
    task = api.schedule("daily_report", "alice", cron="0 9 * * *", key="r")
    assert task.status == "active"
    assert task.next_run is not None


def test_schedule__with_key_keeps_a_paused_task_paused_even_when_its_schedule_changes():
    api.schedule("daily_report", "alice", cron="0 9 * * *", key="p")
    ScheduledTask.objects.get(key="p").pause()
    same = api.schedule("daily_report", "alice", cron="0 9 * * *", key="p", payload={"a": 1})
    assert same.status == "paused"
    before = timezone.now()
    moved = api.schedule("daily_report", "alice", cron="0 10 * * *", key="p")
    stored = ScheduledTask.objects.get(key="p")
    assert (moved.status, stored.status) == ("paused", "paused")
    assert stored.next_run == next_occurrence("0 10 * * *", stored.timezone, before)


def test_schedule__a_task_in_error_scheduled_again_is_active_again():
    task = api.schedule("daily_report", "alice", cron="0 9 * * *", key="e")
    task.mark_error("unknown_kind", "not registered in run_reminders")
    again = api.schedule("daily_report", "alice", cron="0 9 * * *", key="e")
    stored = ScheduledTask.objects.get(key="e")
    assert (again.status, stored.status, stored.error_code) == ("active", "active", "")
    assert stored.next_run > timezone.now()
