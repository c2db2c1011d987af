"""ops.stats.wave: the next hour minute by minute, the members nearest WeCom's limits,
the runs held by quiet hours and the daily quota, against a small world at a fixed now.

Day D is 2026-03-10 in Asia/Shanghai; now is 15:00:30 local, so the hour is 15:00 to
16:00. Waiting (times local, D unless said):

* alice (follow_up, cron): 35 at 15:05, 5 at 15:10: 40 in the hour, 35 in one minute
  (past the 30 a minute); bob (daily_report, cron): 3 at 15:05, one at 16:00:30 (after
  the hour) and one due 14:50 (the backlog, not in the hour); carol's task is paused
  (a run at 15:20: left out everywhere).
* dave (follow_up): two held by quiet hours, resuming D+1 08:30 and 08:40.
* erin: a one-off task, its run due D+1 10:00.

Last week, D-6 (a week before tomorrow): alice's task 4 sent, one cancelled, one skipped,
one made on request; carol's (paused) 2 sent: the estimate for tomorrow is 4.
Ledger: today 2 sent rows plus one in 3 parts (5 messages), one failed; one sent
yesterday.

Every task and ledger row is on the WeCom app channel ("wecom", ``app_channels``), whose
messages spend the daily quota, unless a test says otherwise.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.test import override_settings

from ops import stats
from ops.models import Alert, AlertDelivery
from ops.stats import Quota
from ops.stats.wave import quota, quota_channels
from reminders.calendars.days import CalendarDay
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.senders.wecom import WeComSender

from .stats_world import DAY, START

pytestmark = pytest.mark.django_db

NOW = START + timedelta(hours=15, seconds=30)


def at(hh: int, mm: int = 0, ss: int = 0, days: int = 0) -> Any:
    return START + timedelta(days=days, hours=hh, minutes=mm, seconds=ss)


class Builder:
    def __init__(self) -> None:
        self.n = 0

    def task(
        self,
        kind: str,
        recipient: str,
        *,
        cron: str = "0 9 * * *",
        channel: str = "wecom",
        **kw: Any,
    ) -> Any:
        return ScheduledTask.objects.create(
            kind=kind,
            recipient=recipient,
            channel=channel,
            cron=cron,
            run_at=None if cron else at(10, days=1),
            timezone="Asia/Shanghai",
            priority="normal",
            **kw,
        )

    def runs(self, task: Any, due: Any, status: str = "scheduled", n: int = 1, **kw: Any) -> None:
        rows = []
        for _ in range(n):
            self.n += 1
            fields: dict[str, Any] = {
                "task": task,
                "occurrence": due - timedelta(microseconds=self.n),
                "run_date": due.date(),
                "due_at": due,
                "status": status,
                "ledger_key": f"k{self.n}",
            }
            if status in TaskRun.WAITING:
                fields["next_attempt_at"] = due
            elif status in TaskRun.FINISHED:
                fields["finished_at"] = due
            fields.update(kw)
            rows.append(TaskRun(**fields))
        TaskRun.objects.bulk_create(rows)

    def sent(
        self, when: Any, status: str = "sent", parts: int | None = None, channel: str = "wecom"
    ) -> None:
        self.n += 1
        row = SendLog.objects.create(
            key=f"log{self.n}",
            status=status,
            recipient="alice",
            channel=channel,
            body="{}",
            reply_detail={"parts": parts} if parts else {},
            sent_at=when if status == "sent" else None,
        )
        SendLog.objects.filter(pk=row.pk).update(created_at=when - timedelta(minutes=1))


@pytest.fixture
def world(app_channels: tuple[str, ...]) -> Builder:
    b = Builder()
    alice = b.task("follow_up", "alice")
    bob = b.task("daily_report", "bob")
    carol = b.task("follow_up", "carol", status=ScheduledTask.Status.PAUSED)
    dave = b.task("follow_up", "dave")
    erin = b.task("birthday", "erin", cron="")
    b.runs(alice, at(15, 5), n=35)
    b.runs(alice, at(15, 10), n=5)
    b.runs(bob, at(15, 5), n=3)
    b.runs(bob, at(16, 0, 30))
    b.runs(bob, at(14, 50))
    b.runs(carol, at(15, 20))
    for minute in (30, 40):
        b.runs(dave, at(8, minute, days=1), "retrying", error_code="quiet_hours")
    b.runs(erin, at(10, days=1))
    week = -6
    b.runs(alice, at(9, days=week), "sent", n=4)
    b.runs(alice, at(9, 1, days=week), "cancelled")
    b.runs(alice, at(9, 2, days=week), "skipped")
    b.runs(alice, at(9, 3, days=week), "sent", is_manual=True)
    b.runs(carol, at(9, days=week), "sent", n=2)
    b.sent(at(9))
    b.sent(at(10))
    b.sent(at(11), parts=3)
    b.sent(at(12), status="failed")
    b.sent(at(23, days=-1))
    return b


def test_the_next_hour_minute_by_minute_stacked_by_kind(world):
    wave = stats.compute(DAY, NOW).wave
    assert wave is not None
    assert wave.start == at(15)
    assert len(wave.minutes) == 60
    assert wave.minutes[5].kinds == {"follow_up": 35, "daily_report": 3}
    assert wave.minutes[10].kinds == {"follow_up": 5}
    assert sum(m.total for m in wave.minutes) == 43  # no backlog, no pause, not 16:00:30
    assert wave.peak == 38
    assert wave.kinds == ["daily_report", "follow_up"]
    assert wave.minutes[5].label == "15:05"


def test_the_members_closest_to_wecoms_limits(world):
    members = stats.compute(DAY, NOW).wave.members
    assert [(m.recipient, m.next_hour, m.busiest_minute) for m in members] == [
        ("alice", 40, 35),
        ("bob", 3, 3),
    ]
    assert members[0].busiest_at == at(15, 5)
    assert members[0].over and not members[1].over
    assert members[0].closeness == pytest.approx(35 / 30)


def test_the_top_ten_are_the_closest_to_either_limit(world):
    b = world
    # 12 members with 2 in one minute each, and one with 20 spread over 20 minutes.
    for i in range(12):
        b.runs(b.task("follow_up", f"m{i:02}"), at(15, 30), n=2)
    spread = b.task("follow_up", "spread")
    for minute in range(20):
        b.runs(spread, at(15, 20 + minute))
    members = stats.compute(DAY, NOW).wave.members
    assert len(members) == 10
    assert [m.recipient for m in members[:3]] == ["alice", "bob", "m00"]
    assert "spread" not in [m.recipient for m in members]  # 20/1000 and 1/30: furthest


def test_the_runs_held_by_quiet_hours(world):
    quiet = stats.compute(DAY, NOW).wave.quiet
    assert [(q.kind, q.runs, q.first_resume, q.last_resume) for q in quiet] == [
        ("follow_up", 2, at(8, 30, days=1), at(8, 40, days=1))
    ]


def test_the_quota_without_seats_is_unknown(world):
    quota = stats.compute(DAY, NOW).wave.quota
    assert quota.seats is None and quota.quota is None
    assert quota.used == 5
    assert quota.waiting_today == 45  # 40 + 3 + 1 + the backlog
    assert quota.forecast == 50
    assert (quota.tomorrow_planned, quota.tomorrow_estimated, quota.tomorrow) == (1, 4, 5)
    assert not quota.today_over and not quota.tomorrow_over


@override_settings(OPS_WECOM_SEATS=2)
def test_the_quota_with_seats(world):
    data = stats.compute(DAY, NOW).as_dict()["wave"]
    assert data["quota"] == {
        "day": "2026-03-10",
        "time_zone": "Asia/Shanghai",
        "channels": ["wecom"],
        "seats": 2,
        "per_seat": 200,
        "quota": 400,
        "used": 5,
        "waiting_today": 45,
        "forecast": 50,
        "today_over": False,
        "tomorrow": 5,
        "tomorrow_planned": 1,
        "tomorrow_estimated": 4,
        "tomorrow_over": False,
    }
    assert data["tomorrow_by_kind"] == {"birthday": 1, "follow_up": 4}
    assert data["members"][0]["busiest_at"] == "2026-03-10T15:05:00+08:00"
    assert data["quiet_hours"][0]["first_resume"] == "2026-03-11T08:30:00+08:00"


def test_quota_over():
    assert Quota(1, 150, 51, 0, 0).today_over
    assert not Quota(1, 150, 50, 0, 0).today_over
    assert Quota(1, 0, 0, 100, 101).tomorrow_over
    assert not Quota(None, 0, 0, 100, 101).tomorrow_over


def test_nothing_waiting():
    wave = stats.compute(DAY, NOW).wave
    assert wave.members == [] and wave.quiet == [] and wave.peak == 0
    assert wave.quota.used == 0 and wave.quota.tomorrow == 0


# Only WeCom app messages, by Beijing's day ------------------------------------------------


def test_the_quota_counts_the_wecom_app_channels_only(world):
    """A group robot, a console or any other channel does not spend WeCom's app quota:
    their messages sent, their runs waiting and their runs last week count nowhere."""
    b = world
    for channel in ("robot", "console", "memory"):
        b.sent(at(13), channel=channel)
        recurring = b.task("follow_up", "zoe", channel=channel)
        b.runs(recurring, at(20))  # waiting today, after the hour
        b.runs(recurring, at(9, days=-6), "sent", n=2)  # a week before tomorrow
        once = b.task("birthday", "zoe", cron="", channel=channel)
        b.runs(once, at(10, days=1))

    wave = stats.compute(DAY, NOW).wave

    found = wave.quota
    assert found.channels == ("wecom",)
    assert (found.used, found.waiting_today, found.forecast) == (5, 45, 50)
    assert (found.tomorrow_planned, found.tomorrow_estimated) == (1, 4)
    assert wave.tomorrow_by_kind == {"birthday": 1, "follow_up": 4}


def test_the_quota_counts_the_alerts_sent_today_as_the_wecom_app(world, settings):
    """An alert sent through an alert channel that sends as the WeCom app is a message
    WeCom counts against the quota, with no ledger row; one through a group robot, one
    sent yesterday (Beijing) and one not sent are not."""
    settings.OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": "wecom", "recipient": "oncall"},
        },
        "group": {"BACKEND": "ops.alert_channels.ReminderChannel", "OPTIONS": {"channel": "robot"}},
    }
    alert = Alert.objects.create(group_key="g", seq=1, type="run_failed", created_at=at(9))
    for channel, sent_at in [
        ("on_call", at(13)),
        ("on_call", at(14, 59)),
        ("group", at(13)),
        ("on_call", at(23, days=-1)),
        ("on_call", None),
    ]:
        status = AlertDelivery.Status.SENT if sent_at else AlertDelivery.Status.RETRYING
        AlertDelivery.objects.create(alert=alert, channel=channel, status=status, sent_at=sent_at)

    found = stats.compute(DAY, NOW).wave.quota

    assert (found.used, found.forecast) == (5 + 2, 50 + 2)


@override_settings(TIME_ZONE="Europe/London")  # UTC+0 in March: 8 hours behind Beijing
def test_the_quota_counts_beijings_day_whatever_the_time_zone(app_channels):
    """At 17:00 UTC on the 10th it is already the 11th in Beijing: WeCom's day."""
    b = Builder()
    now = datetime(2026, 3, 10, 17, tzinfo=UTC)
    b.sent(datetime(2026, 3, 10, 15, 30, tzinfo=UTC))  # 23:30 on the 10th in Beijing
    b.sent(datetime(2026, 3, 10, 16, 30, tzinfo=UTC))  # 00:30 on the 11th in Beijing
    once = b.task("birthday", "erin", cron="")
    b.runs(once, datetime(2026, 3, 11, 10, tzinfo=UTC))  # 18:00 on the 11th: today
    b.runs(once, datetime(2026, 3, 11, 17, tzinfo=UTC), n=2)  # 01:00 on the 12th: tomorrow
    b.runs(once, datetime(2026, 3, 12, 15, tzinfo=UTC), n=4)  # 23:00 on the 12th: tomorrow
    recurring = b.task("follow_up", "alice")
    # A week before tomorrow is the 5th in Beijing: 4 March 16:00 to 5 March 16:00 UTC.
    b.runs(recurring, datetime(2026, 3, 4, 15, tzinfo=UTC), "sent", n=16)  # the 4th there
    b.runs(recurring, datetime(2026, 3, 4, 17, tzinfo=UTC), "sent", n=3)
    b.runs(recurring, datetime(2026, 3, 5, 15, tzinfo=UTC), "sent", n=5)

    found = quota(now)

    assert found.day == date(2026, 3, 11)
    assert found.tomorrow_day == date(2026, 3, 12)
    assert found.used == 1
    assert found.waiting_today == 1
    assert (found.tomorrow_planned, found.tomorrow_estimated) == (6, 8)


class BranchApp(WeComSender):
    """A CRM's own WeCom app sender: its messages are app messages too."""


def test_quota_channels__the_wecom_app_sender_and_its_subclasses(app_channels, settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "branch": {"BACKEND": f"{__name__}.BranchApp"},
        # Options a send would refuse: what it sent still counts.
        "odd": {"BACKEND": "reminders.senders.wecom.WeComSender", "OPTIONS": {"oversize": "?"}},
        "gone": {"BACKEND": "reminders.senders.nowhere.Sender"},
    }
    assert quota_channels() == ("branch", "odd", "wecom")
    assert WeComSender.spends_app_quota and not BranchApp.__dict__.get("spends_app_quota")


def test_quota_channels__none_counts_nothing(world, settings):
    settings.REMINDERS_CHANNELS = {
        alias: config for alias, config in settings.REMINDERS_CHANNELS.items() if alias != "wecom"
    }
    found = quota(NOW)
    assert found.channels == ()
    assert (found.used, found.waiting_today, found.tomorrow) == (0, 0, 0)


# Tomorrow by the working-day calendar --------------------------------------------------


def a_week_of_reports(b: Builder, status: str = "sent", **kw: Any) -> None:
    """A week before tomorrow: three daily reports (the kind follows the "cn" calendar)
    and two follow-ups (no calendar)."""
    b.runs(b.task("daily_report", "bob"), at(9, days=-6), status, n=3, **kw)
    b.runs(b.task("follow_up", "alice"), at(9, days=-6), "sent", n=2)


def test_quota_tomorrow__a_rest_day_by_the_calendar_expects_no_report(app_channels):
    CalendarDay.objects.create(calendar="cn", day=date(2026, 3, 11), kind="rest", note="x")
    a_week_of_reports(Builder())

    wave = stats.compute(DAY, NOW).wave

    assert wave.quota.tomorrow_estimated == 2
    assert wave.tomorrow_by_kind == {"follow_up": 2}


def test_quota_tomorrow__a_working_day_expects_the_reports_a_rest_day_skipped_a_week_before(
    app_channels,
):
    CalendarDay.objects.create(calendar="cn", day=date(2026, 3, 4), kind="rest", note="x")
    a_week_of_reports(Builder(), "skipped", error_code="holiday")

    wave = stats.compute(DAY, NOW).wave

    assert wave.quota.tomorrow_estimated == 5
    assert wave.tomorrow_by_kind == {"daily_report": 3, "follow_up": 2}
