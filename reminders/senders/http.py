"""JSON over HTTP: the pooled client every provider sender uses, and ``HttpSender``.

``JsonClient`` keeps one ``requests.Session`` per process (a forked child opens its own:
sharing a parent's sockets would interleave two processes' bytes on one connection),
turns network failures and HTTP statuses into ``SendError`` subclasses, and scrubs
secrets from every message it builds: a ``requests`` error repeats the full URL, query
string and all, which is where WeCom puts the access token.

``HttpSender`` speaks to third-party WeCom gateways whose API is a JSON call configured
entirely in ``OPTIONS``::

    "gateway": {
        "BACKEND": "reminders.senders.http.HttpSender",
        "OPTIONS": {
            "url": "https://gateway.example/api/send",
            "headers": {"X-Api-Key": "${GATEWAY_API_KEY}"},
            "body": {"account": "sales", "to": "{recipient}", "text": "{content}"},
            "success_field": "result.code",
            "success_values": [0],
            "message_id_field": "result.id",
        },
    }

String leaves of ``body`` are formatted with ``{recipient}``, ``{content}``,
``{msgtype}``, ``{key}`` (the idempotency key) and, after a login, ``{token}``; write
``{{`` and ``}}`` for literal braces. Header values and the login body may name
environment variables as ``${NAME}``, read at each call so that secrets stay out of the
settings module. With ``login_url`` the sender first logs in for a token (shared by
every process through ``ProviderToken``), puts it in ``token_header`` (formatted with
``token_format``) or the body field ``token_body_field``, and logs in again once when
the gateway answers 401 or a ``token_invalid_values`` code.

``recipient_pattern`` (a regular expression the whole recipient must match, e.g.
``"1[3-9][0-9]{9}"`` for a gateway that sends to mainland mobile numbers) narrows the
recipients the channel accepts; every recipient is a WeCom member id first, whatever
the pattern says.
"""

from __future__ import annotations

import json
import logging
import os
import re
import ssl
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import requests
import urllib3
from django.conf import settings as django_settings
from django.utils import timezone

from ..exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PayloadSendError,
    PermanentSendError,
    RecipientSendError,
    SendError,
    ThrottledSendError,
    TransientSendError,
)
from .base import (
    REDACTED,
    SECRET_NAME,
    SECRET_PARAMS,
    BaseSender,
    Message,
    SendResult,
    redact,
    secret_leaves,
)
from .tokens import SharedToken, token_name

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def timeout_setting() -> float:
    """``WECOM_TIMEOUT`` seconds, read when a sender is built."""
    return float(getattr(django_settings, "WECOM_TIMEOUT", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)


def canonical_json(data: Any) -> bytes:
    """The same data always gives the same bytes: what makes a re-send identical."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode()


def bare_url(url: str) -> str:
    """``url`` without its query string, for messages."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


# Every value of a query string: ``?a=1&b=2`` keeps its names only.
_QUERY_VALUE = re.compile(r"([?&][^=&?#\s'\"]+=)[^&#\s'\"]+")


class RedactingFilter(logging.Filter):
    """Masks every query value in urllib3's records: it logs each request line at
    DEBUG, query and all, and a credential may sit under any name (``?u=...``), not only
    under one that says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = _QUERY_VALUE.sub(r"\1" + REDACTED, SECRET_PARAMS.sub(r"\1" + REDACTED, message))
        if masked != message:
            record.msg, record.args = masked, ()
        return True


_URLLIB3_LOGGER = "urllib3.connectionpool"


def _guard_urllib3_log() -> None:
    """Install the filter once, when the first client is built (never at import)."""
    target = logging.getLogger(_URLLIB3_LOGGER)
    if not any(isinstance(item, RedactingFilter) for item in target.filters):
        target.addFilter(RedactingFilter())


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: its status and its JSON (``None`` when the body is not JSON)."""

    status: int
    data: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def object(self) -> dict[str, Any]:
        return self.data if isinstance(self.data, dict) else {}


class JsonClient:
    """Pooled JSON calls for one sender; every failure is a ``SendError``.

    ``secrets`` returns the values to mask in messages (tokens, secrets, keys); it is
    called only when a message is built.
    """

    def __init__(
        self,
        *,
        timeout: float,
        connect_timeout: float | None = None,
        secrets: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        self.timeout = (connect_timeout or timeout, timeout)
        self._secrets = secrets
        self._session: requests.Session | None = None
        self._pid = 0
        self._environments: dict[str, tuple[dict[str, str], bool | str]] = {}
        self._lock = threading.Lock()
        _guard_urllib3_log()

    def session(self) -> requests.Session:
        """This process's session: one pool of kept-alive connections per process."""
        with self._lock:
            if self._session is None or self._pid != os.getpid():
                # After a fork the parent's sockets are not ours to use or to close.
                self._session = requests.Session()
                self._session.headers["Content-Type"] = "application/json; charset=utf-8"
                # requests reads the proxy variables from the environment on every call
                # (a fifth of a send's time); ``_environment`` reads them once per host.
                self._session.trust_env = False
                self._environments = {}
                self._pid = os.getpid()
            return self._session

    def _environment(self, url: str) -> tuple[dict[str, str], bool | str]:
        """Proxies (``HTTPS_PROXY``, ``NO_PROXY``...) and CA bundle for ``url``'s host."""
        host = urlsplit(url).netloc
        found = self._environments.get(host)
        if found is None:
            proxies = requests.utils.get_environ_proxies(url)
            bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
            found = self._environments[host] = (proxies, bundle or True)
        return found

    def close(self) -> None:
        with self._lock:
            if self._session is not None and self._pid == os.getpid():
                self._session.close()
            self._session = None

    def redact(self, text: str) -> str:
        return redact(text, self._secrets())

    def call(
        self,
        method: str,
        url: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """One request; network failures raise, any HTTP status is returned."""
        session = self.session()
        proxies, verify = self._environment(url)
        try:
            response = session.request(
                method,
                url,
                params=params,
                data=body,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=False,
                proxies=proxies,
                verify=verify,
            )
        except requests.ConnectTimeout:
            raise TransientSendError(
                f"{what}: could not connect (timeout after {self.timeout[0]:g} s); "
                "nothing was sent.",
                code="connect-timeout",
            ) from None
        except requests.Timeout:
            # The request left: the provider may have acted on it and its answer is lost.
            raise InDoubtSendError(
                f"{what}: no answer (read timeout after {self.timeout[1]:g} s); "
                "the provider may have acted on the request.",
                code="timeout",
            ) from None
        except requests.ConnectionError as exc:
            text = self.redact(str(exc))[:300]
            if not _request_left(exc):
                raise TransientSendError(
                    f"{what}: could not connect: {text}", code="connect"
                ) from None
            raise InDoubtSendError(
                f"{what}: the connection broke after the request left; the provider may "
                f"have acted on it: {text}",
                code="network",
            ) from None
        except requests.RequestException as exc:
            # A malformed URL or similar: nothing will pass until the settings change.
            raise ConfigurationSendError(
                f"{what}: cannot call {bare_url(url)}: {type(exc).__name__}: "
                f"{self.redact(str(exc))[:300]}",
                code="url",
            ) from None
        try:
            data = response.json()
        except ValueError:
            data = None
        return Reply(response.status_code, data, response.headers)

    def check_status(self, reply: Reply, what: str) -> None:
        """Raise the ``SendError`` a non-2xx status means."""
        status = reply.status
        if 200 <= status < 300:
            return
        detail = self._describe(reply)
        code = f"http-{status}"
        if status == 429:
            raise ThrottledSendError(
                f"{what}: HTTP 429 (too many requests){detail}.",
                code=code,
                pause_seconds=_retry_after(reply.headers) or 60.0,
            )
        if status == 408:
            # The server gave up waiting for our request: it never took it.
            raise TransientSendError(f"{what}: HTTP {status}{detail}.", code=code)
        if status >= 500:
            # The request reached a server that failed while handling it: it may have
            # passed the message on before failing.
            raise InDoubtSendError(f"{what}: HTTP {status}{detail}.", code=code)
        if status < 400 or status in {401, 403, 404, 405}:
            # A redirect, a refused credential or a wrong path: the base URL or the
            # credentials are wrong, and retrying the same call cannot help.
            raise ConfigurationSendError(f"{what}: HTTP {status}{detail}.", code=code)
        raise PayloadSendError(f"{what}: HTTP {status}{detail}.", code=code)

    def _describe(self, reply: Reply) -> str:
        if reply.data is None:
            return ""
        return ": " + self.redact(json.dumps(reply.data, ensure_ascii=False))[:300]


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


# --- the generic gateway sender --------------------------------------------------------


def dig(data: Any, path: str) -> Any:
    """The value at dotted ``path`` (``"result.items.0.id"``), or ``None``."""
    for part in path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.lstrip("-").isdigit():
            index = int(part)
            data = data[index] if -len(data) <= index < len(data) else None
        else:
            return None
    return data


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        data = data.setdefault(part, {})
    data[parts[-1]] = value


def _normal(value: Any) -> str:
    """Compare reply codes as text: a gateway may answer ``0`` one day and ``"0"`` the next."""
    return value if isinstance(value, str) else json.dumps(value)


def expand_env(value: str, *, what: str) -> str:
    """``value`` with each ``${NAME}`` replaced by that environment variable."""

    def lookup(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigurationSendError(
                f"{what} needs the environment variable {name}, which is not set.", code="env"
            )
        return os.environ[name]

    return _ENV_REFERENCE.sub(lookup, value)


def _render(template: Any, values: Mapping[str, str], *, what: str) -> Any:
    if isinstance(template, dict):
        return {key: _render(item, values, what=what) for key, item in template.items()}
    if isinstance(template, list):
        return [_render(item, values, what=what) for item in template]
    if isinstance(template, str):
        try:
            return expand_env(template, what=what).format_map(values)
        except (KeyError, IndexError, ValueError, AttributeError) as exc:
            raise ConfigurationSendError(
                f"{what}: cannot fill template {template!r}: {type(exc).__name__} {exc}",
                code="template",
            ) from None
    return template


def message_content(message: Message) -> str:
    """The text of a message, whatever its type: what a text-only gateway can carry."""
    body = message.body
    if isinstance(body.get("content"), str):
        return str(body["content"])
    lines = [str(body[name]) for name in ("title", "description", "url") if body.get(name)]
    return "\n".join(lines) if lines else message.rendered


class HttpSender(BaseSender):
    """Sends through a third-party gateway's JSON API, configured in ``OPTIONS``."""

    DEFAULT_BODY: dict[str, Any] = {
        "to": "{recipient}",
        "msgtype": "{msgtype}",
        "content": "{content}",
        "idempotency_key": "{key}",
    }

    def __init__(
        self,
        alias: str,
        *,
        url: str,
        method: str = "POST",
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        success_field: str = "",
        success_values: Sequence[Any] = (0, "ok", True),
        transient_values: Sequence[Any] = (),
        error_field: str = "",
        message_id_field: str = "",
        timeout: float | None = None,
        connect_timeout: float | None = None,
        duplicate_check_seconds: int = 0,
        login_url: str = "",
        login_method: str = "POST",
        login_headers: Mapping[str, str] | None = None,
        login_body: Any = None,
        token_field: str = "token",  # noqa: S107 - a field name, not a password
        token_ttl_field: str = "",
        token_ttl: float = 3600.0,
        token_header: str = "",
        token_format: str = "{token}",  # noqa: S107 - a template, not a password
        token_body_field: str = "",
        token_invalid_values: Sequence[Any] = (),
        recipient_pattern: str = "",
        **options: Any,
    ) -> None:
        super().__init__(alias, **options)
        self.recipient_pattern = _compile_pattern(alias, recipient_pattern)
        if not url:
            raise ConfigurationSendError(f"Channel {alias!r}: OPTIONS needs a url.", code="url")
        if login_url and not (token_header or token_body_field):
            raise ConfigurationSendError(
                f"Channel {alias!r}: with login_url, set token_header or token_body_field.",
                code="login",
            )
        if method.upper() not in BODY_METHODS or login_method.upper() not in BODY_METHODS:
            raise ConfigurationSendError(
                f"Channel {alias!r}: method and login_method must be one of "
                f"{', '.join(sorted(BODY_METHODS))}: the message travels as a JSON body.",
                code="method",
            )
        self.url = url
        self.method = method.upper()
        self.headers = dict(headers or {})
        self.body = self.DEFAULT_BODY if body is None else body
        self.success_field = success_field
        self.success_values = {_normal(v) for v in success_values}
        self.transient_values = {_normal(v) for v in transient_values}
        self.error_field = error_field
        self.message_id_field = message_id_field
        if duplicate_check_seconds:
            # Only for a gateway known to drop a body it has seen (e.g. keyed on {key}).
            self.supports_duplicate_check = True  # type: ignore[misc]
            self.duplicate_check_seconds = int(duplicate_check_seconds)  # type: ignore[misc]
        self.login_url = login_url
        self.login_method = login_method.upper()
        self.login_headers = dict(login_headers or {})
        self.login_body = login_body
        self.token_field = token_field
        self.token_ttl_field = token_ttl_field
        self.token_ttl = float(token_ttl)
        self.token_header = token_header
        self.token_format = token_format
        self.token_body_field = token_body_field
        self.token_invalid_values = {_normal(v) for v in token_invalid_values}
        self._token: SharedToken | None = None
        self._secret_values: set[str] = set()
        seconds = timeout or timeout_setting()
        self.client = JsonClient(
            timeout=seconds, connect_timeout=connect_timeout, secrets=self._known_secrets
        )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r} {bare_url(self.url)}>"

    def close(self) -> None:
        self.client.close()

    def _known_secrets(self) -> set[str]:
        return set(self.secrets())

    def secrets(self) -> set[str]:
        """Everything configured that may be a credential: header values, the login
        body, body constants under credential names, the URLs' query values and
        passwords, the value of every ``${NAME}`` any template names (as the environment
        holds it now: what a request carries, and a gateway may echo), and the tokens
        seen since."""
        found = set(self._secret_values) | set(super().secrets())
        found.update(
            _env_values(
                self.headers, self.login_headers, self.body, self.login_body,
                self.url, self.login_url,
            )
        )  # fmt: skip
        found.update(str(value) for value in self.headers.values())
        found.update(str(value) for value in self.login_headers.values())
        found.update(secret_leaves(self.login_body, secret=True))
        found.update(secret_leaves(self.body))
        for url in (self.url, self.login_url):
            found.update(_url_secrets(url))
        return found

    def _expanded_headers(self, template: Mapping[str, str], what: str) -> dict[str, str]:
        headers = {name: expand_env(str(value), what=what) for name, value in template.items()}
        # Header values that came from the environment are credentials more often than not.
        self._secret_values.update(
            value for name, value in headers.items() if _ENV_REFERENCE.search(template[name])
        )
        return headers

    # -- login ------------------------------------------------------------------------

    def _shared_token(self) -> SharedToken:
        if self._token is None:
            login_body = _render(self.login_body or {}, {}, what=f"Channel {self.alias!r} login")
            self._token = SharedToken(
                token_name(
                    "http",
                    bare_url(self.login_url)[:120],
                    secret=canonical_json(login_body).decode(),
                ),
                self._login,
                lease_seconds=2 * sum(self.client.timeout) + 5,
            )
        return self._token

    def _login(self) -> tuple[str, float]:
        what = f"Channel {self.alias!r} login"
        login_body = _render(self.login_body or {}, {}, what=what)
        self._secret_values.update(_secret_leaves(self.login_body or {}, login_body))
        reply = self.client.call(
            self.login_method,
            self.login_url,
            what=what,
            body=canonical_json(login_body),
            headers=self._expanded_headers(self.login_headers, what),
        )
        if reply.status in {401, 403}:
            raise ConfigurationSendError(f"{what}: credentials refused (HTTP {reply.status}).")
        self.client.check_status(reply, what)
        token = dig(reply.data, self.token_field)
        if not isinstance(token, str) or not token:
            raise ConfigurationSendError(
                f"{what}: the reply has no token at {self.token_field!r}.", code="login"
            )
        self._secret_values.add(token)
        ttl = dig(reply.data, self.token_ttl_field) if self.token_ttl_field else None
        return token, float(ttl) if isinstance(ttl, int | float) and ttl > 0 else self.token_ttl

    # -- sending ----------------------------------------------------------------------

    def validate_recipient(self, recipient: str) -> None:
        super().validate_recipient(recipient)
        if self.recipient_pattern and not self.recipient_pattern.fullmatch(recipient):
            raise RecipientSendError(
                f"Channel {self.alias!r} sends only to recipients matching "
                f"{self.recipient_pattern.pattern!r}, not {recipient!r}.",
                code="recipient",
            )

    def send(self, message: Message) -> SendResult:
        what = f"Channel {self.alias!r}"
        self.validate_recipient(message.recipient)
        token = self._shared_token().get() if self.login_url else ""
        reply = self._call(message, token, what)
        if self.login_url and self._token_rejected(reply):
            token = self._shared_token().get(stale=token)
            reply = self._call(message, token, what)
        return self._result(reply, what)

    def _call(self, message: Message, token: str, what: str) -> Reply:
        values = {
            "recipient": message.recipient,
            "content": message_content(message),
            "msgtype": message.msgtype,
            "key": message.idempotency_key,
            "token": token,
        }
        body = _render(self.body, values, what=what)
        headers = self._expanded_headers(self.headers, what)
        if token and self.token_header:
            headers[self.token_header] = self.token_format.format(token=token)
        if token and self.token_body_field and isinstance(body, dict):
            _set_path(body, self.token_body_field, token)
        return self.client.call(
            self.method,
            self.url,
            what=what,
            body=canonical_json(body),
            headers=headers,
        )

    def _token_rejected(self, reply: Reply) -> bool:
        if reply.status == 401:
            return True
        if not (self.success_field and self.token_invalid_values):
            return False
        return _normal(dig(reply.data, self.success_field)) in self.token_invalid_values

    def _result(self, reply: Reply, what: str) -> SendResult:
        self.client.check_status(reply, what)
        code = "0"
        if self.success_field:
            if reply.data is None:
                # A 2xx page that is not JSON comes from a proxy in the way, not the
                # gateway; whether the gateway got the message is not known.
                raise InDoubtSendError(f"{what}: the reply is not JSON.", code="bad-reply")
            value = dig(reply.data, self.success_field)
            code = _normal(value)
            if code not in self.success_values:
                self._fail(reply, what, code)
        message_id = dig(reply.data, self.message_id_field) if self.message_id_field else None
        return SendResult(
            message_id="" if message_id is None else str(message_id),
            code=code,
            detail={"status": reply.status},
        )

    def _fail(self, reply: Reply, what: str, code: str) -> None:
        error = dig(reply.data, self.error_field) if self.error_field else None
        reason = self.client.redact(str(error))[:300] if error is not None else ""
        text = f"{what}: the gateway answered {self.success_field}={code}"
        text += f" ({reason})." if reason else "."
        error_class: type[SendError] = (
            TransientSendError if code in self.transient_values else PermanentSendError
        )
        raise error_class(text, code=code[:64])


def _env_values(*templates: Any) -> Iterator[str]:
    """The values of the environment variables ``templates`` name as ``${NAME}``, in
    their strings at any depth (keys included); unset ones have none."""
    for template in templates:
        if isinstance(template, Mapping):
            yield from _env_values(*template.keys(), *template.values())
        elif isinstance(template, list | tuple):
            yield from _env_values(*template)
        elif isinstance(template, str):
            for name in _ENV_REFERENCE.findall(template):
                value = os.environ.get(name)
                if value:
                    yield value


def _url_secrets(url: str) -> list[str]:
    """The password and the query values of ``url``: where URLs carry credentials."""
    if not url:
        return []
    parts = urlsplit(url)
    found = [parts.password or ""]
    found += [value for _, _, value in (pair.partition("=") for pair in parts.query.split("&"))]
    return [item for item in found if item]


def _compile_pattern(alias: str, pattern: str) -> re.Pattern[str] | None:
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigurationSendError(
            f"Channel {alias!r}: recipient_pattern {pattern!r} is not a regular expression: {exc}.",
            code="options",
        ) from None


def _secret_leaves(template: Any, rendered: Any, *, secret: bool = False) -> list[str]:
    """The values of a rendered login body to mask: those under a key that names a
    credential, and those read from the environment."""
    if isinstance(template, dict) and isinstance(rendered, dict):
        return [
            leaf
            for name, item in template.items()
            for leaf in _secret_leaves(
                item, rendered.get(name), secret=secret or bool(SECRET_NAME.search(str(name)))
            )
        ]
    if isinstance(template, list) and isinstance(rendered, list):
        return [
            leaf
            for item, done in zip(template, rendered, strict=False)
            for leaf in _secret_leaves(item, done, secret=secret)
        ]
    if isinstance(template, str) and isinstance(rendered, str):
        return [rendered] if secret or _ENV_REFERENCE.search(template) else []
    return []
