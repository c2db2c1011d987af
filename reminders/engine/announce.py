"""Telling the CRM what people did with their cards: ``signals.run_acted``, once per
action, from a scheduler's tick.

The callback records an action and answers WeCom at once (``intake.clicks``); the CRM's
receivers run here instead, so they never hold up WeCom's request nor make it retry.
An action is told after the transaction that recorded it committed (a scheduler only
sees committed rows), and once: each is claimed under a row lock, skipped by other
schedulers where the database can skip locked rows, and marked told in the same
transaction as its claim. A receiver's error is logged, never raised here (the signals'
rule): an action is told once whatever its receivers make of it. An action recorded
while no scheduler ran is told by the next one: late, never lost.
Also forgets the callback's nonces once their timestamps are outside the window the
callback accepts: a replay of one is refused by its timestamp by then.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from .. import signals
from ..conf import settings as conf
from ..models import CallbackNonce, RunAction, TaskRun

logger = logging.getLogger(__name__)

BATCH = 100


def announce(now: datetime | None = None) -> int:
    """Send ``run_acted`` for the actions not told yet (up to ``BATCH``); returns how
    many were told. Safe in any number of schedulers at once."""
    now = now or timezone.now()
    with transaction.atomic():
        pending = RunAction.objects.filter(announced_at__isnull=True).order_by("received_at")
        if connection.features.has_select_for_update_skip_locked:
            pending = pending.select_for_update(skip_locked=True)
        else:
            pending = pending.select_for_update()
        # Only the actions' rows are locked: the runs and tasks they name are the
        # planner's and delivery's to lock, and are read apart.
        claimed = list(pending.values_list("pk", flat=True)[:BATCH])
        if claimed:
            RunAction.objects.filter(pk__in=claimed).update(announced_at=now)
        actions = list(
            RunAction.objects.filter(pk__in=claimed)
            .select_related("run", "run__task")
            .order_by("received_at")
        )
        for action in actions:
            signals.after_commit(
                signals.run_acted,
                TaskRun,
                run=action.run,
                action=action.action,
                member=action.member,
                acted_at=action.acted_at,
            )
    forget_nonces(now)
    return len(actions)


def forget_nonces(now: datetime) -> int:
    """Delete the nonces whose requests the callback would refuse by their age anyway."""
    window = timedelta(seconds=conf.CALLBACK_MAX_SKEW_SECONDS)
    old = CallbackNonce.objects.filter(received_at__lt=now - 2 * window)
    # A read first: a tick with nothing to forget takes no write lock (one writer at a
    # time on SQLite, where the workers' recording must not wait for it).
    if not old.exists():
        return 0
    deleted, _ = old.delete()
    return deleted
