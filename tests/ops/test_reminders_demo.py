from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db.models import F
from django.test import TestCase
from django.utils import timezone

from ops.management.commands.reminders_demo import demo_tasks
from reminders import dispatch
from reminders.models import ScheduledTask, SendLog, TaskRun
from tests.support.jobs import run_queued
from tests.support.sandbox import assert_ledger_matches, running_sandbox, wecom_settings

pytestmark = pytest.mark.django_db


def demo(*args: str) -> str:
    out = StringIO()
    call_command("reminders_demo", "--no-input", *args, stdout=out)
    return out.getvalue()


def snapshot() -> dict:
    return {
        "users": list(get_user_model().objects.values_list("username", "is_superuser")),
        "tasks": sorted(
            ScheduledTask.objects.values_list("key", "kind", "recipient", "cron", "status")
        ),
    }


def test_demo__running_twice_updates_the_same_rows(monkeypatch):
    monkeypatch.delenv("DEMO_ADMIN_USER", raising=False)
    monkeypatch.delenv("DEMO_ADMIN_PASSWORD", raising=False)
    first_output = demo()
    first = snapshot()
    second_output = demo()
    assert snapshot() == first
    expected = {task.key for task in demo_tasks(timezone.now(), "UTC")}
    assert {row[0] for row in first["tasks"]} == expected
    assert ScheduledTask.objects.count() == len(expected)
    assert first["users"] == [("admin", True)]
    assert "created demo:birthday" in first_output
    assert "updated demo:birthday" in second_output and "created" not in second_output


def test_demo__tasks_cover_every_kind_and_some_are_due_at_once():
    demo()
    tasks = ScheduledTask.objects.all()
    assert {t.kind for t in tasks} == {
        "daily_report",
        "weekly_report",
        "birthday",
        "follow_up",
        "inquiry_timeout",
    }
    daily = tasks.filter(kind="daily_report")
    assert daily.count() == 3 and {t.cron for t in daily} == {"0 9 * * *"}
    assert tasks.get(kind="weekly_report").cron == "0 9 * * 1"
    assert tasks.filter(cron="* * * * *").count() == 1
    now = timezone.now()
    assert all(t.status == "active" and t.next_run is not None for t in tasks)
    assert tasks.filter(next_run__lte=now).exists()
    assert tasks.get(key="demo:follow_up").next_run > now


def test_demo__a_newcomer_sees_a_message_go_out_on_the_first_tick(outbox):
    demo()
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize()
        dispatch.claim("test", 100)
        sent = run_queued()
    assert sent >= 1
    assert "wangwu" in {m.recipient for m in outbox}  # the inquiry timeout, due now


def test_demo__rerun_after_sending_reactivates_one_shots_without_new_tasks(outbox):
    demo()
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize()
        dispatch.claim("test", 100)
        run_queued()
    inquiry = ScheduledTask.objects.get(key="demo:inquiry_timeout")
    assert inquiry.status == "completed"
    # As if the first run was a while ago: the rerun's "now" differs from the stored one.
    ScheduledTask.objects.filter(pk=inquiry.pk).update(run_at=F("run_at") - timedelta(minutes=5))
    before = ScheduledTask.objects.count()
    demo()
    inquiry.refresh_from_db()
    assert inquiry.status == "active" and ScheduledTask.objects.count() == before
    assert TaskRun.objects.filter(task=inquiry, status="sent").count() == 1


def test_demo__superuser_comes_from_the_environment_and_is_updated(monkeypatch, client):
    first, second = "first-secret", "second-secret"
    monkeypatch.setenv("DEMO_ADMIN_USER", "ops")
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", first)
    output = demo()
    assert "ops" in output and first in output
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", second)
    demo()
    user = get_user_model().objects.get(username="ops")
    assert user.is_superuser and user.is_staff
    assert not client.login(username="ops", password=first)
    assert client.login(username="ops", password=second)
    assert client.get("/admin/").status_code == 200


def test_demo__quiet_at_verbosity_zero():
    out = StringIO()
    call_command("reminders_demo", verbosity=0, stdout=out)
    assert out.getvalue() == ""
    assert ScheduledTask.objects.filter(key__startswith="demo:").exists()


def test_demo__unknown_time_zone_is_a_command_error():
    with pytest.raises(CommandError, match="Mars/Olympus"):
        demo("--tz", "Mars/Olympus")
    assert not ScheduledTask.objects.exists()


def test_demo__through_the_wecom_sandbox_every_message_is_delivered_none_suppressed(settings):
    """`make run` sends the demo to the sandbox: its every-minute follow-up has fixed
    content, which WeCom's duplicate check would merge were occurrences not told apart."""
    with running_sandbox() as sandbox:
        for name, value in wecom_settings(sandbox.base_url).items():
            setattr(settings, name, value)
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
        }
        settings.REMINDERS_DEFAULT_CHANNEL = "wecom"
        demo()
        start = timezone.now()
        # Five minutes of `make run`, then the next morning's reports.
        moments = [start + timedelta(minutes=n, seconds=1) for n in range(5)]
        moments.append(start + timedelta(days=1, hours=1))
        for moment in moments:
            with TestCase.captureOnCommitCallbacks(execute=True):
                dispatch.materialize(now=moment)
                dispatch.claim("test", 100, now=moment)
                run_queued()

        sends = [e for e in sandbox.ledger() if e.endpoint == "message/send"]
        assert sends and {e.status for e in sends} == {"delivered"}, [
            (e.status, e.touser, e.content) for e in sends if e.status != "delivered"
        ]
        every_minute = sandbox.delivered(to="zhaoliu")
        assert len(every_minute) >= 5
        assert len({e.content for e in every_minute}) == len(every_minute)
        assert set(SendLog.objects.values_list("status", flat=True)) == {"sent"}
        assert_ledger_matches(sandbox)
