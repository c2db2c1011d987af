from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from reminders import api
from reminders.models import ScheduledTask
from reminders.senders.memory import MemorySender

# The sandbox fixtures, and the check of every sandbox's ledger against ours.
pytest_plugins = ["tests.support.sandbox"]


@pytest.fixture(autouse=True)
def _clean_outbox() -> Iterator[None]:
    MemorySender.clear()
    yield
    MemorySender.clear()


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
