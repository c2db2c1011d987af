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


def test_checks__job_timeout_must_be_below_the_lease(settings):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 600}
    [message] = check_settings()
    assert (message.id, message.level) == ("reminders.W001", checks.WARNING)


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
