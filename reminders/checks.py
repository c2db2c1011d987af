"""System checks for configuration that would lose or duplicate messages.

``check_settings`` reads settings only. ``check_kinds`` and ``check_calendars`` read the
database, so Django runs them only where a command asks for database checks
(``migrate``, ``check --database``, and ``run_reminders`` at start-up); they warn and
never stop a process, since a task of an unknown kind or an uncovered year stops
nothing either (it is put in ``error``, or its occurrence skipped, when due).

Messages and hints are written in the language active when the checks run (a command's:
``LANGUAGE_CODE``), so they are made with ``gettext`` there, never at import.

``check_worker`` guards what only ``run_reminders`` uses: the engine's django-q2 cluster
(``REMINDERS_CLUSTER``) and how the host's own ``Q_CLUSTER`` stands beside it. It is a
deployment check tagged ``reminders_worker``: ``run_reminders`` runs it at start-up (its
errors stop it there), ``check --deploy`` shows it (``check --deploy --tag
reminders_worker`` alone), and no other command of the host runs it, so that the
worker's settings never block, say, the host's ``makemigrations``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, router
from django.db.models import Count, QuerySet
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext, ngettext

from . import calendars, kinds
from .calendars import coverage as calendar_coverage
from .conf import settings as conf
from .exceptions import ChannelNotConfigured, RemindersError, UnknownKind
from .messages import builders, cards
from .schedule.policies import PolicyError
from .senders import get_sender
from .senders.base import BaseSender


@register("reminders")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    try:
        channels = conf.CHANNELS
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="reminders.E001")]
    for alias, config in channels.items():
        backend = (config or {}).get("BACKEND")
        try:
            import_string(str(backend))
        except ImportError:
            errors.append(
                Error(
                    gettext(
                        "REMINDERS_CHANNELS[%(alias)r]['BACKEND'] cannot be imported: %(backend)r."
                    )
                    % {"alias": alias, "backend": backend},
                    id="reminders.E002",
                )
            )
    errors.extend(_check_senders(channels))
    if conf.DEFAULT_CHANNEL not in channels:
        errors.append(
            Error(
                gettext("REMINDERS_DEFAULT_CHANNEL %(channel)r is not in REMINDERS_CHANNELS.")
                % {"channel": conf.DEFAULT_CHANNEL},
                hint=gettext("Use one of: %(aliases)s.") % {"aliases": ", ".join(channels)},
                id="reminders.E003",
            )
        )
    names = (
        "LEASE_SECONDS",
        "RETRY_DELAYS",
        "TICK_SECONDS",
        "MAX_WORKER_DEATHS",
        "MAX_JOB_FAILURES",
        "RUN_TIMEOUT",
        "PLAN_AHEAD_SECONDS",
        "HIGH_RATE_SHARE",
        "HIGH_WORKERS",
        "RETENTION_DAYS",
        "CALENDAR_WARN_DAYS",
        "CALLBACK_MAX_SKEW_SECONDS",
    )
    for name in names:
        try:
            getattr(conf, name)
        except ImproperlyConfigured as exc:
            errors.append(Error(str(exc), id="reminders.E004"))
    errors.extend(_check_kinds_settings())
    errors.extend(_check_builders())
    errors.extend(_check_kinds_calendars())
    errors.extend(_check_rate_limit_cache())
    errors.extend(_check_callback())
    return errors


# Caches that are not one store for every process, or whose add() is not atomic: rate
# limits kept there would hold for one process, or not at all.
UNSHARED_CACHES = {
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
    "django.core.cache.backends.filebased.FileBasedCache",
}


def _check_rate_limit_cache() -> list[CheckMessage]:
    alias = conf.RATE_LIMIT_CACHE
    if not alias:
        return []
    caches = getattr(django_settings, "CACHES", {})
    if alias not in caches:
        return [
            Error(
                gettext("REMINDERS_RATE_LIMIT_CACHE %(alias)r is not in CACHES.")
                % {"alias": alias},
                hint=gettext("Use one of: %(aliases)s.")
                % {"aliases": ", ".join(caches) or gettext("(none configured)")},
                id="reminders.E007",
            )
        ]
    backend = caches[alias].get("BACKEND", "")
    if backend in UNSHARED_CACHES:
        return [
            Error(
                gettext(
                    "REMINDERS_RATE_LIMIT_CACHE %(alias)r uses %(backend)s, which processes do "
                    "not share: every process would keep rate limits of its own."
                )
                % {"alias": alias, "backend": backend},
                hint=gettext(
                    "Use Redis or Memcached, or leave the setting empty for the database."
                ),
                id="reminders.E007",
            )
        ]
    return []


def _check_senders(channels: dict[str, Any]) -> list[CheckMessage]:
    """Build each sender once: missing credentials show here, not on the first send."""
    messages: list[CheckMessage] = []
    for alias in channels:
        try:
            sender = get_sender(alias)
            sender.check()
        # TypeError: OPTIONS without one the backend needs, or with one it does not take.
        except (RemindersError, ImproperlyConfigured, TypeError) as exc:
            if not isinstance(exc, ChannelNotConfigured):
                messages.append(
                    Error(
                        gettext("Channel %(alias)r cannot be used: %(error)s")
                        % {"alias": alias, "error": exc},
                        id="reminders.E006",
                    )
                )
            continue
        try:
            window = sum(conf.RETRY_DELAYS) + conf.LEASE_SECONDS
        except ImproperlyConfigured:
            continue
        if sender.supports_duplicate_check and window >= sender.duplicate_check_seconds:
            messages.append(
                Warning(
                    gettext(
                        "Channel %(alias)r de-duplicates re-sends for %(dedup)ss, but the last "
                        "retry can come %(window)ss after the first send (REMINDERS_RETRY_DELAYS "
                        "plus REMINDERS_LEASE_SECONDS): a re-send after a lost reply could "
                        "arrive twice."
                    )
                    % {
                        "alias": alias,
                        "dedup": sender.duplicate_check_seconds,
                        "window": window,
                    },
                    id="reminders.W002",
                )
            )
        messages.extend(_check_cards(alias, sender))
    return messages


def _check_cards(alias: str, sender: BaseSender) -> list[CheckMessage]:
    """A channel that carries cards with buttons whose clicks could not come back: its
    follow-ups and inquiry alerts go without buttons (``messages.cards.carried``)."""
    reason = cards.lost_clicks(sender) if sender.carries_cards else ""
    if not reason:
        return []
    return [
        Warning(
            gettext(
                "Channel %(alias)r carries cards with buttons, and %(reason)s: its follow-ups "
                "and inquiry alerts go as text, without buttons."
            )
            % {"alias": alias, "reason": reason},
            hint=gettext(
                "Configure WeCom's callback for the channel's app (WECOM_CALLBACK_TOKEN, "
                "WECOM_CALLBACK_AES_KEY, WECOM_AGENT_ID), or silence reminders.W008 where "
                "text is what you want."
            ),
            id="reminders.W008",
        )
    ]


def _check_kinds_settings() -> list[CheckMessage]:
    """``REMINDERS_KINDS``: every override names a policy field with a value it takes."""
    try:
        overrides = conf.KINDS
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="reminders.E009")]
    messages: list[CheckMessage] = []
    for name, values in overrides.items():
        try:
            kinds.get(name).policy.with_overrides(values)
        except UnknownKind:
            messages.append(
                Warning(
                    gettext("REMINDERS_KINDS names %(kind)r, which no code registered.")
                    % {"kind": name},
                    hint=gettext("Registered kinds: %(kinds)s.")
                    % {"kinds": ", ".join(kinds.names())},
                    id="reminders.W004",
                )
            )
        except PolicyError as exc:
            messages.append(
                Error(
                    gettext("REMINDERS_KINDS[%(kind)r]: %(error)s") % {"kind": name, "error": exc},
                    id="reminders.E009",
                )
            )
    return messages


def _check_builders() -> list[CheckMessage]:
    """``REMINDERS_BUILDERS`` names callables that import; builders are plugged in for
    kinds some code registered; ``REMINDERS_REPORT_URL`` is a link."""
    messages: list[CheckMessage] = [
        Error(problem, id="reminders.E011") for problem in builders.setting_problems()
    ]
    for name in sorted(builders.plugged_kinds() - set(kinds.names())):
        messages.append(
            Warning(
                gettext("A message builder is plugged in for %(kind)r, which no code registered.")
                % {"kind": name},
                hint=gettext("Registered kinds: %(kinds)s.") % {"kinds": ", ".join(kinds.names())},
                id="reminders.W006",
            )
        )
    try:
        _url = conf.REPORT_URL
    except ImproperlyConfigured as exc:
        messages.append(Error(str(exc), id="reminders.E012"))
    return messages


def _check_kinds_calendars() -> list[CheckMessage]:
    """Every calendar a kind's policy names is configured, and can be built."""
    messages: list[CheckMessage] = []
    for name in kinds.names():
        try:
            calendar = kinds.policy(name).calendar
        except ImproperlyConfigured:
            continue  # a bad REMINDERS_KINDS is E009's to report
        try:
            if calendar:
                calendars.get(calendar)
        except ImproperlyConfigured as exc:
            messages.append(
                Error(
                    gettext("Kind %(kind)r: %(error)s") % {"kind": name, "error": exc},
                    id="reminders.E010",
                )
            )
    # Every configured calendar too (a task may name one no kind does), e.g. its
    # UNCOVERED rule.
    said = " ".join(str(message.msg) for message in messages)
    try:
        configured = calendars.names()
    except ImproperlyConfigured:
        configured = []  # said above through the kinds, or planning says it
    for name in configured:
        try:
            calendars.get(name)
        except ImproperlyConfigured as exc:
            if str(exc) not in said:
                messages.append(Error(str(exc), id="reminders.E010"))
    return messages


WORKER_TAG = "reminders_worker"


@register(WORKER_TAG, deploy=True)
def check_worker(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The engine's cluster, and the host's django-q2 beside it; see the module docstring
    for where this runs."""
    try:
        lease = conf.LEASE_SECONDS
    except ImproperlyConfigured:
        return []  # E004 says so
    try:
        cluster = conf.CLUSTER
    except ImproperlyConfigured as exc:
        return [Error(str(exc), id="reminders.E013")]
    messages: list[CheckMessage] = []
    if cluster["orm"] != "default":
        messages.append(
            Error(
                gettext(
                    "REMINDERS_CLUSTER['orm'] is %(orm)r; it must be 'default': a claim and its "
                    "queued job must commit in one transaction."
                )
                % {"orm": cluster["orm"]},
                id="reminders.E005",
            )
        )
    timeout, retry = cluster["timeout"], cluster["retry"]
    if timeout is None or timeout >= lease:
        messages.append(
            Error(
                gettext(
                    "REMINDERS_CLUSTER['timeout'] (%(timeout)s) must be below "
                    "REMINDERS_LEASE_SECONDS (%(lease)s): a job that outlives its lease has its "
                    "runs claimed by another worker while it still sends them."
                )
                % {"timeout": timeout, "lease": lease},
                hint=gettext("Leave it out (0.8 x REMINDERS_LEASE_SECONDS), or set about that."),
                id="reminders.E008",
            )
        )
    elif retry <= timeout:
        messages.append(
            Error(
                gettext(
                    "REMINDERS_CLUSTER['retry'] (%(retry)s) must be above its timeout "
                    "(%(timeout)s): django-q2 hands a job to another worker while the first "
                    "still runs it."
                )
                % {"retry": retry, "timeout": timeout},
                hint=gettext("Leave it out (a minute past REMINDERS_LEASE_SECONDS)."),
                id="reminders.E008",
            )
        )
    messages.extend(_check_host_cluster(cluster))
    return messages


def _check_host_cluster(cluster: dict[str, Any]) -> list[CheckMessage]:
    """The host's django-q2, as this process resolved it (``Q_CLUSTER``, with
    ``ALT_CLUSTERS`` picked by ``Q_CLUSTER_NAME``), reading one of the engine's queues:
    meant where the project's django-q2 is the engine's (the standalone settings), and
    then its ``qcluster`` must run jobs as the engine's cluster does."""
    from django_q.conf import Conf

    from .engine.cluster import HIGH_QUEUE_SUFFIX

    queues = {cluster["name"], f"{cluster['name']}{HIGH_QUEUE_SUFFIX}"}
    other_broker = Conf.BROKER_CLASS or Conf.IRON_MQ or isinstance(Conf.SQS, dict)
    if other_broker or cluster["orm"] != Conf.ORM or Conf.CLUSTER_NAME not in queues:
        return []
    names = ("timeout", "retry", "max_attempts")
    differ = [
        f"{name} {getattr(Conf, name.upper())!r} (REMINDERS_CLUSTER: {cluster[name]!r})"
        for name in names
        if getattr(Conf, name.upper()) != cluster[name]
    ]
    if not differ:
        return []
    return [
        Warning(
            gettext(
                "Q_CLUSTER reads the engine's queue %(queue)r on database %(orm)r: a `manage.py "
                "qcluster` with it executes deliveries, with other settings: %(settings)s."
            )
            % {"queue": Conf.CLUSTER_NAME, "orm": cluster["orm"], "settings": ", ".join(differ)},
            hint=gettext(
                "Give the project's own django-q2 a name of its own (Q_CLUSTER['name']), or, "
                "where it is meant to execute the engine's jobs, REMINDERS_CLUSTER's settings."
            ),
            id="reminders.W007",
        )
    ]


@register("reminders", Tags.database)
def check_kinds(
    app_configs: Any = None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Kinds that active or paused tasks use and this process has not registered."""
    try:
        live = _live_tasks(databases)
        if live is None:
            return []
        unknown = dict(
            live.exclude(kind__in=kinds.names())
            .values_list("kind")
            .annotate(tasks=Count("pk"))
            .order_by("kind")
        )
    except DatabaseError:
        return []  # the database's own checks and errors say what is wrong with it
    if not unknown:
        return []
    named = ", ".join(
        ngettext("%(kind)r (%(count)d task)", "%(kind)r (%(count)d tasks)", count)
        % {"kind": kind, "count": count}
        for kind, count in unknown.items()
    )
    return [
        Warning(
            gettext(
                "Tasks use kinds this process has not registered: %(kinds)s. When due they are "
                "put in error and not sent."
            )
            % {"kinds": named},
            hint=gettext(
                "A CRM registers its kinds with reminders.kinds.register() in its "
                "AppConfig.ready(), so that every process (run_reminders too) knows them."
            ),
            id="reminders.W003",
        )
    ]


@register("reminders", Tags.database)
def check_calendars(
    app_configs: Any = None,
    databases: Sequence[str] | None = None,
    today: date | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Calendars that live tasks or registered kinds use and that do not cover the
    current year or, from December, the next: their occurrences then would be skipped."""
    today = today or timezone.localdate()
    years = [today.year, today.year + 1] if today.month == 12 else [today.year]
    messages: list[CheckMessage] = []
    if _checked_alias(databases) is None:
        return []
    try:
        live = _live_tasks(databases)
    except DatabaseError:
        live = None  # the database's own checks and errors say what is wrong with it
    try:
        names = calendar_coverage.named(live)
    except DatabaseError:  # the database's own checks and errors say what is wrong with it
        names = calendar_coverage.named(None)
    for name in sorted(names):
        try:
            missing = [year for year in years if not calendars.covers(name, year)]
        except ImproperlyConfigured:
            continue  # E010, or the tasks' own planning errors, say so
        except DatabaseError:  # not migrated yet: the backend alone
            missing = [year for year in years if not calendars.get(name).covers(year)]
        if missing:
            messages.append(_uncovered_warning(name, missing))
    return messages


def _checked_alias(databases: Sequence[str] | None) -> str | None:
    """The tasks' database, if the checks were asked to read it."""
    from .models import ScheduledTask

    alias = router.db_for_read(ScheduledTask)
    return alias if databases and alias in databases else None


def _live_tasks(databases: Sequence[str] | None) -> QuerySet[Any] | None:
    """Active and paused tasks on the database the checks were asked to read; None when
    that database is not among them, or not migrated yet."""
    from .models import ScheduledTask

    alias = _checked_alias(databases)
    if alias is None:
        return None
    if ScheduledTask._meta.db_table not in connections[alias].introspection.table_names():
        return None
    return ScheduledTask.objects.using(alias).filter(
        status__in=(ScheduledTask.Status.ACTIVE, ScheduledTask.Status.PAUSED)
    )


def _uncovered_warning(name: str, years: list[int]) -> Warning:
    *first, last = [str(year) for year in years]
    listed = (
        gettext("%(years)s and %(last)s") % {"years": ", ".join(first), "last": last}
        if first
        else last
    )
    return Warning(
        gettext(
            "Working-day calendar %(calendar)r does not cover %(years)s: days then follow its "
            "fallback rule %(rule)r (and signals.calendar_uncovered is sent for each "
            "occurrence)."
        )
        % {"calendar": name, "years": listed, "rule": calendars.get(name).uncovered},
        hint=gettext(
            "Import the year's official notice once it is published (manage.py "
            "reminders_calendar import FILE, or the admin's calendar days); no restart needed."
        ),
        id="reminders.W005",
    )


def _check_callback() -> list[CheckMessage]:
    """The callback is set up whole or not at all, with a key WeCom could have given,
    for one app it can check clicks against."""
    try:
        if conf.CALLBACK is not None:  # read, it raises what is wrong
            _agent = conf.CALLBACK_AGENT_ID
    except ImproperlyConfigured as exc:  # BadEncodingAESKey is one
        return [Error(str(exc), id="reminders.E015")]
    return []
