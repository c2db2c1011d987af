"""How fast messages reached the provider, from its delivery timestamps.

Pure functions, shared by ``benchmarks/ratelimit.py`` and the rate-limit integration
tests, so that both judge a run by the same arithmetic.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence


def busiest_window(times: Sequence[float], seconds: float = 1.0) -> tuple[int, float]:
    """The most deliveries in any half-open window ``[t, t + seconds)``, and its start.

    The busiest window always starts at a delivery, so only those starts are tried.
    """
    ordered = sorted(times)
    best, start = 0, ordered[0] if ordered else 0.0
    for i, t in enumerate(ordered):
        count = bisect_left(ordered, t + seconds, lo=i) - i
        if count > best:
            best, start = count, t
    return best, start


def backlog_rate(times: Sequence[float], burst: int) -> float:
    """The paced rate between the first and the last delivery, everything due at once.

    A token bucket lets ``burst`` go at the first instant and paces the rest, so an
    exact limiter at R a second delivers ``n`` messages in ``(n - burst) / R`` seconds:
    ``(n - burst) / span`` is then exactly R, and the burst does not flatter the figure.
    """
    if len(times) < 2:
        return float("nan")
    span = max(times) - min(times)
    return (len(times) - burst) / span if span > 0 else float("inf")
