"""Buckets in a Django cache shared by every process and host (Redis, Memcached).

``REMINDERS_RATE_LIMIT_CACHE`` names the cache. A bucket is held by adding its lock key
(``cache.add`` is atomic on the shared backends; the system checks refuse the others),
in name order so that two callers never wait for each other in a circle. A holder that
dies lets go when its lock expires. Pauses are kept in the cache too: the
``RateBucket`` table stays empty.
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from django.core.cache import caches

from .store import Held, Store

# A hold lasts milliseconds; a lock this old belongs to a process that died holding it.
LOCK_SECONDS = 10.0
# How long to wait for a held bucket before giving up: longer than a dead holder's lock.
WAIT_SECONDS = LOCK_SECONDS + 2


class CacheStore(Store):
    def __init__(self, alias: str) -> None:
        self.cache = caches[alias]

    @contextmanager
    def hold(self, paced: Sequence[str], unlimited: Sequence[str]) -> Iterator[Held]:
        token = uuid.uuid4().hex
        locks: list[str] = []
        try:
            for name in sorted(paced):
                locks.append(self._lock(name, token))
            tat_keys = {name: _key("tat", name) for name in paced}
            pause_keys = {name: _key("pause", name) for name in [*paced, *unlimited]}
            found = self.cache.get_many([*tat_keys.values(), *pause_keys.values()])
            held = Held(
                tat={name: float(found.get(key, 0.0)) for name, key in tat_keys.items()},
                paused={name: found[key][0] for name, key in pause_keys.items() if key in found},
            )
            yield held
            if held.changed:
                # An entry may vanish once its time has passed: a missing bucket reads as
                # 0, which the algorithm treats exactly like a time in the past.
                ahead = max(held.changed.values()) - time.time()
                self.cache.set_many(
                    {tat_keys[name]: value for name, value in held.changed.items()},
                    timeout=max(1, math.ceil(ahead) + 1),
                )
        finally:
            still_ours = [
                key for key, value in self.cache.get_many(locks).items() if value == token
            ]
            self.cache.delete_many(still_ours)

    def _lock(self, name: str, token: str) -> str:
        key = _key("lock", name)
        deadline = time.monotonic() + WAIT_SECONDS
        pause = 0.0005
        while not self.cache.add(key, token, timeout=LOCK_SECONDS):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Rate limit {name!r} was held by another process for over {WAIT_SECONDS:g} s."
                )
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return key

    def pause(self, name: str, seconds: float, reason: str) -> datetime:
        with self.hold([name], []) as held:
            until = max(held.paused.get(name, 0.0), time.time() + seconds)
            if until > held.paused.get(name, 0.0):
                self.cache.set(_key("pause", name), (until, reason), timeout=math.ceil(seconds) + 1)
        return datetime.fromtimestamp(until, tz=UTC)


def _key(kind: str, name: str) -> str:
    # Names hold member ids: hashed, any name is a valid key for every backend.
    digest = hashlib.blake2b(name.encode(), digest_size=16).hexdigest()
    return f"reminders:rate:{kind}:{digest}"
