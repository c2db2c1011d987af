"""Every setting the app reads, as its reference documents it: name, default and what it
does (``SETTINGS``), with the defaults ``reminders.conf`` falls back on.

Data only, importing nothing of the app, so that ``reminders.conf`` (which re-exports
it) and the documentation both read it. The settings reference is generated from these
tables (``docs/_ext``), and a test fails when a setting the code reads is missing here,
or a setting here is one the code never reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DEFAULT_CHANNELS: dict[str, dict[str, Any]] = {
    "console": {"BACKEND": "reminders.senders.console.ConsoleSender"},
}

# The engine's own django-q2 cluster (``REMINDERS_CLUSTER`` is read over these; see
# ``reminders.engine.cluster``). ``timeout`` and ``retry`` follow the lease unless set.
CLUSTER_DEFAULTS: dict[str, Any] = {
    "name": "reminders",
    "orm": "default",
    "workers": 2,
    "max_attempts": 1,
    "save_limit": -1,
    "poll": 0.1,
    "bulk": 10,
    "recycle": 500,
    "max_rss": None,
    "guard_cycle": 0.5,
    "cpu_affinity": 0,
    "daemonize_workers": True,
}

# What each setting is, for the documentation's settings reference (generated from these
# tables) and its test, which fails when a setting the code reads is missing here, or a
# setting here is one the code never reads. Reading and checking stay in the properties of
# ``reminders.conf`` (and, for the WeCom senders and the calendars, their modules); these tables
# only say what they read.


@dataclass(frozen=True)
class Setting:
    """One setting as the reference documents it: its name, the default the code uses
    when the project does not set it, and what it does. ``default_text`` says a default
    that is not a plain value ("the host name")."""

    name: str
    default: Any
    summary: str
    default_text: str = ""


SETTINGS: tuple[Setting, ...] = (
    # Channels and messages
    Setting(
        "REMINDERS_CHANNELS",
        DEFAULT_CHANNELS,
        "The senders, by alias, configured like ``CACHES``: ``BACKEND`` (a dotted path) and "
        "``OPTIONS``. A non-empty dict (reminders.E001).",
    ),
    Setting(
        "REMINDERS_DEFAULT_CHANNEL",
        "console",
        "The channel of tasks scheduled without one; an alias of REMINDERS_CHANNELS "
        "(reminders.E003).",
    ),
    Setting(
        "REMINDERS_KINDS",
        {},
        "Per-kind policy overrides, field by field: "
        '``{"daily_report": {"jitter_seconds": 120}}`` (a typo is reminders.E009).',
    ),
    Setting(
        "REMINDERS_BUILDERS",
        {},
        "Message builders by kind, as dotted paths: "
        '``{"follow_up": "crm.reminders.build_follow_up"}``; they win over the kinds\' own '
        "(reminders.E011).",
    ),
    Setting(
        "REMINDERS_REPORT_URL",
        "",
        "The link of a report reminder whose payload has no ``url``: where reports are "
        "written; an http(s) link (reminders.E012). Empty: none.",
    ),
    Setting(
        "REMINDERS_RECIPIENT_RESOLVER",
        "",
        "The dotted path of a callable, user -> WeCom member id, for users given as "
        "recipients (reminders.E014). Empty: the user's REMINDERS_USER_ID_FIELD.",
    ),
    Setting(
        "REMINDERS_USER_ID_FIELD",
        "",
        "The user model's attribute that holds a user's member id (reminders.E014). "
        "Empty: the model's ``USERNAME_FIELD``.",
    ),
    Setting(
        "REMINDERS_CALENDARS",
        {"cn": {"BACKEND": "reminders.calendars.ChineseCalendar"}},
        "Working-day calendars by name, like ``CACHES`` (a value may be a bare dotted path); "
        "replaces the default, so keep ``cn`` for the report kinds (reminders.E010). "
        "``UNCOVERED`` beside a ``BACKEND``: ``weekdays`` (the default) or ``skip``, the rule "
        "for a year nobody covers.",
    ),
    Setting(
        "REMINDERS_CALENDAR_WARN_DAYS",
        60,
        "Days before a calendar in use stops being covered that ops are alerted daily and "
        "see a banner; 0: never.",
    ),
    # The scheduler and the workers
    Setting(
        "REMINDERS_LEASE_SECONDS",
        300,
        "How long a claim holds a run before others may take it: how long a dead host's "
        "runs wait. The job timeout of the engine's cluster is 0.8 of it.",
    ),
    Setting(
        "REMINDERS_RETRY_DELAYS",
        [60, 300, 900],
        "Seconds before each retry of a passing error (a list, or a comma-separated string).",
    ),
    Setting(
        "REMINDERS_TICK_SECONDS",
        1.0,
        "How often each scheduler scans for due work at least; on PostgreSQL work made due "
        "now elsewhere wakes it at once.",
    ),
    Setting("REMINDERS_CLAIM_BATCH", 500, "Runs claimed per tick, at most."),
    Setting(
        "REMINDERS_MAX_IN_FLIGHT",
        1000,
        "Claimed runs one process lets wait for its workers (back-pressure), so that one "
        "host does not take a whole wave others could share.",
    ),
    Setting("REMINDERS_RUNS_PER_JOB", 20, "Runs handed to one django-q2 job."),
    Setting(
        "REMINDERS_DIGEST_SECONDS",
        3600,
        "The window of a kind a recipient moved to a digest, when the kind's policy has "
        "none (digest_seconds): their messages due in one window go as one, at its end.",
    ),
    Setting(
        "REMINDERS_PLAN_AHEAD_SECONDS",
        3600,
        "How far ahead runs are planned, so that the plan can be seen and a 09:00 wave is "
        "spread before it comes; 0: when due.",
    ),
    Setting(
        "REMINDERS_MISSED_RUNS_RECORDED",
        50,
        "Skipped runs written per task and tick after downtime; more are counted, not written.",
    ),
    Setting(
        "REMINDERS_MISSED_GRACE_SECONDS",
        300.0,
        "How late an occurrence of a kind whose missed rule is ``skip`` may still run.",
    ),
    Setting(
        "REMINDERS_MAX_WORKER_DEATHS",
        5,
        "Workers that may die sending one run's message before it is given up as "
        "``unknown`` (code ``worker_died``).",
    ),
    Setting(
        "REMINDERS_MAX_JOB_FAILURES",
        3,
        "Jobs in a row that may end before starting a run (a builder that hangs until the "
        "job's timeout) before it is failed (code ``job_failures``) and ops told.",
    ),
    Setting(
        "REMINDERS_RUN_TIMEOUT",
        600,
        "Seconds a run may be ``running`` before the ``run_stuck`` signal reports it (once).",
    ),
    Setting(
        "REMINDERS_RETENTION_DAYS",
        90,
        "What ``reminders_prune`` deletes unless ``--older-than`` says otherwise: finished "
        "runs and ledger rows older than this many days.",
    ),
    Setting(
        "REMINDERS_SHUTDOWN_GRACE",
        30.0,
        "Seconds the workers get to finish on SIGTERM before what is left is killed.",
    ),
    Setting(
        "REMINDERS_WORKER_ID",
        "",
        "How a host's processes name themselves (with their pid) in leases and heartbeats; "
        "set it where hosts may share a name, as containers do.",
        default_text="the host name",
    ),
    Setting(
        "REMINDERS_HIGH_WORKERS",
        1,
        "Workers of the cluster ``run_reminders`` starts for ``high`` runs only, beside the "
        "bulk one; 0: none, high runs share the bulk workers.",
    ),
    Setting(
        "REMINDERS_CLUSTER",
        {},
        "The engine's own django-q2 cluster, over its defaults: ``name`` ``reminders`` (its "
        "queue; high priority runs use ``reminders-high``), ``orm`` ``default`` "
        "(reminders.E005), ``workers`` 2, ``max_attempts`` 1, ``save_limit`` -1, ``poll`` "
        "0.1, ``bulk`` 10 (never more than ``workers``), ``recycle`` 500, ``max_rss`` None, "
        "``guard_cycle`` 0.5, ``cpu_affinity`` 0, ``daemonize_workers`` True; ``timeout`` "
        "0.8 x REMINDERS_LEASE_SECONDS (below the lease: reminders.E008), ``retry`` "
        "REMINDERS_LEASE_SECONDS + 60, ``queue_limit`` ``workers``. Other keys are "
        "reminders.E013. The host's ``Q_CLUSTER`` is never read for it.",
    ),
    # Rate limits
    Setting(
        "REMINDERS_RATE_MAX_WAIT",
        2.0,
        "Seconds a worker waits for a rate-limit slot before handing the run back, without "
        "spending an attempt.",
    ),
    Setting(
        "REMINDERS_RATE_LIMIT_CACHE",
        "",
        "A cache alias shared by every process (Redis, Memcached) that keeps the rate "
        "limits instead of the database (reminders.E007). Empty: the database.",
    ),
    Setting(
        "REMINDERS_HIGH_RATE_SHARE",
        0.2,
        "Share of each paced channel's rate kept for ``high`` runs, the rest for bulk "
        "(``normal``, ``low``) ones; each borrows the other's idle slots. 0 to 1 exclusive "
        "(0: one bucket, in order).",
    ),
    Setting(
        "REMINDERS_RATE_BORROW_SECONDS",
        0.5,
        "How far ahead a send may take the other priority class's idle slots: the longest a "
        "``high`` send waits behind bulk sends that borrowed its share.",
    ),
    Setting(
        "REMINDERS_MAX_PAUSE_SECONDS",
        300.0,
        'The longest a provider\'s "too fast" (Retry-After) may pause a channel; longer '
        "ones are capped and logged.",
    ),
    # WeCom, read by its senders when they are built
    Setting(
        "WECOM_CORP_ID",
        "",
        "The WeCom app's corp id: the default of a WeCom channel's ``corp_id`` option.",
    ),
    Setting(
        "WECOM_CORP_SECRET",
        "",
        "The WeCom app's secret: the default of a WeCom channel's ``corp_secret`` option.",
    ),
    Setting(
        "WECOM_AGENT_ID",
        "",
        "The WeCom app's agent id (an integer): the default of a WeCom channel's "
        "``agent_id`` option, and the app whose clicks the callback takes (unset: the one "
        "agent the channels name; several is reminders.E015).",
    ),
    Setting(
        "WECOM_CALLBACK_TOKEN",
        "",
        "The Token of the app's callback (WeCom's admin console, receive messages): with "
        "WECOM_CALLBACK_AES_KEY, it turns the callback URL on. Empty: the URL answers 404.",
    ),
    Setting(
        "WECOM_CALLBACK_AES_KEY",
        "",
        "The EncodingAESKey of the app's callback: 43 characters, as the console shows it "
        "(reminders.E015).",
    ),
    Setting(
        "REMINDERS_CALLBACK_MAX_SKEW_SECONDS",
        300,
        "How far a callback's timestamp may be from this clock, either way; an older "
        "request is refused as a replay. A positive number of seconds (reminders.E004).",
    ),
    Setting(
        "WECOM_API_BASE",
        "https://qyapi.weixin.qq.com",
        "Where the WeCom and robot channels send: any server speaking the same API (the "
        "local sandbox).",
    ),
    Setting(
        "WECOM_TIMEOUT",
        10.0,
        "Seconds, connect and read, of the WeCom, robot and HTTP channels' requests.",
    ),
    Setting(
        "WECOM_RATE_LIMIT",
        0,
        "Messages a second of the WeCom app, shared by every process and host (a channel's "
        "``rate_limit`` option wins); 0: the channel is not paced.",
    ),
    Setting(
        "WECOM_ROBOT_KEY",
        "",
        "A group robot's key: the one the local sandbox (``wecom_sandbox``) accepts, and in "
        "the standalone project the ``wecom_robot`` channel's.",
        default_text="empty (the sandbox: a development key)",
    ),
)
