"""Alerts as WeCom cards with buttons, to named ops members: the alert channel
``WeComCards``, and what its cards show before and after a click.

    OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_cards.WeComCards",
            "OPTIONS": {"channel": "wecom", "recipients": ["zhangsan", "lisi"]},
        },
    }
    OPS_ADMIN_URL = "https://crm.example.com/admin/"

A card states the alert in words (its title; the kind, the channel, how many, since
when; the first reasons) and has these buttons: "Retry the N failed" (where the alert
names runs), "Mark handled", "Mute 1 hour" and a link to the alert's runs in the admin
(``OPS_ADMIN_URL``). A click comes back through reminders' callback to
``ops.card_clicks``, which acts as the member's Django user; the clicker's card is then
replaced by the same card saying what was done, with the link alone left as a button.

Invariants:

* One card per delivery and member, its ``task_id`` (``ops-a<delivery>-<10 hex>``)
  fixed when the card is first tried: a delivery tried again sends the very same card to
  the members it has not reached yet, and WeCom's "task_id taken" for one that went is
  read as delivered (``senders.template_card``). The hex digest covers the alert's
  creation time, so that a database restored from a backup never sends an old card's id
  again for a new alert (WeCom takes an id once, for good).
* Cards only where clicks come back: the channel must carry cards (a WeCom app) and
  WeCom's callback must take that app's clicks (``messages.cards.lost_clicks``), and
  ``OPS_ADMIN_URL`` must be set; the system checks say what is missing (ops.W002) and a
  delivery fails saying so.
* It fits: every text is held to WeCom's lengths (``senders.template_card``), the
  alert's words cut, never the buttons.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext, pgettext

from reminders.engine.cards import CODE_LIFETIME
from reminders.messages.cards import lost_clicks
from reminders.messages.fitting import cut
from reminders.registry import label as kind_label
from reminders.senders import BaseSender, Message
from reminders.senders.template_card import CARD_TYPE, problem, room, width

from . import alert_texts, morning
from .alert_channels import AlertChannel, AlertChannelError, ThroughChannel
from .conf import settings as conf
from .models import Alert, AlertAction, AlertCard, AlertDelivery, AlertEvent

logger = logging.getLogger(__name__)

SUMMARY = morning.SUMMARY
# Every alert card's task_id starts so (``reminders.intake.card_owners``).
PREFIX = "ops-"
RETRY, HANDLED, MUTE = "retry", "handled", "mute_1h"
# Reasons shown on a card, at most.
REASONS = 3


def task_id(delivery: AlertDelivery, member: str) -> str:
    """The card's ``task_id`` for ``member`` (see the invariants)."""
    name = f"{delivery.pk}|{member.casefold()}|{delivery.alert.created_at.isoformat()}"
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]  # noqa: S324 - a name, not a secret
    return f"{PREFIX}a{delivery.pk}-{digest}"


def chain(alert: Alert) -> list[Alert]:
    """The alerts ``alert`` goes on from (``Alert.continues``), first to last, and
    ``alert``: what its card counts and acts on."""
    found = [alert]
    while found[0].continues_id is not None:
        earlier = Alert.objects.filter(pk=found[0].continues_id).first()
        if earlier is None:
            break
        found.insert(0, earlier)
    return found


def head(alert: Alert) -> Alert:
    """The last alert of ``alert``'s chain: what a click on any of its cards acts on."""
    while True:
        later = Alert.objects.filter(continues=alert).first()
        if later is None:
            return alert
        alert = later


def failed_runs(alerts: Sequence[Alert]) -> list[int]:
    """The runs the events of ``alerts`` (a chain, ``chain``) name, in the order they
    happened."""
    events = AlertEvent.objects.filter(alert__in=alerts, run_id__isnull=False)
    ordered = events.order_by("occurred_at", "pk").values_list("run_id", flat=True)
    return list(dict.fromkeys(pk for pk in ordered if pk is not None))


def runs_url(alert: Alert, runs: Sequence[int]) -> str:
    """The admin's list of ``runs`` (``OPS_ADMIN_URL``); ``alert``'s page where there are
    none; ``""`` without the setting."""
    base = conf.ADMIN_URL
    if not base:
        return ""
    if runs:
        query = {"id__in": ",".join(str(pk) for pk in runs[:200])}
        return f"{base}reminders/taskrun/?{urlencode(query)}"
    return f"{base}ops/alert/{alert.pk}/change/"


def card(alert: Alert, card_id: str, *, outcome: str = "") -> dict[str, Any]:
    """The card of ``alert`` and the alerts it goes on from (its ``task_id``
    ``card_id``): with its buttons, or, once acted on, saying ``outcome`` with the
    admin's link as its one button. In ``OPS_ALERT_LANGUAGE``."""
    if alert.type == SUMMARY:
        return _summary_card(alert, card_id)
    alerts = chain(alert)
    runs = failed_runs(alerts)
    link = runs_url(alert, runs)
    with translation.override(conf.ALERT_LANGUAGE):
        count = sum(each.event_count for each in alerts)
        return _body(
            alert,
            card_id,
            title=alert.title if len(alerts) == 1 else alert_texts.title(alert, count),
            details=outcome or _reasons(alerts),
            facts=_facts(alerts, count),
            buttons=_link(link) if outcome else _buttons(len(runs), link),
        )


def _summary_card(alert: Alert, card_id: str) -> dict[str, Any]:
    """The morning summary's card: yesterday's figures, the dashboard's link as its one
    button; nothing to act on."""
    data = morning.kept(alert.events.all())
    with translation.override(conf.ALERT_LANGUAGE):
        facts = []
        if data:
            quota = "?" if data["quota"] is None else f"{data['forecast']}/{data['quota']}"
            failed = data["failed"] + data["expired"]
            facts = [
                (pgettext("card line name, at most 5 characters", "Sent"), str(data["sent"])),
                (pgettext("card line name, at most 5 characters", "Failed"), str(failed)),
                (
                    pgettext("card line name, at most 5 characters", "In doubt"),
                    str(data["unknown"]),
                ),
                (
                    pgettext("card line name, at most 5 characters", "Recalled"),
                    str(data["recalled"]),
                ),
                (pgettext("card line name, at most 5 characters", "Quota"), quota),
            ]
        link = f"{conf.ADMIN_URL}ops/dashboard/" if conf.ADMIN_URL else ""
        text = pgettext("alert card button, at most 10 characters", "Open dashboard")
        return _body(
            alert,
            card_id,
            title=alert.title,
            details=("\n".join(morning.lines(data)[1:]) if data else alert.body) or alert.title,
            facts=facts,
            buttons=[{"text": text, "style": 1, "type": 1, "url": link}],
        )


def _body(
    alert: Alert,
    card_id: str,
    *,
    title: str,
    details: str,
    facts: Sequence[tuple[str, str]],
    buttons: list[dict[str, Any]],
) -> dict[str, Any]:
    """An alert card: its texts cut to WeCom's lengths, and checked as WeCom checks it
    (``AlertChannelError`` naming what it would refuse)."""
    value = room("horizontal_content_list.value")
    body: dict[str, Any] = {
        "card_type": CARD_TYPE,
        "source": {"desc": cut(gettext("Reminders ops"), room("source.desc"), width)},
        "main_title": {"title": cut(title, room("main_title.title"), width)},
        "sub_title_text": cut(details, room("sub_title_text"), width),
        "task_id": card_id,
        "button_list": buttons,
    }
    if facts:
        body["horizontal_content_list"] = [
            {"keyname": key, "value": cut(shown, value, width)} for key, shown in facts
        ]
    found = problem(body)
    if found:
        raise AlertChannelError(f"the card of alert {alert.pk} is one WeCom refuses: {found}")
    return body


def _reasons(alerts: Sequence[Alert]) -> str:
    """The first distinct reasons the alerts' events give."""
    seen: list[str] = []
    events = AlertEvent.objects.filter(alert__in=alerts).order_by("occurred_at", "pk")
    for message in events.values_list("message", flat=True):
        if message and message not in seen:
            seen.append(message)
        if len(seen) == REASONS:
            break
    return "\n".join(seen) or alerts[-1].title


def _facts(alerts: Sequence[Alert], count: int) -> list[tuple[str, str]]:
    """The kind and channel (where the alerts have them), how many, since when."""
    alert = alerts[0]
    since = timezone.localtime(alert.first_event_at or alert.created_at)
    facts: list[tuple[str, str]] = []
    if alert.kind:
        kind = pgettext("card line name, at most 5 characters", "Kind")
        facts.append((kind, str(kind_label(alert.kind))))
    if alert.channel:
        facts.append((pgettext("card line name, at most 5 characters", "Channel"), alert.channel))
    facts.append((pgettext("card line name, at most 5 characters", "Count"), str(count)))
    since_name = pgettext("card line name, at most 5 characters", "Since")
    facts.append((since_name, since.strftime("%Y-%m-%d %H:%M")))
    return facts


def _buttons(runs: int, link: str) -> list[dict[str, Any]]:
    buttons = []
    if runs:
        retry = ngettext("Retry %(count)d failed", "Retry %(count)d failed", runs)
        buttons.append({"text": retry % {"count": runs}, "style": 1, "key": RETRY})
    buttons += [
        {
            "text": pgettext("alert card button, at most 10 characters", "Mark handled"),
            "style": 2,
            "key": HANDLED,
        },
        {
            "text": pgettext("alert card button, at most 10 characters", "Mute 1 hour"),
            "style": 2,
            "key": MUTE,
        },
    ]
    return buttons + _link(link)


def _link(link: str) -> list[dict[str, Any]]:
    if not link:
        return []
    text = pgettext("alert card button, at most 10 characters", "Open in admin")
    return [{"text": text, "style": 3, "type": 1, "url": link}]


class WeComCards(ThroughChannel):
    """A WeCom app channel (a ``REMINDERS_CHANNELS`` alias whose sender carries cards),
    to the members ``OPTIONS["recipients"]`` names: one card each."""

    sends = AlertChannel.CARDS

    @property
    def recipients(self) -> list[str]:
        value = self.options.get("recipients", [])
        if isinstance(value, str):
            value = value.split(",")
        return [str(member).strip() for member in value if str(member).strip()]

    @property
    def who(self) -> str:
        return f"{self.channel} → {', '.join(self.recipients)}"

    def deliver(self, title: str, body: str, key: str) -> None:
        raise AlertChannelError("WeComCards sends alerts as cards: deliver_alert, not deliver.")

    def deliver_alert(self, delivery: AlertDelivery, now: datetime) -> None:
        """To each member not reached yet: the card of an earlier alert of the group
        updated to count this one too, where that can be (``_update``), else a card;
        raises naming those it could not reach (the delivery is tried again, for them
        only)."""
        found = self.problems()
        if found:
            raise AlertChannelError("; ".join(found))
        sender = self.sender()
        alert = delivery.alert
        goes_on = continues(alert, now)
        failed: list[str] = []
        for member in self.recipients:
            mine = AlertCard.objects.filter(
                member=member, delivery__channel=delivery.channel, sent_at__isnull=False
            )
            if mine.filter(Q(delivery=delivery) | Q(shows=alert)).exists():
                continue  # reached by an earlier attempt
            if goes_on and self._update(sender, alert, member, now):
                continue
            sent, _created = AlertCard.objects.get_or_create(
                delivery=delivery, member=member, defaults={"task_id": task_id(delivery, member)}
            )
            body = card(alert, sent.task_id)
            message = Message(member, "template_card", body, f"ops-alert:{sent.task_id}")
            try:
                result = sender.send(message)
            except Exception as exc:
                failed.append(f"{member}: {sender.redact(f'{type(exc).__name__}: {exc}')}")
                continue
            sent.response_code = str(result.detail.get("response_code", ""))
            sent.sent_at = now
            sent.save(update_fields=["response_code", "sent_at"])
        if failed:
            raise AlertChannelError("; ".join(failed))

    def _update(self, sender: BaseSender, alert: Alert, member: str, now: datetime) -> bool:
        """Whether ``member``'s card of an earlier alert of ``alert``'s chain now shows
        the chain to ``alert``: one nobody clicked, sent within WeCom's 72 hours, whose
        send's response code is unspent. The code is taken first (it updates once): an
        update that then fails, or dies, leaves the member to a new card."""
        earlier = (
            AlertCard.objects.filter(
                member=member,
                delivery__channel=self.alias,
                delivery__alert__in=chain(alert)[:-1],
                sent_at__gte=now - CODE_LIFETIME,
                code_spent_at__isnull=True,
            )
            .exclude(response_code="")
            .exclude(Exists(AlertAction.objects.filter(card=OuterRef("pk"))))
            .order_by("-sent_at")
            .first()
        )
        if earlier is None:
            return False
        mine = AlertCard.objects.filter(pk=earlier.pk, code_spent_at__isnull=True)
        if not mine.update(code_spent_at=now):
            return False  # another attempt took it
        try:
            sender.replace_card(member, earlier.response_code, card(alert, earlier.task_id))
        except Exception as exc:
            logger.warning("alert card %s not updated (%s): a new card goes", earlier.task_id, exc)
            return False
        AlertCard.objects.filter(pk=earlier.pk).update(shows=alert)
        return True

    def problems(self) -> list[str]:
        sender, found = self.built()
        if sender is None:
            return found
        if not self.recipients:
            return [gettext("OPTIONS has no 'recipients' (the ops members' WeCom ids).")]
        if not sender.carries_cards:
            found.append(
                gettext("channel %(channel)r carries no cards (a WeCom app does).")
                % {"channel": self.channel}
            )
        else:
            lost = lost_clicks(sender)
            if lost:
                found.append(
                    gettext("clicks on its cards cannot come back: %(why)s.") % {"why": lost}
                )
        if not conf.ADMIN_URL:
            found.append(gettext("OPS_ADMIN_URL is not set: its cards would have no link."))
        found += _recipient_problems(sender, self.recipients)
        return found


def continues(alert: Alert, now: datetime) -> bool:
    """Whether ``alert`` goes on from the group's alert before it (``Alert.continues``),
    deciding it the first time: when that one's chain began within WeCom's 72 hours
    and nobody acted on it. Decided under the lock of the chain's first alert, which a
    click on any of its cards takes too (``card_clicks``): an action and a chain's
    growth never cross."""
    if alert.continues_id is not None:
        return True
    if alert.type == SUMMARY:
        return False  # each morning's summary is its own card
    previous = Alert.objects.filter(group_key=alert.group_key, seq=alert.seq - 1).first()
    if previous is None:
        return False
    alerts = chain(previous)
    if alerts[0].created_at < now - CODE_LIFETIME:
        return False
    with transaction.atomic():
        list(Alert.objects.select_for_update().filter(pk=alerts[0].pk))
        if AlertAction.objects.filter(acted_on__in=alerts).exists():
            return False
        Alert.objects.filter(pk=alert.pk, continues__isnull=True).update(continues=previous)
    alert.refresh_from_db(fields=["continues"])
    return alert.continues_id is not None


def _recipient_problems(sender: BaseSender, members: Sequence[str]) -> list[str]:
    found = []
    for member in members:
        try:
            sender.validate_recipient(member)
        except Exception as exc:
            found.append(str(exc))
    return found
