"""A click on a card, as the callback reads it, applied to the run the card was for.

The click is WeCom's word, already authenticated and decrypted by the view; here it is
checked against our rows and acted on, in one transaction with the callback's nonce, so
a request refused or rolled back leaves nothing behind and WeCom may send it again.

A card whose ``task_id`` names no run but starts with a prefix another app registered
(``card_owners``: ops' alert cards) is answered by that app, in the same transaction
with the nonce; what it refuses as unknown or not the member's keeps nothing, as here.

Invariants:

* A click acts on a run that was sent to the member who clicked, only: the card's
  ``task_id`` names the run (``models.acting.card_id``), and the member the card went
  to (its ledger row's recipient, whatever the task names now) must be the clicking
  member, their ids compared whatever their case, as WeCom compares them. Anything else
  is refused with nothing changed, the request's nonce included: WeCom's retry of a
  refused request (a click on a card whose run is recorded sent only later) is judged
  again, never a replay.
* A click on a card recalled (``engine.recall``) is refused with nothing changed: made
  before the recall, it may reach us after it (WeCom's retry), and a snooze it made
  would bring the recalled message back. The click reads the recall under its send
  log's row lock (after the run's), which a recall's mark holds: of a click and a
  recall at once, the second sees the first, and the recall cancels the click's snooze
  or the click is refused.
* One action per run (``RunAction``, unique in the database): the first click acts, and
  every later one (WeCom's retries, a double click, another button afterwards) changes
  nothing and is answered as done, so WeCom stops retrying.
* An inquiry's alerts are the ``inquiry_timeout`` task keyed ``<key>`` and its
  escalation, keyed ``<key>:escalation`` (``occasions.inquiry_keys``), with every copy
  a snooze made; a click on a card of another kind does none of what follows for them.
  ``done`` and ``take`` on any of them cancel what the action makes moot: the
  escalation, whose runs not yet started are cancelled, and the reminders the alerts'
  snoozes made, not started yet (a take on the escalation ends the first alert's
  snooze). A later ``api.schedule_inquiry_timeout`` does not plan that escalation again
  unless the CRM says so (``reopen``; ``ended_by_a_click``).
  ``take`` also tells the inquiry's owner (``payload["owner"]``, else the member an
  escalation came from), unless the owner is the one who took it: a one-off of kind
  ``inquiry_taken`` keyed by the run, so that it is made once.
  ``snooze_1h`` makes a run of the same message an hour after the click, at the end of
  its recipient's quiet hours if that is inside them (``actions.snooze``); none for a
  task paused, cancelled or in error (``actions.stopped_refusal``), whose card says so.
* "I'll take it" holds the whole inquiry: once someone took it on, a built-in click on
  any other of its alerts does nothing; it is kept (one per run still) with ``held_by``
  naming who has it, not told to the CRM, and its card reads "Taken by bob". Two takes
  on two alerts at once act one after the other: a click on an inquiry locks its
  tasks' rows first (then the run's, the planner's order), and the second is held.
* A built-in action that came with WeCom's response code leaves the card to update
  (``card_state`` pending): a scheduler does it (``engine.cards``), not this request.
* The CRM hears of the action through ``signals.run_acted``, sent by a scheduler once
  this has committed (``engine.announce``), never within WeCom's request, so the
  callback answers within WeCom's time limit whatever the CRM's receivers do.
* Every click kept wakes the schedulers once this commits (``engine.wake``, on
  PostgreSQL): there a scheduler looks for actions and cards only at a tick a
  notification woke, or every few seconds (``engine.worker.CLICKS_SECONDS``);
  elsewhere at every tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..callback.events import TemplateCardEvent
from ..engine import actions, cards, wake
from ..models import CallbackNonce, RunAction, ScheduledTask, SendLog, TaskRun
from ..models.acting import DONE, SNOOZE, TAKE, card_id, run_pk
from . import card_owners, scheduling
from .card_owners import Outcome
from .occasions import TAKEN_KIND, escalation_key, inquiry_keys

logger = logging.getLogger(__name__)

SNOOZE_FOR = timedelta(hours=1)
# The buttons whose clicks the engine acts on (and whose cards it updates).
BUILT_IN = (DONE, TAKE, SNOOZE)


# What is refused with nothing kept, the request's nonce included.
REFUSED = (Outcome.UNKNOWN_RUN, Outcome.NOT_RECIPIENT, Outcome.RECALLED)


@dataclass(frozen=True)
class Applied:
    outcome: Outcome
    action: RunAction | None = None


def apply(event: TemplateCardEvent, *, nonce: str, timestamp: int) -> Applied:
    """Record the request's nonce and act on ``event``, in one transaction. The nonce is
    kept with the click it came with, acted on or not (the same request again is a
    replay); a click refused (an unknown card, another member, a card recalled) and an
    error roll both back, so that WeCom may send the request again."""
    with transaction.atomic():
        if not CallbackNonce.objects.spend(nonce, timestamp):
            return Applied(Outcome.REPLAYED)
        owner = card_owners.owner_of(event.task_id) if run_pk(event.task_id) is None else None
        if owner is not None:
            applied = Applied(owner(event, timezone.now()))
        else:
            run = _sent_run(event.task_id)
            applied = (
                _act(run, event)
                if run is not None and _sent_to(run, event.from_user_name)
                else Applied(Outcome.UNKNOWN_RUN if run is None else Outcome.NOT_RECIPIENT)
            )
        if applied.outcome in REFUSED:
            # Nothing is kept, the nonce neither: WeCom's retry of it is no replay.
            transaction.set_rollback(True)
        else:
            # What it left to announce or a card to update (an owner's keeps even a
            # second click, its card saying so) waits for no tick.
            wake.notify()
        return applied


def _sent_run(task_id: str) -> TaskRun | None:
    """The sent run whose card has ``task_id``, if any."""
    pk = run_pk(task_id)
    if pk is None:
        return None
    run = TaskRun.objects.select_related("task").filter(pk=pk, status=TaskRun.Status.SENT).first()
    return run if run is not None and card_id(run) == task_id else None


def _sent_to(run: TaskRun, member: str) -> bool:
    """Whether ``run``'s card went to ``member``: its ledger row's recipient, whatever
    the task says now, compared whatever their case, as WeCom compares member ids."""
    _, recipient = cards.delivery(run)
    return recipient.casefold() == member.casefold()


def _act(run: TaskRun, event: TemplateCardEvent) -> Applied:
    now = timezone.now()
    keys = inquiry_keys(run.task.kind, run.task.key)
    if keys is not None:
        # The inquiry's lock, before the run's (the planner's order, tasks then runs):
        # two takes on two of its alerts act one after the other, the second held.
        list(ScheduledTask.objects.select_for_update().filter(key__in=keys).order_by("pk"))
    # The run's row lock: two clicks racing on one run act once.
    TaskRun.objects.select_for_update().filter(pk=run.pk).exists()
    done = RunAction.objects.filter(run=run).first()
    if done is not None:
        return Applied(Outcome.ALREADY, done)
    if _recalled(run):
        return Applied(Outcome.RECALLED)
    action = RunAction(
        run=run,
        action=event.event_key,
        member=event.from_user_name,
        acted_at=_clicked_at(event, now),
        response_code=event.response_code,
    )
    if event.event_key in BUILT_IN and action.response_code:
        action.card_state = RunAction.CardState.PENDING
    try:
        with transaction.atomic():
            _do(action, keys, now)
            action.save()
    except IntegrityError:  # a click on this run committed first, where rows lock not
        return Applied(Outcome.ALREADY, RunAction.objects.filter(run=run).first())
    return Applied(Outcome.ACTED, action)


def _do(action: RunAction, keys: tuple[str, str] | None, now: datetime) -> None:
    """What ``action`` (not saved yet) does: nothing, held, where someone took its
    inquiry on already; else what its button does."""
    run, key, member = action.run, action.action, action.member
    holder = _holder(keys) if keys is not None and key in BUILT_IN else None
    if holder is not None:
        action.held_by = holder.member
        action.announced_at = now  # nothing happened: nothing to tell the CRM
        return
    if key in (DONE, TAKE) and keys is not None:
        _end_inquiry(keys)
    if key == TAKE:
        _tell_owner(run, member, now)
    elif key == SNOOZE and actions.stopped_refusal(run.task) is None:
        action.follow_up = actions.snooze(run, now + SNOOZE_FOR, by=member)


def _recalled(run: TaskRun) -> bool:
    """Whether ``run``'s card was recalled, read under its send log's row lock, which a
    recall's mark holds until it commits (``engine.recall``): of a recall and a click at
    once, the second sees the first. The rows are locked by run, not by ``recalled_at``:
    PostgreSQL waits only for a row its snapshot finds by the query's filter."""
    rows = SendLog.objects.select_for_update().filter(run_id=run.pk)
    return any(at is not None for at in rows.values_list("recalled_at", flat=True))


def _clicked_at(event: TemplateCardEvent, now: datetime) -> datetime:
    """When the member clicked, as WeCom says, unless that is in the future."""
    return min(event.created_at, now)


def _holder(keys: tuple[str, str]) -> RunAction | None:
    """The take that holds the inquiry of ``keys``, if someone took it on."""
    taken = RunAction.objects.filter(run__task__key__in=keys, action=TAKE, held_by="")
    return taken.order_by("received_at", "pk").first()


def _end_inquiry(keys: tuple[str, str]) -> None:
    """Done or taken on: what the inquiry's alerts would still send is cancelled, its
    escalation (with its runs not yet started, even one the planner made already; a
    one-off is cancelled whether its run waits or it has ``completed``, as
    ``api.cancel_for`` does) and the reminders that snoozes of its alerts made."""
    _, escalated = keys
    escalations = ScheduledTask.objects.filter(key=escalated).exclude(
        status=ScheduledTask.Status.CANCELLED
    )
    for escalation in escalations:
        actions.cancel(escalation)
    snoozed = RunAction.objects.filter(run__task__key__in=keys, follow_up__isnull=False)
    TaskRun.objects.filter(pk__in=snoozed.values("follow_up")).cancel_pending()


def ended_by_a_click(first_key: str) -> bool:
    """Whether someone marked the inquiry of ``first_key`` done or took it on, which
    cancelled its escalation (``api.schedule_inquiry_timeout`` plans it again only when
    told to)."""
    keys = (first_key, escalation_key(first_key))
    acted = RunAction.objects.filter(run__task__key__in=keys, action__in=(DONE, TAKE))
    return acted.filter(held_by="").exists()


def _tell_owner(run: TaskRun, taker: str, now: datetime) -> ScheduledTask | None:
    """A one-off ``inquiry_taken`` to the inquiry's owner saying ``taker`` took it on:
    ``payload["owner"]``, else the member an escalation came from; none when that is
    the taker, or the inquiry names no owner. Keyed by the run: made once."""
    task = run.task
    payload = task.payload if isinstance(task.payload, dict) else {}
    owner = payload.get("owner") or payload.get("escalated_from")
    if not isinstance(owner, str) or not owner or owner == taker:
        return None
    told = {
        name: payload[name] for name in ("customer", "subject", "url", "lang") if name in payload
    }
    item = {
        "kind": TAKEN_KIND,
        "recipient": owner,
        "at": now,
        "payload": {**told, "taken_by": taker},
        "key": f"taken:{run.pk}",
        "channel": task.channel,
        "tz": task.timezone,
    }
    try:
        with transaction.atomic():
            [notice] = scheduling.schedule_all([item]).tasks
    except ValidationError as exc:
        # The take stands; only the notice cannot be made (an owner who is no member id).
        logger.warning("run %s taken by %s; its owner %r not told: %s", run.pk, taker, owner, exc)
        return None
    return notice
