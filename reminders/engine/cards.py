"""Updating a card after someone acted on it: its buttons become one that cannot be
clicked, reading what was done ("Done by alice", "Taken by bob", "Reminder at 10:12").

The callback records the click with WeCom's response code and, for a built-in action,
``card_state`` ``pending`` (``intake.clicks``). A scheduler's tick takes the pending
ones (``claim``) and a job of the high queue updates them (``update``) through the
channel's sender (``BaseSender.update_card``, WeCom's ``update_template_card``), so no
WeCom call is made inside WeCom's request nor holds up a tick.

The clicks are a run's (``RunAction``) or those of another app's cards, kept in a model
of the same shape (``CardClick``) that the app registered (``register``: ops' alert
cards), whose update may replace the whole card (``BaseSender.replace_card``). Every
source is claimed, leased, updated and recorded by the same code, one job per source and
claim; the rules below hold for each.

Invariants:

* One job at a time calls WeCom for a card: a claim sets ``card_attempted_at`` under
  the rows' lock (the lease, which the job is given), and only actions not tried within
  ``LEASE`` are claimed, so a job that died (its host, its worker) is taken over a lease
  later. Before each call, the job renews its lease on that card, in one conditional
  update that fails once another claim has taken it (``card_attempted_at`` is no longer
  the job's): a job that lost its lease, a slow call having kept it past ``LEASE``,
  calls WeCom for none of its cards another job holds now.
* The recorded outcome is the true one, whichever of two jobs answers first: an update
  WeCom made is recorded ``updated`` whoever holds the lease by then, over a refusal
  another job met meanwhile (the code spent by that very update) or an expiry; a
  refusal is recorded only by the job that holds the lease, and only on a card still
  ``pending``.
* WeCom takes a response code once, within 72 hours: an update WeCom refused for good
  is ``failed`` with its reason and never tried again; one that may pass (busy, a lost
  reply) is tried again a lease later, until the 72 hours are over (``expired``). A code
  spent by an attempt whose reply was lost is refused on the next: ``failed``, saying
  so. A card is cosmetic: its update never changes what the action did.
* The card is updated for the member it went to, on the channel it went out on (its
  ledger row's), whatever the task names now.
* A snooze's card says when its reminder goes (its due time: quiet hours move it to
  their end), or that it will not ("Not possible: paused", "Task cancelled", "Reminder
  cancelled"), as things stand when the card is updated: never a time that will not
  come. A click on an inquiry someone else had taken on reads "Taken by" them.
* The words are the task's language (``builders.language``), fitted to a button's
  length (``senders.template_card``): a long member id is cut, never the words.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone, translation
from django.utils.translation import pgettext

from ..exceptions import SendError, TransientSendError
from ..messages.builders import language
from ..messages.fitting import cut
from ..models import RunAction, ScheduledTask, SendLog, TaskRun
from ..models.acting import DONE, SNOOZE, TAKE, CardClick
from ..schedule import timing
from ..senders import get_sender
from ..senders.template_card import room, width
from . import actions, cluster

logger = logging.getLogger(__name__)

UPDATE = "reminders.engine.cards.update"
# How long a job has to update a card before another may take it over.
LEASE = timedelta(seconds=60)
# WeCom takes a response code within 72 hours of the click that gave it.
CODE_LIFETIME = timedelta(hours=72)
BATCH = 20
PENDING = CardClick.CardState.PENDING
RUN_ACTIONS = "reminders.runaction"


@dataclass(frozen=True)
class Change:
    """A card's update: the member it went to, on the channel it went out on; its
    buttons to read ``replace_name``, or the whole ``card`` it becomes (of the same
    ``task_id``), which ``detail`` says in words; ``about`` names it in the logs."""

    channel: str
    recipient: str
    replace_name: str
    about: str
    card: dict[str, Any] | None = None
    detail: str = ""


@dataclass(frozen=True)
class Source:
    """Clicks kept in ``model`` whose cards are updated here: ``change(click)`` says
    how (``related``: what it reads, for ``select_related``)."""

    model: type[CardClick]
    change: Callable[[Any], Change]
    related: tuple[str, ...] = ()


_SOURCES: dict[str, Source] = {}


def register(
    model: type[CardClick], change: Callable[[Any], Change], related: Sequence[str] = ()
) -> None:
    """Have the pending cards of ``model``'s clicks updated as a run's are: the same
    claims, leases, job and records; ``change(click)`` says for whom and to what. An app
    that owns cards (``intake.card_owners``) calls this from its ``AppConfig.ready``."""
    _SOURCES[model._meta.label_lower] = Source(model, change, tuple(related))


def _sources() -> dict[str, Source]:
    return {
        RUN_ACTIONS: Source(RunAction, _run_change, ("run", "run__task", "follow_up")),
        **_SOURCES,
    }


def claim(now: datetime | None = None) -> list[int]:
    """Take the cards due an update (up to ``BATCH`` of each source) and queue a job
    for them; the clicks' ids. Those past WeCom's 72 hours are marked ``expired``
    instead. Safe in any number of schedulers at once."""
    now = now or timezone.now()
    sources = _sources()
    claimed: list[int] = []
    for label in _waiting(sources, now):
        claimed += _claim(label, sources[label].model, now)
    return claimed


def _due(model: type[CardClick], now: datetime) -> QuerySet[CardClick]:
    """``model``'s clicks whose card is to update, and that no job holds."""
    return model._default_manager.filter(card_state=PENDING).filter(
        Q(card_attempted_at__isnull=True) | Q(card_attempted_at__lt=now - LEASE)
    )


def _waiting(sources: dict[str, Source], now: datetime) -> list[str]:
    """The sources with a card to update, read in one statement however many there are:
    a tick with none takes no lock (SQLite has one writer), and an app's cards cost the
    idle tick nothing more."""
    parts: list[str] = []
    params: list[Any] = []
    for source in sources.values():
        sql, args = _due(source.model, now).values("pk").query.sql_with_params()
        parts.append(f"EXISTS ({sql})")
        params.extend(args)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(parts), params)
        found = cursor.fetchone()
    return [label for label, waiting in zip(sources, found, strict=True) if waiting]


def _claim(label: str, model: type[CardClick], now: datetime) -> list[int]:
    manager = model._default_manager
    due = _due(model, now)
    manager.filter(card_state=PENDING, received_at__lt=now - CODE_LIFETIME).update(
        card_state=CardClick.CardState.EXPIRED,
        card_detail="WeCom takes a response code within 72 hours of the click.",
    )
    with transaction.atomic():
        locked = due.order_by("received_at")
        if connection.features.has_select_for_update_skip_locked:
            locked = locked.select_for_update(skip_locked=True)
        else:
            locked = locked.select_for_update()
        claimed = list(locked.values_list("pk", flat=True)[:BATCH])
        if claimed:
            manager.filter(pk__in=claimed).update(card_attempted_at=now)
            # A run's cards keep the job's name and arguments of the releases before.
            named = "" if label == RUN_ACTIONS else f"{model._meta.model_name}-"
            extra = () if label == RUN_ACTIONS else (label,)
            cluster.enqueue(
                cluster.high_queue(),
                UPDATE,
                claimed,
                now.isoformat(),
                *extra,
                task_name=f"cards-{named}{claimed[0]}",
            )
    return claimed


def update(action_ids: Sequence[int], leased_at: str = "", source: str = RUN_ACTIONS) -> int:
    """The job: update the cards of the clicks ``action_ids`` of ``source`` (a model's
    label) whose lease it still holds, the one its claim took at ``leased_at`` (ISO
    8601); how many were updated. One card's failure is its own: the others are updated
    all the same. A job queued without a lease (by the release before leases were given)
    updates nothing: its cards are claimed again a lease later."""
    if not leased_at:
        logger.warning("a card-update job without its lease: %s left to the next claim", action_ids)
        return 0
    found = _sources().get(source)
    if found is None:  # its app is no longer installed: the cards stay as they are
        logger.warning(
            "card updates of %s: no such source, %s left as they are", source, action_ids
        )
        return 0
    held = datetime.fromisoformat(leased_at)
    updated = 0
    clicks = found.model._default_manager.filter(pk__in=list(action_ids), card_state=PENDING)
    for click in clicks.select_related(*found.related).order_by("received_at"):
        updated += _update_one(click, found.change, held)
    return updated


def _update_one(click: CardClick, change_of: Callable[[Any], Change], held: datetime) -> int:
    lease = _renew(click, held)
    if lease is None:
        return 0  # another job holds the card now, or it is no longer to update
    change: Change | None = None
    try:
        change = change_of(click)
        sender = get_sender(change.channel)
        if change.card is not None:
            sender.replace_card(change.recipient, click.response_code, change.card)
        else:
            sender.update_card(change.recipient, click.response_code, change.replace_name)
    except TransientSendError as exc:
        # Tried again once the lease is over, while WeCom still takes the code.
        logger.warning("card of %s not updated yet: %s", _about(click, change), exc)
        return 0
    except SendError as exc:
        return _refused(click, lease, str(exc))
    except Exception as exc:  # a channel no longer configured, a sender's bug
        logger.exception("card of %s not updated", _about(click, change))
        return _refused(click, lease, f"{type(exc).__name__}: {exc}")
    return _updated(click, change.detail or change.replace_name)


def _about(click: CardClick, change: Change | None) -> str:
    """The card in the logs: as its change names it, else by its click."""
    return change.about if change is not None else f"{click._meta.label_lower} {click.pk}"


def _renew(click: CardClick, held: datetime) -> datetime | None:
    """The job's lease on ``click``'s card, renewed for a whole ``LEASE`` from now, if
    the job still holds it (``card_attempted_at`` is still ``held``) and WeCom still
    takes the code; None otherwise."""
    now = timezone.now()
    renewed = (
        type(click)
        ._default_manager.filter(
            pk=click.pk,
            card_state=PENDING,
            card_attempted_at=held,
            received_at__gte=now - CODE_LIFETIME,
        )
        .update(card_attempted_at=now)
    )
    return now if renewed else None


def _updated(click: CardClick, text: str) -> int:
    """Record the update WeCom made: true whoever holds the lease by now."""
    return (
        type(click)
        ._default_manager.filter(pk=click.pk)
        .exclude(card_state=CardClick.CardState.UPDATED)
        .update(card_state=CardClick.CardState.UPDATED, card_detail=text[:2000])
    )


def _refused(click: CardClick, lease: datetime, detail: str) -> int:
    """Record a refusal, if the job still holds the lease on a card still pending: else
    the job that took it over records what became of it."""
    recorded = (
        type(click)
        ._default_manager.filter(pk=click.pk, card_state=PENDING, card_attempted_at=lease)
        .update(card_state=CardClick.CardState.FAILED, card_detail=detail[:2000])
    )
    if not recorded:
        logger.warning(
            "card of %s %s: a refusal after the lease was lost: %s",
            click._meta.label_lower,
            click.pk,
            detail,
        )
    return 0


def _run_change(action: RunAction) -> Change:
    channel, recipient = delivery(action.run)
    return Change(channel, recipient, replace_name(action), f"run {action.run_id}")


def delivery(run: TaskRun) -> tuple[str, str]:
    """The channel and the member ``run``'s card went out to, as its ledger row says,
    whatever its task says now (the CRM may have handed it to someone else since); the
    task's for a run recorded sent without a row."""
    sent = (
        SendLog.objects.filter(run_id=run.pk, status=SendLog.Status.SENT)
        .values_list("channel", "recipient")
        .first()
    )
    return sent or (run.task.channel, run.task.recipient)


def replace_name(action: RunAction) -> str:
    """What the card's button reads once acted on, in the task's language, within a
    button's length: the member's id is cut to fit, never the words."""
    task = action.run.task
    with translation.override(language(task)):
        words, member = _words(action, task)
    if member is None:
        return words
    fixed = width(words % {"member": ""})
    return words % {"member": cut(member, room("button_list.text") - fixed, width)}


def _words(action: RunAction, task: ScheduledTask) -> tuple[str, str | None]:
    """The button's words, with ``%(member)s`` for the member they name (None: they
    name none): who has the inquiry, who acted, or what became of a snooze."""
    if action.held_by or action.action == TAKE:
        taken = pgettext("card button after a click, at most 10 characters", "Taken by %(member)s")
        return taken, action.held_by or action.member
    if action.action == DONE:
        done = pgettext("card button after a click, at most 10 characters", "Done by %(member)s")
        return done, action.member
    if action.action == SNOOZE:
        return _snoozed(action, task), None
    return "%(member)s: " + action.action, action.member


def _snoozed(action: RunAction, task: ScheduledTask) -> str:
    """What a snooze's card says: when its reminder comes (its due time, quiet hours
    included), or that it will not (its task paused, cancelled or in error, or the
    reminder cancelled since): never a time that will not come."""
    refusal = actions.stopped_refusal(task)
    later = action.follow_up
    if refusal is not None:
        return _not_possible(refusal.code)
    if later is None or later.status == TaskRun.Status.CANCELLED:
        return pgettext("card button after a click, at most 10 characters", "Reminder cancelled")
    at = later.due_at.astimezone(timing.zone(task.timezone))
    again = pgettext("card button after a click, at most 10 characters", "Again at %(time)s")
    return again % {"time": at.strftime("%H:%M")}


def _not_possible(code: str) -> str:
    if code == actions.TASK_PAUSED.code:
        return pgettext("card button after a click, at most 10 characters", "Not possible: paused")
    if code == actions.TASK_CANCELLED.code:
        return pgettext("card button after a click, at most 10 characters", "Task cancelled")
    return pgettext("card button after a click, at most 10 characters", "Task in error")
