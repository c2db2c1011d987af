"""SharedToken: one access token for every process, refreshed by one caller at a time."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from reminders.exceptions import TransientSendError
from reminders.models import ProviderToken
from reminders.senders.tokens import LEASE_SUFFIX, SharedToken, token_name


class Provider:
    """Issues numbered tokens and counts how often it was asked."""

    def __init__(self, lifetime: float = 7200.0, delay: float = 0.0) -> None:
        self.calls = 0
        self.lifetime = lifetime
        self.delay = delay
        self._lock = threading.Lock()

    def fetch(self) -> tuple[str, float]:
        with self._lock:
            self.calls += 1
            number = self.calls
        time.sleep(self.delay)
        return f"token-{number}", self.lifetime


def test_token_name__tells_the_credentials_apart_without_the_secret() -> None:
    parts = ("wecom", "qyapi.weixin.qq.com", "ww1", "1000002")
    secret, rotated = "top-secret", "rotated-secret"

    name = token_name(*parts, secret=secret)

    assert name.startswith("wecom:qyapi.weixin.qq.com:ww1:1000002#")
    assert secret not in name
    assert name != token_name(*parts, secret=rotated)
    long_name = token_name("http", "h" * 500, secret=secret)
    assert len(long_name + LEASE_SUFFIX) <= 200


@pytest.mark.django_db
def test_get__the_row_is_the_truth_for_a_second_process() -> None:
    provider = Provider()
    first, second = (SharedToken("t", provider.fetch) for _ in range(2))

    assert first.get() == second.get() == "token-1"
    assert provider.calls == 1
    row = ProviderToken.objects.get(name="t")
    assert row.expires_at - timezone.now() > timedelta(seconds=7200 - 301)


@pytest.mark.django_db
def test_get__a_stale_token_is_dropped_only_if_still_current() -> None:
    provider = Provider()
    first, second = (SharedToken("t", provider.fetch) for _ in range(2))
    assert first.get() == second.get() == "token-1"

    assert first.get(stale="token-1") == "token-2"
    # The second process still holds token-1 and is refused with it: it finds token-2.
    assert second.get(stale="token-1") == "token-2"
    assert provider.calls == 2


@pytest.mark.django_db
def test_get__a_token_reissued_unchanged_after_a_rejection_is_used() -> None:
    calls = []

    def same_again() -> tuple[str, float]:
        calls.append(1)
        return "token-same", 7200.0

    shared = SharedToken("t", same_again)
    assert shared.get() == "token-same"

    assert shared.get(stale="token-same") == "token-same"
    assert len(calls) == 2


@pytest.mark.django_db(transaction=True)
def test_get__waits_for_a_live_refresh_instead_of_fetching_too() -> None:
    provider = Provider()
    ProviderToken.objects.create(
        name="t" + LEASE_SUFFIX, value="other", expires_at=timezone.now() + timedelta(seconds=10)
    )

    def other_process_finishes() -> None:
        time.sleep(0.3)
        ProviderToken.objects.update_or_create(
            name="t",
            defaults={"value": "theirs", "expires_at": timezone.now() + timedelta(hours=1)},
        )
        ProviderToken.objects.filter(name="t" + LEASE_SUFFIX).update(value="", expires_at=None)
        connection.close()

    thread = threading.Thread(target=other_process_finishes)
    thread.start()
    try:
        assert SharedToken("t", provider.fetch).get() == "theirs"
    finally:
        thread.join()
    assert provider.calls == 0


@pytest.mark.django_db
def test_get__takes_over_the_lease_of_a_refresher_that_died() -> None:
    provider = Provider()
    ProviderToken.objects.create(
        name="t" + LEASE_SUFFIX, value="dead", expires_at=timezone.now() + timedelta(seconds=0.3)
    )

    started = time.monotonic()
    assert SharedToken("t", provider.fetch, lease_seconds=0.3).get() == "token-1"

    assert 0.2 < time.monotonic() - started < 3
    assert provider.calls == 1


@pytest.mark.django_db
def test_get__gives_up_waiting_with_a_passing_error() -> None:
    provider = Provider()
    ProviderToken.objects.create(
        name="t" + LEASE_SUFFIX, value="stuck", expires_at=timezone.now() + timedelta(hours=1)
    )

    with pytest.raises(TransientSendError, match="another process"):
        SharedToken("t", provider.fetch, lease_seconds=0.1).get()
    assert provider.calls == 0


@pytest.mark.django_db
def test_get__a_failed_fetch_releases_the_lease() -> None:
    def failing() -> tuple[str, float]:
        raise TransientSendError("gettoken busy", code="-1")

    with pytest.raises(TransientSendError):
        SharedToken("t", failing).get()

    lease = ProviderToken.objects.get(name="t" + LEASE_SUFFIX)
    assert (lease.value, lease.expires_at) == ("", None)


@pytest.mark.django_db(transaction=True)
def test_get__threads_of_many_processes_fetch_once() -> None:
    provider = Provider(delay=0.2)
    tokens: list[str] = []
    barrier = threading.Barrier(8)

    def run() -> None:
        try:
            barrier.wait()
            tokens.append(SharedToken("t", provider.fetch).get())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert tokens == ["token-1"] * 8
    assert provider.calls == 1
