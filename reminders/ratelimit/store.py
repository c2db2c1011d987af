"""What a place that keeps rate-limit buckets provides to ``reminders.ratelimit``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime


@dataclass
class Held:
    """Buckets as read while they are held: ``tat`` of each paced one (0 when new), and
    until when (epoch seconds) those that are paused are."""

    tat: dict[str, float]
    paused: dict[str, float]
    changed: dict[str, float] = field(default_factory=dict)

    def save(self, tat: dict[str, float]) -> None:
        """The new ``tat`` of the buckets that moved, written when the hold ends."""
        self.changed = tat


class Store(ABC):
    @abstractmethod
    def hold(self, paced: Sequence[str], unlimited: Sequence[str]) -> AbstractContextManager[Held]:
        """Hold the ``paced`` buckets for this caller alone (others wait) and read them,
        with the pauses of the ``unlimited`` ones, which are read but not held; write
        what the caller ``save``\\s when the block ends without an error."""

    @abstractmethod
    def pause(self, name: str, seconds: float, reason: str) -> datetime:
        """Pause ``name`` for ``seconds`` unless it is paused longer already; returns
        until when it is paused."""
