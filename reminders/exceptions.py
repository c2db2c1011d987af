"""The app's exceptions: one base class, subclasses of Django's categories where they fit."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured


class RemindersError(Exception):
    """Base class of every error this app raises on purpose."""


class ChannelNotConfigured(RemindersError, ImproperlyConfigured):
    """A channel alias that ``REMINDERS_CHANNELS`` does not define."""


class UnknownKind(RemindersError, LookupError):
    """A task kind that no code registered."""


class SendError(RemindersError):
    """A sender could not deliver a message; ``retryable`` says whether it may pass."""

    retryable = False

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TransientSendError(SendError):
    """Delivery failed for a reason that can pass (timeout, 5xx, provider busy)."""

    retryable = True


class PermanentSendError(SendError):
    """Delivery can never succeed as asked (invalid recipient, bad payload)."""
