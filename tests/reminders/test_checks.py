import pytest
from django.core import checks

from reminders.checks import check_settings


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_checks__pass_on_the_project_settings():
    assert check_settings() == []


def test_checks__default_channel_must_exist(settings):
    settings.REMINDERS_DEFAULT_CHANNEL = "fax"
    assert ids(check_settings()) == ["reminders.E003"]


def test_checks__backend_must_import(settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "broken": {"BACKEND": "reminders.senders.nope.Sender"},
    }
    assert ids(check_settings()) == ["reminders.E002"]


def test_checks__retry_delays_must_be_positive_numbers(settings):
    settings.REMINDERS_RETRY_DELAYS = "60,soon"
    messages = check_settings()
    assert ids(messages) == ["reminders.E004"]
    assert "REMINDERS_RETRY_DELAYS" in messages[0].msg


def test_checks__broker_must_share_the_default_database(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "orm": "other"}
    assert ids(check_settings()) == ["reminders.E005"]


@pytest.mark.parametrize("timeout", [600, 300, None])
def test_checks__a_job_timeout_not_below_the_lease_is_an_error(settings, timeout):
    settings.REMINDERS_LEASE_SECONDS = 300
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": timeout}
    [message] = check_settings()
    assert (message.id, message.level) == ("reminders.E008", checks.ERROR)
    assert "REMINDERS_LEASE_SECONDS" in message.msg


def test_checks__max_worker_deaths_must_be_a_positive_number(settings):
    settings.REMINDERS_MAX_WORKER_DEATHS = "never"
    [message] = check_settings()
    assert message.id == "reminders.E004"
    assert "REMINDERS_MAX_WORKER_DEATHS" in message.msg


@pytest.mark.parametrize("value", ["0", "-5", "abc"])
def test_conf__lease_seconds_must_be_positive(settings, value):
    from django.core.exceptions import ImproperlyConfigured

    from reminders.conf import settings as conf

    settings.REMINDERS_LEASE_SECONDS = value
    with pytest.raises(ImproperlyConfigured, match="REMINDERS_LEASE_SECONDS"):
        _ = conf.LEASE_SECONDS


def test_checks__a_channel_missing_its_credentials_is_an_error(settings):
    settings.WECOM_CORP_ID = ""
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
    }
    [message] = check_settings()
    assert message.id == "reminders.E006"
    assert "WECOM_CORP_ID" in message.msg


def test_checks__retries_must_end_inside_the_providers_duplicate_window(settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "wecom": {
            "BACKEND": "reminders.senders.wecom.WeComSender",
            "OPTIONS": {
                "corp_id": "c",
                "corp_secret": "s",
                "agent_id": 1,
                "duplicate_check_interval": 1800,
            },
        },
    }
    settings.REMINDERS_RETRY_DELAYS = [60, 300, 900]
    settings.REMINDERS_LEASE_SECONDS = 300
    assert ids(check_settings()) == []  # 1,560 s < 1,800 s
    settings.REMINDERS_LEASE_SECONDS = 600
    assert ids(check_settings()) == ["reminders.W002"]


def test_checks__rate_limit_cache_must_exist(settings):
    settings.REMINDERS_RATE_LIMIT_CACHE = "shared"
    messages = check_settings()
    assert ids(messages) == ["reminders.E007"]
    assert "'shared' is not in CACHES" in messages[0].msg


def test_checks__rate_limit_cache_must_be_shared_by_processes(settings):
    settings.CACHES = {
        **settings.CACHES,
        "local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    }
    settings.REMINDERS_RATE_LIMIT_CACHE = "local"
    messages = check_settings()
    assert ids(messages) == ["reminders.E007"]
    assert "LocMemCache" in messages[0].msg


def test_checks__a_shared_rate_limit_cache_passes(settings):
    from tests.settings import rate_cache

    settings.CACHES = {**settings.CACHES, "rate": rate_cache("checks")}
    settings.REMINDERS_RATE_LIMIT_CACHE = "rate"
    assert check_settings() == []


@pytest.mark.django_db
def test_check_kinds__names_kinds_of_live_tasks_this_process_has_not_registered(make_task):
    from reminders.checks import check_kinds
    from reminders.models import ScheduledTask

    tasks = [make_task(cron="0 9 * * *") for _ in range(4)]
    ScheduledTask.objects.filter(pk__in=[tasks[0].pk, tasks[1].pk]).update(kind="crm_only")
    ScheduledTask.objects.filter(pk=tasks[2].pk).update(kind="long_gone", status="cancelled")
    assert check_kinds(databases=None) == []  # needs the database: only when asked for it
    [message] = check_kinds(databases=["default"])
    assert (message.id, message.level) == ("reminders.W003", checks.WARNING)
    assert "'crm_only' (2 tasks)" in message.msg
    assert "long_gone" not in message.msg
    assert "AppConfig.ready()" in message.hint


@pytest.mark.django_db
def test_run_reminders__shows_the_database_checks_at_start_up(make_task, monkeypatch):
    from io import StringIO

    from django.core.management import call_command

    from reminders.models import ScheduledTask
    from reminders.worker import ReminderWorker

    task = make_task(cron="0 9 * * *")
    ScheduledTask.objects.filter(pk=task.pk).update(kind="crm_only")
    started = []
    monkeypatch.setattr(ReminderWorker, "run", lambda worker: started.append(worker))
    stderr = StringIO()
    call_command("run_reminders", "--no-cluster", skip_checks=False, stderr=stderr)
    assert "reminders.W003" in stderr.getvalue()
    assert len(started) == 1  # a warning: the process starts all the same


WECOM = "reminders.senders.wecom.WeComSender"
HTTP = "reminders.senders.http.HttpSender"
ROBOT = "reminders.senders.robot.WeComRobotSender"
CREDENTIALS = {"corp_id": "c", "corp_secret": "s", "agent_id": 1}


def channel(backend: str, **options) -> dict:
    return {"bad": {"BACKEND": backend, "OPTIONS": options}}


@pytest.mark.parametrize(
    ("setting", "value", "error"),
    [
        pytest.param("REMINDERS_CHANNELS", {}, "reminders.E001", id="no channels"),
        pytest.param("REMINDERS_CHANNELS", ["console"], "reminders.E001", id="not a dict"),
        pytest.param("REMINDERS_TICK_SECONDS", 0, "reminders.E004", id="tick of 0"),
        pytest.param(
            "REMINDERS_PLAN_AHEAD_SECONDS", -60, "reminders.E004", id="plan ahead negative"
        ),
        pytest.param("REMINDERS_HIGH_RATE_SHARE", 1, "reminders.E004", id="high share of all"),
        pytest.param("REMINDERS_HIGH_WORKERS", -1, "reminders.E004", id="high workers negative"),
        pytest.param("REMINDERS_LEASE_SECONDS", "five", "reminders.E004", id="lease not a number"),
        pytest.param("REMINDERS_RETRY_DELAYS", "60,-1", "reminders.E004", id="negative retry"),
        pytest.param(
            "REMINDERS_CHANNELS",
            channel(WECOM, **CREDENTIALS, oversize="truncate"),
            "reminders.E006",
            id="wecom oversize unknown",
        ),
        pytest.param(
            "REMINDERS_CHANNELS",
            channel(WECOM, **{**CREDENTIALS, "agent_id": "one"}),
            "reminders.E006",
            id="wecom agent id not a number",
        ),
        pytest.param(
            "REMINDERS_CHANNELS",
            channel(WECOM, **CREDENTIALS, duplicate_check_interval=5 * 3600),
            "reminders.E006",
            id="wecom duplicate check over 4 hours",
        ),
        pytest.param(
            "REMINDERS_CHANNELS",
            channel(HTTP, url="http://gw", recipient_pattern="1[3-9"),
            "reminders.E006",
            id="http recipient pattern not a regex",
        ),
        pytest.param("REMINDERS_CHANNELS", channel(HTTP), "reminders.E006", id="http without url"),
        pytest.param(
            "REMINDERS_CHANNELS",
            channel(ROBOT, key="k", allow_mention_all="yes"),
            "reminders.E006",
            id="robot allow_mention_all not a bool",
        ),
    ],
)
def test_checks__bad_settings_are_errors_naming_them(settings, setting, value, error):
    if setting == "REMINDERS_CHANNELS" and value and isinstance(value, dict):
        value = {**settings.REMINDERS_CHANNELS, **value}
    setattr(settings, setting, value)
    messages = check_settings()
    assert error in ids(messages)
