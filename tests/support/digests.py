"""Digests at frozen times, for the tests of the engine, the admin and ops: the clock of
a Shanghai Thursday, one tick of the engine at a given moment (planning, claiming,
delivering, and the digests that ended settling their runs), a follow-up with a link,
and the moment a recipient's digest of a window goes."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.test import TestCase

from reminders import api
from reminders.engine import digest_ends, dispatch
from reminders.models import ScheduledTask
from reminders.schedule import timing
from reminders.schedule.policies import Policy
from tests.support.jobs import run_queued

SHANGHAI = ZoneInfo("Asia/Shanghai")
TZ = "Asia/Shanghai"
THURSDAY = date(2026, 12, 3)


def at(day: date, hour: int, minute: int = 0, second: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=SHANGHAI)


def tick_at(now: datetime) -> int:
    """A scheduler's tick at ``now``, its jobs run at once; how many messages went."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 100, now=now)
        sent = run_queued(now=now)
        digest_ends.settle_ended(now)
        return sent


def follow_up(
    recipient: str, when: datetime, customer: str, channel: str = "memory", **payload: Any
) -> ScheduledTask:
    return api.schedule(
        "follow_up",
        recipient,
        at=when,
        tz=TZ,
        channel=channel,
        payload={"customer": customer, "url": f"https://crm.example/c/{customer}", **payload},
    )


def release(
    recipient: str, end: datetime, policy: Policy | None = None, window: int = 900
) -> datetime:
    """When ``recipient``'s digest of a window of ``window`` seconds ending at ``end``
    goes: staggered as the kind's ``policy`` staggers, or, for a kind with no jitter (the
    default policy), over a fifth of the window, at most ten minutes."""
    policy = policy or Policy()
    return end + timing.stagger(
        recipient=recipient,
        jitter_seconds=policy.jitter_seconds or min(window // 5, 600),
        batches=policy.batches,
        batch_interval_seconds=policy.batch_interval_seconds,
    )
