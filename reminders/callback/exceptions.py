"""The refusals of WeCom's callback protocol: one base, ``CallbackError``, under the app's.

What we receive and refuse is a ``SuspiciousOperation`` as well: a view that lets one
through answers 400, and Django logs it under ``django.security.<class name>``. A bad
EncodingAESKey is ours to fix: an ``ImproperlyConfigured``.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation

from ..exceptions import RemindersError


class CallbackError(RemindersError):
    """Base class of every error of WeCom's callback protocol."""


class BadEncodingAESKey(CallbackError, ImproperlyConfigured):
    """An EncodingAESKey that is not 43 characters of base64 (32 bytes once decoded)."""


class CallbackRefused(CallbackError, SuspiciousOperation):
    """A callback, or the message inside it, refused: nothing of it may be used."""


class BadSignature(CallbackRefused):
    """A msg_signature that does not sign the token, timestamp, nonce and ciphertext."""


class BadCiphertext(CallbackRefused):
    """A ciphertext that is not what WeCom encrypts: its base64, blocks, padding, frame
    or text."""


class WrongReceiveId(CallbackRefused):
    """A message framed for another receive id (corp id) than ours."""


class MalformedXml(CallbackRefused):
    """XML that is not well-formed, declares a DTD, or is not shaped as WeCom's."""


class BadQuery(CallbackRefused):
    """A value of the query string missing, or of a shape WeCom never sends; ``field``
    names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class StaleRequest(CallbackRefused):
    """A request whose timestamp is too far from our clock: a replay, or a clock off."""


class NotAnEchostr(CallbackRefused):
    """A URL verification whose ``echostr`` decrypts to something else than WeCom's
    echostr (digits): a message of ours, captured and replayed to have it decrypted."""


class MissingField(MalformedXml):
    """A field WeCom always sends, missing; ``field`` names it."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field
