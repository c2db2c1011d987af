"""The helpers: a yearly birthday greeting, and an inquiry's timeout with its escalation."""

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from reminders import api
from reminders.engine import dispatch
from reminders.models import ScheduledTask, TaskRun
from reminders.schedule import timing
from tests.crm.models import Customer, Inquiry

pytestmark = pytest.mark.django_db

SHANGHAI = ZoneInfo("Asia/Shanghai")


def occurrences(task: ScheduledTask, after: datetime, n: int) -> list[datetime]:
    found = []
    for _ in range(n):
        after = timing.next_occurrence(task.cron, task.timezone, after)
        found.append(after.astimezone(timing.zone(task.timezone)))
    return found


# Birthdays -------------------------------------------------------------------------------


def test_birthday__yearly_at_nine_on_the_day_in_the_members_zone():
    task = api.schedule_birthday("alice", date(1990, 7, 14), tz="Europe/Berlin")

    assert (task.kind, task.cron, task.timezone, task.priority) == (
        "birthday",
        "0 9 14 7 *",
        "Europe/Berlin",
        "high",
    )
    start = datetime(2026, 8, 1, tzinfo=UTC)
    assert occurrences(task, start, 2) == [
        datetime(2027, 7, 14, 9, 0, tzinfo=ZoneInfo("Europe/Berlin")),
        datetime(2028, 7, 14, 9, 0, tzinfo=ZoneInfo("Europe/Berlin")),
    ]


def test_birthday__on_29_february_is_greeted_on_the_last_day_of_february():
    task = api.schedule_birthday("leapling", date(2000, 2, 29), at=time(8, 30))

    assert task.cron == "30 8 L 2 *"
    stored = ScheduledTask.objects.get(pk=task.pk)
    assert stored.next_run is not None
    assert occurrences(task, datetime(2026, 3, 1, tzinfo=UTC), 3) == [
        datetime(2027, 2, 28, 8, 30, tzinfo=SHANGHAI),
        datetime(2028, 2, 29, 8, 30, tzinfo=SHANGHAI),
        datetime(2029, 2, 28, 8, 30, tzinfo=SHANGHAI),
    ]


def test_birthday__the_cron_validation_accepts_the_last_day_of_february():
    task = ScheduledTask(cron="0 9 L 2 *")
    task.full_clean(exclude=["kind", "recipient", "channel", "timezone", "priority"])
    assert timing.fires_at_most_daily("0 9 L 2 *")


def test_birthday__with_key_again_updates_the_same_task():
    customer = Customer.objects.create(name="ACME")
    first = api.schedule_birthday("alice", date(1990, 7, 14), key="bday:alice", about=customer)
    again = api.schedule_birthday("alice", date(1990, 7, 15), key="bday:alice", about=customer)
    assert again.pk == first.pk
    assert ScheduledTask.objects.get().cron == "0 9 15 7 *"


@pytest.mark.parametrize(
    ("born", "at", "field"),
    [
        pytest.param("1990-07-14", time(9), "born", id="born as text"),
        pytest.param(datetime(1990, 7, 14), time(9), "born", id="born a datetime"),
        pytest.param(date(1990, 7, 14), "09:00", "at", id="at as text"),
        pytest.param(date(1990, 7, 14), time(9, 0, 30), "at", id="at with seconds"),
        pytest.param(date(1990, 7, 14), time(9, tzinfo=UTC), "at", id="at with a zone"),
    ],
)
def test_birthday__bad_born_or_at_is_refused_by_name(born, at, field):
    with pytest.raises(ValidationError) as excinfo:
        api.schedule_birthday("alice", born, at=at)
    assert field in excinfo.value.message_dict
    assert not ScheduledTask.objects.exists()


def test_birthday_item__schedules_many_birthdays_in_one_call():
    born = [date(1990, 2, 27), date(1990, 2, 28), date(1992, 2, 29)]
    items = [api.birthday_item(f"m{i}", day, key=f"bday:{i}") for i, day in enumerate(born)]
    tasks = api.schedule_many(items)
    assert [task.cron for task in tasks] == ["0 9 27 2 *", "0 9 28 2 *", "0 9 L 2 *"]


# Inquiry timeouts ----------------------------------------------------------------------


@pytest.fixture
def inquiry():
    return Inquiry.objects.create(subject="Price of 200 units?")


ARRIVED = datetime(2030, 3, 4, 10, 0, tzinfo=SHANGHAI)


def test_inquiry_timeout__alerts_once_minutes_after_it_arrived(inquiry):
    [task] = api.schedule_inquiry_timeout("alice", ARRIVED, minutes=30, about=inquiry)

    assert (task.kind, task.recipient, task.priority) == ("inquiry_timeout", "alice", "high")
    assert task.run_at == ARRIVED + timedelta(minutes=30)
    assert task.about == inquiry
    assert task.key == f"inquiry_timeout:crm.inquiry:{inquiry.pk}"


def test_inquiry_timeout__escalates_later_saying_from_whom_and_how_long_it_waited(inquiry):
    alert, escalation = api.schedule_inquiry_timeout(
        "alice",
        ARRIVED,
        minutes=30,
        about=inquiry,
        escalate_to="boss",
        escalate_after_minutes=60,
        payload={"customer": "ACME"},
    )

    assert escalation.recipient == "boss"
    assert escalation.run_at == ARRIVED + timedelta(minutes=90)
    assert escalation.payload == {"customer": "ACME", "escalated_from": "alice", "minutes": 90}
    assert alert.payload == {"customer": "ACME"}
    assert escalation.key == f"{alert.key}:escalation"
    assert escalation.about == inquiry


def test_inquiry_timeout__escalated_from_a_user_names_their_member_id(inquiry, django_user_model):
    someone = django_user_model.objects.create_user("zhangsan")
    _, escalation = api.schedule_inquiry_timeout(
        someone, ARRIVED, minutes=5, about=inquiry, escalate_to="boss", escalate_after_minutes=5
    )
    assert escalation.payload["escalated_from"] == "zhangsan"


def test_inquiry_timeout__called_again_updates_both_and_the_key_may_be_given(inquiry):
    kwargs = {"about": inquiry, "escalate_to": "boss", "escalate_after_minutes": 60}
    first = api.schedule_inquiry_timeout("alice", ARRIVED, minutes=30, **kwargs)
    again = api.schedule_inquiry_timeout("bob", ARRIVED, minutes=45, **kwargs)

    assert [task.pk for task in again] == [task.pk for task in first]
    assert ScheduledTask.objects.count() == 2
    assert again[1].payload == {"escalated_from": "bob", "minutes": 105}

    keyed = api.schedule_inquiry_timeout("carol", ARRIVED, minutes=5, key="inq:7", **kwargs)
    assert [task.key for task in keyed] == ["inq:7", "inq:7:escalation"]


def test_inquiry_timeout__an_escalation_left_out_later_is_cancelled(inquiry):
    api.schedule_inquiry_timeout(
        "alice", ARRIVED, minutes=30, about=inquiry, escalate_to="boss", escalate_after_minutes=60
    )
    [alert] = api.schedule_inquiry_timeout("alice", ARRIVED, minutes=20, about=inquiry)

    statuses = dict(ScheduledTask.objects.values_list("recipient", "status"))
    assert statuses == {"alice": "active", "boss": "cancelled"}
    assert alert.run_at == ARRIVED + timedelta(minutes=20)


def test_inquiry_timeout__a_reply_recorded_cancels_both(inquiry):
    now = timezone.now()
    api.schedule_inquiry_timeout(
        "alice", now - timedelta(minutes=31), minutes=30, about=inquiry,
        escalate_to="boss", escalate_after_minutes=60,
    )  # fmt: skip
    dispatch.materialize()
    assert TaskRun.objects.filter(task__recipient="alice", status="scheduled").exists()

    assert api.cancel_for(inquiry) == 2

    assert set(ScheduledTask.objects.values_list("status", flat=True)) == {"cancelled"}
    assert set(TaskRun.objects.values_list("status", flat=True)) == {"cancelled"}


def test_inquiry_timeout__minutes_pass_as_the_clock_goes_forward():
    inquiry = Inquiry.objects.create(subject="late night")
    berlin = ZoneInfo("Europe/Berlin")
    # 01:30 on the night the clocks skip from 02:00 to 03:00: 60 minutes later is 03:30.
    arrived = datetime(2030, 3, 31, 1, 30, tzinfo=berlin)
    [task] = api.schedule_inquiry_timeout("alice", arrived, minutes=60, about=inquiry)
    assert task.run_at.astimezone(berlin) == datetime(2030, 3, 31, 3, 30, tzinfo=berlin)
    assert task.run_at - arrived == timedelta(minutes=60)


def test_inquiry_timeout__a_naive_arrival_is_on_the_projects_clock(inquiry):
    [task] = api.schedule_inquiry_timeout(
        "alice", datetime(2030, 3, 4, 10, 0), minutes=30, about=inquiry
    )
    assert task.run_at == datetime(2030, 3, 4, 10, 30, tzinfo=SHANGHAI)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"arrived_at": "2030-03-04 10:00"}, "arrived_at", id="arrived_at text"),
        pytest.param({"minutes": 0}, "minutes", id="minutes zero"),
        pytest.param({"minutes": 1.5}, "minutes", id="minutes not whole"),
        pytest.param({"about": None}, "about", id="about missing"),
        pytest.param({"about": Inquiry(subject="x")}, "about", id="about unsaved"),
        pytest.param({"escalate_to": "boss"}, "escalate_after_minutes", id="no escalation delay"),
        pytest.param({"escalate_after_minutes": 5}, "escalate_to", id="no one to escalate to"),
        pytest.param({"recipient": "@all"}, "recipient", id="bad recipient"),
        pytest.param(
            {"escalate_to": "a|b", "escalate_after_minutes": 5}, "escalate_to", id="bad escalatee"
        ),
        pytest.param(
            {"arrived_at": datetime(2099, 12, 31, 23, 45, tzinfo=UTC)}, "arrived_at", id="2100"
        ),
        pytest.param({"payload": ["x"]}, "payload", id="payload not an object"),
    ],
)
def test_inquiry_timeout__bad_input_is_refused_by_name(inquiry, kwargs, field):
    args = {"recipient": "alice", "arrived_at": ARRIVED, "minutes": 30, "about": inquiry, **kwargs}
    with pytest.raises(ValidationError) as excinfo:
        api.schedule_inquiry_timeout(args.pop("recipient"), args.pop("arrived_at"), **args)
    assert field in excinfo.value.message_dict
    assert not ScheduledTask.objects.exists()
