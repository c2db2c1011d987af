"""JSON over HTTP: ``HttpSender``, and the pooled client every provider sender uses.

The client (``JsonClient``, ``Reply``: ``reminders.senders.client``), what a failed call
means (``reminders.senders.failures``) and the gateway's templates
(``reminders.senders.gateway_templates``) have modules of their own; their public
names are importable from here too.

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
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import (
    ConfigurationSendError,
    InDoubtSendError,
    PermanentSendError,
    RecipientSendError,
    SendError,
    TransientSendError,
)
from .base import BaseSender, Message, SendResult, secret_leaves
from .client import (
    DEFAULT_TIMEOUT,
    JsonClient,
    RedactingFilter,
    Reply,
    bare_url,
    canonical_json,
    timeout_setting,
)
from .gateway_templates import (
    ENV_REFERENCE,
    dig,
    env_values,
    expand_env,
    message_content,
    render,
    rendered_secrets,
    set_path,
    url_secrets,
)
from .tokens import SharedToken, token_name

__all__ = [
    "BODY_METHODS",
    "DEFAULT_TIMEOUT",
    "HttpSender",
    "JsonClient",
    "RedactingFilter",
    "Reply",
    "bare_url",
    "canonical_json",
    "dig",
    "expand_env",
    "message_content",
    "timeout_setting",
]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


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
        _check_options(alias, url, method, login_url, login_method, token_header, token_body_field)
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
        self._init_state(timeout, connect_timeout)

    def _init_state(self, timeout: float | None, connect_timeout: float | None) -> None:
        """What the sender keeps as it works: the login's token, shared by every process
        once asked for, the secrets seen since (tokens, header values from the
        environment), and its pooled client (``WECOM_TIMEOUT`` unless ``timeout``)."""
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
            env_values(
                self.headers, self.login_headers, self.body, self.login_body,
                self.url, self.login_url,
            )
        )  # fmt: skip
        found.update(str(value) for value in self.headers.values())
        found.update(str(value) for value in self.login_headers.values())
        found.update(secret_leaves(self.login_body, secret=True))
        found.update(secret_leaves(self.body))
        for url in (self.url, self.login_url):
            found.update(url_secrets(url))
        return found

    def _expanded_headers(self, template: Mapping[str, str], what: str) -> dict[str, str]:
        headers = {name: expand_env(str(value), what=what) for name, value in template.items()}
        # Header values that came from the environment are credentials more often than not.
        self._secret_values.update(
            value for name, value in headers.items() if ENV_REFERENCE.search(template[name])
        )
        return headers

    # -- login ------------------------------------------------------------------------

    def _shared_token(self) -> SharedToken:
        if self._token is None:
            login_body = render(self.login_body or {}, {}, what=f"Channel {self.alias!r} login")
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
        login_body = render(self.login_body or {}, {}, what=what)
        self._secret_values.update(rendered_secrets(self.login_body or {}, login_body))
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
        body = render(self.body, values, what=what)
        headers = self._expanded_headers(self.headers, what)
        if token and self.token_header:
            headers[self.token_header] = self.token_format.format(token=token)
        if token and self.token_body_field and isinstance(body, dict):
            set_path(body, self.token_body_field, token)
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


def _normal(value: Any) -> str:
    """Compare reply codes as text: a gateway may answer ``0`` one day and ``"0"`` the next."""
    return value if isinstance(value, str) else json.dumps(value)


def _check_options(
    alias: str,
    url: str,
    method: str,
    login_url: str,
    login_method: str,
    token_header: str,
    token_body_field: str,
) -> None:
    """Raise ``ConfigurationSendError`` for OPTIONS that cannot make a call: no url, a
    login whose token goes nowhere, a method that carries no JSON body."""
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
