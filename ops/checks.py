"""System checks of the ``OPS_*`` settings: every one is read once, so a typo shows at
start-up rather than when the first alert is due or the first scrape comes. Messages are
written in the language active when the checks run (``gettext`` there, never at import)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.utils import timezone
from django.utils.translation import gettext

from . import alert_channels
from .conf import settings as conf

SETTINGS = (
    "ALERT_WINDOW_SECONDS",
    "ALERT_WINDOWS",
    "ALERT_RETRY_DELAYS",
    "ALERT_LEASE_SECONDS",
    "ALERT_INTERVAL_SECONDS",
    "ALERT_RETENTION_DAYS",
    "HEARTBEAT_MAX_AGE_SECONDS",
    "SUCCESS_RATE_THRESHOLD",
    "SUCCESS_RATE_WINDOW_SECONDS",
    "SUCCESS_RATE_MIN_RUNS",
    "STATISTICS_HOUR",
    "STATISTICS_TOLERANCE",
    "STATISTICS_TOLERANCE_RATIO",
    "METRICS_ALLOWED_NETWORKS",
    "METRICS_WINDOW_SECONDS",
    "HEALTH_QUEUE_WAIT_SECONDS",
    "SEATS",
    "ADMIN_URL",
    "SUMMARY_HOUR",
)


@register("ops")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for name in SETTINGS:
        try:
            getattr(conf, name)
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), id="ops.E001"))
    errors.extend(_check_alert_channels())
    return errors


def _check_alert_channels() -> list[CheckMessage]:
    try:
        aliases = list(conf.ALERT_CHANNELS)
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="ops.E002")]
    if not aliases:
        return [
            Warning(
                gettext("OPS_ALERT_CHANNELS is empty: alerts are recorded, and nobody is told."),
                id="ops.W001",
            )
        ]
    found: list[CheckMessage] = []
    for alias in aliases:
        try:
            problems = alert_channels.build(alias).problems()
        except Exception as exc:
            found.append(Error(_channel_problem(alias, exc), id="ops.E002"))
            continue
        found += [Warning(_channel_problem(alias, problem), id="ops.W002") for problem in problems]
    return found


def _channel_problem(alias: str, problem: object) -> str:
    return gettext("OPS_ALERT_CHANNELS[%(alias)r]: %(problem)s") % {
        "alias": alias,
        "problem": problem,
    }


@register("ops", deploy=True)
def check_daily_quota(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """ops.W003: tomorrow's planned WeCom app messages (the next Beijing day, of the
    channels that spend the quota, ``ops.stats.wave``) over WeCom's daily quota
    (``OPS_WECOM_SEATS`` x 200), as the alert step's ``daily_quota`` counts them. Nothing
    without seats, or without a database to read."""
    from .stats.wave import quota  # the stats read the models: not at import

    try:
        if conf.SEATS is None:
            return []
        found = quota(timezone.now())
    except (ImproperlyConfigured, DatabaseError):
        return []  # a bad setting is ops.E001; no tables yet: nothing planned
    if not found.tomorrow_over:
        return []
    return [
        Warning(
            gettext(
                "Tomorrow's planned volume (%(day)s, Beijing time), %(tomorrow)d WeCom app "
                "messages, exceeds WeCom's daily quota of %(quota)d (OPS_WECOM_SEATS "
                "%(seats)d x 200): messages past it are refused."
            )
            % {
                "day": found.tomorrow_day,
                "tomorrow": found.tomorrow,
                "quota": found.quota,
                "seats": found.seats,
            },
            hint=gettext(
                "Spread the recurring tasks over more days, or buy seats and raise "
                "OPS_WECOM_SEATS. The dashboard's wave section shows the figures."
            ),
            id="ops.W003",
        )
    ]
