"""Buckets as ``RateBucket`` rows, held with ``SELECT ... FOR UPDATE``.

Correct on PostgreSQL and MariaDB (row locks) and SQLite (its one writer at a time:
the settings open every transaction with ``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from ..models import RateBucket, sql
from .store import Held, Store


class DatabaseStore(Store):
    @contextmanager
    def hold(self, paced: Sequence[str], unlimited: Sequence[str]) -> Iterator[Held]:
        if paced:
            # Outside the transaction: on MariaDB an INSERT that finds the row takes a
            # shared lock on it, and two callers upgrading theirs to FOR UPDATE deadlock.
            RateBucket.objects.bulk_create(
                [RateBucket(name=name) for name in paced], ignore_conflicts=True
            )
        # Pauses alone are one read: in the caller's transaction, if any, without a
        # transaction or a savepoint of their own.
        with transaction.atomic() if paced else nullcontext():
            rows = []
            if paced:
                locked = RateBucket.objects.filter(name__in=paced).order_by("name")
                if connection.features.has_select_for_update:
                    locked = locked.select_for_update()
                rows = list(locked)
            # A pause is rare: a statement of its own (reminders.engine.sql) usually finds none,
            # and only a pause found is read as rows.
            if sql.any_set(RateBucket, "name", unlimited, "paused_until"):
                rows += RateBucket.objects.filter(name__in=unlimited, paused_until__isnull=False)
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
        until = timezone.now() + timedelta(seconds=seconds)
        RateBucket.objects.bulk_create([RateBucket(name=name)], ignore_conflicts=True)
        with transaction.atomic():
            row = RateBucket.objects.select_for_update().get(name=name)
            if row.paused_until is None or row.paused_until < until:
                row.paused_until = until
                row.pause_reason = reason
                row.save(update_fields=["paused_until", "pause_reason"])
            return row.paused_until
