"""After a worker dies mid-job, only the message it was sending may be in doubt.

The process tests show the symptom (most ``unknown`` runs of a crash never reached the
provider); this is the same crash, step by step, in one process.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from reminders import delivery, dispatch
from reminders.models import TaskRun
from reminders.senders import get_sender
from tests.support.jobs import run_queued

pytestmark = pytest.mark.django_db(transaction=True)


def test_crash_mid_job__runs_never_attempted_are_sent_by_the_next_worker(
    make_task, outbox, settings
):
    at = timezone.now()
    tasks = [make_task(at=at) for _ in range(4)]
    dispatch.materialize()
    claim = dispatch.claim("dead-scheduler", 10)
    jobs = delivery.start(claim.token, claim.run_ids)
    assert len(jobs) == 4
    assert delivery.reserve(jobs[0])
    delivery.send(jobs[0])
    # The provider takes the second message, then the worker dies before recording it.
    assert delivery.reserve(jobs[1])
    get_sender(jobs[1].channel).send(jobs[1].message)
    in_doubt = jobs[1].run.pk
    never_attempted = {job.run.pk for job in jobs[2:]}

    after_lease = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    dispatch.claim("next-scheduler", 10, now=after_lease)
    run_queued()

    statuses = dict(TaskRun.objects.values_list("pk", "status"))
    assert statuses[in_doubt] == "unknown"
    assert {statuses[pk] for pk in never_attempted} == {"sent"}
    assert len(outbox) == len(tasks)
