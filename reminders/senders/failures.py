"""What a failed HTTP call means: each network failure and each HTTP status as the
``SendError`` subclass that says what became of the request.

Invariants: a failure is ``TransientSendError`` only when the request surely never
reached the server (a refused connection, a connect timeout, a TLS handshake that
failed, a proxy refusing, a 408); once it may have arrived (a read timeout, a reset
after it left, a 5xx) it is ``InDoubtSendError``, since the provider may have acted on
it. A refused credential, a wrong path or a redirect is ``ConfigurationSendError``: the
same call cannot pass until the settings change. Every text passes through the
caller's ``redact`` (a ``requests`` error repeats the full URL, query string and all),
and names a URL only without its query string.
"""

from __future__ import annotations

import ssl
import traceback
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime

import requests
import urllib3
from django.utils import timezone

from ..exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PayloadSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)


def request_error(
    exc: requests.RequestException,
    what: str,
    where: str,
    timeout: tuple[float, float],
    redact: Callable[[str], str],
) -> SendError:
    """The ``SendError`` for a request to ``where`` (its URL without the query) that
    ``requests`` could not complete, given the (connect, read) ``timeout``."""
    if isinstance(exc, requests.ConnectTimeout):
        return TransientSendError(
            f"{what}: could not connect (timeout after {timeout[0]:g} s); nothing was sent.",
            code="connect-timeout",
        )
    if isinstance(exc, requests.Timeout):
        # The request left: the provider may have acted on it and its answer is lost.
        return InDoubtSendError(
            f"{what}: no answer (read timeout after {timeout[1]:g} s); "
            "the provider may have acted on the request.",
            code="timeout",
        )
    if isinstance(exc, requests.ConnectionError):
        text = redact(str(exc))[:300]
        if not _request_left(exc):
            return TransientSendError(f"{what}: could not connect: {text}", code="connect")
        return InDoubtSendError(
            f"{what}: the connection broke after the request left; the provider may "
            f"have acted on it: {text}",
            code="network",
        )
    # A malformed URL or similar: nothing will pass until the settings change.
    return ConfigurationSendError(
        f"{what}: cannot call {where}: {type(exc).__name__}: {redact(str(exc))[:300]}",
        code="url",
    )


def status_error(status: int, headers: Mapping[str, str], detail: str, what: str) -> SendError:
    """The ``SendError`` a non-2xx ``status`` means; ``detail``: the reply, redacted,
    as it ends the message."""
    code = f"http-{status}"
    if status == 429:
        return ThrottledSendError(
            f"{what}: HTTP 429 (too many requests){detail}.",
            code=code,
            pause_seconds=_retry_after(headers) or 60.0,
        )
    if status == 408:
        # The server gave up waiting for our request: it never took it.
        return TransientSendError(f"{what}: HTTP {status}{detail}.", code=code)
    if status >= 500:
        # The request reached a server that failed while handling it: it may have
        # passed the message on before failing.
        return InDoubtSendError(f"{what}: HTTP {status}{detail}.", code=code)
    if status < 400 or status in {401, 403, 404, 405}:
        # A redirect, a refused credential or a wrong path: the base URL or the
        # credentials are wrong, and retrying the same call cannot help.
        return ConfigurationSendError(f"{what}: HTTP {status}{detail}.", code=code)
    return PayloadSendError(f"{what}: HTTP {status}{detail}.", code=code)


# What urllib3 raises when no byte of the request reached the server.
_NOT_SENT = (
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    urllib3.exceptions.NameResolutionError,
)


# Where a TLS error raised in these functions comes from: the handshake, before any byte
# of the request left (an untrusted certificate, a server that does not speak TLS).
_HANDSHAKE_FRAMES = frozenset({"do_handshake", "_validate_conn", "connect", "_new_conn"})


def _request_left(exc: BaseException) -> bool:
    """Whether a connection error may have come after the request reached the server.

    Only a failure to connect (refused, unresolvable, a proxy refusing, the TLS
    handshake) is sure to have sent nothing; a reset or a closed connection may come
    after the server took it. urllib3 raises ``SSLError`` both in the handshake and
    while reading a reply (a corrupt record, a TLS alert): where it was raised decides.
    """
    if isinstance(exc, requests.exceptions.ProxyError):
        return False
    chain = _chain(exc)
    if any(isinstance(item, _NOT_SENT) for item in chain):
        return False
    tls = [item for item in chain if isinstance(item, ssl.SSLError | ssl.CertificateError)]
    return not any(_raised_in(item, _HANDSHAKE_FRAMES) for item in tls)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it wraps, carries or was raised from."""
    seen: dict[int, BaseException] = {}
    pending: list[object] = [exc]
    while pending:
        item = pending.pop()
        if id(item) in seen or not isinstance(item, BaseException):
            continue
        seen[id(item)] = item
        pending += [*item.args, getattr(item, "reason", None), item.__cause__, item.__context__]
    return list(seen.values())


def _raised_in(exc: BaseException, functions: frozenset[str]) -> bool:
    """Whether ``exc`` was raised inside a function of one of these names."""
    return any(
        frame.f_code.co_name in functions for frame, _ in traceback.walk_tb(exc.__traceback__)
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(float(value), 1.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max((when - timezone.now()).total_seconds(), 1.0)
