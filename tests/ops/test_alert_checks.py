"""What the alert step checks by itself: stale heartbeats and the send success rate;
the command that runs the step; the settings' system checks."""

from __future__ import annotations

import os
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils.timezone import now as timezone_now

from ops import checks
from ops.models import AlertEvent
from reminders.exceptions import PermanentSendError
from reminders.models import SchedulerHeartbeat, TaskRun
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db


def beat(owner: str, at) -> None:  # type: ignore[no-untyped-def]
    SchedulerHeartbeat.objects.beat(owner, host="h", pid=1, started_at=at, now=at)


def test_a_stale_heartbeat_is_alerted_once(admins, clock, mailoutbox, settings):
    settings.OPS_HEARTBEAT_MAX_AGE_SECONDS = 60
    beat("host-a:1", clock.now)
    beat("host-b:2", clock.now)
    assert clock.step(30).checked == 0
    beat("host-b:2", clock.now)  # b keeps ticking, a stopped
    result = clock.step(31)
    assert result.checked == 1
    [alert] = result.opened
    assert alert.type == "heartbeat_stale"
    assert "1 scheduler stopped ticking" in mailoutbox[0].subject
    assert "host-a:1 last ticked 61 s ago" in mailoutbox[0].body
    beat("host-b:2", clock.now + timedelta(seconds=600))
    assert clock.step(600).checked == 0  # the same stale heartbeat, not again
    assert AlertEvent.objects.filter(type="heartbeat_stale").count() == 1


def test_a_scheduler_that_stopped_gracefully_is_not_stale(admins, clock, settings):
    beat("host-a:1", clock.now)
    SchedulerHeartbeat.objects.stop("host-a:1")
    assert clock.step(3600).checked == 0


def test_a_low_success_rate_is_alerted_once_per_window(
    make_task, admins, clock, mailoutbox, settings
):
    settings.OPS_SUCCESS_RATE_THRESHOLD = 0.5
    settings.OPS_SUCCESS_RATE_MIN_RUNS = 4
    settings.OPS_SUCCESS_RATE_WINDOW_SECONDS = 900
    for _ in range(4):
        make_task()
    MemorySender.script[:] = [None] + [PermanentSendError("invalid user", code="81013")] * 3
    tick()
    assert sorted(TaskRun.objects.values_list("status", flat=True)) == [
        "failed",
        "failed",
        "failed",
        "sent",
    ]
    result = clock.step()
    assert result.checked == 1
    assert sorted(a.type for a in result.opened) == ["run_failed", "success_rate"]
    rate = AlertEvent.objects.get(type="success_rate")
    assert (rate.channel, rate.data["sent"], rate.data["total"]) == ("memory", 1, 4)
    assert "1 of 4 runs sent (25%, under 50%)" in rate.message
    assert clock.step(10).checked == 0


def test_a_success_rate_on_too_few_runs_says_nothing(make_task, clock, settings):
    settings.OPS_SUCCESS_RATE_MIN_RUNS = 5
    for _ in range(4):
        make_task()
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")] * 4
    tick()
    assert clock.step().checked == 0


def test_the_command_runs_one_step(admins, mailoutbox, now):
    AlertEvent.objects.record("run_stuck", occurred_at=now - timedelta(seconds=1), kind="k")
    out = StringIO()
    call_command("ops_alerts", stdout=out)
    assert "1 alerts opened, 1 deliveries sent, 0 failed, 0 old alerts deleted" in out.getvalue()
    assert len(mailoutbox) == 1


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("OPS_ALERT_WINDOW_SECONDS", 0, "must be greater than 0"),
        ("OPS_ALERT_RETRY_DELAYS", "60,x", "must be a number"),
        ("OPS_SUCCESS_RATE_THRESHOLD", 2, "0 to 1"),
        ("OPS_METRICS_ALLOWED_NETWORKS", ["10.0.0.0/8", "not-a-net"], "not a network"),
        ("OPS_ALERT_CHANNELS", {"x": {}}, "with a BACKEND"),
    ],
)
def test_system_checks__refuse_bad_settings(settings, name, value, problem):
    setattr(settings, name, value)
    found = checks.check_settings()
    assert any(problem in message.msg for message in found), found


def test_system_checks__a_channel_that_cannot_work(settings):
    settings.ADMINS = []
    settings.OPS_ALERT_CHANNELS = {
        "admins": {"BACKEND": "ops.alert_channels.MailAdmins"},
        "nowhere": {"BACKEND": "ops.alert_channels.Nowhere"},
        "app": {"BACKEND": "ops.alert_channels.ReminderChannel", "OPTIONS": {"channel": "memory"}},
    }
    found = sorted((m.id, m.msg) for m in checks.check_settings())
    assert [i for i, _ in found] == ["ops.E002", "ops.W002", "ops.W002"]
    assert "cannot import" in found[0][1]
    assert any("needs a 'recipient'" in msg for _, msg in found)
    assert any("ADMINS is empty" in msg for _, msg in found)


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_the_loop_runs_until_sigterm_and_records_a_failing_channel(tmp_path):
    import signal
    import subprocess
    import sys

    from django.db import connection

    from ops.models import AlertDelivery
    from tests.support.processes import REPO, database_url, wait_until

    AlertEvent.objects.record("run_stuck", occurred_at=timezone_now(), kind="k")
    env = {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "DATABASE_URL": database_url(connection.settings_dict),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    err = (tmp_path / "stderr").open("wb")
    loop = subprocess.Popen(
        [sys.executable, "manage.py", "ops_alerts", "--loop", "--interval", "0.2"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,
    )
    try:
        # The test settings have no ADMINS: mail_admins fails, is recorded, and the loop
        # goes on.
        delivery = wait_until(
            lambda: AlertDelivery.objects.filter(status="retrying").first(),
            timeout=60,
            what="a failed delivery recorded",
            processes=(),
        )
        assert "ADMINS is empty" in delivery.error
        assert loop.poll() is None
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(30) == 0
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait(10)
        err.close()
