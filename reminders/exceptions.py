"""The app's exceptions: one base class, subclasses of Django's categories where they fit."""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured, ValidationError


class RemindersError(Exception):
    """Base class of every error this app raises on purpose."""


class ChannelNotConfigured(RemindersError, ImproperlyConfigured):
    """A channel alias that ``REMINDERS_CHANNELS`` does not define."""


class UnknownKind(RemindersError, LookupError):
    """A task kind that no code registered."""


class BadPayload(RemindersError, ValueError):
    """A payload field a kind's builder cannot use: its type or its value."""


class BuilderFailed(RemindersError):
    """A message builder that raised, or returned something that is not a message; the
    message names the builder and the kind, and what it raised is the ``__cause__``."""


class RetentionTooShort(RemindersError, ValueError):
    """A retention under what the engine still reads (``retention.minimum_age``)."""


class UnplannableTask(RemindersError, ValidationError):
    """A stored task this process cannot plan; ``code`` and ``message`` say why."""

    code: str
    message: str

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message, code=code)


class BulkValidationError(RemindersError, ValidationError):
    """Items of one ``api.schedule_many`` call that cannot be scheduled; none was saved.

    ``errors`` maps each bad item's index (from 0, in the order given) to its errors by
    parameter name, as ``ValidationError.message_dict`` gives them for one ``schedule``
    call; ``causes`` holds those ``ValidationError`` objects, codes included. As a
    ``ValidationError`` it lists one message per error, "item 3, recipient: ...", so a
    caller that catches ``ValidationError`` reads them too; ``str()`` is a readable list.
    """

    def __init__(self, causes: Mapping[int, ValidationError], *, label: str = "item") -> None:
        self.causes = dict(sorted(causes.items()))
        self.errors: dict[int, dict[str, list[str]]] = {
            index: _message_dict(error) for index, error in self.causes.items()
        }
        self.label = label
        super().__init__(
            [
                ValidationError(f"{label} {index}, {field}: {message}")
                for index, fields in self.errors.items()
                for field, messages in fields.items()
                for message in messages
            ]
        )

    def __str__(self) -> str:
        count = len(self.errors)
        lines = [
            f"{count} {self.label}{'s' if count != 1 else ''} cannot be scheduled; "
            "nothing was saved:"
        ]
        lines += [f"  {message}" for message in self.messages]
        return "\n".join(lines)


def _message_dict(error: ValidationError) -> dict[str, list[str]]:
    """``error.message_dict``, with an error not tied to a field under ``__all__``."""
    if hasattr(error, "error_dict"):
        return error.message_dict
    return {"__all__": error.messages}


class ActionRefused(RemindersError):
    """An operator's action that does not apply to its object (running a paused task
    now); ``code`` and ``message`` say why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SendError(RemindersError):
    """A sender could not deliver a message.

    ``retryable`` says whether the same message may pass later; ``category`` names the
    class of the provider's answer (``passing``, ``throttled``, ``configuration``,
    ``recipient``, ``payload``) for the run's record and for alerts.
    """

    retryable = False
    category = "error"
    # The same bytes are refused whenever they are sent (no such member, a malformed
    # body): an earlier attempt of them cannot have been delivered either.
    refuses_these_bytes = False
    # Of a text sent in parts (``senders.parts``) that failed on a later part: the
    # provider's message ids of the parts delivered before it, in order, those of
    # earlier attempts (``Message.sent_parts``) included. Empty: no part went.
    delivered_parts: tuple[str, ...] = ()

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TransientSendError(SendError):
    """Delivery failed for a reason that can pass (timeout, 5xx, provider busy)."""

    retryable = True
    category = "passing"


class InDoubtSendError(TransientSendError):
    """The request may have reached the provider, but no answer says what it did with it
    (a read timeout, a 5xx, a dropped connection): the message may have been delivered.

    Sent again only where the provider drops an identical body (or the channel accepts
    a possible duplicate); otherwise the run's outcome is ``unknown``.
    """

    category = "in_doubt"


class ThrottledSendError(TransientSendError):
    """The provider (or our limiter) says "too fast": wait, without spending an attempt.

    ``pause_seconds`` is how long the whole channel must hold off (WeCom blocks a caller
    for 60 s after 45009).
    """

    category = "throttled"

    def __init__(self, message: str, *, code: str = "", pause_seconds: float = 60.0) -> None:
        super().__init__(message, code=code)
        self.pause_seconds = pause_seconds


class PermanentSendError(SendError):
    """Delivery can never succeed as asked."""

    category = "permanent"


class ConfigurationSendError(PermanentSendError):
    """Our credentials or settings are wrong: nothing passes until someone fixes them."""

    category = "configuration"


class RecipientSendError(PermanentSendError):
    """The recipient does not exist or may not receive messages."""

    category = "recipient"
    refuses_these_bytes = True


class PayloadSendError(PermanentSendError):
    """The message itself is invalid (empty, too large, bad type)."""

    category = "payload"
    refuses_these_bytes = True
