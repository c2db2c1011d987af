"""Where alerts go, configured like Django's ``CACHES`` in ``OPS_ALERT_CHANNELS``::

    OPS_ALERT_CHANNELS = {
        # Django's mail_admins: every address in settings.ADMINS.
        "admins": {"BACKEND": "ops.alert_channels.MailAdmins"},
        # A WeCom group robot: a REMINDERS_CHANNELS alias whose sender is the robot.
        "ops_group": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": "wecom_robot"},
        },
        # Any reminders channel, to one member.
        "on_call": {
            "BACKEND": "ops.alert_channels.ReminderChannel",
            "OPTIONS": {"channel": "wecom", "recipient": "zhangsan"},
        },
    }

A channel's ``deliver`` raises when the alert did not go out; the alert step records
that and tries again later. Nothing here is called on the engine's send path, and an
alert sent through a reminders channel is not a run: no ledger row, no rate-limit slot
(alerts are few: one per group and window), and a provider's "too fast" is one more
failure to retry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.core.mail import mail_admins
from django.utils.module_loading import import_string
from django.utils.translation import gettext

from reminders.senders import BaseSender, Message, get_sender

from .conf import settings as conf
from .models import AlertDelivery, Target

# WeCom's limit for a text message is 2,048 bytes; a little is kept for the sender.
TEXT_LIMIT = 2000


class AlertChannelError(Exception):
    """An alert channel that cannot deliver as configured."""


class AlertChannel(ABC):
    # What WeCom counts of a delivery through a reminders channel (``through``): one
    # message (``TEXT``), or one a member reached (``CARDS``, ``alert_cards.AlertCard``).
    TEXT, CARDS = "text", "cards"
    sends = TEXT

    def __init__(self, alias: str, **options: Any) -> None:
        self.alias = alias
        self.options = options

    @property
    @abstractmethod
    def who(self) -> str:
        """Who this channel tells, for the record: never a secret."""

    @abstractmethod
    def deliver(self, title: str, body: str, key: str) -> None:
        """Send one alert; raise when it did not go out. ``key`` identifies the
        delivery (the same on every attempt)."""

    def deliver_alert(self, delivery: AlertDelivery, now: datetime) -> None:
        """Send ``delivery``'s alert; raise when it did not go out. A channel that sends
        the alert's title and body as they are needs only ``deliver``; one that shows more
        of it (``alert_cards.WeComCards``) overrides this."""
        self.deliver(delivery.alert.title, delivery.alert.body, str(delivery.pk))

    def problems(self) -> list[str]:
        """What stops this channel from working, for the system checks (in the language
        they run in)."""
        return []


class MailAdmins(AlertChannel):
    """Django's ``mail_admins``: the subject is prefixed with ``EMAIL_SUBJECT_PREFIX``."""

    @property
    def who(self) -> str:
        return "ADMINS"

    def deliver(self, title: str, body: str, key: str) -> None:
        if not django_settings.ADMINS:
            raise AlertChannelError("settings.ADMINS is empty: there is nobody to mail.")
        mail_admins(title, body, fail_silently=False)

    def problems(self) -> list[str]:
        if not django_settings.ADMINS:
            return [gettext("settings.ADMINS is empty: alerts to this channel reach nobody.")]
        return []


class ThroughChannel(AlertChannel):
    """An alert channel that sends by a ``REMINDERS_CHANNELS`` sender, its alias
    ``OPTIONS["channel"]``."""

    @property
    def channel(self) -> str:
        return str(self.options.get("channel", ""))

    def sender(self) -> BaseSender:
        return get_sender(self.channel)

    def built(self) -> tuple[BaseSender | None, list[str]]:
        """The channel's sender, or none and why (for ``problems``)."""
        if not self.channel:
            return None, [gettext("OPTIONS has no 'channel' (a REMINDERS_CHANNELS alias).")]
        try:
            return self.sender(), []
        except Exception as exc:
            return None, [
                gettext("channel %(channel)r: %(error)s") % {"channel": self.channel, "error": exc}
            ]


class ReminderChannel(ThroughChannel):
    """A ``REMINDERS_CHANNELS`` sender. OPTIONS: ``channel`` (its alias), ``recipient``
    (a member id; a group robot needs none: it posts to its group), ``msgtype``
    (``text``, the default, or ``markdown``)."""

    @property
    def recipient(self) -> str:
        return str(self.options.get("recipient", ""))

    @property
    def who(self) -> str:
        return f"{self.channel} → {self.recipient}" if self.recipient else self.channel

    def deliver(self, title: str, body: str, key: str) -> None:
        sender = self.sender()
        content = fit(f"{title}\n\n{body}", TEXT_LIMIT)
        msgtype = str(self.options.get("msgtype", "text"))
        message = Message(self.recipient, msgtype, {"content": content}, f"ops-alert:{key}")
        try:
            sender.send(message)
        except Exception as exc:
            # The sender's secrets never reach the record.
            raise AlertChannelError(sender.redact(f"{type(exc).__name__}: {exc}")) from None

    def problems(self) -> list[str]:
        from reminders.senders.robot import WeComRobotSender

        sender, found = self.built()
        if sender is None:
            return found
        if not self.recipient and not isinstance(sender, WeComRobotSender):
            return [
                gettext("channel %(channel)r is not a group robot: OPTIONS needs a 'recipient'.")
                % {"channel": self.channel}
            ]
        if self.recipient:
            try:
                sender.validate_recipient(self.recipient)
            except Exception as exc:
                return [str(exc)]
        return []


def fit(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, an ellipsis saying so."""
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len("…".encode())].decode(errors="ignore") + "…"


def build(alias: str) -> AlertChannel:
    """The configured alert channel ``alias``; raises ``AlertChannelError``."""
    config = conf.ALERT_CHANNELS.get(alias)
    if config is None:
        raise AlertChannelError(f"OPS_ALERT_CHANNELS has no channel {alias!r}.")
    try:
        backend = import_string(str(config["BACKEND"]))
    except ImportError as exc:
        raise AlertChannelError(f"alert channel {alias!r}: cannot import backend: {exc}") from None
    channel = backend(alias, **config.get("OPTIONS", {}))
    if not isinstance(channel, AlertChannel):
        raise AlertChannelError(f"alert channel {alias!r}: not an ops AlertChannel.")
    return channel


def through(channels: Iterable[str], sends: str = AlertChannel.TEXT) -> list[str]:
    """The alert channels that send by one of the reminders ``channels`` (their
    ``channel`` option) what ``sends`` says (``AlertChannel.sends``); one that cannot be
    built is left out."""
    wanted = set(channels)
    found = []
    for alias in conf.ALERT_CHANNELS:
        try:
            channel = build(alias)
        except (AlertChannelError, TypeError):  # the ops system checks say why
            continue
        if (
            isinstance(channel, ThroughChannel)
            and channel.sends == sends
            and channel.channel in wanted
        ):
            found.append(alias)
    return found


def targets() -> list[Target]:
    """Every configured alert channel and who it tells; one that cannot be built is
    still listed (its deliveries will fail, and say why)."""
    found = []
    for alias in conf.ALERT_CHANNELS:
        try:
            who = build(alias).who
        except Exception:
            who = alias
        found.append(Target(alias, who))
    return found
