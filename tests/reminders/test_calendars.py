"""Working-day calendars: the contract, the Chinese calendar, and the registry."""

from __future__ import annotations

from datetime import date

import pytest
from django.core.exceptions import ImproperlyConfigured

from reminders import calendars
from reminders.calendars import ChineseCalendar, UnknownCalendar

CN = ChineseCalendar("cn")


@pytest.mark.parametrize(
    ("day", "working"),
    [
        (date(2026, 10, 1), False),  # National Day, a Thursday
        (date(2026, 2, 17), False),  # Spring Festival, a Tuesday
        (date(2026, 2, 14), True),  # a make-up working Saturday
        (date(2026, 9, 20), True),  # a make-up working Sunday
        (date(2026, 1, 4), True),  # another Sunday that is worked
        (date(2026, 11, 7), False),  # an ordinary Saturday
        (date(2026, 11, 8), False),  # an ordinary Sunday
        (date(2026, 11, 9), True),  # an ordinary Monday
    ],
)
def test_chinese_calendar__knows_2026_holidays_and_make_up_days(day, working):
    assert CN.is_working_day(day) is working


def test_chinese_calendar__covers_the_years_its_data_has():
    assert CN.covers(2026)
    assert not CN.covers(1999)
    assert not CN.covers(max(CN.years()) + 1)


@pytest.mark.django_db
def test_day_off__is_none_on_a_working_day_and_every_day_without_a_calendar():
    assert calendars.day_off("cn", date(2026, 9, 20)) is None
    assert calendars.day_off("", date(2026, 10, 1)) is None


@pytest.mark.django_db
def test_day_off__on_a_rest_day_says_the_calendar_rests_that_date():
    off = calendars.day_off("cn", date(2026, 10, 1))
    assert off is not None
    assert off.code == "holiday"
    assert "2026-10-01" in off.message
    assert "rest day" in off.message
    assert "'cn'" in off.message


@pytest.mark.django_db
def test_day_off__in_a_year_the_calendar_does_not_cover_is_not_a_guess(settings):
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar", "UNCOVERED": "skip"}
    }
    year = max(CN.years()) + 1
    off = calendars.day_off("cn", date(year, 3, 2))
    assert off is not None
    assert (off.code, off.calendar, off.year) == ("calendar_uncovered", "cn", year)
    assert str(year) in off.message


@pytest.mark.django_db
def test_day_off__in_a_year_nobody_covers_the_default_rule_is_monday_to_friday():
    year = max(CN.years()) + 1
    monday, saturday = date(year, 3, 1), date(year, 3, 6)
    assert (monday.weekday(), saturday.weekday()) == (0, 5)
    decision = calendars.decide("cn", monday)
    assert (decision.working, decision.source, decision.rule) == (True, "fallback", "weekdays")
    off = calendars.day_off("cn", saturday)
    assert (off.code, off.source) == ("holiday", "fallback")
    assert "fallback rule 'weekdays'" in off.message


def test_registry__has_cn_by_default(settings):
    del settings.REMINDERS_CALENDARS
    assert "cn" in calendars.names()
    assert isinstance(calendars.get("cn"), ChineseCalendar)
    assert calendars.get("cn").name == "cn"


@pytest.mark.django_db
def test_registry__takes_a_crm_calendar_by_backend_or_dotted_path(settings):
    settings.REMINDERS_CALENDARS = {
        "four": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": [2026, 2026]},
            "UNCOVERED": "skip",
        },
        "short": "tests.support.calendars.FourDayWeek",
    }
    assert calendars.names() == ["four", "short"]
    four = calendars.get("four")
    assert (four.name, four.covers(2026), four.covers(2027)) == ("four", True, False)
    assert calendars.day_off("short", date(2026, 11, 13)).code == "holiday"  # a Friday
    assert calendars.day_off("four", date(2027, 11, 9)).code == "calendar_uncovered"


def test_registry__is_read_again_when_the_setting_changes(settings):
    assert isinstance(calendars.get("cn"), ChineseCalendar)
    settings.REMINDERS_CALENDARS = {"cn": "tests.support.calendars.FourDayWeek"}
    assert not isinstance(calendars.get("cn"), ChineseCalendar)


def test_registry__an_unknown_name_or_backend_is_an_error(settings):
    with pytest.raises(UnknownCalendar, match="nope"):
        calendars.get("nope")
    settings.REMINDERS_CALENDARS = {"bad": {"BACKEND": "tests.support.calendars.Missing"}}
    with pytest.raises(ImproperlyConfigured, match="bad"):
        calendars.get("bad")
