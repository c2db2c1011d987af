from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from ops.alerts import StepResult, run_step
from tests.support.alert_channels import admins_setting


@pytest.fixture
def admins(settings: Any) -> None:
    """Alerts by mail to the admins only (the locmem backend keeps them in mail.outbox)."""
    settings.ADMINS = admins_setting("ops@example.com")
    settings.OPS_ALERT_CHANNELS = {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}}


@pytest.fixture
def robot(settings: Any) -> str:
    """Alerts to a group robot only: a reminders channel, the memory sender standing in
    for the robot (its messages land in MemorySender.outbox)."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "ops_robot": {"BACKEND": "reminders.senders.memory.MemorySender"},
    }
    settings.OPS_ALERT_CHANNELS = {
        "group": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": "ops_robot", "recipient": "ops"},
        }
    }
    return "ops_robot"


@pytest.fixture
def app_channels(settings: Any) -> tuple[str, ...]:
    """Beside the test settings' memory channels, a WeCom app channel ("wecom", whose
    messages spend WeCom's daily quota) and a group robot ("robot", whose do not).
    Nothing is ever sent to them: they are for what counts against the quota."""
    never = "http://127.0.0.1:9"  # the discard port: a send would fail, not reach anyone
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {"api_base": never, "corp_id": "ww-corp", "corp_secret": "s", "agent_id": 1},
        },
        "robot": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"api_base": never, "key": "robot-key"},
        },
    }
    return ("wecom",)


class Clock:
    """The alert step's clock, moved by the test."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def step(self, seconds: float = 0) -> StepResult:
        self.now += timedelta(seconds=seconds)
        return run_step(self.now)


@pytest.fixture
def clock(now: datetime) -> Clock:
    """Starts a minute ahead of the real clock, so that what the engine's signals record
    during the test (on the real clock) is in the step's past."""
    return Clock(now + timedelta(minutes=1))
