"""The ledger against WeCom's own count (``ops.statistics``), over real HTTP against the
sandbox: once a day per app, from OPS_STATISTICS_HOUR (Beijing), at explicit times."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail

from ops import statistics
from ops.alerts import run_step
from ops.conf import settings as conf
from ops.models import Alert, AlertCard, AlertDelivery, AlertEvent, AlertType, StatisticsCheck
from reminders.models import SendLog
from reminders.senders import get_sender
from reminders.senders.base import Message
from reminders.senders.parts import CONTENT_LIMIT
from tests.ops.test_statistics_sandbox import seconds_to_noon
from tests.support.alert_channels import admins_setting
from tests.support.sandbox import AGENT_ID, CORP_ID, running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

pytestmark = pytest.mark.django_db

BEIJING = statistics.BEIJING
SCOPE = f"{CORP_ID}/{AGENT_ID}"
# Two aliases of one app (the ledger watch of tests.support.sandbox covers "wecom" only:
# these tests write ledger rows of their own).
APP_CHANNELS = ("app_a", "app_b")


@pytest.fixture
def box(settings: Any) -> Iterator[WeComSandbox]:
    """The sandbox at noon of a Beijing day, and two channels sending as its app."""
    with running_sandbox() as sandbox:
        sandbox.advance(seconds_to_noon(sandbox.state.wall()))
        for name, value in wecom_settings(sandbox.base_url).items():
            setattr(settings, name, value)
        settings.WECOM_TIMEOUT = 1.0
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            **{
                alias: {
                    "BACKEND": "reminders.senders.wecom.WeComSender",
                    "OPTIONS": {"oversize": "split"},
                }
                for alias in APP_CHANNELS
            },
        }
        settings.ADMINS = admins_setting("ops@example.com")
        settings.OPS_ALERT_CHANNELS = {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}}
        yield sandbox


def sandbox_day(box: WeComSandbox) -> datetime:
    """Midnight (Beijing) starting the sandbox's day."""
    here = datetime.fromtimestamp(box.state.wall(), BEIJING)
    return here.replace(hour=0, minute=0, second=0, microsecond=0)


def deliver(box: WeComSandbox, *contents: str) -> None:
    """Messages WeCom (the sandbox) delivers today, sent as the app."""
    sender = get_sender(APP_CHANNELS[0])
    for n, content in enumerate(contents):
        sender.send(Message(f"member{n}", "text", {"content": content}, f"k{n}"))


def ledger_row(
    at: datetime,
    *,
    channel: str = APP_CHANNELS[0],
    status: str = "sent",
    reserved: timedelta = timedelta(minutes=1),
    **detail: Any,
) -> SendLog:
    """A ledger row sent at ``at``, reserved (created) ``reserved`` before."""
    row = SendLog.objects.create(
        key=f"row-{SendLog.objects.count()}",
        status=status,
        recipient="member",
        channel=channel,
        body="{}",
        reply_detail=detail,
        sent_at=at if status == "sent" else None,
    )
    SendLog.objects.filter(pk=row.pk).update(created_at=at - reserved)
    return row


def next_night(box: WeComSandbox, hour: int = 3) -> datetime:
    """Move the sandbox to the next day; the alert step's time then: ``hour`` Beijing."""
    box.advance(24 * 3600)
    return sandbox_day(box) + timedelta(hours=hour)


def test_our_count__sent_rows_of_the_app_s_channels_on_the_beijing_day_with_their_parts(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    ledger_row(day + timedelta(hours=9))
    ledger_row(day + timedelta(hours=10), channel=APP_CHANNELS[1], parts=3, msgids=["a", "b", "c"])
    # A card WeCom answered "delivered before": the attempt that delivered it counted.
    ledger_row(day + timedelta(hours=11), delivered_before="task_id already used", task_id="t")
    ledger_row(day + timedelta(hours=23, minutes=59))
    # Not counted: another day (Beijing), another status, another channel.
    ledger_row(day - timedelta(seconds=1))
    ledger_row(day + timedelta(days=1))
    ledger_row(day + timedelta(hours=12), status="failed")
    ledger_row(day + timedelta(hours=12), status="unknown")
    ledger_row(day + timedelta(hours=12), channel="memory")
    assert statistics.our_count(APP_CHANNELS, day.date()) == 6


def test_our_count__a_row_reserved_days_before_it_was_sent_counts_on_the_day_it_was_sent(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    # Reserved, then held for days (a long outage, retries, quiet hours) before it went.
    ledger_row(day + timedelta(hours=9), reserved=timedelta(days=5))
    ledger_row(day + timedelta(hours=10), reserved=timedelta(days=2, hours=11))
    ledger_row(day - timedelta(hours=1), reserved=timedelta(days=5))  # the day before
    assert statistics.our_count(APP_CHANNELS, day.date()) == 2
    assert statistics.our_count(APP_CHANNELS, day.date() - timedelta(days=1)) == 1


def test_check__a_row_reserved_days_before_it_was_sent_matches_wecom_s_count(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    deliver(box, "one", "two")
    ledger_row(day + timedelta(hours=12), reserved=timedelta(days=4))
    ledger_row(day + timedelta(hours=12, minutes=1))

    run_step(next_night(box))

    check = StatisticsCheck.objects.get()
    assert (check.ours, check.theirs, check.outcome) == (2, 2, StatisticsCheck.Outcome.MATCH)


def test_check__alerts_sent_through_the_app_count_and_a_mismatch_does_not_feed_the_next_day(
    box: WeComSandbox, settings: Any
) -> None:
    settings.OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": APP_CHANNELS[1], "recipient": "oncall"},
        }
    }
    day = sandbox_day(box)
    deliver(box, "one")
    ledger_row(day + timedelta(hours=12))
    ledger_row(day + timedelta(hours=13))  # WeCom never got it: a mismatch

    run_step(next_night(box))  # the mismatch, told on call through the app itself

    assert StatisticsCheck.objects.get().outcome == StatisticsCheck.Outcome.MISMATCH
    assert AlertDelivery.objects.get().status == AlertDelivery.Status.SENT
    deliver(box, "four")
    ledger_row(sandbox_day(box) + timedelta(hours=12))
    run_step(next_night(box))

    second = StatisticsCheck.objects.latest("day")
    assert (second.ours, second.theirs, second.outcome) == (2, 2, StatisticsCheck.Outcome.MATCH)
    assert Alert.objects.count() == 1


def test_check__alert_cards_sent_through_the_app_count_one_a_member(
    box: WeComSandbox, settings: Any
) -> None:
    """A card to each of two members is two messages WeCom counts; a card's update is
    none."""
    settings.OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_cards.WeComCards",
            "OPTIONS": {"channel": APP_CHANNELS[1], "recipients": ["oncall", "backup"]},
        }
    }
    settings.OPS_ADMIN_URL = "https://crm.example/admin/"
    day = sandbox_day(box)
    deliver(box, "one")
    ledger_row(day + timedelta(hours=12))
    ledger_row(day + timedelta(hours=13))  # WeCom never got it: a mismatch

    run_step(next_night(box))  # the mismatch, told on call as two cards

    assert StatisticsCheck.objects.get().outcome == StatisticsCheck.Outcome.MISMATCH
    assert AlertCard.objects.filter(sent_at__isnull=False).count() == 2
    run_step(next_night(box))

    second = StatisticsCheck.objects.latest("day")
    assert (second.ours, second.theirs, second.outcome) == (2, 2, StatisticsCheck.Outcome.MATCH)


def test_wecom_apps__aliases_of_one_app_are_one_app(box: WeComSandbox) -> None:
    assert statistics.wecom_apps() == [statistics.App(CORP_ID, str(AGENT_ID), APP_CHANNELS)]


def test_check__a_match_is_recorded_and_alerts_nobody(box: WeComSandbox) -> None:
    day = sandbox_day(box)
    deliver(box, "one", "two " + "x" * CONTENT_LIMIT)  # the second in two parts
    deliver(box, "one")  # the same bytes again: WeCom's duplicate check drops it
    ledger_row(day + timedelta(hours=12, minutes=1))
    ledger_row(day + timedelta(hours=12, minutes=2), channel=APP_CHANNELS[1], parts=2)
    now = next_night(box)

    result = run_step(now)

    check = StatisticsCheck.objects.get()
    assert (check.day, check.ours, check.theirs, check.outcome) == (
        day.date(),
        3,
        3,
        StatisticsCheck.Outcome.MATCH,
    )
    assert (check.corp_id, check.agent_id, check.channels) == (
        CORP_ID,
        str(AGENT_ID),
        "app_a,app_b",
    )
    assert check.app_name == "WeCom sandbox"
    assert check.checked_at == now
    assert result.checked == 0
    assert not AlertEvent.objects.exists()


def test_check__a_difference_within_the_tolerance_alerts_nobody(
    box: WeComSandbox, settings: Any
) -> None:
    settings.OPS_STATISTICS_TOLERANCE = 1
    day = sandbox_day(box)
    deliver(box, "one")
    ledger_row(day + timedelta(hours=12))
    ledger_row(day + timedelta(hours=13))

    run_step(next_night(box))

    check = StatisticsCheck.objects.get()
    assert (check.ours, check.theirs, check.tolerance) == (2, 1, 1)
    assert check.outcome == StatisticsCheck.Outcome.WITHIN_TOLERANCE
    assert not AlertEvent.objects.exists()


def test_check__a_mismatch_alerts_ops_with_both_figures_and_the_app(box: WeComSandbox) -> None:
    day = sandbox_day(box)
    deliver(box, "one", "two", "three")
    for minute in range(5):
        ledger_row(day + timedelta(hours=12, minutes=minute))
    now = next_night(box)

    result = run_step(now)

    check = StatisticsCheck.objects.get()
    assert (check.ours, check.theirs, check.outcome) == (5, 3, StatisticsCheck.Outcome.MISMATCH)
    assert result.checked == 1
    (alert,) = Alert.objects.all()
    assert alert.type == AlertType.STATISTICS_MISMATCH
    assert alert.scope == SCOPE
    assert SCOPE in alert.title
    line = (
        f"{day.date().isoformat()}: WeCom counted 3 messages from app {SCOPE} (WeCom sandbox), "
        "our ledger 5 (tolerance 0)."
    )
    assert line in alert.body
    (message,) = mail.outbox
    assert line in message.body


def test_check__a_mismatch_in_chinese(box: WeComSandbox, settings: Any) -> None:
    settings.OPS_ALERT_LANGUAGE = "zh-hans"
    day = sandbox_day(box)
    ledger_row(day + timedelta(hours=12))
    run_step(next_night(box))
    (alert,) = Alert.objects.all()
    assert "企业微信" in alert.title
    assert "企业微信" in alert.body and " 0 " in alert.body and " 1 " in alert.body


def test_check__wecom_unreachable_is_recorded_and_alerted_and_the_step_goes_on(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    ledger_row(day + timedelta(hours=12))
    now = next_night(box)
    box.stop()

    result = run_step(now)

    check = StatisticsCheck.objects.get()
    assert check.outcome == StatisticsCheck.Outcome.UNAVAILABLE
    assert (check.ours, check.theirs) == (1, None)
    assert check.error
    assert result.checked == 1
    (alert,) = Alert.objects.all()
    assert alert.type == AlertType.STATISTICS_UNAVAILABLE
    assert SCOPE in alert.title
    assert "our ledger 1" in alert.body
    assert len(mail.outbox) == 1  # delivered in the same step


def test_check__once_per_app_and_day_however_many_steps(box: WeComSandbox) -> None:
    day = sandbox_day(box)
    ledger_row(day + timedelta(hours=12))
    box.advance(24 * 3600)
    midnight = sandbox_day(box)

    run_step(midnight + timedelta(minutes=30))  # before OPS_STATISTICS_HOUR (1): not yet
    assert not StatisticsCheck.objects.exists()
    for minutes in (60, 61, 300, 23 * 60):
        run_step(midnight + timedelta(minutes=minutes))

    assert StatisticsCheck.objects.count() == 1
    assert AlertEvent.objects.count() == 1
    assert box.stats()["message/get_statistics calls"] == 1


def calls(box: WeComSandbox) -> int:
    return box.stats().get("message/get_statistics calls", 0)


def test_check__wecom_unreachable_is_asked_again_hourly_and_alerted_once(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    deliver(box, "one")
    ledger_row(day + timedelta(hours=12))
    night = next_night(box)
    port = int(box.base_url.rsplit(":", 1)[1])
    box.stop()

    assert run_step(night).checked == 1  # WeCom not reached: recorded and alerted
    for minutes in (1, 30, 59):  # within the hour: not asked again
        run_step(night + timedelta(minutes=minutes))
    check = StatisticsCheck.objects.get()
    assert (check.outcome, check.attempts, check.checked_at) == ("unavailable", 1, night)

    an_hour_on = night + timedelta(hours=1)
    assert run_step(an_hour_on).checked == 0  # asked again, still down: not alerted again
    check.refresh_from_db()
    assert (check.outcome, check.attempts, check.checked_at) == ("unavailable", 2, an_hour_on)
    assert check.error

    box.start(port=port)  # WeCom answers again
    run_step(an_hour_on + timedelta(minutes=30))  # within the hour of the last attempt
    assert calls(box) == 0
    run_step(an_hour_on + timedelta(hours=1))
    check.refresh_from_db()
    assert (check.outcome, check.ours, check.theirs, check.attempts, check.error) == (
        StatisticsCheck.Outcome.MATCH,
        1,
        1,
        3,
        "",
    )
    assert check.checked_at == an_hour_on + timedelta(hours=1)
    answered = calls(box)  # (two when the token fetched yesterday had expired)
    for hours in (3, 4, 20):  # answered: never asked again that day
        run_step(night + timedelta(hours=hours))
    assert calls(box) == answered
    assert StatisticsCheck.objects.count() == 1
    (event,) = AlertEvent.objects.all()  # the failure, once
    assert event.type == AlertType.STATISTICS_UNAVAILABLE
    assert len(mail.outbox) == 1


def test_check__an_error_reply_then_a_difference_are_each_alerted_once(
    box: WeComSandbox,
) -> None:
    day = sandbox_day(box)
    ledger_row(day + timedelta(hours=12))
    ledger_row(day + timedelta(hours=13))
    night = next_night(box)
    # WeCom refuses the app's token (60020: our IP not allowed), the first time only.
    box.control(invalidate_tokens=True, gettoken_errcodes=[60020])

    run_step(night)
    check = StatisticsCheck.objects.get()
    assert check.outcome == StatisticsCheck.Outcome.UNAVAILABLE
    assert "60020" in check.error

    assert run_step(night + timedelta(hours=1)).checked == 1  # the difference, told
    check.refresh_from_db()
    assert (check.outcome, check.ours, check.theirs, check.attempts) == (
        StatisticsCheck.Outcome.MISMATCH,
        2,
        0,
        2,
    )
    run_step(night + timedelta(hours=2))
    assert sorted(AlertEvent.objects.values_list("type", flat=True)) == [
        AlertType.STATISTICS_MISMATCH,
        AlertType.STATISTICS_UNAVAILABLE,
    ]
    assert calls(box) == 1  # the first attempt got no token


def test_check__the_last_retry_is_before_beijing_midnight(box: WeComSandbox) -> None:
    """After midnight WeCom's yesterday is another day: the day that failed is not asked
    again; the new one is compared."""
    night = next_night(box, hour=23)
    port = int(box.base_url.rsplit(":", 1)[1])
    box.stop()
    run_step(night)
    box.start(port=port)
    box.advance(24 * 3600)  # WeCom's clock too: its yesterday is now the day after

    run_step(night + timedelta(hours=2))  # 01:00 the next day, OPS_STATISTICS_HOUR

    failed, compared = StatisticsCheck.objects.order_by("day")
    assert (failed.outcome, failed.attempts) == (StatisticsCheck.Outcome.UNAVAILABLE, 1)
    assert compared.day == failed.day + timedelta(days=1)
    assert compared.outcome == StatisticsCheck.Outcome.MATCH


def test_retry__taken_by_one_step_only(box: WeComSandbox) -> None:
    """Two steps read the failed check at once: the first to move its ``checked_at`` asks
    WeCom, the other asks nothing."""
    night = next_night(box)
    port = int(box.base_url.rsplit(":", 1)[1])
    box.stop()
    run_step(night)
    box.start(port=port)
    (app,) = statistics.wecom_apps()
    seen = StatisticsCheck.objects.get()
    later = night + statistics.RETRY_AFTER
    assert statistics.retry_due(seen, later)

    assert statistics.retry(app, StatisticsCheck.objects.get(), later) is not None
    assert statistics.retry(app, seen, later) is None  # read before the first took it

    assert calls(box) == 1
    assert StatisticsCheck.objects.get().attempts == 2


def test_check__off(box: WeComSandbox, settings: Any) -> None:
    settings.OPS_STATISTICS_CHECK = False
    run_step(next_night(box))
    assert not StatisticsCheck.objects.exists()


def test_tolerance__the_larger_of_the_absolute_and_the_relative(settings: Any) -> None:
    settings.OPS_STATISTICS_TOLERANCE = 2
    settings.OPS_STATISTICS_TOLERANCE_RATIO = 0.01
    assert conf.statistics_tolerance(100, 101) == 2
    assert conf.statistics_tolerance(1000, 950) == 10
