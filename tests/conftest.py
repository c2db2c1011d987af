from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone, translation

from reminders import api
from reminders.models import ScheduledTask
from reminders.senders.memory import MemorySender

# The sandbox fixtures, the check of every sandbox's ledger against ours, and the
# suite's clock (TEST_CLOCK moves it; a test that starts a process is marked so).
pytest_plugins = ["tests.support.sandbox", "tests.support.clock"]


@pytest.fixture(autouse=True)
def _clean_outbox() -> Iterator[None]:
    MemorySender.clear()
    yield
    MemorySender.clear()


@pytest.fixture(autouse=True)
def _calendar_entries_read_afresh() -> Iterator[None]:
    """Ops calendar entries are kept per process for a while; a test's rolled-back
    rows must not outlive it."""
    from reminders.calendars import days as calendar_days

    calendar_days.forget()
    yield
    calendar_days.forget()


@pytest.fixture(autouse=True)
def _rate_buckets_read_afresh() -> Iterator[None]:
    """Buckets found there, and unlimited ones found not paused, are trusted per process
    for a while; a test's rolled-back rows must not outlive it."""
    from reminders.ratelimit import database

    database.forget()
    yield
    database.forget()


@pytest.fixture(autouse=True)
def _language_of_the_settings() -> Iterator[None]:
    """A request in another language (``Accept-Language``) leaves it active in the
    thread, as LocaleMiddleware does: every test starts and ends in LANGUAGE_CODE."""
    translation.deactivate()
    yield
    translation.deactivate()


@pytest.fixture
def outbox() -> list:
    return MemorySender.outbox


@pytest.fixture
def make_task(db: None) -> Callable[..., ScheduledTask]:
    """Factory: a task through the public API; a one-shot due now unless told otherwise."""
    counter = iter(range(1, 1_000_000))

    def make(kind: str = "follow_up", recipient: str | None = None, **kwargs: Any) -> ScheduledTask:
        if "cron" not in kwargs and "at" not in kwargs:
            kwargs["at"] = timezone.now()
        return api.schedule(kind, recipient or f"user{next(counter)}", **kwargs)

    return make


@pytest.fixture
def now() -> datetime:
    return timezone.now()


@pytest.fixture
def received() -> Iterator[list[tuple[str, int, str]]]:
    """What the engine told ops: its signals as (name, run or task pk, status then)."""
    from reminders import signals

    seen: list[tuple[str, int, str]] = []
    handlers = {}
    for name in (
        "run_sent",
        "run_failed",
        "run_unknown",
        "run_expired",
        "run_stuck",
        "task_error",
    ):

        def handler(sender: Any, name: str = name, **kwargs: Any) -> None:
            subject = kwargs.get("run") or kwargs["task"]
            seen.append((name, subject.pk, subject.status))

        handlers[name] = handler
        getattr(signals, name).connect(handler, weak=False)
    yield seen
    for name, handler in handlers.items():
        getattr(signals, name).disconnect(handler)


@pytest.fixture
def carrier_channels(settings: Any) -> None:
    """Channels with limits of their own, beside the test settings' ones. Nothing here
    is ever sent: they are for checks made when a task is scheduled."""
    never = "http://127.0.0.1:9"  # the discard port: a send would fail, not reach anyone
    wecom = {"api_base": never, "corp_id": "ww-corp", "corp_secret": "s", "agent_id": 1}
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender", "OPTIONS": wecom},
        "wecom_split": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {**wecom, "oversize": "split"},
        },
        "robot": {
            "BACKEND": "reminders.senders.robot.WeComRobotSender",
            "OPTIONS": {"api_base": never, "key": "robot-key"},
        },
        # A gateway that sends text messages to mainland mobile numbers.
        "sms": {
            "BACKEND": "reminders.senders.http.HttpSender",
            "OPTIONS": {"url": never, "recipient_pattern": r"1[3-9][0-9]{9}"},
        },
    }


@pytest.fixture
def reports_every_day(settings: Any) -> None:
    """The report kinds without their working-day calendar: for tests of something else
    that schedule reports on the real clock, which may fall on a weekend, a holiday or a
    year the calendar does not cover yet."""
    settings.REMINDERS_KINDS = {
        "daily_report": {"calendar": ""},
        "weekly_report": {"calendar": ""},
    }


@pytest.fixture
def paced_channel(settings: Any) -> str:
    """A memory channel paced at 20 a second, one at a time, whose runs wait at most
    0.2 s for a slot: what the rate-limit tests send through."""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "paced": {
            "BACKEND": "reminders.senders.memory.MemorySender",
            "OPTIONS": {"rate_limit": 20, "rate_burst": 1},
        },
    }
    settings.REMINDERS_RATE_MAX_WAIT = 0.2
    return "paced"
