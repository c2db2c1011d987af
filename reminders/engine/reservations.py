"""A message's ledger key: reserved right before its send, and the reservation undone
when the message is not sent after all.

Invariants:

* A message's ledger key is reserved (``sending``) and committed just before its send,
  so a crash leaves at most the message in hand in doubt. Where the provider drops an
  identical body sent again, a batch of keys is reserved at once (and recorded at once,
  ``reminders.engine.records``): a crash then leaves the batch in doubt, and the
  re-send (``reminders.engine.retries``) settles it.
* A key belongs to one run at a time. A fresh key is inserted, and a unique key makes a
  second insert fail; a known row is taken only as it was read (its status and its
  owner), so two runs never both take one key, and never once recalled (a message
  partly sent whose parts delivered were taken back: ``engine.recall``). A key another
  run took meanwhile makes its run wait, and the others still go.
* A stale holder writes nothing the new holder owns: the ledger rows a job hands back
  change only while its run is still held under its lease (``held``: the run's row
  locked meanwhile). A key handed back is dropped if it was fresh, else ``failed``
  again, ``unknown`` if an earlier attempt may have delivered it, or ``partly_sent`` if
  parts of it went.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from ..models import SendLog, sql
from .jobs import Job, held


def reserve(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """Mark the jobs' keys ``sending`` and commit, right before their sends; returns
    the jobs whose key is now theirs, in order, and those whose key another run took
    meanwhile (they wait and are decided again)."""
    try:
        with transaction.atomic():
            return take_keys(jobs)
    except IntegrityError:
        return take_keys_one_by_one(jobs)


def take_keys_one_by_one(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``reserve`` once a key of the jobs proved taken by another run (a schedule moved
    within its day): each key on its own, so that the others still go."""
    lost = {job.run.pk for job in jobs if job.fresh and not _insert(job)}
    lost.update(job.run.pk for job in jobs if not job.fresh and not _mark_sending(job))
    return _split(jobs, lost)


def take_keys(jobs: Sequence[Job]) -> tuple[list[Job], list[Job]]:
    """``reserve`` in the caller's transaction: the fresh keys in one INSERT, which
    raises ``IntegrityError`` if another run took one meanwhile (the caller rolls back),
    then the known rows, each only as it was read."""
    sql.insert(fresh_rows(jobs))
    lost = {job.run.pk for job in jobs if not job.fresh and not _mark_sending(job)}
    return _split(jobs, lost)


def fresh_rows(jobs: Sequence[Job]) -> list[SendLog]:
    """The ledger rows of ``jobs``' keys never tried, as their first attempt inserts them."""
    fresh = [job.ledger for job in jobs if job.fresh]
    for row in fresh:
        row.attempts = 1
    return fresh


def _split(jobs: Sequence[Job], lost: set[int]) -> tuple[list[Job], list[Job]]:
    return (
        [job for job in jobs if job.run.pk not in lost],
        [job for job in jobs if job.run.pk in lost],
    )


def _insert(job: Job) -> bool:
    try:
        with transaction.atomic():
            job.ledger.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _mark_sending(job: Job) -> bool:
    """Take a known row for this send: only as it was read (status and owner), so two
    runs never both take one key. It passes to this run with the body it sends."""
    row = job.ledger
    return bool(
        SendLog.objects.filter(
            pk=row.pk, status=row.status, run_id=job.owner, recalled_at__isnull=True
        ).update(
            status=SendLog.Status.SENDING,
            run=job.run,
            task=job.run.task,
            recipient=row.recipient,
            channel=row.channel,
            body=row.body,
            attempts=F("attempts") + 1,
            updated_at=timezone.now(),
        )
    )


def hand_back(jobs: Sequence[Job], deferred: list[tuple[Job, float]], until: float) -> None:
    """Undo the reservation of keys that will not be sent now; their runs wait for a
    later claim. A fresh key is dropped; a known one is ``failed`` again, or
    ``unknown`` if an earlier attempt may have delivered it."""
    if not jobs:
        return
    with transaction.atomic():
        ours = held(jobs)
        fresh = [job.ledger for job in ours if job.fresh]
        known_pks(fresh)
        SendLog.objects.filter(
            pk__in=[row.pk for row in fresh], status=SendLog.Status.SENDING
        ).delete()
        for job in ours:
            if not job.fresh:
                SendLog.objects.filter(pk=job.ledger.pk, status=SendLog.Status.SENDING).update(
                    status=job.unsent_status(job.in_doubt), attempts=F("attempts") - 1
                )
    deferred.extend((job, until) for job in jobs)


def unreserve(jobs: Sequence[Job]) -> None:
    """Undo the jobs' key reservations, those that reached the database: a fresh key is
    dropped, a known one is ``failed`` again (``unknown`` if an earlier attempt may have
    delivered it, ``partly_sent`` if parts of it went, this attempt's too: a throttled
    later part). Only rows this very run reserved (``sending`` in its name)."""
    for job in jobs:
        row = SendLog.objects.filter(key=job.ledger.key, run=job.run, status=SendLog.Status.SENDING)
        if job.fresh and not job.parts_sent:
            row.delete()
        else:
            status = job.unsent_status(job.in_doubt)
            row.update(status=status, parts_sent=job.parts_sent, attempts=F("attempts") - 1)


def known_pks(rows: list[SendLog]) -> None:
    """Where ``bulk_create`` could not return primary keys, read them by key."""
    missing = {row.key: row for row in rows if row.pk is None}
    if missing:
        for key, pk in SendLog.objects.filter(key__in=missing).values_list("key", "pk"):
            missing[key].pk = pk
