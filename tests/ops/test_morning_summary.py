"""The morning summary: from ``OPS_SUMMARY_HOUR``, once a day, yesterday's figures to
every alert channel, as a card where the channel sends cards. The day is the stats
world's (2026-03-10, Asia/Shanghai, every run's status set by hand); the clock is moved
to the next morning."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from ops.alerts import run_step
from ops.models import Alert, AlertEvent, StatisticsCheck
from reminders.models import SendLog
from reminders.senders.memory import MemorySender
from tests.ops import stats_world
from tests.ops.test_alert_cards import ops_cards
from tests.reminders.callback.test_view import callback_settings

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("callback_settings", "ops_cards")]
__all__ = ["callback_settings", "ops_cards"]

SHANGHAI = ZoneInfo("Asia/Shanghai")
MORNING = datetime(2026, 3, 11, 9, 0, 30, tzinfo=SHANGHAI)


@pytest.fixture
def yesterday(settings: Any, time_machine: Any) -> None:
    """The stats world's day, a message of it recalled, and WeCom's count of it; the
    summary at 09:00, with 2 seats."""
    settings.OPS_SUMMARY_HOUR = 9
    settings.OPS_WECOM_SEATS = 2
    settings.OPS_STATISTICS_CHECK = False
    time_machine.move_to(MORNING - timedelta(days=1), tick=False)
    world = stats_world.build(plan=False, heartbeats=False)
    run = world.runs["1"]
    SendLog.objects.create(
        key="recalled-1",
        task=run.task,
        run=run,
        recipient="alice",
        channel="memory",
        status=SendLog.Status.SENT,
        recalled_at=stats_world.local(16),
        recalled_by="alice.wang",
        recall_reason="wrong customer",
    )
    StatisticsCheck.objects.create(
        day=date(2026, 3, 10),
        corp_id="ww-corp",
        agent_id="1000002",
        app_name="CRM",
        channels="wecom",
        ours=9,
        theirs=9,
        outcome=StatisticsCheck.Outcome.MATCH,
        checked_at=stats_world.local(23),
    )


def step(at: datetime) -> int:
    return run_step(at).checked


@pytest.mark.usefixtures("yesterday")
def test_from_the_hour__yesterday_s_figures_once_a_day() -> None:
    assert step(MORNING - timedelta(minutes=1)) == 0  # 08:59
    assert step(MORNING) == 1
    assert step(MORNING + timedelta(hours=3)) == 0  # once a day, however many steps
    [event] = AlertEvent.objects.filter(type="daily_summary")
    data = event.data
    # The world's day, counted by hand (tests/ops/stats_world.py).
    assert (data["day"], data["sent"], data["failed"], data["expired"], data["unknown"]) == (
        "2026-03-10",
        7,
        2,
        1,
        1,
    )
    assert data["recalled"] == 1
    assert data["wecom"] == [{"app": "CRM", "ours": 9, "theirs": 9, "outcome": "match"}]
    assert data["quota"] == 400
    alert = Alert.objects.get(type="daily_summary")
    assert alert.title == "[reminders] Yesterday, 2026-03-10: 7 sent, 3 failed, 1 in doubt"
    assert "WeCom's count of 2026-03-10: CRM: ledger 9, WeCom 9." in alert.body
    assert "Today's forecast:" in alert.body and "of the quota's 400." in alert.body
    # The next morning, the next summary.
    assert step(MORNING + timedelta(days=1)) == 1


@pytest.mark.usefixtures("yesterday")
def test_the_card__figures_and_the_dashboard_s_link_nothing_to_click() -> None:
    step(MORNING)
    [card] = [m.body for m in MemorySender.outbox if m.recipient == "alice"]
    facts = {line["keyname"]: line["value"] for line in card["horizontal_content_list"]}
    assert facts == {
        "Sent": "7",
        "Failed": "3",
        "In doubt": "1",
        "Recalled": "1",
        "Quota": facts["Quota"],
    }
    assert facts["Quota"].endswith("/400")
    assert card["button_list"] == [
        {
            "text": "Open dashboard",
            "style": 1,
            "type": 1,
            "url": "https://crm.example/admin/ops/dashboard/",
        }
    ]
    # Each morning's summary is a card of its own, never an update of yesterday's.
    step(MORNING + timedelta(days=1))
    assert len([m for m in MemorySender.outbox if m.recipient == "alice"]) == 2
    assert not MemorySender.card_replacements


def test_no_hour__no_summary(settings: Any) -> None:
    settings.OPS_SUMMARY_HOUR = None
    assert step(timezone.now()) == 0
    assert not AlertEvent.objects.exists()


@pytest.mark.parametrize("hour", [24, -1, 9.5, "nine"])
def test_a_bad_hour__says_which_setting_and_why(settings: Any, hour: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from ops.conf import settings as conf

    settings.OPS_SUMMARY_HOUR = hour
    with pytest.raises(ImproperlyConfigured, match="OPS_SUMMARY_HOUR"):
        conf.SUMMARY_HOUR  # noqa: B018 - read to be checked
