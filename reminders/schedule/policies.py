"""A kind's timing rules (its policy), and how the settings override them per kind.

Every rule about *when* a kind's messages go lives in one ``Policy``: priority, stagger,
send-by deadline, what becomes of missed occurrences, retry delays, working-day
calendar, and whether the idempotency key is per day or per occurrence. A kind declares
its own in the registry (``reminders.kinds``); ``REMINDERS_KINDS`` overrides any of them
by name, per kind::

    REMINDERS_KINDS = {"daily_report": {"jitter_seconds": 120, "missed": "skip"}}

Invariants: a ``Policy`` is valid once built (every field is checked in
``__post_init__``, naming the field and the reason), and an override names only fields
that exist, so a typo in settings is a system-check error (``reminders.E009``), never a
silently ignored rule. The errors are in the active language (see ``reminders.i18n``:
a kind's policy is built when its module is imported).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..exceptions import RemindersError
from ..i18n import early_gettext as _
from . import timing
from .quiet import BadQuietHours, QuietWindow

PRIORITIES = ("high", "normal", "low")
MISSED_RULES = ("skip", "latest", "compensate")
KEY_GRANULARITIES = ("auto", "day", "occurrence")
DAY_SECONDS = 24 * 3600
_CLOCK = re.compile(r"([01][0-9]|2[0-3]):[0-5][0-9]")


class PolicyError(RemindersError, ImproperlyConfigured):
    """A policy field that does not exist, or a value it cannot take."""


@dataclass(frozen=True)
class Policy:
    """When a kind's messages go. Every duration is in seconds.

    * ``priority``: claim order and reserved capacity (``high``, ``normal``, ``low``).
    * ``jitter_seconds``, ``batches``, ``batch_interval_seconds``: the stagger, a
      deterministic offset in [0, jitter) plus a batch slot by a hash of the recipient.
    * ``send_by``: the latest local time ("12:00") on the occurrence's day a message may
      still go; ``max_lateness_seconds``: how long after its due time. Past either the
      run is not sent late but ``expired``.
    * ``missed``: an occurrence that passed unsent (downtime, a pause): ``skip`` them
      all, run the ``latest`` (the others skipped), or ``compensate`` (made up at the
      next occurrence, at most ``compensate_max_age_seconds`` old).
    * ``retry_delays``: before each retry of a passing error; empty: the setting
      ``REMINDERS_RETRY_DELAYS``.
    * ``calendar``: the working-day calendar occurrences must fall on; "": every day.
    * ``key_per``: the idempotency key's granularity: ``day`` (one message a local
      day), ``occurrence``, or ``auto`` (per day for a schedule firing at most daily).
    * ``mandatory``: its recipients cannot opt out of it (``reminders.preferences``).
    * ``quiet_hours``: local hours its messages wait out ("21:00-08:30"; "": none), unless
      the recipient set quiet hours of their own; ``quiet_calendar``: a working-day
      calendar whose rest days are quiet all day too; ``breaks_quiet_hours``: it goes
      whatever the quiet hours (an inquiry alert). A message due inside them is
      deferred to their end, never sent past its deadline (``expired``, saying why).
    * ``digest_seconds``: fold a recipient's occurrences due within one window of this
      many seconds (on the local clock, from midnight) into one message sent at the
      window's end (staggered): "3 follow-ups due: ..." (``reminders.engine.digests``);
      0: each goes on its own, unless its recipient moved the kind to a digest
      (``REMINDERS_DIGEST_SECONDS`` is then the window).
    * ``throttle_per_hour``: at most this many messages of the kind an hour to one
      recipient (a digest counts as one); the excess waits and folds into one digest
      when the hour allows, never dropped. 0: no throttle.
    """

    priority: str = "normal"
    jitter_seconds: int = 0
    batches: int = 1
    batch_interval_seconds: int = 60
    send_by: str = ""
    max_lateness_seconds: int | None = None
    missed: str = "latest"
    compensate_max_age_seconds: int = 7 * 24 * 3600
    retry_delays: tuple[int, ...] = ()
    calendar: str = ""
    key_per: str = "auto"
    mandatory: bool = False
    quiet_hours: str = ""
    quiet_calendar: str = ""
    breaks_quiet_hours: bool = False
    digest_seconds: int = 0
    throttle_per_hour: int = 0

    def __post_init__(self) -> None:
        _one_of("priority", self.priority, PRIORITIES)
        _one_of("missed", self.missed, MISSED_RULES)
        _one_of("key_per", self.key_per, KEY_GRANULARITIES)
        _whole("jitter_seconds", self.jitter_seconds, minimum=0)
        _whole("batches", self.batches, minimum=1)
        _whole("batch_interval_seconds", self.batch_interval_seconds, minimum=0)
        _whole("compensate_max_age_seconds", self.compensate_max_age_seconds, minimum=1)
        _whole("digest_seconds", self.digest_seconds, minimum=0)
        if self.digest_seconds > DAY_SECONDS:
            raise PolicyError(
                _("digest_seconds must be at most a day (%(day)d), not %(value)r.")
                % {"day": DAY_SECONDS, "value": self.digest_seconds}
            )
        _whole("throttle_per_hour", self.throttle_per_hour, minimum=0)
        if self.max_lateness_seconds is not None:
            _whole("max_lateness_seconds", self.max_lateness_seconds, minimum=1)
        if self.send_by and not (isinstance(self.send_by, str) and _CLOCK.fullmatch(self.send_by)):
            raise PolicyError(
                _("send_by must be a local time as HH:MM, not %(value)r.") % {"value": self.send_by}
            )
        if not isinstance(self.retry_delays, tuple):
            raise PolicyError(_("retry_delays must be a tuple of seconds."))
        for delay in self.retry_delays:
            _whole("retry_delays", delay, minimum=1)
        for name in ("mandatory", "breaks_quiet_hours"):
            if not isinstance(getattr(self, name), bool):
                raise PolicyError(
                    _("%(name)s must be True or False, not %(value)r.")
                    % {"name": name, "value": getattr(self, name)}
                )
        if self.quiet_hours:
            try:
                QuietWindow.parse(self.quiet_hours)
            except BadQuietHours as exc:
                raise PolicyError(f"quiet_hours: {exc}") from None
        if not isinstance(self.quiet_calendar, str):
            raise PolicyError(
                _("quiet_calendar must be a calendar's name, not %(value)r.")
                % {"value": self.quiet_calendar}
            )
        if not isinstance(self.calendar, str):
            raise PolicyError(
                _("calendar must be a calendar's name, not %(value)r.") % {"value": self.calendar}
            )

    def stagger(self, recipient: str, spread: int = 0) -> timedelta:
        """How long after a moment ``recipient``'s run of this kind goes
        (``timing.stagger``); a kind with no jitter of its own is spread over ``spread``
        seconds (the end of quiet hours, a window's digests), or not at all."""
        return timing.stagger(
            recipient=recipient,
            jitter_seconds=self.jitter_seconds or spread,
            batches=self.batches,
            batch_interval_seconds=self.batch_interval_seconds,
        )

    def deadline(self, occurrence: datetime, due_at: datetime, tz_name: str) -> datetime | None:
        """The last moment a run of ``occurrence`` (due at ``due_at``, staggered) may be
        sent: ``send_by`` on the occurrence's local day in ``tz_name``, or
        ``max_lateness_seconds`` after ``due_at``, the earlier of the two; None without
        either."""
        limits = []
        if self.send_by:
            limits.append(timing.local_time_on_day(occurrence, tz_name, self.send_by))
        if self.max_lateness_seconds is not None:
            limits.append(due_at + timedelta(seconds=self.max_lateness_seconds))
        return min(limits, default=None)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Policy:
        """This policy with ``overrides`` (field name to value) applied; raises
        ``PolicyError`` naming an unknown field or a bad value."""
        if not isinstance(overrides, Mapping):
            raise PolicyError(
                _("A kind's overrides must be a dict, not %(value)r.") % {"value": overrides}
            )
        known = {field.name for field in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise PolicyError(
                _("Unknown policy setting(s) %(unknown)s (known: %(known)s).")
                % {"unknown": ", ".join(unknown), "known": ", ".join(sorted(known))}
            )
        values = dict(overrides)
        if isinstance(values.get("retry_delays"), list):
            values["retry_delays"] = tuple(values["retry_delays"])
        return replace(self, **values)


def _one_of(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise PolicyError(
            _("%(name)s must be one of %(allowed)s, not %(value)r.")
            % {"name": name, "allowed": ", ".join(allowed), "value": value}
        )


def _whole(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PolicyError(
            _("%(name)s must be a whole number of at least %(minimum)d, not %(value)r.")
            % {"name": name, "minimum": minimum, "value": value}
        )
