"""A job and what it holds: the runs it started, each with its message and its ledger
row (``Job``), its time and its lease (``Budget``), and putting started runs back in
line (``defer``, ``wait``).

Invariants:

* A run is started only by the holder of the claim's token, and starting it swaps that
  token for a fresh one (``reminders.engine.starting``). Every later write to the run
  is guarded by that token, so a redelivered job, a stale one from an earlier claim, or
  a worker whose lease ran out and was taken over changes nothing: ``wait`` puts back
  only runs still under it, and ``held`` names them, their rows locked meanwhile.
* A run put back in line waits without spending an attempt.
* A key not sent says what went: a text sent in parts whose later part failed is
  ``partly_sent``, naming the parts delivered (``Job.unsent_status``), never
  ``failed``; its next attempt sends only the parts missing (``Message.sent_parts``).
* A job stops taking new sends when its time is nearly up and hands the rest back, and
  renews its lease while it makes progress (``Budget``).

Every module of a job logs under one name, ``reminders.engine.delivery`` (``logger``
here), as it did when they were all that module.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property

from django.db import connection
from django.db.models import Case, F, PositiveSmallIntegerField, Value, When
from django.utils import timezone

from ..conf import settings as conf
from ..exceptions import SendError
from ..messages import digests as digest_wording
from ..models import Priority, SendLog, TaskRun
from ..senders import BaseSender, Message, SendResult

logger = logging.getLogger("reminders.engine.delivery")

# How long a run waits when its key or its day is in another run's hands right now.
BUSY_WAIT_SECONDS = 5.0


@dataclass
class Job:
    """One started run, the message it is to send, and its ledger row.

    ``ledger`` is unsaved for a key never tried (``fresh``); otherwise it is the row as
    read, whose status and owner (``owner``: the run it belonged to) the reservation
    expects. ``in_doubt`` when an earlier attempt may have delivered this very body.
    """

    run: TaskRun
    ledger: SendLog
    fresh: bool = True
    owner: int | None = None
    in_doubt: bool = False
    sender: BaseSender | None = None  # None if the channel is not configured
    prepared: bool = False  # the sender is ready to send at once
    # What its send came to, once the sender answered: the truth to write even when
    # the database was away at the time (``job_outage``).
    outcome: SendResult | SendError | None = None

    @property
    def channel(self) -> str:
        return self.ledger.channel

    @cached_property
    def message(self) -> Message:
        row = self.ledger
        return Message.from_rendered(row.recipient, row.body, row.key, row.parts_sent or ())

    @property
    def parts_sent(self) -> list[str] | None:
        """Of a text sent in parts, the message ids of the parts delivered so far, in
        order: those named by the error its send ended with (``delivered_parts``), else
        those its ledger row named; None when no part went."""
        if isinstance(self.outcome, SendError) and self.outcome.delivered_parts:
            return list(self.outcome.delivered_parts)
        return self.ledger.parts_sent or None

    def unsent_status(self, doubt: bool) -> str:
        """What its key says when this attempt did not end ``sent``: ``unknown`` if it
        may have been delivered (``doubt``), ``partly_sent`` if some of its parts were,
        else ``failed``."""
        if doubt:
            return SendLog.Status.UNKNOWN
        return SendLog.Status.PARTLY_SENT if self.parts_sent else SendLog.Status.FAILED

    @property
    def priority(self) -> str:
        """The run's priority by name (``high``, ``normal``, ``low``)."""
        return Priority.from_rank(self.run.priority)

    @property
    def scope(self) -> str:
        return self.sender.rate_scope if self.sender else self.channel


def worker_id() -> str:
    return f"{conf.WORKER_ID}:{os.getpid()}"


@dataclass
class Budget:
    """How long one job may go on starting sends, and its runs' lease.

    django-q2 kills a job at ``Q_CLUSTER['timeout']``; a job stops starting batches
    ``margin`` before that, and hands what is left back. The lease (``start`` stamps it)
    is renewed whenever less than ``margin`` of it is left, so that the runs a job
    still holds are never claimed by another worker while it makes progress. With the
    timeout below the lease (``reminders.E008``) the first limit is the one that bites.
    """

    ends: float  # monotonic
    lease_until: float  # monotonic
    margin: float

    @classmethod
    def begin(cls) -> Budget:
        now = time.monotonic()
        lease = float(conf.LEASE_SECONDS)
        limit = conf.JOB_TIMEOUT or math.inf
        return cls(now + limit, now + lease, margin=0.2 * min(lease, limit))

    def nearly_up(self) -> bool:
        return time.monotonic() > self.ends - self.margin

    def renew(self, jobs: Sequence[Job]) -> None:
        now = time.monotonic()
        if not jobs or self.lease_until - now > self.margin:
            return
        until = timezone.now() + timedelta(seconds=conf.LEASE_SECONDS)
        token = jobs[0].run.lease_token
        TaskRun.objects.filter(pk__in=[job.run.pk for job in jobs], lease_token=token).update(
            lease_expires_at=until
        )
        self.lease_until = now + conf.LEASE_SECONDS


def defer(
    items: Sequence[tuple[Job, float]],
    code: str = "rate_limited",
    message: str = "Waiting for the channel's rate limit.",
) -> None:
    """Put runs that were started but not sent back in line, the attempt not spent."""
    if not items:
        return
    until = datetime.fromtimestamp(min(at for _, at in items), tz=UTC)
    wait([job.run for job, _ in items], until, code, message)
    logger.info("deferred %d runs until %s (%s)", len(items), until.isoformat(), code)


def wait(runs: Sequence[TaskRun], until: datetime, code: str, message: str) -> None:
    """Started runs go back to waiting until ``until`` without spending their attempt;
    only while this worker still holds them."""
    TaskRun.objects.filter(
        pk__in=[run.pk for run in runs], lease_token__in={run.lease_token for run in runs}
    ).update(
        status=Case(
            When(attempts__lte=1, then=Value(TaskRun.Status.SCHEDULED)),
            default=Value(TaskRun.Status.RETRYING),
        ),
        attempts=Case(
            When(attempts__gt=0, then=F("attempts") - 1),
            default=F("attempts"),
            output_field=PositiveSmallIntegerField(),
        ),
        next_attempt_at=until,
        error_code=code,
        error_message=message,
        lease_owner="",
        lease_token="",
        lease_expires_at=None,
    )


def held(jobs: Sequence[Job]) -> list[Job]:
    """The jobs whose run this worker still holds, their rows locked until the
    transaction ends (where the database locks rows), so that no claim takes one over
    while its ledger row is changed: a stale holder never touches the key of the run's
    new holder, which may be sending it right now."""
    tokens = {job.run.lease_token for job in jobs}
    rows = TaskRun.objects.filter(pk__in=[job.run.pk for job in jobs], lease_token__in=tokens)
    if connection.features.has_select_for_update:
        rows = rows.select_for_update()
    ours = set(rows.values_list("pk", flat=True))
    return [job for job in jobs if job.run.pk in ours]


def tried(jobs: Sequence[Job]) -> set[int]:
    """The tasks a job tried, to stamp at its end (``TaskQuerySet.ran``): its runs', and
    its digests' items' (``digest_ends.settle_sent`` ends those sent with their digest's
    record and leaves their tasks to this one statement)."""
    return {
        task for job in jobs for task in (job.run.task_id, *digest_wording.item_tasks(job.run.task))
    }
