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
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext, pgettext

from reminders.messages.cards import lost_clicks
from reminders.messages.fitting import cut
from reminders.registry import label as kind_label
from reminders.senders import BaseSender, Message, get_sender
from reminders.senders.template_card import CARD_TYPE, problem, room, width

from .alert_channels import AlertChannel, AlertChannelError
from .conf import settings as conf

if TYPE_CHECKING:
    from .models import Alert, AlertDelivery

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


def failed_runs(alert: Alert) -> list[int]:
    """The runs the alert's events name, in the order they happened."""
    events = alert.events.filter(run_id__isnull=False).order_by("occurred_at", "pk")
    ids: list[int] = [pk for pk in events.values_list("run_id", flat=True) if pk is not None]
    return list(dict.fromkeys(ids))


def runs_url(alert: Alert) -> str:
    """The admin's list of the alert's runs (``OPS_ADMIN_URL``); ``""`` without it."""
    base = conf.ADMIN_URL
    if not base:
        return ""
    runs = failed_runs(alert)
    if runs:
        query = {"id__in": ",".join(str(pk) for pk in runs[:200])}
        return f"{base}reminders/taskrun/?{urlencode(query)}"
    return f"{base}ops/alert/{alert.pk}/change/"


def card(alert: Alert, card_id: str, *, outcome: str = "") -> dict[str, Any]:
    """The card of ``alert`` (its ``task_id`` ``card_id``): with its buttons, or, once
    acted on, saying ``outcome`` with the admin's link as its one button. In
    ``OPS_ALERT_LANGUAGE``."""
    with translation.override(conf.ALERT_LANGUAGE):
        runs = failed_runs(alert)
        link = runs_url(alert)
        body: dict[str, Any] = {
            "card_type": CARD_TYPE,
            "source": {"desc": cut(gettext("Reminders ops"), room("source.desc"), width)},
            "main_title": {"title": cut(alert.title, room("main_title.title"), width)},
            "sub_title_text": cut(outcome or _reasons(alert), room("sub_title_text"), width),
            "horizontal_content_list": _facts(alert),
            "task_id": card_id,
            "button_list": _link(link) if outcome else _buttons(len(runs), link),
        }
    found = problem(body)
    if found:
        raise AlertChannelError(f"the card of alert {alert.pk} is one WeCom refuses: {found}")
    return body


def _reasons(alert: Alert) -> str:
    """The first distinct reasons the alert's events give."""
    seen: list[str] = []
    for message in alert.events.order_by("occurred_at", "pk").values_list("message", flat=True):
        if message and message not in seen:
            seen.append(message)
        if len(seen) == REASONS:
            break
    return "\n".join(seen) or alert.title


def _facts(alert: Alert) -> list[dict[str, Any]]:
    """The kind and channel (where the alert has them), how many, since when."""
    since = timezone.localtime(alert.first_event_at or alert.created_at)
    name = "card line name, at most 5 characters"
    facts = []
    if alert.kind:
        facts.append((pgettext(name, "Kind"), str(kind_label(alert.kind))))
    if alert.channel:
        facts.append((pgettext(name, "Channel"), alert.channel))
    facts.append((pgettext(name, "Count"), str(alert.event_count)))
    facts.append((pgettext(name, "Since"), since.strftime("%Y-%m-%d %H:%M")))
    value = room("horizontal_content_list.value")
    return [{"keyname": key, "value": cut(text, value, width)} for key, text in facts]


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


class WeComCards(AlertChannel):
    """A WeCom app channel (a ``REMINDERS_CHANNELS`` alias whose sender carries cards),
    to the members ``OPTIONS["recipients"]`` names: one card each."""

    @property
    def channel(self) -> str:
        return str(self.options.get("channel", ""))

    @property
    def recipients(self) -> list[str]:
        value = self.options.get("recipients", [])
        if isinstance(value, str):
            value = value.split(",")
        return [str(member).strip() for member in value if str(member).strip()]

    @property
    def who(self) -> str:
        return f"{self.channel} → {', '.join(self.recipients)}"

    def sender(self) -> BaseSender:
        return get_sender(self.channel)

    def deliver(self, title: str, body: str, key: str) -> None:
        raise AlertChannelError("WeComCards sends alerts as cards: deliver_alert, not deliver.")

    def deliver_alert(self, delivery: AlertDelivery, now: datetime) -> None:
        """A card to each member who has not got one yet; raises naming those it could
        not reach (the delivery is tried again, for them only)."""
        from .models import AlertCard

        found = self.problems()
        if found:
            raise AlertChannelError("; ".join(found))
        sender = self.sender()
        failed: list[str] = []
        for member in self.recipients:
            sent, _created = AlertCard.objects.get_or_create(
                delivery=delivery, member=member, defaults={"task_id": task_id(delivery, member)}
            )
            if sent.sent_at is not None:
                continue
            body = card(delivery.alert, sent.task_id)
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

    def problems(self) -> list[str]:
        if not self.channel:
            return [gettext("OPTIONS has no 'channel' (a REMINDERS_CHANNELS alias).")]
        if not self.recipients:
            return [gettext("OPTIONS has no 'recipients' (the ops members' WeCom ids).")]
        try:
            sender = self.sender()
        except Exception as exc:
            return [
                gettext("channel %(channel)r: %(error)s") % {"channel": self.channel, "error": exc}
            ]
        found: list[str] = []
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


def _recipient_problems(sender: BaseSender, members: Sequence[str]) -> list[str]:
    found = []
    for member in members:
        try:
            sender.validate_recipient(member)
        except Exception as exc:
            found.append(str(exc))
    return found
