"""The ops app's settings, read from ``django.conf.settings`` on every access.

Nothing is copied at import time, so ``override_settings`` works everywhere; a value
that cannot work raises ``ImproperlyConfigured`` where it is read, saying why in the
active language, and the system checks (``ops.checks``) read every one of them at
start-up.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from reminders.conf import Setting
from reminders.i18n import early_gettext as _

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_ALERT_CHANNELS: dict[str, dict[str, Any]] = {
    "admins": {"BACKEND": "ops.alert_channels.MailAdmins"},
}


def _number(name: str, value: Any, *, minimum: float = 0.0, inclusive: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ImproperlyConfigured(
            _("%(name)s must be a number, got %(value)r.") % {"name": name, "value": value}
        ) from None
    if isinstance(value, bool) or number < minimum or (number == minimum and not inclusive):
        message = (
            _("%(name)s must be at least %(minimum)s, got %(value)r.")
            if inclusive
            else _("%(name)s must be greater than %(minimum)s, got %(value)r.")
        )
        raise ImproperlyConfigured(
            message % {"name": name, "minimum": f"{minimum:g}", "value": value}
        )
    return number


def _items(value: Any) -> list[Any]:
    """A list from a list or tuple, or from a comma-separated string (the environment)."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    if isinstance(value, Sequence):
        return list(value)
    raise ImproperlyConfigured(
        _("Expected a list or a comma-separated string, got %(value)r.") % {"value": value}
    )


class Settings:
    """Typed, lazily read ``OPS_*`` settings with their defaults."""

    def _get(self, name: str, default: Any) -> Any:
        return getattr(django_settings, f"OPS_{name}", default)

    # Alerts ---------------------------------------------------------------------------

    @property
    def ALERT_CHANNELS(self) -> dict[str, dict[str, Any]]:
        """Where alerts go, configured like ``CACHES``: alias -> ``BACKEND`` (a dotted
        path to an ``ops.alert_channels.AlertChannel``) and ``OPTIONS``. Empty: alerts
        are recorded and nobody is told."""
        channels = self._get("ALERT_CHANNELS", DEFAULT_ALERT_CHANNELS)
        if not isinstance(channels, dict) or not all(
            isinstance(config, dict) and "BACKEND" in config for config in channels.values()
        ):
            raise ImproperlyConfigured(
                _("OPS_ALERT_CHANNELS must be a dict of aliases to dicts with a BACKEND.")
            )
        return channels

    @property
    def ALERT_WINDOW_SECONDS(self) -> float:
        """After an alert of a group goes out, the group's further events wait this long
        and go together in one digest."""
        return _number("OPS_ALERT_WINDOW_SECONDS", self._get("ALERT_WINDOW_SECONDS", 600))

    @property
    def ALERT_WINDOWS(self) -> dict[str, float]:
        """Per alert type, a window other than ``ALERT_WINDOW_SECONDS``."""
        raw = self._get("ALERT_WINDOWS", {})
        if not isinstance(raw, dict):
            raise ImproperlyConfigured(_("OPS_ALERT_WINDOWS must be a dict of alert types."))
        return {str(k): _number(f"OPS_ALERT_WINDOWS[{k!r}]", v) for k, v in raw.items()}

    def window_for(self, alert_type: str) -> float:
        return self.ALERT_WINDOWS.get(alert_type, self.ALERT_WINDOW_SECONDS)

    @property
    def ALERT_RETRY_DELAYS(self) -> list[float]:
        """Seconds before each new attempt of an alert a channel failed to deliver; after
        the last one it is given up (``failed``)."""
        raw = self._get("ALERT_RETRY_DELAYS", [60, 300, 900, 3600])
        return [_number("OPS_ALERT_RETRY_DELAYS", item) for item in _items(raw)]

    @property
    def ALERT_LEASE_SECONDS(self) -> float:
        """How long a delivery being sent is held before another step may try it again
        (its sender died mid-way): alerts are delivered at least once."""
        return _number("OPS_ALERT_LEASE_SECONDS", self._get("ALERT_LEASE_SECONDS", 300))

    @property
    def ALERT_LANGUAGE(self) -> str:
        """The language alert texts are written in (``en``, ``zh-hans``)."""
        return str(self._get("ALERT_LANGUAGE", "") or django_settings.LANGUAGE_CODE)

    @property
    def SUMMARY_HOUR(self) -> int | None:
        """The local hour from which the morning summary goes (``ops.morning``); None:
        no summary."""
        value = self._get("SUMMARY_HOUR", None)
        if value is None or value == "":
            return None
        hour = _number("OPS_SUMMARY_HOUR", value, minimum=0, inclusive=True)
        if hour != int(hour) or hour > 23:
            raise ImproperlyConfigured(
                _("OPS_SUMMARY_HOUR must be a whole hour from 0 to 23, got %(value)r.")
                % {"value": value}
            )
        return int(hour)

    @property
    def ADMIN_URL(self) -> str:
        """The admin's address as ops reach it (``https://crm.example.com/admin/``), for
        the links of alert cards; ``""``: none is known."""
        value = self._get("ADMIN_URL", "")
        if not isinstance(value, str):
            raise ImproperlyConfigured(
                _("OPS_ADMIN_URL must be text, got %(value)r.") % {"value": value}
            )
        if value and not value.startswith(("https://", "http://")):
            raise ImproperlyConfigured(
                _("OPS_ADMIN_URL must be an absolute http(s) address, got %(value)r.")
                % {"value": value}
            )
        return value if not value or value.endswith("/") else value + "/"

    @property
    def ALERT_INTERVAL_SECONDS(self) -> float:
        """Seconds between two steps of ``ops_alerts --loop``."""
        return _number("OPS_ALERT_INTERVAL_SECONDS", self._get("ALERT_INTERVAL_SECONDS", 15))

    @property
    def ALERT_RETENTION_DAYS(self) -> float:
        """Alerts (with their events and deliveries) older than this many days are
        deleted by the alert step, a batch per step; 0 keeps them for ever."""
        return _number(
            "OPS_ALERT_RETENTION_DAYS",
            self._get("ALERT_RETENTION_DAYS", 90),
            inclusive=True,
        )

    @property
    def HEARTBEAT_MAX_AGE_SECONDS(self) -> float:
        """A scheduler that has not ticked for longer is stale: an alert, and /healthz
        failing when no scheduler is fresher."""
        return _number("OPS_HEARTBEAT_MAX_AGE_SECONDS", self._get("HEARTBEAT_MAX_AGE_SECONDS", 60))

    @property
    def SUCCESS_RATE_THRESHOLD(self) -> float:
        """A channel whose share of runs sent, among those that ended in the window, is
        under this is alerted (0 turns the check off)."""
        value = _number(
            "OPS_SUCCESS_RATE_THRESHOLD",
            self._get("SUCCESS_RATE_THRESHOLD", 0.9),
            inclusive=True,
        )
        if value > 1:
            raise ImproperlyConfigured(
                _("OPS_SUCCESS_RATE_THRESHOLD must be 0 to 1, got %(value)s.") % {"value": value}
            )
        return value

    @property
    def SUCCESS_RATE_WINDOW_SECONDS(self) -> float:
        return _number(
            "OPS_SUCCESS_RATE_WINDOW_SECONDS", self._get("SUCCESS_RATE_WINDOW_SECONDS", 900)
        )

    @property
    def SUCCESS_RATE_MIN_RUNS(self) -> int:
        """Fewer runs ended in the window say nothing: no alert."""
        return int(
            _number(
                "OPS_SUCCESS_RATE_MIN_RUNS",
                self._get("SUCCESS_RATE_MIN_RUNS", 20),
                minimum=1,
                inclusive=True,
            )
        )

    # WeCom's count against the ledger ----------------------------------------------------

    @property
    def STATISTICS_CHECK(self) -> bool:
        """Whether the alert step compares each WeCom app's count of yesterday's messages
        with the ledger's (``ops.statistics``)."""
        return bool(self._get("STATISTICS_CHECK", True))

    @property
    def STATISTICS_HOUR(self) -> int:
        """The hour of the Beijing day (0-23) from which yesterday is compared."""
        value = _number("OPS_STATISTICS_HOUR", self._get("STATISTICS_HOUR", 1), inclusive=True)
        if value >= 24 or value != int(value):
            raise ImproperlyConfigured(
                _("OPS_STATISTICS_HOUR must be a whole hour, 0 to 23, got %(value)s.")
                % {"value": value}
            )
        return int(value)

    @property
    def STATISTICS_TOLERANCE(self) -> int:
        """Messages the two counts may differ by without an alert."""
        return int(
            _number(
                "OPS_STATISTICS_TOLERANCE", self._get("STATISTICS_TOLERANCE", 0), inclusive=True
            )
        )

    @property
    def STATISTICS_TOLERANCE_RATIO(self) -> float:
        """A share of the larger count the two may differ by (the larger of this and
        ``STATISTICS_TOLERANCE`` applies)."""
        value = _number(
            "OPS_STATISTICS_TOLERANCE_RATIO",
            self._get("STATISTICS_TOLERANCE_RATIO", 0.0),
            inclusive=True,
        )
        if value > 1:
            raise ImproperlyConfigured(
                _("OPS_STATISTICS_TOLERANCE_RATIO must be 0 to 1, got %(value)s.")
                % {"value": value}
            )
        return value

    def statistics_tolerance(self, ours: int, theirs: int) -> int:
        """How far the counts ``ours`` and ``theirs`` may differ without an alert."""
        relative = int(self.STATISTICS_TOLERANCE_RATIO * max(ours, theirs))
        return max(self.STATISTICS_TOLERANCE, relative)

    # Metrics and health ------------------------------------------------------------------

    # WeCom's daily quota -------------------------------------------------------------

    @property
    def SEATS(self) -> int | None:
        """The corp's seats: WeCom allows seats x ``PER_SEAT_DAILY`` (200) person-messages
        of app messages a Beijing day per corp. None (the default): no quota known,
        nothing compared."""
        value = getattr(django_settings, "OPS_WECOM_SEATS", None)  # not WECOM_*: ours
        if value is None or value == "":
            return None
        number = _number("OPS_WECOM_SEATS", value, minimum=1, inclusive=True)
        if number != int(number):
            raise ImproperlyConfigured(
                _("OPS_WECOM_SEATS must be a whole number of seats, got %(value)r.")
                % {"value": value}
            )
        return int(number)

    @property
    def METRICS_TOKEN(self) -> str:
        """A bearer token that opens ``/metrics``; empty: none does."""
        return str(self._get("METRICS_TOKEN", "") or "")

    @property
    def METRICS_ALLOWED_NETWORKS(self) -> list[Network]:
        """Networks (CIDRs) whose ``REMOTE_ADDR`` may read ``/metrics`` without a token."""
        networks = []
        for item in _items(self._get("METRICS_ALLOWED_NETWORKS", [])):
            try:
                networks.append(ipaddress.ip_network(str(item).strip(), strict=False))
            except ValueError:
                raise ImproperlyConfigured(
                    _("OPS_METRICS_ALLOWED_NETWORKS: %(value)r is not a network (CIDR).")
                    % {"value": item}
                ) from None
        return networks

    @property
    def METRICS_WINDOW_SECONDS(self) -> float:
        """The recent window the finished-run metrics (counts, histograms) cover."""
        return _number("OPS_METRICS_WINDOW_SECONDS", self._get("METRICS_WINDOW_SECONDS", 3600))

    @property
    def HEALTH_QUEUE_WAIT_SECONDS(self) -> float:
        """A django-q2 job waiting longer than this for a worker fails /healthz."""
        return _number("OPS_HEALTH_QUEUE_WAIT_SECONDS", self._get("HEALTH_QUEUE_WAIT_SECONDS", 120))


settings = Settings()


# -- the reference ----------------------------------------------------------------------
# What each setting is, for the documentation's settings reference (generated from this
# table) and its test; reading and checking stay in the properties above.

SETTINGS: tuple[Setting, ...] = (
    # Alerts
    Setting(
        "OPS_ALERT_CHANNELS",
        DEFAULT_ALERT_CHANNELS,
        "Where alerts go, configured like ``CACHES``: alias -> ``BACKEND`` (an "
        "``ops.alert_channels.AlertChannel``) and ``OPTIONS`` (ops.E002). ``{}``: alerts are "
        "recorded and nobody is told (ops.W001).",
    ),
    Setting(
        "OPS_SUMMARY_HOUR",
        None,
        "The local hour (0-23) from which the morning summary of yesterday's figures goes to "
        "every alert channel, once a day (``ops.morning``); ``None``: no summary.",
    ),
    Setting(
        "OPS_ADMIN_URL",
        "",
        "The admin's absolute address as ops reach it (``https://crm.example.com/admin/``): "
        "the alert cards' links to the admin (``ops.alert_cards.WeComCards`` needs it).",
    ),
    Setting(
        "OPS_ALERT_WINDOW_SECONDS",
        600,
        "A group's throttling window: after an alert, the group's further events wait this "
        "long and go together in one digest.",
    ),
    Setting(
        "OPS_ALERT_WINDOWS",
        {},
        'Per alert type, a window other than OPS_ALERT_WINDOW_SECONDS: ``{"heartbeat_stale": '
        "120}``.",
    ),
    Setting(
        "OPS_ALERT_RETRY_DELAYS",
        [60, 300, 900, 3600],
        "Seconds before each new attempt of a delivery a channel failed; after the last one "
        "it is given up (``failed``).",
    ),
    Setting(
        "OPS_ALERT_LEASE_SECONDS",
        300,
        "A delivery whose step died is tried again after this: alerts are delivered at least once.",
    ),
    Setting(
        "OPS_ALERT_LANGUAGE",
        "",
        "The language of alert texts (``en``, ``zh-hans``).",
        default_text="``LANGUAGE_CODE``",
    ),
    Setting(
        "OPS_ALERT_INTERVAL_SECONDS",
        15,
        "Seconds between two steps of ``ops_alerts --loop``.",
    ),
    Setting(
        "OPS_ALERT_RETENTION_DAYS",
        90,
        "Alerts, their events and deliveries are deleted after this many days, a batch per "
        "step; 0: kept for ever.",
    ),
    Setting(
        "OPS_HEARTBEAT_MAX_AGE_SECONDS",
        60,
        "A scheduler silent longer is stale: an alert, and ``/healthz`` failing when no "
        "scheduler is fresher.",
    ),
    Setting(
        "OPS_SUCCESS_RATE_THRESHOLD",
        0.9,
        "A channel whose share of runs sent, among those that ended in the window, is under "
        "this is alerted; 0: off.",
    ),
    Setting(
        "OPS_SUCCESS_RATE_WINDOW_SECONDS",
        900,
        "The window the success rate is computed over.",
    ),
    Setting(
        "OPS_SUCCESS_RATE_MIN_RUNS",
        20,
        "Fewer runs ended in the window say nothing: no alert.",
    ),
    # WeCom's count against the ledger
    Setting(
        "OPS_STATISTICS_CHECK",
        True,
        "Every night the alert step compares each WeCom app's count of yesterday's messages "
        "(``message/get_statistics``) with the ledger's, and alerts a difference beyond the "
        "tolerance; False: off.",
    ),
    Setting(
        "OPS_STATISTICS_HOUR",
        1,
        "The hour of the Beijing day (0 to 23) from which the alert step compares yesterday; "
        "once per app and day, a check WeCom did not answer asked again hourly until "
        "midnight (Beijing).",
    ),
    Setting(
        "OPS_STATISTICS_TOLERANCE",
        0,
        "Messages WeCom's count and ours may differ by without an alert.",
    ),
    Setting(
        "OPS_STATISTICS_TOLERANCE_RATIO",
        0.0,
        "A share (0 to 1) of the larger count the two may differ by; the larger of this and "
        "OPS_STATISTICS_TOLERANCE applies.",
    ),
    # WeCom's daily quota
    Setting(
        "OPS_WECOM_SEATS",
        None,
        "The corp's seats in WeCom, which allows seats x 200 person-messages a day per corp, "
        "of app messages (the channels whose sender is the WeCom app's; not a group robot) "
        "and by Beijing's day: the dashboard shows the day's quota used and forecast, and "
        "``check --deploy`` (ops.W003) and the alert step (``daily_quota``) warn when "
        "tomorrow's planned volume would exceed it. None: no quota known (the dashboard says "
        "so).",
    ),
    # Metrics and health
    Setting(
        "OPS_METRICS_TOKEN",
        "",
        "A bearer token that opens ``/metrics``; empty: none does.",
    ),
    Setting(
        "OPS_METRICS_ALLOWED_NETWORKS",
        [],
        "Networks (CIDRs, a list or a comma-separated string) whose ``REMOTE_ADDR`` may read "
        "``/metrics`` without a token.",
    ),
    Setting(
        "OPS_METRICS_WINDOW_SECONDS",
        3600,
        "The recent window the finished-run metrics (counts, histograms) cover.",
    ),
    Setting(
        "OPS_HEALTH_QUEUE_WAIT_SECONDS",
        120,
        "A django-q2 job waiting longer than this for a worker fails ``/healthz``.",
    ),
)
