"""A click on an alert card, acted on as the clicking member's Django user.

Registered with reminders' callback as the owner of cards whose ``task_id`` starts with
``ops-`` (``reminders.intake.card_owners``), so a click comes through the one callback
URL: its signature, time window and nonce checked, and the nonce kept in the same
transaction as what the click does here.

Invariants:

* A click counts only from the member the card went to (their ids compared whatever
  their case, as WeCom does); another member's, or one on a card we never sent, is
  refused with nothing kept, as on a run's card.
* The member acts as the Django user linked to them: ops' own link
  (``WeComMember``), else the CRM's user-to-member mapping
  (``reminders.intake.users.users_of``), which must name one active user. The user
  must hold the permission the button needs, the one the admin's action needs:
  ``reminders.retry_taskrun`` to retry, ``reminders.mark_handled_taskrun`` to mark
  handled, ``ops.mute_alert`` to mute (the ``ops_operator`` role holds all three).
  Anyone else is declined: the refusal is recorded, their card says why, and nothing
  else changes.
* One click acts per alert, whoever's card it is (``AlertAction.acted_on`` is unique,
  and clicks on one alert take its row lock first): every later one, a second click or
  another operator's, changes nothing, and its card says who acted and what they did.
  A card updated to count a later alert of its group acts on the whole chain
  (``alert_cards.chain``), from whichever of its cards the click comes.
* Retry and mark handled apply the admin's rules, run by run
  (``reminders.engine.actions``): a run its rules refuse is left as it is and counted,
  with the reason, in what the card says ("12 retried by alice, 2 refused: its deadline
  has passed"). Mute holds the alert's group for an hour (``AlertMute``): its events wait
  and go together when it ends.
* Every click is kept (``AlertAction``): who, as which user, when, from where, and what
  it did; one that acted is also in the admin's history of the alert (``LogEntry``).
* The card is updated after the click by a scheduler, as a run's card is
  (``reminders.engine.cards``): the same card, saying what became of the click, its
  buttons gone but the admin's link.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import IntegrityError, transaction
from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext

from reminders.callback.events import TemplateCardEvent
from reminders.engine import actions as operator
from reminders.engine.cards import Change
from reminders.intake.clicks import Outcome
from reminders.intake.users import users_of
from reminders.models import TaskRun

from . import alert_cards, alert_channels
from .alert_cards import HANDLED, MUTE, RETRY
from .conf import settings as conf
from .models import Alert, AlertAction, AlertCard, AlertMute, WeComMember

PERMISSIONS = {
    RETRY: "reminders.retry_taskrun",
    HANDLED: "reminders.mark_handled_taskrun",
    MUTE: "ops.mute_alert",
}
MUTE_FOR = timedelta(hours=1)
OUTCOMES = {
    AlertAction.Outcome.ACTED: Outcome.ACTED,
    AlertAction.Outcome.ALREADY: Outcome.ALREADY,
    AlertAction.Outcome.DECLINED: Outcome.DECLINED,
}


def act(event: TemplateCardEvent, now: datetime) -> Outcome:
    """The card owner's answer to a click (``reminders.intake.card_owners``): inside
    the callback's transaction, its nonce kept."""
    card = AlertCard.objects.select_related("delivery__alert").filter(task_id=event.task_id).first()
    if card is None or card.sent_at is None:
        return Outcome.UNKNOWN_RUN
    if card.member.casefold() != event.from_user_name.casefold():
        return Outcome.NOT_RECIPIENT
    # The lock of the chain's first alert: two clicks on its cards act one after the
    # other, and its chain does not grow meanwhile (``alert_cards.continues``).
    first = alert_cards.chain(card.delivery.alert)[0]
    list(Alert.objects.select_for_update().filter(pk=first.pk))
    alert = alert_cards.head(card.delivery.alert)
    click = AlertAction(
        alert=alert,
        card=card,
        action=event.event_key,
        member=event.from_user_name,
        acted_at=min(event.created_at, now),
        response_code=event.response_code,
        source=f"WeCom callback: corp {event.to_user_name}, app {event.agent_id}",
    )
    if click.response_code:
        click.card_state = AlertAction.CardState.PENDING
    with translation.override(conf.ALERT_LANGUAGE):
        try:
            with transaction.atomic():
                _decide(click, alert, now)
                click.save()
        except IntegrityError:  # another click acted first, where rows do not lock
            earlier = AlertAction.objects.filter(acted_on__in=alert_cards.chain(alert)).first()
            if earlier is None:
                raise
            _already(click, earlier)
            click.save()
    if click.outcome == AlertAction.Outcome.ACTED:
        _log(click)
    # The callback wakes the schedulers for every click kept: the card's update waits
    # for no tick (``reminders.intake.clicks``).
    return OUTCOMES[AlertAction.Outcome(click.outcome)]


def _decide(click: AlertAction, alert: Alert, now: datetime) -> None:
    """What ``click`` (not saved yet) does: nothing after another click acted, nothing
    for a member who may not, else what its button does. The user the member is, is
    kept whatever the outcome."""
    user, refusal = _user(click.member, click.action)
    click.user = user
    click.username = user.get_username() if user is not None else ""
    first = AlertAction.objects.filter(acted_on__in=alert_cards.chain(alert)).first()
    if first is not None:
        _already(click, first)
        return
    if refusal:
        click.outcome = AlertAction.Outcome.DECLINED
        click.detail = gettext("Not done: %(why)s") % {"why": refusal}
        return
    click.outcome = AlertAction.Outcome.ACTED
    click.acted_on = alert
    click.detail = DO[click.action](alert, click.username, now)


def _already(click: AlertAction, first: AlertAction) -> None:
    click.outcome, click.acted_on = AlertAction.Outcome.ALREADY, None
    click.detail = gettext("Already done: %(what)s") % {"what": first.detail}


def _user(member: str, action: str) -> tuple[Any, str]:
    """The user ``member`` acts as, and why they may not do ``action`` (``""``: they
    may)."""
    link = WeComMember.objects.select_related("user").filter(member__iexact=member).first()
    users = users_of(member) if link is None else [u for u in [link.user] if u.is_active]
    if not users:
        return None, gettext(
            "WeCom member %(member)s is no active user's: link them to one in the admin "
            "(WeCom members of users)."
        ) % {"member": member}
    if len(users) > 1:
        return None, gettext("WeCom member %(member)s is %(count)d users'.") % {
            "member": member,
            "count": len(users),
        }
    user = users[0]
    if action not in PERMISSIONS:
        return user, gettext("the card has no button %(key)r.") % {"key": action}
    if not user.has_perm(PERMISSIONS[action]):
        return user, gettext("%(user)s lacks the permission %(permission)s.") % {
            "user": user.get_username(),
            "permission": PERMISSIONS[action],
        }
    return user, ""


def _retry(alert: Alert, by: str, now: datetime) -> str:
    """The alert's runs back in line, as the admin's bulk retry puts them."""
    done, refused = 0, Counter[str]()
    chained = alert_cards.chain(alert)
    runs = TaskRun.objects.select_related("task").filter(pk__in=alert_cards.failed_runs(chained))
    for run in runs.order_by("pk"):
        refusal = operator.retry_refusal(run, now)
        if refusal is None and operator.retry_now(run, now):
            done += 1
        else:
            refusal = refusal or operator.retry_refusal(run, now)
            refused[str(refusal.message) if refusal else gettext("it changed meanwhile")] += 1
    said = ngettext("%(count)d retried by %(user)s", "%(count)d retried by %(user)s", done) % {
        "count": done,
        "user": by,
    }
    for reason, count in refused.most_common():
        said += gettext(", %(count)d refused: %(reason)s") % {"count": count, "reason": reason}
    return said


def _handled(alert: Alert, by: str, now: datetime) -> str:
    """The alert handled (with those it goes on from), and its runs that ended unsent,
    as the admin marks them."""
    chained = alert_cards.chain(alert)
    Alert.objects.filter(pk__in=[each.pk for each in chained]).update(
        handled_at=now, handled_by=by[:150]
    )
    runs = TaskRun.objects.filter(pk__in=alert_cards.failed_runs(chained)).mark_handled(by, now)
    said = gettext("Handled by %(user)s") % {"user": by}
    if runs:
        said += ngettext(
            " (%(count)d run marked handled)", " (%(count)d runs marked handled)", runs
        ) % {"count": runs}
    return said


def _mute(alert: Alert, by: str, now: datetime) -> str:
    """The alert's group held for ``MUTE_FOR``: a mute already longer is kept."""
    until = now + MUTE_FOR
    mute = AlertMute.objects.select_for_update().filter(group_key=alert.group_key).first()
    if mute is None:
        AlertMute.objects.create(group_key=alert.group_key, until=until, by=by, created_at=now)
    elif mute.until < until:
        mute.until, mute.by, mute.created_at = until, by, now
        mute.save(update_fields=["until", "by", "created_at"])
    else:
        until = mute.until
    return gettext("Muted until %(time)s by %(user)s") % {
        "time": timezone.localtime(until).strftime("%H:%M"),
        "user": by,
    }


DO = {RETRY: _retry, HANDLED: _handled, MUTE: _mute}


def _log(click: AlertAction) -> None:
    """The action in the admin's history of its alert, as the admin's own are."""
    if click.user is None or not apps.is_installed("django.contrib.admin"):
        return
    from django.contrib.admin.models import CHANGE, LogEntry

    LogEntry.objects.log_actions(
        user_id=click.user.pk,
        queryset=Alert.objects.filter(pk=click.alert_id),
        action_flag=CHANGE,
        change_message=f"{click.detail} (WeCom member {click.member}; {click.source})",
        single_object=True,
    )


def change(click: AlertAction) -> Change:
    """The update of ``click``'s card (``reminders.engine.cards``): the same card, saying
    what became of the click."""
    if click.card is None:
        raise LookupError(f"the card of click {click.pk} is gone")
    channel = alert_channels.build(click.card.delivery.channel)
    if not isinstance(channel, alert_cards.WeComCards):
        raise LookupError(f"alert channel {click.card.delivery.channel!r} sends no cards now")
    body = alert_cards.card(click.alert, click.card.task_id, outcome=click.detail)
    return Change(
        channel.channel,
        click.card.member,
        replace_name="",
        about=f"alert {click.alert_id}",
        card=body,
        detail=click.detail,
    )
