"""The app's settings, read from ``django.conf.settings`` on every access.

Nothing is copied at import time, so ``override_settings`` works everywhere. A value that
cannot work raises ``ImproperlyConfigured`` saying why, in the active language (see
``reminders.i18n``).

The defaults the properties fall back on, and the reference of every setting (name,
default, meaning) that the documentation is generated from, are in
``reminders.settings_reference``, re-exported here.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from .callback.crypto import Credentials
from .i18n import early_gettext as _
from .links import link_problem
from .settings_reference import CLUSTER_DEFAULTS, DEFAULT_CHANNELS, SETTINGS, Setting

# Keys of ``REMINDERS_CLUSTER`` beside the defaults'; ``queue_limit`` is ``workers``
# unless set (django-q2's own default is their square: see ``EngineBroker``). Keys of a
# django-q2 ``Q_CLUSTER`` that pick another broker, or drive the host's schedules, have
# no meaning for the engine's cluster.
CLUSTER_KEYS = {*CLUSTER_DEFAULTS, "timeout", "retry", "queue_limit"}


def _positive_number(name: str, value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(
            _("%(name)s must be a number, got %(value)r.") % {"name": name, "value": value}
        ) from None
    if number <= 0:
        raise ImproperlyConfigured(
            _("%(name)s must be greater than 0, got %(value)r.") % {"name": name, "value": value}
        )
    return number


class Settings:
    """Typed, lazily read ``REMINDERS_*`` settings with their defaults."""

    def _get(self, name: str, default: Any) -> Any:
        return getattr(django_settings, f"REMINDERS_{name}", default)

    @property
    def CHANNELS(self) -> dict[str, dict[str, Any]]:
        channels = self._get("CHANNELS", DEFAULT_CHANNELS)
        if not isinstance(channels, dict) or not channels:
            raise ImproperlyConfigured(_("REMINDERS_CHANNELS must be a non-empty dict of aliases."))
        return channels

    @property
    def KINDS(self) -> dict[str, dict[str, Any]]:
        """Per-kind policy overrides: ``{"daily_report": {"jitter_seconds": 120}}``."""
        kinds = self._get("KINDS", {})
        if not isinstance(kinds, dict) or not all(isinstance(v, dict) for v in kinds.values()):
            raise ImproperlyConfigured(
                _("REMINDERS_KINDS must be a dict of kind names to dicts of policy settings.")
            )
        return kinds

    @property
    def BUILDERS(self) -> dict[str, str]:
        """Message builders a CRM plugs in by kind, as dotted paths:
        ``{"follow_up": "crm.reminders.build_follow_up"}`` (``reminders.messages.builders``)."""
        builders = self._get("BUILDERS", {})
        if not isinstance(builders, dict) or not all(
            isinstance(kind, str) and isinstance(path, str) for kind, path in builders.items()
        ):
            raise ImproperlyConfigured(
                _("REMINDERS_BUILDERS must be a dict of kind names to dotted paths of builders.")
            )
        return builders

    @property
    def REPORT_URL(self) -> str:
        """Where reports are written: the link of a report reminder whose payload has no
        ``url``; empty: none."""
        url = self._get("REPORT_URL", "") or ""
        problem = link_problem(url) if url else None
        if problem is not None:
            raise ImproperlyConfigured(f"REMINDERS_REPORT_URL {problem}")
        return str(url)

    @property
    def DEFAULT_CHANNEL(self) -> str:
        return str(self._get("DEFAULT_CHANNEL", "console"))

    @property
    def LEASE_SECONDS(self) -> int:
        return int(_positive_number("REMINDERS_LEASE_SECONDS", self._get("LEASE_SECONDS", 300)))

    @property
    def RETRY_DELAYS(self) -> list[int]:
        raw = self._get("RETRY_DELAYS", [60, 300, 900])
        items: Sequence[Any] = raw.split(",") if isinstance(raw, str) else raw
        delays = [int(_positive_number("REMINDERS_RETRY_DELAYS", item)) for item in items]
        return delays

    @property
    def TICK_SECONDS(self) -> float:
        return _positive_number("REMINDERS_TICK_SECONDS", self._get("TICK_SECONDS", 1.0))

    @property
    def CALLBACK(self) -> Credentials | None:
        """The WeCom callback's credentials (``WECOM_CALLBACK_TOKEN``,
        ``WECOM_CALLBACK_AES_KEY`` and ``WECOM_CORP_ID``, the receive id), or None while
        neither of the first two is set. Half a set-up, no corp id or a key WeCom could
        not have given is ``ImproperlyConfigured`` (system check ``reminders.E015``)."""
        token = getattr(django_settings, "WECOM_CALLBACK_TOKEN", "")
        key = getattr(django_settings, "WECOM_CALLBACK_AES_KEY", "")
        if not token and not key:
            return None
        if not token or not key:
            raise ImproperlyConfigured(
                _("WECOM_CALLBACK_TOKEN and WECOM_CALLBACK_AES_KEY are set together or not at all.")
            )
        corp = str(getattr(django_settings, "WECOM_CORP_ID", ""))
        if not corp:
            raise ImproperlyConfigured(
                _("The callback needs WECOM_CORP_ID: WeCom encrypts for the corp.")
            )
        return Credentials(token=token, encoding_aes_key=key, receive_id=corp)

    @property
    def CALLBACK_AGENT_ID(self) -> str:
        """The app whose clicks the callback takes (its agent id): ``WECOM_AGENT_ID``,
        else the one agent the channels name (``OPTIONS["agent_id"]``), else ``""``
        (none to check against). Channels naming several while ``WECOM_AGENT_ID`` is
        unset is ``ImproperlyConfigured`` (system check ``reminders.E015``): which app's
        callback this is cannot be told."""
        agent = str(getattr(django_settings, "WECOM_AGENT_ID", "")).strip()
        if agent:
            return agent
        named = sorted(
            {
                str(options["agent_id"]).strip()
                for channel in self.CHANNELS.values()
                if isinstance(channel, dict)
                and isinstance(options := channel.get("OPTIONS"), dict)
                and str(options.get("agent_id") or "").strip()
            }
        )
        if len(named) > 1:
            raise ImproperlyConfigured(
                _(
                    "The callback takes the clicks of one WeCom app, and the channels name "
                    "agents %(agents)s: set WECOM_AGENT_ID to the one whose callback this is."
                )
                % {"agents": ", ".join(named)}
            )
        return named[0] if named else ""

    @property
    def CALLBACK_MAX_SKEW_SECONDS(self) -> float:
        """How far a callback's timestamp may be from our clock, either way: an older
        request is refused as a replay (its nonce is not kept longer than this)."""
        return _positive_number(
            "REMINDERS_CALLBACK_MAX_SKEW_SECONDS", self._get("CALLBACK_MAX_SKEW_SECONDS", 300)
        )

    @property
    def CLAIM_BATCH(self) -> int:
        """Runs claimed per scheduler tick, at most."""
        return int(_positive_number("REMINDERS_CLAIM_BATCH", self._get("CLAIM_BATCH", 500)))

    @property
    def MAX_IN_FLIGHT(self) -> int:
        """Runs one process keeps claimed but not yet started, at most (back-pressure)."""
        return int(_positive_number("REMINDERS_MAX_IN_FLIGHT", self._get("MAX_IN_FLIGHT", 1000)))

    @property
    def RUNS_PER_JOB(self) -> int:
        """Runs handed to one django-q2 task; fewer, larger tasks keep the broker light."""
        return int(_positive_number("REMINDERS_RUNS_PER_JOB", self._get("RUNS_PER_JOB", 20)))

    @property
    def DIGEST_SECONDS(self) -> int:
        """The window of a kind a recipient moved to a digest, where the kind's policy
        has none of its own (``Policy.digest_seconds``): at most a day."""
        value = int(_positive_number("REMINDERS_DIGEST_SECONDS", self._get("DIGEST_SECONDS", 3600)))
        if value > 24 * 3600:
            raise ImproperlyConfigured(
                f"REMINDERS_DIGEST_SECONDS must be at most a day (86400), not {value}."
            )
        return value

    @property
    def PLAN_AHEAD_SECONDS(self) -> float:
        """How far ahead of their time runs are planned (materialized); 0: when due."""
        value = self._get("PLAN_AHEAD_SECONDS", 3600)
        if value == 0 or value == "0":
            return 0.0
        return _positive_number("REMINDERS_PLAN_AHEAD_SECONDS", value)

    @property
    def MISSED_RUNS_RECORDED(self) -> int:
        """Missed occurrences recorded as skipped after downtime, per task and tick."""
        return int(self._get("MISSED_RUNS_RECORDED", 50))

    @property
    def MISSED_GRACE_SECONDS(self) -> float:
        """How late an occurrence of a kind whose missed rule is ``skip`` may still be
        planned: one planned later than this after its time passed while nothing ran."""
        return _positive_number(
            "REMINDERS_MISSED_GRACE_SECONDS", self._get("MISSED_GRACE_SECONDS", 300.0)
        )

    @property
    def CALENDAR_WARN_DAYS(self) -> int:
        """How many days before a working-day calendar in use stops being covered ops
        are warned (the alert, the banners); 0: never."""
        raw = self._get("CALENDAR_WARN_DAYS", 60)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ImproperlyConfigured(
                _("%(name)s must be a whole number of at least %(minimum)d, not %(value)r.")
                % {"name": "REMINDERS_CALENDAR_WARN_DAYS", "minimum": 0, "value": raw}
            )
        return raw

    @property
    def RATE_MAX_WAIT(self) -> float:
        """Seconds a worker may hold a run waiting for its rate-limit slot; later slots
        go back in line for another claim."""
        return _positive_number("REMINDERS_RATE_MAX_WAIT", self._get("RATE_MAX_WAIT", 2.0))

    @property
    def RATE_BORROW_SECONDS(self) -> float:
        """How far ahead a send may take the other priority class's idle rate-limit
        slots: the longest a high send waits behind bulk sends that borrowed its share."""
        return _positive_number(
            "REMINDERS_RATE_BORROW_SECONDS", self._get("RATE_BORROW_SECONDS", 0.5)
        )

    @property
    def MAX_PAUSE_SECONDS(self) -> float:
        """The longest a provider's "too fast" (Retry-After, a pause) may hold a channel;
        longer ones are capped, and logged."""
        return _positive_number(
            "REMINDERS_MAX_PAUSE_SECONDS", self._get("MAX_PAUSE_SECONDS", 300.0)
        )

    @property
    def RATE_LIMIT_CACHE(self) -> str:
        """The alias of a Django cache shared by every process that keeps the rate limits;
        empty: the database keeps them."""
        return str(self._get("RATE_LIMIT_CACHE", "") or "")

    @property
    def SHUTDOWN_GRACE(self) -> float:
        return _positive_number("REMINDERS_SHUTDOWN_GRACE", self._get("SHUTDOWN_GRACE", 30.0))

    @property
    def MAX_WORKER_DEATHS(self) -> int:
        """Workers that may die while sending one run's message before the run is given
        up as ``unknown`` (a message that kills its worker every time)."""
        return int(
            _positive_number("REMINDERS_MAX_WORKER_DEATHS", self._get("MAX_WORKER_DEATHS", 5))
        )

    @property
    def MAX_JOB_FAILURES(self) -> int:
        """Jobs in a row that may end before starting a run (a builder that hangs until
        the job's timeout, or breaks its job) before the run is failed, and ops told."""
        raw = self._get("MAX_JOB_FAILURES", 3)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise ImproperlyConfigured(
                _("%(name)s must be a whole number of at least %(minimum)d, not %(value)r.")
                % {"name": "REMINDERS_MAX_JOB_FAILURES", "minimum": 1, "value": raw}
            )
        return raw

    @property
    def RUN_TIMEOUT(self) -> float:
        """Seconds a run may be ``running`` before ``run_stuck`` reports it (once)."""
        return _positive_number("REMINDERS_RUN_TIMEOUT", self._get("RUN_TIMEOUT", 600))

    @property
    def RETENTION_DAYS(self) -> float:
        """What ``reminders_prune`` deletes unless ``--older-than`` says otherwise: finished
        runs and ledger rows older than this many days (``reminders.engine.retention``)."""
        return _positive_number("REMINDERS_RETENTION_DAYS", self._get("RETENTION_DAYS", 90))

    @property
    def CLUSTER(self) -> dict[str, Any]:
        """The engine's django-q2 cluster: ``REMINDERS_CLUSTER`` over ``CLUSTER_DEFAULTS``,
        with ``timeout`` at 0.8 of the lease and ``retry`` a minute past it unless set.
        The host's own ``Q_CLUSTER`` is never read here."""
        raw = self._get("CLUSTER", {})
        if not isinstance(raw, dict):
            raise ImproperlyConfigured(
                _("REMINDERS_CLUSTER must be a dict of django-q2 cluster settings, got %(value)r.")
                % {"value": raw}
            )
        unknown = sorted(set(raw) - CLUSTER_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                _(
                    "REMINDERS_CLUSTER has keys the engine's cluster does not take: "
                    "%(unknown)s. It is always django-q2's ORM broker and never runs "
                    "django-q2 schedules; it takes: %(known)s."
                )
                % {"unknown": ", ".join(unknown), "known": ", ".join(sorted(CLUSTER_KEYS))}
            )
        lease = self.LEASE_SECONDS
        cluster = {
            **CLUSTER_DEFAULTS,
            "timeout": max(int(lease * 0.8), 1),
            "retry": lease + 60,
            **raw,
        }
        name, workers = cluster["name"], cluster["workers"]
        if not isinstance(name, str) or not name:
            raise ImproperlyConfigured(
                _("REMINDERS_CLUSTER['name'] must be a name, got %(value)r.") % {"value": name}
            )
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ImproperlyConfigured(
                _(
                    "REMINDERS_CLUSTER['workers'] must be a whole number of at least 1, "
                    "got %(value)r."
                )
                % {"value": workers}
            )
        if cluster["timeout"] is not None:
            _positive_number("REMINDERS_CLUSTER['timeout']", cluster["timeout"])
        _positive_number("REMINDERS_CLUSTER['retry']", cluster["retry"])
        return cluster

    @property
    def JOB_TIMEOUT(self) -> float | None:
        """Seconds django-q2 lets one job run before it kills the worker
        (``REMINDERS_CLUSTER['timeout']``); None when it sets none."""
        timeout = self.CLUSTER["timeout"]
        return None if timeout is None else float(timeout)

    @property
    def HIGH_RATE_SHARE(self) -> float:
        """The share of each paced channel's rate kept for ``high`` priority runs, the
        rest for bulk (``normal``, ``low``) ones; each may borrow the other's idle
        slots (``RATE_BORROW_SECONDS``). 0: no split, one bucket in order."""
        raw = self._get("HIGH_RATE_SHARE", 0.2)
        try:
            share = float(raw)
        except (TypeError, ValueError):
            share = -1.0
        if isinstance(raw, bool) or not 0 <= share < 1:
            raise ImproperlyConfigured(
                _(
                    "REMINDERS_HIGH_RATE_SHARE must be a number from 0 to less than 1, "
                    "got %(value)r."
                )
                % {"value": raw}
            )
        return share

    @property
    def HIGH_WORKERS(self) -> int:
        """Workers of the cluster that executes ``high`` priority runs only, beside the
        bulk one; 0: no such cluster, high runs share the bulk workers."""
        raw = self._get("HIGH_WORKERS", 1)
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise ImproperlyConfigured(
                _("REMINDERS_HIGH_WORKERS must be a whole number of at least 0, got %(value)r.")
                % {"value": raw}
            )
        return raw

    @property
    def RECIPIENT_RESOLVER(self) -> str:
        """The dotted path of a callable, user -> WeCom member id; empty: the user's
        ``USER_ID_FIELD`` (``reminders.intake.users``)."""
        return str(self._get("RECIPIENT_RESOLVER", "") or "")

    @property
    def USER_ID_FIELD(self) -> str:
        """The user model's attribute that holds a user's member id; empty: its
        ``USERNAME_FIELD``."""
        return str(self._get("USER_ID_FIELD", "") or "")

    @property
    def WORKER_ID(self) -> str:
        return str(self._get("WORKER_ID", "") or socket.gethostname())


settings = Settings()

__all__ = [
    "CLUSTER_DEFAULTS",
    "CLUSTER_KEYS",
    "DEFAULT_CHANNELS",
    "SETTINGS",
    "Setting",
    "settings",
]
