"""A throttle is a ceiling: a recipient's hour counts every message of the kind that may
have reached them, not only those recorded ``sent``: one being sent (its run started,
its ledger row ``sending``) and one in doubt (``unknown``, waiting to be decided) count
too, so that what another job is sending at that moment is never sent past. Every
clock is the tests'. (Two schedulers side by side: tests/integration/test_throttles.py.)
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from reminders.models import SendLog, TaskRun
from tests.support.digests import THURSDAY, at, follow_up, tick_at

pytestmark = pytest.mark.django_db


@pytest.fixture
def throttled(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"throttle_per_hour": 2, "max_lateness_seconds": 400 * 24 * 3600}
    }


def put_back(run: TaskRun, status: str, ledger: str, **fields: Any) -> None:
    """``run``, sent, as it would be mid-flight: its status and its ledger row's."""
    TaskRun.objects.filter(pk=run.pk).update(status=status, finished_at=None, **fields)
    SendLog.objects.filter(key=run.ledger_key).update(status=ledger, sent_at=None)


@pytest.mark.usefixtures("throttled")
@pytest.mark.parametrize(
    ("status", "ledger", "fields"),
    [
        # Being sent by another job: started under its lease, its key reserved.
        (
            TaskRun.Status.RUNNING,
            SendLog.Status.SENDING,
            {"lease_token": "other", "lease_owner": "w2", "lease_expires_at": at(THURSDAY, 11)},
        ),
        # In doubt: ended unknown, or waiting to be decided again.
        (TaskRun.Status.UNKNOWN, SendLog.Status.UNKNOWN, {}),
        (TaskRun.Status.RETRYING, SendLog.Status.UNKNOWN, {"next_attempt_at": at(THURSDAY, 12)}),
        (TaskRun.Status.RETRYING, SendLog.Status.SENDING, {"next_attempt_at": at(THURSDAY, 12)}),
    ],
)
def test_throttle__messages_being_sent_or_in_doubt_count_against_the_hour(
    outbox: list, status: str, ledger: str, fields: dict[str, Any]
) -> None:
    first = [follow_up("alice", at(THURSDAY, 10), f"C{n}") for n in range(2)]
    assert tick_at(at(THURSDAY, 10)) == 2
    for task in first:
        put_back(TaskRun.objects.get(task=task), status, ledger, **fields)
    later = follow_up("alice", at(THURSDAY, 10, 20), "Later")
    assert tick_at(at(THURSDAY, 10, 20)) == 0
    held = TaskRun.objects.get(task=later)
    assert (held.error_code, held.next_attempt_at) == ("throttled", at(THURSDAY, 11))
    assert len(outbox) == 2


@pytest.mark.usefixtures("throttled")
def test_throttle__a_message_that_failed_for_good_frees_its_place(outbox: list) -> None:
    first = [follow_up("alice", at(THURSDAY, 10), f"C{n}") for n in range(2)]
    assert tick_at(at(THURSDAY, 10)) == 2
    put_back(TaskRun.objects.get(task=first[0]), TaskRun.Status.FAILED, SendLog.Status.FAILED)
    follow_up("alice", at(THURSDAY, 10, 20), "Later")
    assert tick_at(at(THURSDAY, 10, 20) + timedelta(seconds=1)) == 1
