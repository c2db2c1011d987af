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
from ops.models import Alert, AlertEvent, AlertType, StatisticsCheck
from ops.sandbox import WeComSandbox
from reminders.models import SendLog
from reminders.senders import get_sender
from reminders.senders.base import Message
from reminders.senders.parts import CONTENT_LIMIT
from tests.ops.test_statistics_sandbox import seconds_to_noon
from tests.support.alert_channels import admins_setting
from tests.support.sandbox import AGENT_ID, CORP_ID, running_sandbox, wecom_settings

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
    at: datetime, *, channel: str = APP_CHANNELS[0], status: str = "sent", **detail: Any
) -> SendLog:
    row = SendLog.objects.create(
        key=f"row-{SendLog.objects.count()}",
        status=status,
        recipient="member",
        channel=channel,
        body="{}",
        reply_detail=detail,
        sent_at=at if status == "sent" else None,
    )
    SendLog.objects.filter(pk=row.pk).update(created_at=at - timedelta(minutes=1))
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


def test_check__off(box: WeComSandbox, settings: Any) -> None:
    settings.OPS_STATISTICS_CHECK = False
    run_step(next_night(box))
    assert not StatisticsCheck.objects.exists()


def test_tolerance__the_larger_of_the_absolute_and_the_relative(settings: Any) -> None:
    settings.OPS_STATISTICS_TOLERANCE = 2
    settings.OPS_STATISTICS_TOLERANCE_RATIO = 0.01
    assert conf.statistics_tolerance(100, 101) == 2
    assert conf.statistics_tolerance(1000, 950) == 10
