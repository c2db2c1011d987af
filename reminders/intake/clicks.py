"""A click on a card, as the callback reads it, applied to the run the card was for.

The click is WeCom's word, already authenticated and decrypted by the view; here it is
checked against our rows and acted on, in one transaction with the callback's nonce, so
a request refused or rolled back leaves nothing behind and WeCom may send it again.

Invariants:

* A click acts on a run that was sent to the member who clicked, only: the card's
  ``task_id`` names the run (``models.acting.card_id``), and its recipient must be the clicking
  member. Anything else is refused, with nothing changed.
* One action per run (``RunAction``, unique in the database): the first click acts, and
  every later one (WeCom's retries, a double click, another button afterwards) changes
  nothing and is answered as done, so WeCom stops retrying.
* ``done`` and ``take`` cancel what the action makes moot: the inquiry's escalation (the
  task keyed ``<key>:escalation``), whose runs not yet started are cancelled.
  ``take`` also tells the inquiry's owner (``payload["owner"]``, else the member an
  escalation came from), unless the owner is the one who took it: a one-off of kind
  ``inquiry_taken`` keyed by the run, so that it is made once.
  ``snooze_1h`` makes a run of the same message an hour after the click.
* A built-in action that came with WeCom's response code leaves the card to update
  (``card_state`` pending): a scheduler does it (``engine.cards``), not this request,
  woken once this commits (``engine.wake``, on PostgreSQL) rather than at its next tick.
* The CRM hears of the action through ``signals.run_acted``, sent by a scheduler once
  this has committed (``engine.announce``), never within WeCom's request, so the
  callback answers within WeCom's time limit whatever the CRM's receivers do.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..callback.events import TemplateCardEvent
from ..engine import actions, wake
from ..models import CallbackNonce, RunAction, ScheduledTask, TaskRun
from ..models.acting import DONE, SNOOZE, TAKE, card_id, run_pk
from . import scheduling
from .occasions import TAKEN_KIND, escalation_key

logger = logging.getLogger(__name__)

SNOOZE_FOR = timedelta(hours=1)


class Outcome(enum.Enum):
    ACTED = "acted"  # the first click: recorded and acted on
    ALREADY = "already"  # the run was acted on before: nothing changed
    REPLAYED = "replayed"  # the request's nonce was seen before: nothing changed
    UNKNOWN_RUN = "unknown_run"  # no sent run of ours has this card
    NOT_RECIPIENT = "not_recipient"  # the clicking member is not the run's recipient


@dataclass(frozen=True)
class Applied:
    outcome: Outcome
    action: RunAction | None = None


def apply(event: TemplateCardEvent, *, nonce: str, timestamp: int) -> Applied:
    """Record the request's nonce and act on ``event``, in one transaction. The nonce is
    kept whatever the click comes to (the same request again is a replay); an error
    rolls both back, so that WeCom may send the request again."""
    with transaction.atomic():
        if not CallbackNonce.objects.spend(nonce, timestamp):
            return Applied(Outcome.REPLAYED)
        pk = run_pk(event.task_id)
        run = (
            TaskRun.objects.select_related("task").filter(pk=pk, status=TaskRun.Status.SENT).first()
            if pk is not None
            else None
        )
        if run is None or card_id(run) != event.task_id:
            return Applied(Outcome.UNKNOWN_RUN)
        if run.task.recipient != event.from_user_name:
            return Applied(Outcome.NOT_RECIPIENT)
        return _act(run, event)


def _act(run: TaskRun, event: TemplateCardEvent) -> Applied:
    now = timezone.now()
    # The run's row lock: two clicks racing on one run act once.
    TaskRun.objects.select_for_update().filter(pk=run.pk).exists()
    done = RunAction.objects.filter(run=run).first()
    if done is not None:
        return Applied(Outcome.ALREADY, done)
    action = RunAction(
        run=run,
        action=event.event_key,
        member=event.from_user_name,
        acted_at=_clicked_at(event, now),
        response_code=event.response_code,
    )
    if event.event_key in (DONE, TAKE, SNOOZE) and action.response_code:
        action.card_state = RunAction.CardState.PENDING
    try:
        with transaction.atomic():
            if event.event_key in (DONE, TAKE):
                _cancel_escalation(run.task)
            if event.event_key == TAKE:
                _tell_owner(run, event.from_user_name, now)
            elif event.event_key == SNOOZE:
                action.follow_up = actions.snooze(run, now + SNOOZE_FOR, by=event.from_user_name)
            action.save()
            if action.card_state == RunAction.CardState.PENDING:
                # The card's update waits for no tick: the schedulers take it at once.
                wake.notify()
    except IntegrityError:  # a click on this run committed first, where rows lock not
        return Applied(Outcome.ALREADY, RunAction.objects.filter(run=run).first())
    return Applied(Outcome.ACTED, action)


def _clicked_at(event: TemplateCardEvent, now: datetime) -> datetime:
    """When the member clicked, as WeCom says, unless that is in the future."""
    return min(event.created_at, now)


def _cancel_escalation(task: ScheduledTask) -> None:
    if not task.key:
        return
    # A one-off whose run was planned is ``completed``: its run, due later, is cancelled
    # all the same (as ``api.cancel_for`` does).
    escalations = ScheduledTask.objects.filter(key=escalation_key(task.key)).exclude(
        status=ScheduledTask.Status.CANCELLED
    )
    for escalation in escalations:
        actions.cancel(escalation)


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
