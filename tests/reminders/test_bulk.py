"""``api.schedule_many``: thousands of tasks in one call, all or none, upserted by key."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reminders import api
from reminders.engine import actions, dispatch
from reminders.exceptions import BulkValidationError
from reminders.models import ScheduledTask
from tests.crm.models import Customer

pytestmark = pytest.mark.django_db


def report(i: int, **kwargs) -> dict:
    """Item ``i``: a daily report to member ``m<i>``, keyed ``report:<i>``."""
    return {
        "kind": "daily_report",
        "recipient": f"m{i}",
        "cron": "0 9 * * *",
        "tz": "Asia/Shanghai",
        "key": f"report:{i}",
        **kwargs,
    }


def test_schedule_many__creates_every_task_in_the_order_given():
    tasks = api.schedule_many(report(i) for i in range(5))

    assert [task.key for task in tasks] == [f"report:{i}" for i in range(5)]
    assert all(task.pk is not None and task.status == "active" for task in tasks)
    stored = ScheduledTask.objects.get(key="report:3")
    assert (stored.recipient, stored.cron, stored.priority) == ("m3", "0 9 * * *", "normal")
    assert stored.next_run == tasks[3].next_run > timezone.now()
    assert stored.created_at is not None and stored.updated_at is not None


def test_schedule_many__takes_the_same_parameters_as_schedule():
    customer = Customer.objects.create(name="ACME")
    at = datetime(2030, 5, 1, 9, 0)
    [task] = api.schedule_many(
        [
            {
                "kind": "follow_up",
                "recipient": "alice",
                "at": at,
                "tz": "Europe/Berlin",
                "payload": {"content": "Call ACME"},
                "key": "fu:1",
                "channel": "console",
                "priority": "low",
                "about": customer,
            }
        ]
    )
    stored = ScheduledTask.objects.get(pk=task.pk)
    assert stored.run_at == datetime(2030, 5, 1, 7, 0, tzinfo=UTC)
    assert (stored.payload, stored.channel, stored.priority) == (
        {"content": "Call ACME"},
        "console",
        "low",
    )
    assert stored.about == customer


def test_schedule_many__one_bad_item_in_a_thousand_saves_nothing():
    items = [report(i) for i in range(1000)]
    items[637]["recipient"] = "@all"

    with pytest.raises(BulkValidationError) as excinfo:
        api.schedule_many(items)

    assert list(excinfo.value.errors) == [637]
    assert not ScheduledTask.objects.exists()


def test_schedule_many__a_bad_item_among_updates_changes_no_task():
    api.schedule_many(report(i) for i in range(3))
    items = [report(i, cron="0 10 * * *") for i in range(3)]
    items[2]["tz"] = "Mars/Olympus"

    with pytest.raises(BulkValidationError):
        api.schedule_many(items)

    assert set(ScheduledTask.objects.values_list("cron", flat=True)) == {"0 9 * * *"}


def test_schedule_many__reports_every_bad_item_by_index_and_parameter():
    items = [
        report(0),
        report(1, recipient="u1|u2"),
        report(2),
        report(3, cron="0 25 * * *", tz="Mars/Olympus"),
        {"kind": "follow_up", "recipient": "bob", "cron": "0 9 * * *", "at": timezone.now()},
        report(5, at="tomorrow", cron=None),
        report(6, payload={"content": ""}),
        {"kind": "daily_report", "cron": "0 9 * * *", "recipients": "bob"},
        ("daily_report", "bob"),
    ]

    with pytest.raises(BulkValidationError) as excinfo:
        api.schedule_many(items)

    errors = excinfo.value.errors
    assert {index: sorted(fields) for index, fields in errors.items()} == {
        1: ["recipient"],
        3: ["cron", "tz"],
        4: ["cron"],
        5: ["at"],
        6: ["payload"],
        7: ["recipient", "recipients"],
        8: ["__all__"],
    }
    assert "lists several members" in errors[1]["recipient"][0]
    assert "not a parameter of api.schedule" in errors[7]["recipients"][0]
    assert not ScheduledTask.objects.exists()


def test_bulk_validation_error__is_a_validation_error_with_a_readable_message():
    with pytest.raises(ValidationError) as excinfo:
        api.schedule_many([report(0), report(1, recipient="@all"), report(2, tz="Mars/Olympus")])

    error = excinfo.value
    assert isinstance(error, BulkValidationError)
    text = str(error)
    assert text.startswith("2 items cannot be scheduled; nothing was saved:")
    assert "item 1, recipient: " in text and "item 2, tz: " in text
    assert any(message.startswith("item 2, tz: ") for message in error.messages)
    assert error.causes[1].error_dict["recipient"][0].code == "recipient_everyone"


def test_schedule_many__a_key_given_twice_is_an_error_on_the_second():
    items = [report(0), report(1), report(0, recipient="other")]

    with pytest.raises(BulkValidationError) as excinfo:
        api.schedule_many(items)

    assert excinfo.value.errors == {
        2: {"key": ["The key 'report:0' is also item 0's: one call schedules one task per key."]}
    }
    assert not ScheduledTask.objects.exists()


def test_schedule_many__upserts_by_key_as_schedule_does():
    first = api.schedule_many([report(0), report(1)])
    api.schedule("daily_report", "solo", cron="0 9 * * *", key="solo")

    again = api.schedule_many(
        [report(1, cron="0 10 * * *", payload={"a": 1}), report(2), {**report(3), "key": "solo"}]
    )

    assert again[0].pk == first[1].pk
    assert ScheduledTask.objects.count() == 4
    updated = ScheduledTask.objects.get(key="report:1")
    assert (updated.cron, updated.payload) == ("0 10 * * *", {"a": 1})
    assert updated.updated_at > updated.created_at
    assert (again[0].created_at, again[0].updated_at) == (updated.created_at, updated.updated_at)
    assert ScheduledTask.objects.get(key="solo").recipient == "m3"
    assert ScheduledTask.objects.get(key="report:0").cron == "0 9 * * *"


def test_schedule_many__re_plans_what_changed_and_keeps_a_paused_task_paused():
    at = timezone.now()
    api.schedule_many(
        [
            {"kind": "follow_up", "recipient": "a", "at": at, "key": "moved"},
            {"kind": "follow_up", "recipient": "b", "at": at, "key": "same"},
            report(2),
        ]
    )
    dispatch.materialize()
    actions.pause(ScheduledTask.objects.get(key="report:2"))
    later = at + timedelta(hours=2)

    moved, same, paused = api.schedule_many(
        [
            {"kind": "follow_up", "recipient": "a", "at": later, "key": "moved"},
            {"kind": "follow_up", "recipient": "b", "at": at, "key": "same", "payload": {"x": 1}},
            report(2, cron="0 10 * * *"),
        ]
    )

    moved.refresh_from_db()
    assert (moved.status, moved.next_run) == ("active", later)
    assert list(moved.runs.values_list("status", flat=True)) == ["cancelled"]
    same.refresh_from_db()
    assert same.status == "active"  # its run waits
    assert list(same.runs.values_list("status", flat=True)) == ["scheduled"]
    paused.refresh_from_db()
    assert paused.status == "paused" and paused.cron == "0 10 * * *"


def test_schedule_many__a_cancelled_task_scheduled_again_is_active_again():
    api.schedule_many([report(0)])
    api.cancel("report:0")
    [task] = api.schedule_many([report(0)])
    task.refresh_from_db()
    assert task.status == "active" and task.next_run is not None


def statements(n: int) -> int:
    """The most statements writing ``n`` rows may take: one on PostgreSQL, which has no
    limit of parameters per statement; SQLite's (999) and MariaDB's make Django split an
    INSERT or UPDATE of many columns into a few, never one per row."""
    return 1 if connection.vendor == "postgresql" else n // 25


def test_schedule_many__costs_no_query_per_item():
    def queries(items: list[dict]) -> int:
        with CaptureQueriesContext(connection) as captured:
            api.schedule_many(items)
        return len(captured)

    # A savepoint, the keys' lookup, the INSERT, the savepoint's release.
    assert queries([report(i) for i in range(10)]) == 4
    assert queries([report(i) for i in range(10, 1010)]) <= 3 + statements(1000)


def test_schedule_many__updates_cost_no_query_per_item():
    api.schedule_many(report(i) for i in range(300))
    dispatch.materialize()
    with CaptureQueriesContext(connection) as captured:
        api.schedule_many(report(i, cron="0 10 * * *") for i in range(300))
    # A savepoint, the lookup, reading the planned runs that need more than a cancel (in
    # doubt, make-ups), cancelling the others, the UPDATE, the release.
    assert len(captured) <= 5 + statements(300)
    assert ScheduledTask.objects.filter(cron="0 10 * * *").count() == 300


def test_schedule_many__tells_progress_as_it_checks():
    seen = []
    api.schedule_many((report(i) for i in range(600)), progress=lambda *p: seen.append(p))
    assert seen == [(250, 600), (500, 600), (600, 600)]


def test_schedule_many__nothing_to_schedule_is_nothing():
    assert api.schedule_many([]) == []
