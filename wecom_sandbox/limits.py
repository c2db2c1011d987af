"""The two kinds of limit the sandbox enforces, on its own clock; not thread-safe.

* ``WindowLimit``: at most N accepted sends in any sliding window of W seconds, and a
  caller who goes over is blocked for W seconds (WeCom: "over a minute limit the caller
  is blocked for 60 s"). Used per member (30/minute, 1,000/hour) and per robot (20/minute).
* ``TokenBucket``: the per-second limit over all app sends, a token bucket whose burst
  defaults to one second's worth. A sliding one-second window would answer 45009 to a
  sender that paces itself with a token bucket at exactly the same rate (its burst plus
  one second of refill can land in one window), so the bucket is the fair judge.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Window:
    """At most ``count`` sends in any ``seconds``."""

    count: int
    seconds: float

    @classmethod
    def parse(cls, text: str) -> Window:
        """``"30/60"`` is 30 sends in any 60 seconds."""
        count, _, seconds = text.partition("/")
        try:
            window = cls(int(count), float(seconds))
        except ValueError:
            raise ValueError(f"expected COUNT/SECONDS such as 30/60, got {text!r}") from None
        if window.count < 1 or window.seconds <= 0:
            raise ValueError(f"expected a positive COUNT/SECONDS, got {text!r}")
        return window

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}"


@dataclass
class WindowLimit:
    """The accepted sends of one caller, checked against several windows at once."""

    windows: tuple[Window, ...]
    times: list[float] = field(default_factory=list)
    blocked_until: float = 0.0

    def allows(self, now: float) -> bool:
        """Whether a send at ``now`` fits; one that does not blocks the caller."""
        if now < self.blocked_until:
            return False
        longest = max(window.seconds for window in self.windows)
        stale = bisect_right(self.times, now - longest)
        if stale:
            del self.times[:stale]
        for window in self.windows:
            recent = len(self.times) - bisect_right(self.times, now - window.seconds)
            if recent >= window.count:
                self.blocked_until = now + window.seconds
                return False
        return True

    def count(self, now: float) -> None:
        self.times.append(now)

    def admit(self, now: float) -> bool:
        """Count a send at ``now`` if it fits; say whether it did."""
        if not self.allows(now):
            return False
        self.count(now)
        return True


@dataclass
class TokenBucket:
    """``rate`` sends a second sustained, up to ``burst`` at once; starts full."""

    rate: float
    burst: float
    tokens: float = -1.0
    updated: float = 0.0

    def admit(self, now: float) -> bool:
        if self.tokens < 0:
            self.tokens, self.updated = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
