"""A provider's access token, cached once for every process and host that sends.

The ``ProviderToken`` row named after the credentials is the shared truth; each process
keeps a copy in memory so that a message costs no database read while the token is
good. ``expires_at`` is when callers stop using a token: a margin before the provider's
own expiry, so that a token is never sent in its last seconds.

Refreshing is a compare-and-set, not a lock held across the HTTP call: the caller that
moves the ``<name>:refresh`` row's lease into the future fetches the token; the others
wait for that lease to be released and read what it wrote. The same code is correct on
PostgreSQL, MariaDB and SQLite, and no database lock is ever held while the provider is
slow to answer.

A failure to get a token is never a message in doubt: ``_refresh`` turns the
``InDoubtSendError`` a provider call may raise into a plain ``TransientSendError``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from ..exceptions import InDoubtSendError, TransientSendError
from ..models import ProviderToken

logger = logging.getLogger(__name__)

# Providers issue tokens for hours; renew this long before the end (or a tenth of a
# short lifetime), so a token in flight never expires between our check and its use.
MAX_MARGIN_SECONDS = 300.0
NAME_LENGTH = ProviderToken._meta.get_field("name").max_length or 200
LEASE_SUFFIX = ":refresh"

Fetch = Callable[[], tuple[str, float]]


def token_name(prefix: str, *parts: str, secret: str = "") -> str:
    """A row name that tells ops which credentials it holds, without the secret.

    A short hash of the secret keeps tokens of a rotated secret apart; it cannot be
    turned back into the secret.
    """
    name = ":".join((prefix, *parts))
    if secret:
        name += "#" + hashlib.sha256(secret.encode()).hexdigest()[:12]
    limit = NAME_LENGTH - len(LEASE_SUFFIX)
    if len(name) > limit:
        digest = hashlib.sha256(name.encode()).hexdigest()[:16]
        name = f"{name[: limit - 17]}~{digest}"
    return name


def _margin(lifetime: float) -> float:
    return min(MAX_MARGIN_SECONDS, lifetime / 10)


class SharedToken:
    """One access token, shared through ``ProviderToken`` and copied per process.

    ``fetch`` asks the provider for a token and returns it with its lifetime in
    seconds; it raises a ``SendError`` when it cannot. ``lease_seconds`` bounds how long
    the others wait for a refresher that died: use more than ``fetch`` can take.
    """

    def __init__(self, name: str, fetch: Fetch, *, lease_seconds: float = 30.0) -> None:
        self.name = name
        self.lease_name = name + LEASE_SUFFIX
        self._fetch = fetch
        self._lease_seconds = lease_seconds
        self._value = ""
        self._use_until = 0.0  # time.time() of this process's copy's end
        self._local = threading.Lock()

    def __repr__(self) -> str:
        return f"<SharedToken {self.name}>"

    def get(self, *, stale: str = "") -> str:
        """A token to use now; with ``stale``, one other than the token just rejected.

        The rejected token is dropped from the shared row (only if the row still holds
        it, so a newer token that someone else wrote survives), then the row's token is
        used if it is newer, else one caller fetches a new token.
        """
        since = self._drop(stale) if stale else None
        with self._local:
            # Threads of one process wait here rather than each asking the database.
            if self._value and self._value != stale and time.time() < self._use_until:
                return self._value
            value, use_until = self._shared(stale, since)
            self._value, self._use_until = value, use_until
            return value

    @property
    def local_value(self) -> str:
        """This process's copy, for masking in messages; "" when it holds none."""
        return self._value

    def clear_local(self) -> None:
        """Forget this process's copy; the next ``get`` reads the shared row."""
        with self._local:
            self._value, self._use_until = "", 0.0

    def _drop(self, stale: str) -> datetime:
        with self._local:
            if self._value == stale:
                self._value, self._use_until = "", 0.0
        ProviderToken.objects.filter(name=self.name, value=stale).update(
            value="", expires_at=None, updated_at=timezone.now()
        )
        return timezone.now()

    def _shared(self, stale: str, since: datetime | None) -> tuple[str, float]:
        """The shared token, fetched first if the row holds none that is good."""
        ProviderToken.objects.get_or_create(name=self.name)
        ProviderToken.objects.get_or_create(name=self.lease_name)
        give_up = time.monotonic() + 2 * self._lease_seconds + 5
        pause = 0.02
        while True:
            found = self._read(stale, since)
            if found is not None:
                return found
            owner = self._claim()
            if owner:
                try:
                    # Someone may have written a token between our read and our claim.
                    found = self._read(stale, since)
                    return found if found is not None else self._refresh()
                finally:
                    self._release(owner)
            if time.monotonic() > give_up:
                raise TransientSendError(
                    f"Timed out waiting for another process to refresh {self.name}.",
                    code="token-wait",
                )
            # Another caller holds the lease: wait for its token, not a second gettoken.
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def _read(self, stale: str, since: datetime | None) -> tuple[str, float] | None:
        row = (
            ProviderToken.objects.filter(name=self.name)
            .values("value", "expires_at", "updated_at")
            .first()
        )
        if row is None or not row["value"]:
            return None
        if row["value"] == stale and (since is None or row["updated_at"] <= since):
            # The token just rejected, not re-issued since: the provider may hand out the
            # same token again, and then it is good.
            return None
        expires_at: datetime | None = row["expires_at"]
        if expires_at is None or expires_at <= timezone.now():
            return None
        return row["value"], expires_at.timestamp()

    def _claim(self) -> str:
        """Take the refresh lease if nobody holds a live one; returns our owner id or ""."""
        now = timezone.now()
        owner = f"{os.getpid()}:{uuid.uuid4().hex}"
        taken = (
            ProviderToken.objects.filter(name=self.lease_name)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__lte=now))
            .update(
                value=owner,
                expires_at=now + timedelta(seconds=self._lease_seconds),
                updated_at=now,
            )
        )
        return owner if taken else ""

    def _release(self, owner: str) -> None:
        ProviderToken.objects.filter(name=self.lease_name, value=owner).update(
            value="", expires_at=None, updated_at=timezone.now()
        )

    def _refresh(self) -> tuple[str, float]:
        asked = time.time()
        try:
            value, lifetime = self._fetch()
        except InDoubtSendError as exc:
            # A token request carries no message: whatever its answer left open (a read
            # timeout, a 5xx, a reply that is not the provider's), nothing was delivered,
            # so the send that needed the token failed plainly and may simply retry.
            raise TransientSendError(
                f"{exc.message} It asked for a token only: no message was sent.", code=exc.code
            ) from None
        use_until = asked + lifetime - _margin(lifetime)
        expires_at = datetime.fromtimestamp(use_until, tz=timezone.get_current_timezone())
        ProviderToken.objects.filter(name=self.name).update(
            value=value, expires_at=expires_at, updated_at=timezone.now()
        )
        logger.info("fetched a new access token for %s, valid %d s", self.name, lifetime)
        return value, use_until
