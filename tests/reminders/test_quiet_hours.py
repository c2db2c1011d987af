"""Quiet hours: a message due inside its kind's quiet hours waits for their end (on the
task's clock, staggered), never past its deadline; rest days of a working-day calendar
are quiet all day. Every clock is the tests': across a quiet boundary, a holiday, a
make-up working Saturday and a year no calendar package covers."""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import hypothesis
import pytest
from django.core.exceptions import ValidationError
from django.test import TestCase
from hypothesis import given
from hypothesis import strategies as st

from reminders import api, preferences
from reminders.calendars.backends import day_off
from reminders.engine import dispatch, holds
from reminders.models import QuietHours, QuietHoursChange, TaskRun
from reminders.schedule import timing
from reminders.schedule.policies import Policy, PolicyError
from reminders.schedule.quiet import BadQuietHours, QuietWindow, quiet_until, release
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued

SHANGHAI = ZoneInfo("Asia/Shanghai")
TZ = "Asia/Shanghai"
NIGHT = QuietWindow.parse("21:00-08:30")


def at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=SHANGHAI)


THURSDAY = date(2026, 12, 3)


# --- The window --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "ends"),
    [
        (at(THURSDAY, 20, 59), None),  # just before: not quiet
        (at(THURSDAY, 21, 0), at(THURSDAY + timedelta(days=1), 8, 30)),  # its first minute
        (at(THURSDAY, 23, 45), at(THURSDAY + timedelta(days=1), 8, 30)),
        (at(THURSDAY, 3, 0), at(THURSDAY, 8, 30)),  # after midnight: the same morning
        (at(THURSDAY, 8, 29), at(THURSDAY, 8, 30)),
        (at(THURSDAY, 8, 30), None),  # its end is not quiet
    ],
)
def test_window__past_midnight_and_its_boundaries(moment: datetime, ends: datetime | None) -> None:
    assert quiet_until(moment, TZ, NIGHT) == ends


def test_window__within_a_day() -> None:
    lunch = QuietWindow.parse("12:00-13:30")
    assert quiet_until(at(THURSDAY, 12, 10), TZ, lunch) == at(THURSDAY, 13, 30)
    assert quiet_until(at(THURSDAY, 13, 30), TZ, lunch) is None


@pytest.mark.parametrize("text", ["21:00", "25:00-08:00", "21:00-21:00", "9:00-10:00", None])
def test_window__bad_text_says_why(text: Any) -> None:
    with pytest.raises(BadQuietHours):
        QuietWindow.parse(text)


@pytest.mark.parametrize("text", ["08:00-07:59", "00:00-23:30", "21:00-20:01"])
def test_window__leaving_less_than_an_hour_open_is_refused_saying_so(text: str) -> None:
    with pytest.raises(BadQuietHours, match="at least an hour"):
        QuietWindow.parse(text)


@pytest.mark.parametrize("text", ["08:00-07:00", "00:00-23:00", "21:00-20:00"])
def test_window__an_hour_open_is_enough(text: str) -> None:
    assert str(QuietWindow.parse(text)) == text


def test_policy__checks_its_quiet_fields() -> None:
    with pytest.raises(PolicyError, match="quiet_hours"):
        Policy(quiet_hours="night")
    with pytest.raises(PolicyError, match=r"quiet_hours.*at least an hour"):
        Policy(quiet_hours="08:00-07:59")
    with pytest.raises(PolicyError, match="breaks_quiet_hours"):
        Policy(breaks_quiet_hours="yes")  # type: ignore[arg-type]
    assert Policy(quiet_hours="21:00-08:30").quiet_hours == "21:00-08:30"


# --- When a held message goes ------------------------------------------------------------

DAY = timedelta(hours=24)
ZONES = ["Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe"]


def open_windows() -> st.SearchStrategy[QuietWindow]:
    """Every window leaving at least an hour of the day open."""
    minutes = st.integers(0, 24 * 60 - 1)
    pairs = st.tuples(minutes, minutes).filter(lambda pair: (pair[0] - pair[1]) % 1440 >= 60)
    return pairs.map(lambda pair: QuietWindow.parse(f"{_hhmm(pair[0])}-{_hhmm(pair[1])}"))


def _hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@hypothesis.settings(max_examples=500, deadline=None)
@given(
    window=open_windows(),
    zone=st.sampled_from(ZONES),
    # 2026 and 2027, their DST nights included, to the second.
    moment=st.datetimes(datetime(2026, 1, 1), datetime(2027, 12, 31), timezones=st.just(SHANGHAI)),
    stagger=st.integers(0, 3 * 3600).map(lambda seconds: timedelta(seconds=seconds)),
)
def test_release__after_now_outside_quiet_hours_and_within_a_day(
    window: QuietWindow, zone: str, moment: datetime, stagger: timedelta
) -> None:
    goes = release(moment, zone, window, stagger=stagger)
    if not window.covers(moment.astimezone(ZoneInfo(zone)).time()):
        assert goes is None
        return
    assert goes is not None
    assert moment < goes <= moment + DAY
    assert quiet_until(goes, zone, window) is None  # never inside quiet hours again
    # A start half an hour late (a backlog) still finds it open: not held another day.
    assert quiet_until(goes + timedelta(minutes=29), zone, window) is None


@hypothesis.settings(max_examples=300, deadline=None)
@given(
    window=st.none() | open_windows(),
    zone=st.sampled_from(ZONES),
    moment=st.datetimes(datetime(2026, 1, 1), datetime(2027, 12, 31), timezones=st.just(SHANGHAI)),
    stagger=st.integers(0, 3 * 3600).map(lambda seconds: timedelta(seconds=seconds)),
    # Rest days: some weekdays (never all seven), as a calendar's weekends.
    weekdays=st.sets(st.integers(0, 6), max_size=6),
)
# A rest day ends the next day at the window's end (late: 22:18), and the stagger comes
# after it: past two days from a Sunday's midnight, within the bound's stagger.
@hypothesis.example(
    window=QuietWindow(start=time(1, 43), end=time(22, 18)),
    zone="Europe/Berlin",
    moment=datetime(2026, 1, 4, 7, 0, tzinfo=SHANGHAI),
    stagger=timedelta(seconds=6121),
    weekdays={6},
)
def test_release__with_rest_days_after_now_and_never_quiet(
    window: QuietWindow | None,
    zone: str,
    moment: datetime,
    stagger: timedelta,
    weekdays: set[int],
) -> None:
    def rest_day(day: date) -> bool:
        return day.weekday() in weekdays

    goes = release(moment, zone, window, rest_day, stagger=stagger)
    if quiet_until(moment, zone, window, rest_day) is None:
        assert goes is None
        return
    assert goes is not None and goes > moment
    assert quiet_until(goes, zone, window, rest_day) is None
    # Each rest day, then the next day up to its window's end, then the stagger.
    assert goes - moment <= timedelta(days=len(weekdays) + 1) + stagger


def test_release__the_stagger_never_lands_in_quiet_hours_again() -> None:
    # One hour open, 07:00-08:00: a stagger of 100 minutes wraps within its first half,
    # so that a start that comes late still finds it open.
    window = QuietWindow.parse("08:00-07:00")
    goes = release(at(THURSDAY, 9), TZ, window, stagger=timedelta(minutes=100))
    assert goes == at(THURSDAY + timedelta(days=1), 7, 10)


def test_release__a_stagger_within_the_open_hours_is_kept() -> None:
    goes = release(at(THURSDAY, 22), TZ, NIGHT, stagger=timedelta(minutes=7))
    assert goes == at(THURSDAY + timedelta(days=1), 8, 37)


@pytest.mark.parametrize(
    ("zone", "night", "repeated"),
    [("America/New_York", date(2026, 11, 1), 1), ("Europe/Berlin", date(2026, 10, 25), 2)],
)
def test_window__the_repeated_hour_of_a_fall_back_night_never_ends_in_the_past(
    zone: str, night: date, repeated: int
) -> None:
    # Quiet until HH:30 of the hour the clocks repeat: at HH:15 the second time, the
    # window ends at HH:30 of that second pass, 15 minutes on, not 45 minutes ago.
    tz = ZoneInfo(zone)
    window = QuietWindow.parse(f"00:00-{repeated:02d}:30")
    first = datetime(night.year, night.month, night.day, repeated, 15, tzinfo=tz)
    second = first.replace(fold=1)
    assert second.timestamp() - first.timestamp() == 3600  # the clocks went back between
    ends = quiet_until(second, zone, window)
    assert ends is not None
    assert ends.timestamp() == second.timestamp() + 15 * 60


def test_release__a_window_ending_in_the_repeated_hour_of_a_fall_back_night_ends_after_it() -> None:
    # Berlin, 25 October 2026: 02:00-03:00 is lived twice. Quiet 22:00-02:30: its end the
    # first time (02:30 CEST) is followed by 02:00-02:30 CET, quiet by the clock again;
    # the message goes after 02:30 CET, however it is staggered, never into that half hour.
    zone, window = "Europe/Berlin", QuietWindow.parse("22:00-02:30")
    evening = datetime(2026, 10, 24, 23, 0, tzinfo=ZoneInfo(zone))
    second_end = datetime(2026, 10, 25, 2, 30, fold=1, tzinfo=ZoneInfo(zone))
    for minutes in (0, 10, 40, 59):
        goes = release(evening, zone, window, stagger=timedelta(minutes=minutes))
        assert goes is not None
        assert quiet_until(goes, zone, window) is None
        assert goes.timestamp() == second_end.timestamp() + minutes * 60


# --- Rest days of the working-day calendar ----------------------------------------------


def rest(calendar: str = "cn") -> Any:
    return lambda day: day_off(calendar, day) is not None


@pytest.mark.django_db
def test_rest_days__a_holiday_is_quiet_until_the_next_working_morning() -> None:
    # National Day 2026: 1-7 October off; Thursday 8 October is worked again.
    assert day_off("cn", date(2026, 10, 1)) is not None
    first_working = next(
        date(2026, 10, 1) + timedelta(days=n)
        for n in range(20)
        if day_off("cn", date(2026, 10, 1) + timedelta(days=n)) is None
    )
    ends = quiet_until(at(date(2026, 10, 1), 10), TZ, NIGHT, rest())
    assert ends == at(first_working, 8, 30)  # its midnight is inside the night: 08:30


@pytest.mark.django_db
def test_rest_days__a_make_up_working_saturday_is_not_quiet() -> None:
    saturdays = [date(2026, 1, 3) + timedelta(weeks=n) for n in range(52)]
    made_up = next(day for day in saturdays if day_off("cn", day) is None)
    assert quiet_until(at(made_up, 10), TZ, NIGHT, rest()) is None
    plain = next(day for day in saturdays if day_off("cn", day) is not None)
    assert quiet_until(at(plain, 10), TZ, NIGHT, rest()) is not None


@pytest.mark.django_db
def test_rest_days__a_year_no_package_covers_follows_the_fallback_rule() -> None:
    # 2027: not covered; the fallback rule "weekdays" makes Saturday 2 January a rest day.
    ends = quiet_until(at(date(2027, 1, 2), 11), TZ, NIGHT, rest())
    assert ends == at(date(2027, 1, 4), 8, 30)  # Monday morning
    assert quiet_until(at(date(2027, 1, 4), 11), TZ, NIGHT, rest()) is None


# --- The engine --------------------------------------------------------------------------


def tick_at(now: datetime) -> int:
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 100, now=now)
        return run_queued(now=now)


@pytest.fixture
def quiet_follow_ups(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"quiet_hours": "21:00-08:30", "max_lateness_seconds": 24 * 3600}
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_engine__a_message_due_at_night_waits_for_the_morning_and_says_so(outbox: list) -> None:
    late = at(THURSDAY, 22, 0)
    task = api.schedule("follow_up", "alice", at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 0
    run = TaskRun.objects.get(task=task)
    morning = at(THURSDAY + timedelta(days=1), 8, 30)
    spread = timing.stagger(
        recipient="alice",
        jitter_seconds=holds.QUIET_SPREAD_SECONDS,
        batches=1,
        batch_interval_seconds=60,
    )
    assert (run.status, run.error_code, run.attempts) == ("scheduled", "quiet_hours", 0)
    assert run.next_attempt_at == morning + spread
    assert "21:00-08:30 Asia/Shanghai" in run.error_message
    assert "from 2026-12-03 22:00 to 2026-12-04 08:" in run.error_message
    assert MemorySender.outbox == []
    # Still night a minute before: nothing; at its time in the morning: sent, once.
    assert tick_at(morning - timedelta(minutes=1)) == 0
    assert tick_at(morning + spread) == 1
    assert TaskRun.objects.get(task=task).status == "sent"


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_planning__a_run_due_at_night_is_planned_due_in_the_morning_never_claimed_before(
    outbox: list,
) -> None:
    evening = at(THURSDAY, 20, 30)  # plans an hour ahead: the 21:15 follow-up is planned now
    task = api.schedule("follow_up", "alice", at=at(THURSDAY, 21, 15), tz=TZ, channel="memory")
    dispatch.materialize(now=evening)
    run = TaskRun.objects.get(task=task)
    morning = at(THURSDAY + timedelta(days=1), 8, 30)
    assert morning <= run.due_at == run.next_attempt_at < morning + timedelta(seconds=600)
    assert (run.status, run.error_code) == ("scheduled", "quiet_hours")
    assert "from 2026-12-03 21:15 to 2026-12-04 08:" in run.error_message
    # All night, nothing of it is claimed.
    assert dispatch.claim("test", 100, now=at(THURSDAY, 23, 0)).run_ids == []
    assert tick_at(run.due_at) == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_planning__the_recipients_own_hours_count_and_a_later_change_still_reaches_the_run(
    outbox: list,
) -> None:
    preferences.set_quiet_hours("alice", "20:00-07:00", by="crm")
    evening = at(THURSDAY, 19, 30)
    task = api.schedule("follow_up", "alice", at=at(THURSDAY, 20, 15), tz=TZ, channel="memory")
    dispatch.materialize(now=evening)
    run = TaskRun.objects.get(task=task)
    assert run.due_at.astimezone(SHANGHAI).hour == 7  # her 07:00, not the kind's 08:30
    # Planned outside any quiet hours, then she sets hours that cover it: the start holds it.
    other = api.schedule("follow_up", "bob", at=at(THURSDAY, 19, 50), tz=TZ, channel="memory")
    dispatch.materialize(now=evening)
    preferences.set_quiet_hours("bob", "19:00-07:00", by="crm")
    assert tick_at(at(THURSDAY, 19, 50)) == 0
    assert TaskRun.objects.get(task=other).error_code == "quiet_hours"


@pytest.mark.django_db
def test_engine__never_past_its_deadline_expired_saying_why(settings: Any, outbox: list) -> None:
    # A follow-up may be 2 hours late: 22:00 deferred to 08:30 would be 10 hours late.
    settings.REMINDERS_KINDS = {"follow_up": {"quiet_hours": "21:00-08:30"}}
    late = at(THURSDAY, 22, 0)
    task = api.schedule("follow_up", "alice", at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 0
    run = TaskRun.objects.get(task=task)
    assert (run.status, run.error_code) == ("expired", "deadline")
    assert "quiet hours" in run.error_message and "would pass its deadline" in run.error_message


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_engine__the_morning_is_staggered_not_a_wave(outbox: list) -> None:
    late = at(THURSDAY, 23, 0)
    for n in range(40):
        api.schedule("follow_up", f"member{n:02d}", at=late, tz=TZ, channel="memory")
    tick_at(late)
    times = set(TaskRun.objects.values_list("next_attempt_at", flat=True))
    assert len(times) > 30  # spread over the recipients, not one instant
    morning = at(THURSDAY + timedelta(days=1), 8, 30)
    assert all(morning <= t < morning + timedelta(seconds=600) for t in times)


@pytest.mark.django_db
def test_engine__a_kind_that_breaks_quiet_hours_goes_at_once(settings: Any, outbox: list) -> None:
    settings.REMINDERS_KINDS = {"inquiry_timeout": {"quiet_hours": "21:00-08:30"}}
    late = at(THURSDAY, 22, 0)
    api.schedule("inquiry_timeout", "alice", at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 1


@pytest.mark.django_db
def test_engine__rest_days_of_its_calendar_are_quiet(settings: Any, outbox: list) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"quiet_calendar": "cn", "max_lateness_seconds": 7 * 24 * 3600}
    }
    saturday = date(2026, 12, 5)
    assert day_off("cn", saturday) is not None
    task = api.schedule("follow_up", "alice", at=at(saturday, 10), tz=TZ, channel="memory")
    assert tick_at(at(saturday, 10)) == 0
    run = TaskRun.objects.get(task=task)
    assert run.error_code == "quiet_hours" and "calendar 'cn'" in run.error_message
    # Monday at 08:00 (no window: the morning), staggered; never at midnight.
    monday = at(date(2026, 12, 7), 8)
    assert monday <= run.next_attempt_at < monday + timedelta(seconds=holds.QUIET_SPREAD_SECONDS)
    assert run.next_attempt_at == monday + Policy().stagger(
        "alice", spread=holds.QUIET_SPREAD_SECONDS
    )


@pytest.mark.django_db
def test_rest_days__end_at_the_windows_end_on_the_next_working_day_never_at_midnight() -> None:
    saturday = date(2026, 12, 5)
    lunch = QuietWindow.parse("12:00-13:30")
    assert quiet_until(at(saturday, 10), TZ, None, rest()) == at(date(2026, 12, 7), 8)
    assert quiet_until(at(saturday, 10), TZ, lunch, rest()) == at(date(2026, 12, 7), 13, 30)


@pytest.mark.django_db
def test_engine__a_mandatory_kind_goes_at_the_first_open_moment(outbox: list) -> None:
    # The daily report's stagger is up to 14 minutes: a mandatory kind is not staggered
    # past the end of quiet hours, it goes at their end.
    preferences.set_quiet_hours("alice", "21:00-08:30", by="alice")
    late = at(THURSDAY, 22)
    task = api.schedule("daily_report", "alice", at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 0
    run = TaskRun.objects.get(task=task)
    morning = at(THURSDAY + timedelta(days=1), 8, 30)
    assert (run.error_code, run.next_attempt_at) == ("quiet_hours", morning)
    assert tick_at(morning) == 1


@pytest.mark.django_db
def test_own__hours_stored_before_the_hour_open_rule_hold_nothing(outbox: list) -> None:
    # Saved before the rule: one open minute a day, less than the report's stagger.
    QuietHours.objects.create(
        recipient="alice", hours="08:00-07:59", changed_by="ops", changed_at=at(THURSDAY, 7)
    )
    noon = at(THURSDAY, 12)
    task = api.schedule("daily_report", "alice", at=noon, tz=TZ, channel="memory")
    dispatch.materialize(now=noon)
    run = TaskRun.objects.get(task=task)
    assert run.error_code == "" and run.due_at < noon + timedelta(minutes=15)  # its stagger
    assert tick_at(run.due_at) == 1


# --- A recipient's own quiet hours --------------------------------------------------------


@pytest.mark.django_db
def test_own__set_read_cleared_and_every_change_kept() -> None:
    assert preferences.quiet_hours("alice") is None  # the kinds' own
    preferences.set_quiet_hours("alice", "22:00-07:00", by="alice", reason="a baby at home")
    own = preferences.quiet_hours("alice")
    assert own is not None and (own.hours, own.changed_by) == ("22:00-07:00", "alice")
    preferences.clear_quiet_hours("alice", by="ops.li", reason="back to normal")
    assert preferences.quiet_hours("alice") is None
    kept = list(QuietHoursChange.objects.values_list("hours", "cleared", "changed_by"))
    assert kept == [("", True, "ops.li"), ("22:00-07:00", False, "alice")]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"hours": "late"}, "hours"),
        ({"hours": "08:00-07:59"}, "hours"),
        ({"calendar": "no-such-calendar"}, "calendar"),
        ({"by": ""}, "by"),
        ({"user": "@all"}, "user"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"tz": ""}, "tz"),
        ({"tz": 8}, "tz"),
        ({"calendar": None}, "calendar"),
        ({"reason": None}, "reason"),
        ({"reason": 42}, "reason"),
    ],
)
def test_own__bad_input_names_the_field_and_saves_nothing(call: dict[str, Any], field: str) -> None:
    values = {"user": "alice", "hours": "22:00-07:00", "by": "alice", **call}
    with pytest.raises(ValidationError) as raised:
        preferences.set_quiet_hours(values.pop("user"), values.pop("hours"), **values)
    assert field in raised.value.message_dict
    assert not QuietHours.objects.exists() and not QuietHoursChange.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("reason", [None, 42])
def test_clearing_own__a_reason_not_text_names_the_field_and_clears_nothing(reason: Any) -> None:
    preferences.set_quiet_hours("alice", "22:00-07:00", by="alice")
    with pytest.raises(ValidationError) as raised:
        preferences.clear_quiet_hours("alice", by="ops.li", reason=reason)
    assert "reason" in raised.value.message_dict
    assert QuietHours.objects.get().hours == "22:00-07:00"
    assert QuietHoursChange.objects.count() == 1


@pytest.mark.django_db
def test_model__validation_refuses_hours_leaving_less_than_an_hour_open() -> None:
    row = QuietHours(
        recipient="alice", hours="08:00-07:59", changed_by="ops", changed_at=at(THURSDAY, 9)
    )
    with pytest.raises(ValidationError) as raised:
        row.full_clean()
    assert "at least an hour" in raised.value.message_dict["hours"][0]


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_own__replace_the_kinds_and_none_means_none(outbox: list) -> None:
    # The kind says 21:00-08:30; alice's own say 23:00-07:00, bob wants none at all.
    preferences.set_quiet_hours("alice", "23:00-07:00", by="alice")
    preferences.set_quiet_hours("bob", "", by="bob")
    late = at(THURSDAY, 22, 0)
    for who in ("alice", "bob", "carol"):
        api.schedule("follow_up", who, at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 2  # alice (her night starts at 23:00) and bob
    carol = TaskRun.objects.get(task__recipient="carol")
    assert carol.error_code == "quiet_hours"
    midnight = at(THURSDAY, 23, 30)
    api.schedule("follow_up", "alice", at=midnight, tz=TZ, channel="memory", key="second")
    tick_at(midnight)
    second = TaskRun.objects.get(task__key="second")
    assert second.error_code == "quiet_hours"
    assert "the recipient's own: 23:00-07:00" in second.error_message
    assert second.next_attempt_at.astimezone(SHANGHAI).hour == 7


@pytest.mark.django_db
def test_own__on_the_projects_clock_unless_told(settings: Any) -> None:
    preferences.set_quiet_hours("alice", "22:00-07:00", by="alice")
    preferences.set_quiet_hours("bob", "22:00-07:00", by="bob", tz="Europe/Berlin")
    alice, bob = preferences.quiet_hours("alice"), preferences.quiet_hours("bob")
    assert alice is not None and alice.tz == settings.TIME_ZONE
    assert bob is not None and bob.tz == "Europe/Berlin"
    assert QuietHours.objects.get(recipient="bob").timezone == "Europe/Berlin"
    assert QuietHoursChange.objects.get(recipient="bob").timezone == "Europe/Berlin"
    # A row written before the zone was kept (or by the code before it): the project's.
    QuietHours.objects.filter(recipient="bob").update(timezone="")
    bob = preferences.quiet_hours("bob")
    assert bob is not None and bob.tz == settings.TIME_ZONE


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_follow_ups")
def test_own__read_on_the_recipients_clock_whatever_the_tasks(outbox: list) -> None:
    # Alice sleeps 22:00-07:00 in Berlin; her tasks are on Shanghai's clock (7 hours on).
    berlin = ZoneInfo("Europe/Berlin")
    preferences.set_quiet_hours("alice", "22:00-07:00", by="alice", tz="Europe/Berlin")
    morning = at(THURSDAY, 10)  # 03:00 in Berlin: her night
    task = api.schedule("follow_up", "alice", at=morning, tz=TZ, channel="memory")
    assert tick_at(morning) == 0
    run = TaskRun.objects.get(task=task)
    woken = datetime(2026, 12, 3, 7, 0, tzinfo=berlin)
    assert run.error_code == "quiet_hours" and "22:00-07:00 Europe/Berlin" in run.error_message
    assert woken <= run.next_attempt_at < woken + timedelta(seconds=holds.QUIET_SPREAD_SECONDS)
    # 22:30 in Shanghai, the kind's night on the task's clock: 15:30 in Berlin, her day.
    late = at(THURSDAY, 22, 30)
    api.schedule("follow_up", "alice", at=late, tz=TZ, channel="memory", key="late")
    assert tick_at(late) >= 1
    assert TaskRun.objects.get(task__key="late").status == "sent"


@pytest.mark.django_db
def test_own__never_hold_a_kind_that_breaks_quiet_hours(outbox: list) -> None:
    preferences.set_quiet_hours("alice", "21:00-08:30", by="alice")
    late = at(THURSDAY, 22, 0)
    api.schedule("inquiry_timeout", "alice", at=late, tz=TZ, channel="memory")
    assert tick_at(late) == 1


@pytest.mark.django_db
def test_own__a_calendar_no_longer_configured_holds_nothing_and_stops_no_one(
    outbox: list,
) -> None:
    # Set when the calendar existed; the settings no longer name it.
    QuietHours.objects.create(
        recipient="alice", hours="", calendar="gone", changed_by="ops", changed_at=at(THURSDAY, 9)
    )
    noon = at(THURSDAY, 12)
    for who in ("alice", "bob"):
        api.schedule("follow_up", who, at=noon, tz=TZ, channel="memory")
    assert tick_at(noon) == 2
