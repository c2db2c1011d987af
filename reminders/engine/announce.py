"""Telling the CRM what people did with their cards: ``signals.run_acted``, at least
once per action, from a scheduler's tick.

The callback records an action and answers WeCom at once (``intake.clicks``); the CRM's
receivers run here instead, so they never hold up WeCom's request nor make it retry.

Invariants, and why:

* An action is told after the transaction that recorded it committed (a scheduler only
  sees committed rows), by one scheduler at a time: a claim takes it under a row lock,
  skipped by other schedulers where the database can skip locked rows, and gives it a
  lease (``announcing_at``, ``LEASE``), committed before any receiver runs, so that the
  receivers run outside any transaction of ours.
* At least once: an action is marked told (``announced_at``) only after its receivers
  ran. A scheduler that dies while telling (its host, a deploy) leaves it unmarked, and
  another tells it again once the lease is over; a receiver that takes longer than the
  lease may see it told twice. Never lost: an action recorded while no scheduler ran is
  told by the next one, late.
* A receiver's error is logged, never raised here (the signals' rule), and the action is
  marked told all the same: not retried, whatever its receivers make of it.

Also forgets the callback's nonces once their timestamps are outside the window the
callback accepts: a replay of one is refused by its timestamp by then. A request taken
at t is replayable until t + 2 windows on the web host's clock, while the nonce's age is
read on the scheduler host's: a nonce is kept a margin longer (``NONCE_CLOCK_MARGIN``),
the clock difference between hosts this tolerates. Hosts whose clocks differ by more
(no NTP) would leave a gap in which a replay is taken.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from .. import signals
from ..conf import settings as conf
from ..models import CallbackNonce, RunAction, TaskRun

logger = logging.getLogger(__name__)

BATCH = 100
# How long a scheduler has to tell a claimed batch before another may tell it again.
LEASE = timedelta(minutes=5)
# How far the scheduler's clock may differ from the web hosts' before a nonce is
# forgotten while a replay of its request could still pass the time window.
NONCE_CLOCK_MARGIN = timedelta(seconds=60)


def announce(now: datetime | None = None, *, forget: bool = True) -> int:
    """Send ``run_acted`` for the actions not told yet (up to ``BATCH``), marking each
    told once its receivers ran, then (with ``forget``) ``forget_nonces``; returns how
    many were told. Safe in any number of schedulers at once."""
    now = now or timezone.now()
    actions = _claim(now)
    for action in actions:
        signals.send(
            signals.run_acted,
            TaskRun,
            run=action.run,
            action=action.action,
            member=action.member,
            acted_at=action.acted_at,
        )
        RunAction.objects.filter(pk=action.pk, announced_at__isnull=True).update(announced_at=now)
    if forget:
        forget_nonces(now)
    return len(actions)


def _claim(now: datetime) -> list[RunAction]:
    """The actions to tell, oldest first, leased to this scheduler in a transaction of
    their own: those not told, and not leased to another within ``LEASE``."""
    untold = RunAction.objects.filter(announced_at__isnull=True).filter(
        Q(announcing_at__isnull=True) | Q(announcing_at__lt=now - LEASE)
    )
    with transaction.atomic():
        pending = untold.order_by("received_at")
        if connection.features.has_select_for_update_skip_locked:
            pending = pending.select_for_update(skip_locked=True)
        else:
            pending = pending.select_for_update()
        # Only the actions' rows are locked: the runs and tasks they name are the
        # planner's and delivery's to lock, and are read apart.
        claimed = list(pending.values_list("pk", flat=True)[:BATCH])
        if claimed:
            RunAction.objects.filter(pk__in=claimed).update(announcing_at=now)
    return list(
        RunAction.objects.filter(pk__in=claimed)
        .select_related("run", "run__task")
        .order_by("received_at")
    )


def forget_nonces(now: datetime) -> int:
    """Delete the nonces whose requests the callback would refuse by their age anyway,
    on any host whose clock is within ``NONCE_CLOCK_MARGIN`` of ours."""
    window = timedelta(seconds=conf.CALLBACK_MAX_SKEW_SECONDS)
    old = CallbackNonce.objects.filter(received_at__lt=now - 2 * window - NONCE_CLOCK_MARGIN)
    # A read first: a tick with nothing to forget takes no write lock (one writer at a
    # time on SQLite, where the workers' recording must not wait for it).
    if not old.exists():
        return 0
    deleted, _ = old.delete()
    return deleted
