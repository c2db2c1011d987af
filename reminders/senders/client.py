"""JSON over HTTP: the pooled client every provider sender uses (``JsonClient``), and
its answers (``Reply``).

Invariants: ``JsonClient`` keeps one ``requests.Session`` per process (a forked child
opens its own: sharing a parent's sockets would interleave two processes' bytes on one
connection), reads the proxy variables and the CA bundle once per host, never follows a
redirect, and waits at most its (connect, read) timeout (``WECOM_TIMEOUT`` unless the
sender sets one). Network failures and HTTP statuses become ``SendError`` subclasses
(``reminders.senders.failures``), and every message it builds is scrubbed of secrets: a
``requests`` error repeats the full URL, query string and all, which is where WeCom
puts the access token; urllib3's own request lines are masked too (``RedactingFilter``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings as django_settings

from .base import REDACTED, SECRET_PARAMS, redact
from .failures import request_error, status_error

DEFAULT_TIMEOUT = 10.0


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
        except requests.RequestException as exc:
            raise request_error(exc, what, bare_url(url), self.timeout, self.redact) from None
        try:
            data = response.json()
        except ValueError:
            data = None
        return Reply(response.status_code, data, response.headers)

    def check_status(self, reply: Reply, what: str) -> None:
        """Raise the ``SendError`` a non-2xx status means."""
        if not 200 <= reply.status < 300:
            raise status_error(reply.status, reply.headers, self._describe(reply), what)

    def _describe(self, reply: Reply) -> str:
        if reply.data is None:
            return ""
        return ": " + self.redact(json.dumps(reply.data, ensure_ascii=False))[:300]
