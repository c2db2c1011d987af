from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from reminders import api
from reminders.engine import actions, dispatch
from reminders.exceptions import BulkValidationError
from reminders.messages import builders
from reminders.models import ScheduledTask, TaskRun
from reminders.schedule.timing import next_occurrence
from tests.crm.models import Inquiry

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
    from reminders.schedule.timing import zone

    return zone(name)


def test_schedule__defaults_to_the_kinds_priority_and_the_project_time_zone(settings):
    task = api.schedule("birthday", "bob", at=timezone.now())
    assert task.priority == "high"
    assert task.timezone == settings.TIME_ZONE


def test_schedule__naive_at_is_read_in_tz():
    task = api.schedule("follow_up", "c", at=datetime(2026, 7, 1, 9, 0), tz="Europe/Berlin")
    assert task.run_at == datetime(2026, 7, 1, 7, 0, tzinfo=UTC)


NEW_YORK = "America/New_York"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"kind": "no_such_kind", "cron": "0 9 * * *"}, "kind", id="unknown kind"),
        pytest.param({"kind": 7, "cron": "0 9 * * *"}, "kind", id="kind not text"),
        # A recipient is one WeCom member id.
        pytest.param({"recipient": ""}, "recipient", id="recipient empty"),
        pytest.param({"recipient": "   "}, "recipient", id="recipient blank"),
        pytest.param({"recipient": "x" * 65}, "recipient", id="recipient over 64 bytes"),
        pytest.param({"recipient": "@all"}, "recipient", id="recipient @all is everyone"),
        pytest.param({"recipient": "u1|u2"}, "recipient", id="recipient lists several"),
        pytest.param({"recipient": "alice\n"}, "recipient", id="recipient with a newline"),
        pytest.param({"recipient": "ali\x1bce"}, "recipient", id="recipient control char"),
        pytest.param({"recipient": "-alice"}, "recipient", id="recipient bad first char"),
        pytest.param({"recipient": "zhang san"}, "recipient", id="recipient with a space"),
        pytest.param({"recipient": "张三"}, "recipient", id="recipient not a member id"),
        pytest.param({"recipient": 10086}, "recipient", id="recipient not text"),
        # The schedule: a cron that fires, or a time the zone database covers.
        pytest.param({"at": datetime(2026, 1, 1, tzinfo=UTC)}, "cron", id="both cron and at"),
        pytest.param({"cron": None}, "at", id="neither cron nor at"),
        pytest.param({"cron": "0 25 * * *"}, "cron", id="cron out of range"),
        pytest.param({"cron": "0 9 30 2 *"}, "cron", id="cron that never fires"),
        pytest.param({"cron": "0 9 * *"}, "cron", id="cron with four fields"),
        pytest.param({"cron": 9}, "cron", id="cron not text"),
        pytest.param({"cron": None, "at": "2026-01-01 09:00"}, "at", id="at a string"),
        pytest.param({"cron": None, "at": date(2026, 1, 1)}, "at", id="at a date"),
        pytest.param(
            {"cron": None, "at": datetime(9999, 12, 31, 23, 59), "tz": NEW_YORK},
            "at",
            id="at overflowing UTC",
        ),
        pytest.param(
            {"cron": None, "at": datetime(9999, 12, 31, tzinfo=UTC)}, "at", id="at year 9999"
        ),
        pytest.param(
            {"cron": None, "at": datetime(2100, 1, 1, tzinfo=UTC)}, "at", id="at past horizon"
        ),
        pytest.param(
            {"cron": None, "at": datetime(1, 1, 1, 1), "tz": "Asia/Shanghai"},
            "at",
            id="at year 1",
        ),
        pytest.param({"tz": "Mars/Olympus"}, "tz", id="tz unknown"),
        pytest.param({"tz": 8}, "tz", id="tz not text"),
        # The payload: a JSON object whose content a channel can send.
        pytest.param({"payload": ["not", "an", "object"]}, "payload", id="payload not object"),
        pytest.param({"payload": {"content": None}}, "payload", id="content None"),
        pytest.param({"payload": {"content": ""}}, "payload", id="content empty"),
        pytest.param({"payload": {"content": " \n "}}, "payload", id="content blank"),
        pytest.param({"payload": {"content": 42}}, "payload", id="content not text"),
        pytest.param({"payload": {"score": float("nan")}}, "payload", id="payload NaN"),
        pytest.param({"payload": {"a": [float("inf")]}}, "payload", id="payload Infinity"),
        pytest.param({"payload": {"due": datetime(2026, 1, 1)}}, "payload", id="not JSON"),
        pytest.param({"payload": {"note": "a\x00b"}}, "payload", id="payload NUL"),
        pytest.param({"payload": {"note": "\ud800"}}, "payload", id="payload lone surrogate"),
        # The rest.
        pytest.param({"key": "crm:\n1"}, "key", id="key with a newline"),
        pytest.param({"key": "k" * 201}, "key", id="key over 200"),
        pytest.param({"key": 5}, "key", id="key not text"),
        pytest.param({"channel": "carrier_pigeon"}, "channel", id="channel unknown"),
        pytest.param({"priority": "urgent"}, "priority", id="priority unknown"),
    ],
)
def test_schedule__bad_input_names_the_field_and_saves_nothing(kwargs, field):
    args = {"kind": "daily_report", "recipient": "alice", "cron": "0 9 * * *", **kwargs}
    if args["cron"] is None:
        del args["cron"]
    with pytest.raises(ValidationError) as excinfo:
        api.schedule(args.pop("kind"), args.pop("recipient"), **args)
    assert field in error_fields(excinfo)
    assert not ScheduledTask.objects.exists()


@pytest.mark.parametrize(
    ("recipient", "reason"),
    [("@all", "means everyone"), ("u1|u2", "lists several members"), ("a\tb", "control")],
)
def test_schedule__a_crowd_for_a_recipient_is_refused_with_the_reason(recipient, reason):
    with pytest.raises(ValidationError) as excinfo:
        api.schedule("follow_up", recipient, at=timezone.now())
    [message] = excinfo.value.message_dict["recipient"]
    assert "recipient" in message and reason in message


def test_schedule__the_recipient_is_kept_as_written_never_trimmed():
    with pytest.raises(ValidationError):
        api.schedule("follow_up", " alice", at=timezone.now())
    assert api.schedule("follow_up", "Li.Si-01@corp", at=timezone.now()).recipient == (
        "Li.Si-01@corp"
    )


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
    assert again.status == "active"  # its run waits
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
    actions.pause(ScheduledTask.objects.get(key="p"))
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


# --- Inside a CRM's own transaction ------------------------------------------------------


def bad_sql(task, run):
    """A CRM's builder whose query fails: on PostgreSQL, the transaction it ran in is
    aborted unless a savepoint is rolled back."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reminders_no_such_table")


def test_schedule__a_builder_whose_query_fails_is_a_payload_error_and_the_transaction_goes_on(
    monkeypatch,
):
    monkeypatch.setitem(builders._decorated, "follow_up", bad_sql)
    with transaction.atomic():
        Inquiry.objects.create(subject="before")  # the CRM's own work
        with pytest.raises(ValidationError) as excinfo:
            api.schedule("follow_up", "alice", cron="0 9 * * *", payload={"customer": "ACME"})
        assert error_fields(excinfo) == {"payload"}
        assert "reminders_no_such_table" in str(excinfo.value)
        Inquiry.objects.create(subject="after")  # refused with "transaction aborted" if broken
    assert sorted(Inquiry.objects.values_list("subject", flat=True)) == ["after", "before"]
    assert not ScheduledTask.objects.exists()


def test_schedule_many__a_builder_whose_query_fails_blames_its_own_item_only(monkeypatch):
    def reads_the_crm(task, run):  # a builder whose query is fine
        return f"{Inquiry.objects.count()} inquiries open"

    monkeypatch.setitem(builders._decorated, "follow_up", bad_sql)
    monkeypatch.setitem(builders._decorated, "birthday", reads_the_crm)
    at = timezone.now() + timedelta(hours=1)
    with transaction.atomic():
        with pytest.raises(BulkValidationError) as excinfo:
            api.schedule_many(
                [
                    {"kind": "birthday", "recipient": "bob", "at": at},
                    {"kind": "follow_up", "recipient": "alice", "at": at},
                    {"kind": "birthday", "recipient": "carol", "at": at},
                ]
            )
        assert list(excinfo.value.errors) == [1]
        assert "reminders_no_such_table" in str(excinfo.value)
        Inquiry.objects.create(subject="after")
    assert not ScheduledTask.objects.exists()
