"""The sandbox's fault switches: counted ones ("the next N sends"), and random ones
drawn for each send (``FaultRates``).

Invariants: a counted fault is spent only by a send it strikes. While any rate is set,
each send draws four numbers from the sandbox's one generator, whatever they decide, so
that a seed gives the same faults to the same order of sends; re-seeding (the ``seed``
switch, or a reset) starts the same sequence again. With no rate set nothing is drawn.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .config import FaultRates


@dataclass
class Faults:
    """The switches; counts are "the next N sends", ``slow=None`` means every reply;
    ``rates`` strike at random."""

    busy: int = 0
    http_errors: int = 0
    http_status: int = 500
    lost_replies: int = 0
    errcodes: list[int] = field(default_factory=list)
    gettoken_errcodes: list[int] = field(default_factory=list)
    delay: float = 0.0
    slow: int | None = None
    rates: FaultRates = field(default_factory=FaultRates)

    def counted(self, name: str) -> bool:
        """Whether the count of fault ``name`` strikes this send; spends one if so."""
        left: int = getattr(self, name)
        if left > 0:
            setattr(self, name, left - 1)
        return left > 0


@dataclass(frozen=True)
class Chance:
    """What the random faults decided for one send."""

    http_error: bool = False
    busy: bool = False
    lost_reply: bool = False
    slow_reply: bool = False


def draw(rates: FaultRates, generator: random.Random) -> Chance:
    """Four draws per send while any rate is set, whatever they decide, so that a seed
    gives the same faults to the same order of sends; none otherwise."""
    if not rates.active:
        return Chance()
    draws = [generator.random() for _ in range(4)]
    return Chance(
        http_error=draws[0] < rates.http_error,
        busy=draws[1] < rates.busy,
        lost_reply=draws[2] < rates.lost_reply,
        slow_reply=draws[3] < rates.slow_reply,
    )
