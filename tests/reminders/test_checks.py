import pytest
from django.core import checks

from reminders.checks import check_settings, check_worker


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def worker_errors() -> list[checks.CheckMessage]:
    """The worker checks' errors; a changed REMINDERS_CLUSTER also differs from the
    standalone Q_CLUSTER (reminders.W007), which these tests leave aside."""
    return [m for m in check_worker() if m.is_serious()]


def test_checks__pass_on_the_project_settings():
    assert check_settings() == []
    assert check_worker() == []


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
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "orm": "other"}
    assert ids(check_worker()) == ["reminders.E005"]
    assert check_settings() == []  # a worker's setting: only where the worker checks run


@pytest.mark.parametrize("timeout", [600, 300, None])
def test_checks__a_job_timeout_not_below_the_lease_is_an_error(settings, timeout):
    settings.REMINDERS_LEASE_SECONDS = 300
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "timeout": timeout}
    [message] = worker_errors()
    assert (message.id, message.level) == ("reminders.E008", checks.ERROR)
    assert "REMINDERS_LEASE_SECONDS" in message.msg


def test_checks__a_retry_not_above_the_job_timeout_is_an_error(settings):
    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "timeout": 100, "retry": 100}
    [message] = worker_errors()
    assert message.id == "reminders.E008"
    assert "REMINDERS_CLUSTER['retry'] (100)" in message.msg


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
    # With no callback the app's cards go without buttons (reminders.W008): not this test's.
    found = [i for i in ids(check_settings()) if i != "reminders.W008"]
    assert found == []  # 1,560 s < 1,800 s
    settings.REMINDERS_LEASE_SECONDS = 600
    assert [i for i in ids(check_settings()) if i != "reminders.W008"] == ["reminders.W002"]


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

    from reminders.engine.worker import ReminderWorker
    from reminders.models import ScheduledTask

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
        pytest.param("REMINDERS_RETENTION_DAYS", 0, "reminders.E004", id="retention of 0"),
        pytest.param(
            "REMINDERS_CALLBACK_MAX_SKEW_SECONDS", "abc", "reminders.E004", id="window not a number"
        ),
        pytest.param(
            "REMINDERS_CALLBACK_MAX_SKEW_SECONDS", -5, "reminders.E004", id="window negative"
        ),
        pytest.param("REMINDERS_CALLBACK_MAX_SKEW_SECONDS", 0, "reminders.E004", id="window of 0"),
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


# The engine's own cluster beside the host's ----------------------------------------------

# A CRM's own django-q2: Redis, its own name; none of the engine's business.
HOST_ON_REDIS = {
    "name": "crm",
    "redis": {"host": "127.0.0.1", "port": 6379, "db": 0},
    "timeout": 60,
    "retry": 120,
}


@pytest.mark.django_db
def test_a_host_django_q2_on_redis_does_not_block_the_host_s_makemigrations(settings):
    from io import StringIO

    from django.core.management import call_command

    settings.Q_CLUSTER = HOST_ON_REDIS
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", skip_checks=False, stdout=out)
    assert "No changes detected" in out.getvalue()


@pytest.mark.django_db
def test_the_worker_checks_show_with_check_deploy_and_its_tag_only(settings):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    settings.REMINDERS_CLUSTER = {**settings.REMINDERS_CLUSTER, "orm": "other"}
    call_command("check", stdout=StringIO())  # not a deployment check: not run
    for args in (["--deploy"], ["--deploy", "--tag", "reminders_worker"]):
        with pytest.raises(SystemCheckError, match=r"reminders\.E005"):
            call_command("check", *args, stdout=StringIO(), stderr=StringIO())


@pytest.mark.django_db
def test_run_reminders__does_not_start_with_a_bad_cluster(settings, monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from reminders.engine.worker import ReminderWorker

    started = []
    monkeypatch.setattr(ReminderWorker, "run", lambda worker: started.append(worker))
    settings.REMINDERS_CLUSTER = {"workers": 2, "redis": {"host": "127.0.0.1"}}
    with pytest.raises(SystemCheckError, match=r"reminders\.E013.*redis"):
        call_command("run_reminders", "--no-cluster", skip_checks=False)
    assert started == []


@pytest.mark.parametrize(
    ("value", "named"),
    [
        pytest.param(["reminders"], "must be a dict", id="not a dict"),
        pytest.param({"sqs": {}}, "sqs", id="another broker"),
        pytest.param({"schedule": True}, "schedule", id="unknown key"),
        pytest.param({"workers": 0}, "['workers']", id="no workers"),
        pytest.param({"name": ""}, "['name']", id="no name"),
        pytest.param({"retry": -1}, "['retry']", id="negative retry"),
    ],
)
def test_checks__a_cluster_setting_the_worker_cannot_take_is_an_error(settings, value, named):
    settings.REMINDERS_CLUSTER = value
    [message] = check_worker()
    assert message.id == "reminders.E013"
    assert named in message.msg


def test_checks__the_host_s_django_q2_reading_our_queue_with_other_settings_is_a_warning(
    monkeypatch,
):
    """As in the standalone settings, where Q_CLUSTER is the engine's cluster: only a
    difference in how it runs the engine's jobs is worth a word."""
    from django_q.conf import Conf

    assert (Conf.ORM, Conf.CLUSTER_NAME) == ("default", "reminders")
    assert check_worker() == []
    monkeypatch.setattr(Conf, "TIMEOUT", 900)
    [message] = check_worker()
    assert (message.id, message.level) == ("reminders.W007", checks.WARNING)
    assert "timeout 900 (REMINDERS_CLUSTER: 240)" in message.msg
    monkeypatch.setattr(Conf, "CLUSTER_NAME", "crm")  # its own queue: none of ours
    assert check_worker() == []
