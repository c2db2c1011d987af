"""Senders configured like Django's ``CACHES``, in ``REMINDERS_CHANNELS``::

REMINDERS_CHANNELS = {
    "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender", "OPTIONS": {...}},
    "console": {"BACKEND": "reminders.senders.console.ConsoleSender"},
}
"""

from __future__ import annotations

from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from ..conf import settings
from ..exceptions import ChannelNotConfigured
from .base import BaseSender, Message, SendResult

__all__ = ["BaseSender", "Message", "SendResult", "aliases", "get_sender"]

_senders: dict[str, BaseSender] = {}


def aliases() -> list[str]:
    return list(settings.CHANNELS)


def get_sender(alias: str) -> BaseSender:
    """The sender for ``alias``, built once per process."""
    sender = _senders.get(alias)
    if sender is None:
        config: dict[str, Any] = settings.CHANNELS.get(alias) or {}
        if "BACKEND" not in config:
            raise ChannelNotConfigured(f"REMINDERS_CHANNELS has no channel {alias!r}.")
        try:
            backend = import_string(config["BACKEND"])
        except ImportError as exc:
            raise ChannelNotConfigured(f"Channel {alias!r}: cannot import backend: {exc}") from exc
        sender = backend(alias, **config.get("OPTIONS", {}))
        _senders[alias] = sender
    return sender


def reset() -> None:
    for sender in _senders.values():
        sender.close()
    _senders.clear()


@receiver(setting_changed)
def _reset_on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in {"REMINDERS_CHANNELS", "REMINDERS_DEFAULT_CHANNEL"} or setting.startswith(
        "WECOM_"
    ):
        reset()
