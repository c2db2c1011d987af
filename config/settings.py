"""Settings for running reminders standalone; every value comes from the environment.

A CRM that adds the ``reminders`` and ``ops`` apps keeps its own settings module and
copies only the ``REMINDERS_*`` and ``WECOM_*`` settings it needs; its ``Q_CLUSTER``,
if it has one, stays its own (see the django-q2 block below).
"""

from pathlib import Path
from typing import Any

import django
import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


class Env(environ.Env):
    """django-environ's, but a value that does not parse names its variable: the
    process stops with ``environment variable PREPARE_THRESHOLD: 'abc' is not an
    integer (...)``, not only Python's ``invalid literal for int()``."""

    def get_value(
        self,
        var: str,
        cast: Any = None,
        default: Any = environ.Env.NOTSET,
        parse_default: bool = False,
    ) -> Any:
        try:
            return super().get_value(var, cast, default, parse_default)
        except (ValueError, TypeError) as exc:
            expected = {int: "an integer", float: "a number"}.get(cast, "valid")
            raise ImproperlyConfigured(
                f"environment variable {var}: {self.ENVIRON.get(var)!r} is not {expected} ({exc})"
            ) from None


env = Env()
environ.Env.read_env(BASE_DIR / ".env")

SECRET_KEY = env.str("SECRET_KEY", default="dev-only-insecure-key-change-me")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_q",
    "reminders",
    "ops",
    # The standalone project's own apps, never in a CRM: the demo data, and the local
    # WeCom sandbox (manage.py wecom_sandbox), which the wheel does not hold.
    "config",
    "wecom_sandbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The admin in the browser's language (Accept-Language) when it is one of LANGUAGES.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
CACHES = {"default": env.cache_url("CACHE_URL", default="locmemcache://")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes write to one file: wait for the lock instead of failing, take
    # the write lock at BEGIN (no upgrade deadlocks), and let readers run beside writers.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # Tests start real processes, which must share the test database: keep it in a file.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / ".test-db.sqlite3")}
else:
    # Re-opening a connection per task halves throughput on PostgreSQL.
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=600))
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # The engine's own statements of every message become prepared statements after a
    # few runs (reminders.models.sql.cursor_of). PREPARE_THRESHOLD= (empty) turns it
    # off, which a transaction-mode pooler in front of PostgreSQL needs.
    threshold = env.str("PREPARE_THRESHOLD", default="5")
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "prepare_threshold", env.int("PREPARE_THRESHOLD", default=5) if threshold else None
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# The admin, alerts and messages are in Simplified Chinese unless LANGUAGE_CODE says
# otherwise (e.g. en); an operator's browser asking for English gets the admin in English.
LANGUAGE_CODE = env.str("LANGUAGE_CODE", default="zh-hans")
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
TIME_ZONE = env.str("TIME_ZONE", default="Asia/Shanghai")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django_q": {"level": env.str("Q_LOG_LEVEL", default="WARNING")}},
}

# --- WeCom ---------------------------------------------------------------------------
WECOM_CORP_ID = env.str("WECOM_CORP_ID", default="")
WECOM_CORP_SECRET = env.str("WECOM_CORP_SECRET", default="")
WECOM_AGENT_ID = env.str("WECOM_AGENT_ID", default="")
WECOM_API_BASE = env.str("WECOM_API_BASE", default="https://qyapi.weixin.qq.com")
WECOM_TIMEOUT = env.float("WECOM_TIMEOUT", default=10.0)
WECOM_RATE_LIMIT = env.float("WECOM_RATE_LIMIT", default=50.0)
WECOM_ROBOT_KEY = env.str("WECOM_ROBOT_KEY", default="")
# The app's callback (reminders/wecom/callback), as set in WeCom's admin console.
WECOM_CALLBACK_TOKEN = env.str("WECOM_CALLBACK_TOKEN", default="")
WECOM_CALLBACK_AES_KEY = env.str("WECOM_CALLBACK_AES_KEY", default="")

# --- reminders -----------------------------------------------------------------------
# Channels appear when their credentials are set; the WeCom senders read WECOM_* lazily.
REMINDERS_CHANNELS: dict[str, dict[str, object]] = {
    "console": {"BACKEND": "reminders.senders.console.ConsoleSender"},
}
if WECOM_CORP_ID:
    REMINDERS_CHANNELS["wecom"] = {
        "BACKEND": "reminders.senders.wecom.WeComSender",
        "OPTIONS": {"oversize": env.str("WECOM_OVERSIZE", default="reject")},
    }
if WECOM_ROBOT_KEY:
    REMINDERS_CHANNELS["wecom_robot"] = {
        "BACKEND": "reminders.senders.robot.WeComRobotSender",
        "OPTIONS": {"key": WECOM_ROBOT_KEY},
    }
REMINDERS_DEFAULT_CHANNEL = env.str(
    "REMINDERS_DEFAULT_CHANNEL", default="wecom" if WECOM_CORP_ID else "console"
)
REMINDERS_LEASE_SECONDS = env.int("REMINDERS_LEASE_SECONDS", default=300)
REMINDERS_RETRY_DELAYS = env.list("REMINDERS_RETRY_DELAYS", cast=int, default=[60, 300, 900])
REMINDERS_TICK_SECONDS = env.float("REMINDERS_TICK_SECONDS", default=1.0)
REMINDERS_CLAIM_BATCH = env.int("REMINDERS_CLAIM_BATCH", default=500)
REMINDERS_MAX_IN_FLIGHT = env.int("REMINDERS_MAX_IN_FLIGHT", default=1000)
REMINDERS_RUNS_PER_JOB = env.int("REMINDERS_RUNS_PER_JOB", default=20)
# The window of a kind a recipient moved to a digest (bin/run-dev makes it 5 minutes).
REMINDERS_DIGEST_SECONDS = env.int("REMINDERS_DIGEST_SECONDS", default=3600)
REMINDERS_RATE_MAX_WAIT = env.float("REMINDERS_RATE_MAX_WAIT", default=2.0)
# The longest pause a provider's "too fast" (Retry-After) may put on a channel.
REMINDERS_MAX_PAUSE_SECONDS = env.float("REMINDERS_MAX_PAUSE_SECONDS", default=300.0)
# Keep the shared rate limits in this cache instead of the database; it must be shared
# by every process (e.g. CACHE_URL=redis://127.0.0.1:6379/0, which needs the "redis" extra).
REMINDERS_RATE_LIMIT_CACHE = env.str("REMINDERS_RATE_LIMIT_CACHE", default="")
# A share of each paced channel's rate bulk work cannot spend, and the workers of the
# cluster that executes high priority runs only (0: none, they share the bulk workers).
REMINDERS_HIGH_RATE_SHARE = env.float("REMINDERS_HIGH_RATE_SHARE", default=0.2)
REMINDERS_HIGH_WORKERS = env.int("REMINDERS_HIGH_WORKERS", default=1)
REMINDERS_SHUTDOWN_GRACE = env.float("REMINDERS_SHUTDOWN_GRACE", default=30.0)
# How this host's schedulers and workers name themselves in leases and heartbeats
# (with their pid); the host name by default. Set it where hosts may share a name.
REMINDERS_WORKER_ID = env.str("REMINDERS_WORKER_ID", default="")
REMINDERS_RUN_TIMEOUT = env.float("REMINDERS_RUN_TIMEOUT", default=600.0)
# What reminders_prune deletes unless --older-than says otherwise: finished runs and
# ledger rows older than this many days.
REMINDERS_RETENTION_DAYS = env.float("REMINDERS_RETENTION_DAYS", default=90.0)

# --- django-q2 -----------------------------------------------------------------------
# The engine's own cluster, which run_reminders runs (keys left out take the defaults of
# reminders.conf; these are they, spelled out). Our own loop claims and enqueues due
# runs; django-q2 only executes them. Delivery is idempotent, so the ORM broker's
# at-least-once redelivery (``retry``) is harmless.
REMINDERS_CLUSTER = {
    "name": env.str("Q_CLUSTER_NAME", default="reminders"),
    "orm": "default",
    "workers": env.int("Q_WORKERS", default=2),
    "timeout": max(int(REMINDERS_LEASE_SECONDS * 0.8), 1),
    "retry": REMINDERS_LEASE_SECONDS + 60,
    "max_attempts": 1,
    "save_limit": -1,
    "poll": 0.1,
    "bulk": 10,
}

# --- ops -------------------------------------------------------------------------------
# Alerts go to ADMINS by mail (a comma-separated list of addresses) and, with
# OPS_ALERT_ROBOT naming a REMINDERS_CHANNELS alias whose sender is a group robot
# (wecom_robot), to that group too. EMAIL_URL as django-environ reads it, e.g.
# smtp+tls://user:password@smtp.example.com:587; a timeout keeps a dead mail server
# from holding the alert step.
# Django 6 takes the addresses alone (and deprecates (name, address) pairs); 5.2 pairs.
_admins = env.list("ADMINS", default=[])
ADMINS = _admins if django.VERSION >= (6, 0) else [(address, address) for address in _admins]
SERVER_EMAIL = env.str("SERVER_EMAIL", default="root@localhost")
globals().update(env.email_url("EMAIL_URL", default="smtp://localhost:25"))
EMAIL_TIMEOUT = env.int("EMAIL_TIMEOUT", default=10)
# Mail only where there is someone to mail (else ops.W001 says that nobody is told).
OPS_ALERT_CHANNELS: dict[str, dict[str, object]] = (
    {"admins": {"BACKEND": "ops.alert_channels.MailAdmins"}} if ADMINS else {}
)
if env.str("OPS_ALERT_ROBOT", default=""):
    OPS_ALERT_CHANNELS["robot"] = {
        "BACKEND": "ops.alert_channels.ReminderChannel",
        "OPTIONS": {"channel": env.str("OPS_ALERT_ROBOT")},
    }
# Alerts as WeCom cards with buttons (Retry, Mark handled, Mute 1 hour) to these members
# (comma-separated ids) on the WeCom app channel; a card's link leads to OPS_ADMIN_URL,
# the admin's address as ops reach it (bin/run-dev sets both for the demo).
if env.list("OPS_ALERT_CARDS", default=[]):
    OPS_ALERT_CHANNELS["cards"] = {
        "BACKEND": "ops.alert_cards.WeComCards",
        "OPTIONS": {"channel": "wecom", "recipients": env.list("OPS_ALERT_CARDS")},
    }
OPS_ADMIN_URL = env.str("OPS_ADMIN_URL", default="")
# The local hour of the morning summary of yesterday's figures; empty: none.
OPS_SUMMARY_HOUR = env.int("OPS_SUMMARY_HOUR", default=None)
OPS_ALERT_LANGUAGE = env.str("OPS_ALERT_LANGUAGE", default="")
# /metrics is refused unless one of these lets a scraper in (see the README).
OPS_METRICS_TOKEN = env.str("OPS_METRICS_TOKEN", default="")
OPS_METRICS_ALLOWED_NETWORKS = env.list("OPS_METRICS_ALLOWED_NETWORKS", default=[])

# This project has no django-q2 work of its own, so its django-q2 is the engine's
# cluster: `manage.py qcluster` executes the engine's queue as run_reminders' clusters
# do (beside `run_reminders --no-cluster`, or as the benchmarks' bare baseline). A CRM
# keeps a Q_CLUSTER of its own instead; reminders.W007 tells where one reads the
# engine's queue with other settings.
Q_CLUSTER = {**REMINDERS_CLUSTER, "catch_up": False, "label": "Task queue"}
