"""Buckets as ``RateBucket`` rows, held with ``SELECT ... FOR UPDATE``.

Correct on PostgreSQL and MariaDB (row locks) and SQLite (its one writer at a time:
the settings open every transaction with ``BEGIN IMMEDIATE``).

A paced bucket's row is made once per process (``INSERT`` that ignores one there), not
before every reservation; one deleted by hand since is made again. An unlimited bucket
only carries pauses. A read that finds it not paused is trusted by
this process for ``PAUSES_FRESH_SECONDS``: a message's reservation on an unlimited
channel then costs no statement for it, and a pause set by another process reaches this
one's sends within that time (those sent meanwhile are refused by the provider as the
one that paused it was, and wait without spending an attempt). A pause this process sets,
and one found, are never trusted away: the next reservation reads the bucket again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from ..models import RateBucket, sql
from .store import Held, Store

# How long a read that found an unlimited bucket not paused is trusted, in this process.
PAUSES_FRESH_SECONDS = 1.0
# Unlimited bucket name -> until when (``time.monotonic``) it is known not paused.
_clear_until: dict[str, float] = {}
# Paced buckets this process made or found: not asked to be made again.
_made: set[str] = set()


def forget() -> None:
    """Read every bucket afresh at the next reservation: its pause, and whether it is
    there."""
    _clear_until.clear()
    _made.clear()


class _Gone(Exception):
    """A paced bucket this process made is not there any more (deleted by hand)."""


class DatabaseStore(Store):
    @contextmanager
    def hold(self, paced: Sequence[str], unlimited: Sequence[str]) -> Iterator[Held]:
        for again in (False, True):
            if paced and (again or not _made.issuperset(paced)):
                # Outside the transaction: on MariaDB an INSERT that finds the row takes a
                # shared lock on it, and two callers upgrading theirs to FOR UPDATE
                # deadlock. Once per bucket and process: they are never deleted.
                RateBucket.objects.bulk_create(
                    [RateBucket(name=name) for name in paced], ignore_conflicts=True
                )
                _made.update(paced)
            try:
                with self._held(paced, unlimited) as held:
                    yield held
                return
            except _Gone:
                _made.difference_update(paced)
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def _held(self, paced: Sequence[str], unlimited: Sequence[str]) -> Iterator[Held]:
        # Pauses alone are one read: in the caller's transaction, if any, without a
        # transaction or a savepoint of their own.
        with transaction.atomic() if paced else nullcontext():
            rows = []
            if paced:
                locked = RateBucket.objects.filter(name__in=paced).order_by("name")
                if connection.features.has_select_for_update:
                    locked = locked.select_for_update()
                rows = list(locked)
                if len(rows) < len(set(paced)):
                    raise _Gone
            # A pause is rare: a statement of its own (reminders.models.sql) usually finds
            # none, and only a pause found is read as rows; buckets found not paused lately
            # are not read again yet.
            now = time.monotonic()
            stale = [name for name in unlimited if _clear_until.get(name, 0.0) <= now]
            if sql.any_set(RateBucket, "name", stale, "paused_until"):
                rows += RateBucket.objects.filter(name__in=stale, paused_until__isnull=False)
            else:
                _clear_until.update(dict.fromkeys(stale, now + PAUSES_FRESH_SECONDS))
            pks = {row.name: row.pk for row in rows}
            held = Held(
                tat={row.name: row.tat for row in rows if row.name in paced},
                paused={row.name: row.paused_until.timestamp() for row in rows if row.paused_until},
            )
            yield held
            # One UPDATE per new value: a batch's fresh recipients all move to the same one.
            # By primary key: on a small table MariaDB may scan for a name list, waiting on
            # rows other callers hold, which deadlocks.
            moved: dict[float, list[int]] = {}
            for name, value in held.changed.items():
                moved.setdefault(value, []).append(pks[name])
            for value, ids in moved.items():
                RateBucket.objects.filter(pk__in=ids).update(tat=value)

    def pause(self, name: str, seconds: float, reason: str) -> datetime:
        _clear_until.pop(name, None)
        until = timezone.now() + timedelta(seconds=seconds)
        RateBucket.objects.bulk_create([RateBucket(name=name)], ignore_conflicts=True)
        with transaction.atomic():
            row = RateBucket.objects.select_for_update().get(name=name)
            if row.paused_until is None or row.paused_until < until:
                row.paused_until = until
                row.pause_reason = reason
                row.save(update_fields=["paused_until", "pause_reason"])
            return row.paused_until
