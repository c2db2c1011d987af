"""After a worker dies mid-job, only the message it was sending may be in doubt.

The process tests show the symptom (most ``unknown`` runs of a crash never reached the
provider); this is the same crash in one process: the sender's call never returns.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reminders.engine import delivery, dispatch
from reminders.models import SendLog, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued

pytestmark = pytest.mark.django_db(transaction=True)


class WorkerDied(BaseException):
    """What the sender's call never returns from: the process is gone."""


def test_crash_mid_job__runs_never_attempted_are_sent_by_the_next_worker(
    make_task, outbox, settings
):
    at = timezone.now()
    tasks = [make_task(at=at) for _ in range(4)]
    dispatch.materialize()
    claim = dispatch.claim("dead-scheduler", 10)
    # The first message goes; the worker dies while sending the second.
    MemorySender.script[:] = [None, WorkerDied()]
    with pytest.raises(WorkerDied):
        delivery.deliver(claim.token, claim.run_ids)
    assert len(outbox) == 1
    in_doubt = SendLog.objects.get(status="sending").run

    after_lease = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    dispatch.claim("next-scheduler", 10, now=after_lease)
    run_queued()

    statuses = dict(TaskRun.objects.values_list("pk", "status"))
    assert statuses.pop(in_doubt.pk) == "unknown"
    assert set(statuses.values()) == {"sent"}
    others = sorted(task.recipient for task in tasks if task.pk != in_doubt.task_id)
    assert sorted(message.recipient for message in outbox) == others
