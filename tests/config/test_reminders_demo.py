"""``reminders_demo``: the standalone project's demo data, which never touches a real
system: it runs only where the default channel is the console or the WeCom sandbox,
never changes an existing user and prints no password it did not make."""

import importlib.util
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command, get_commands
from django.db.models import F
from django.test import TestCase
from django.utils import timezone

from config.demo import DIGEST_CUSTOMERS, DIGEST_MEMBER, ESCALATE_AFTER, INQUIRY_KEY, demo_tasks
from reminders import preferences
from reminders.engine import dispatch
from reminders.intake.occasions import escalation_key
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.schedule import timing
from tests.support.jobs import run_queued
from tests.support.sandbox import assert_ledger_matches, running_sandbox, wecom_settings

pytestmark = pytest.mark.django_db

WECOM = {"BACKEND": "reminders.senders.wecom.WeComSender"}
ROBOT = {"BACKEND": "reminders.senders.robot.WeComRobotSender", "OPTIONS": {"key": "k-1234"}}


@pytest.fixture(autouse=True)
def console_channel(settings, monkeypatch):
    """The demo's channel is the console unless a test says otherwise; no login given."""
    settings.REMINDERS_DEFAULT_CHANNEL = "console"
    monkeypatch.delenv("DEMO_ADMIN_USER", raising=False)
    monkeypatch.delenv("DEMO_ADMIN_PASSWORD", raising=False)


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


class NotWeCom(BaseHTTPRequestHandler):
    """A server at WECOM_API_BASE that is not the sandbox (a proxy to WeCom, say)."""

    def do_GET(self) -> None:
        body = b'{"errcode":40014,"errmsg":"invalid access_token"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def not_the_sandbox() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotWeCom)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_demo__is_the_standalone_project_s_command_not_the_installable_apps():
    assert get_commands()["reminders_demo"] == "config"
    assert importlib.util.find_spec("ops.management.commands.reminders_demo") is None


def test_demo__running_twice_updates_the_same_rows():
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


def test_demo__recipients_are_demo_ids_not_common_member_ids():
    demo()
    recipients = set(ScheduledTask.objects.values_list("recipient", flat=True))
    assert recipients and all(r.startswith("demo-") for r in recipients), recipients


def test_demo__a_newcomer_sees_a_message_go_out_on_the_first_tick(caplog):
    demo()
    with (
        caplog.at_level("INFO", logger="reminders.console"),
        TestCase.captureOnCommitCallbacks(execute=True),
    ):
        dispatch.materialize()
        dispatch.claim("test", 100)
        sent = run_queued()
    assert sent >= 1
    # The inquiry timeout, due now, is logged by the console channel.
    assert any("to demo-wangwu:" in r.getMessage() for r in caplog.records), caplog.text


def test_demo__rerun_after_sending_reactivates_one_shots_without_new_tasks():
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


def test_demo__a_generated_password_is_printed_once_and_logs_in(client):
    output = demo()
    [line] = [line for line in output.splitlines() if "Superuser created" in line]
    password = line.rsplit(" ", 1)[-1]
    assert len(password) >= 12 and password != "admin"
    assert client.login(username="admin", password=password)
    assert client.get("/admin/").status_code == 200
    again = demo()
    assert password not in again
    assert "admin exists: left unchanged" in again
    assert client.login(username="admin", password=password)


def test_demo__a_password_from_the_environment_is_used_but_never_printed(monkeypatch, client):
    secret = "first-secret-4c1d"
    monkeypatch.setenv("DEMO_ADMIN_USER", "ops")
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", secret)
    output = demo()
    assert "ops" in output and secret not in output
    assert "DEMO_ADMIN_PASSWORD" in output
    user = get_user_model().objects.get(username="ops")
    assert user.is_superuser and user.is_staff
    assert client.login(username="ops", password=secret)


def test_demo__never_changes_an_existing_user(monkeypatch, client):
    """A CRM's own ``admin`` keeps its password and its rights, whatever the environment."""
    user = get_user_model().objects.create_user("admin", password="theirs-9f2a")
    before = get_user_model().objects.filter(pk=user.pk).values().get()
    monkeypatch.setenv("DEMO_ADMIN_PASSWORD", "demo-password-1")
    output = demo()
    assert get_user_model().objects.filter(pk=user.pk).values().get() == before
    assert not client.login(username="admin", password="demo-password-1")
    assert client.login(username="admin", password="theirs-9f2a")
    assert "demo-password-1" not in output and "theirs-9f2a" not in output
    assert get_user_model().objects.count() == 1


@pytest.mark.parametrize(
    ("channels", "base", "why"),
    [
        ({"memory": {"BACKEND": "reminders.senders.memory.MemorySender"}}, None, "neither"),
        ({"memory": WECOM}, "https://qyapi.weixin.qq.com", "WeCom's own server"),
        ({"memory": WECOM}, "not-the-sandbox", "is not the WeCom sandbox"),
        ({"memory": WECOM}, "http://127.0.0.1:9", "is not the WeCom sandbox"),
        ({"memory": ROBOT}, "not-the-sandbox", "is not the WeCom sandbox"),
    ],
    ids=["memory", "wecom", "other-server", "nothing-there", "robot"],
)
def test_demo__refuses_a_default_channel_that_is_neither_the_sandbox_nor_the_console(
    settings, not_the_sandbox, channels, base, why
):
    """As installed in a CRM with WeCom credentials: a real default channel."""
    settings.REMINDERS_CHANNELS = {**settings.REMINDERS_CHANNELS, **channels}
    settings.REMINDERS_DEFAULT_CHANNEL = "memory"
    if base is not None:
        settings.WECOM_API_BASE = not_the_sandbox if base == "not-the-sandbox" else base
        settings.WECOM_CORP_ID, settings.WECOM_CORP_SECRET = "ww0123456789abcdef", "s" * 43
        settings.WECOM_AGENT_ID = "1000002"
    with pytest.raises(CommandError, match=f"REMINDERS_DEFAULT_CHANNEL.*{why}"):
        demo()
    assert not ScheduledTask.objects.exists()
    assert not get_user_model().objects.exists()


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
        settings.REMINDERS_CHANNELS = {**settings.REMINDERS_CHANNELS, "wecom": WECOM}
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
        every_minute = sandbox.delivered(to="demo-zhaoliu")
        assert len(every_minute) >= 5
        assert len({e.content for e in every_minute}) == len(every_minute)
        assert set(SendLog.objects.values_list("status", flat=True)) == {"sent"}
        assert_ledger_matches(sandbox)


def test_demo__a_sandbox_holding_another_app_is_not_this_channel_s(settings):
    """The server at WECOM_API_BASE is a sandbox, but of another corp: refused."""
    with running_sandbox(corp_id="ww-someone-else") as sandbox:
        for name, value in wecom_settings(sandbox.base_url).items():
            setattr(settings, name, value)
        settings.REMINDERS_CHANNELS = {**settings.REMINDERS_CHANNELS, "wecom": WECOM}
        settings.REMINDERS_DEFAULT_CHANNEL = "wecom"
        with pytest.raises(CommandError, match="REMINDERS_DEFAULT_CHANNEL"):
            demo()
    assert not ScheduledTask.objects.exists()


def test_demo__says_when_the_next_message_goes_not_where_planning_resumes(settings):
    demo()
    dispatch.materialize()  # the every-minute task's next hour is planned
    task = ScheduledTask.objects.get(key="demo:every_minute")
    first = task.runs.filter(status__in=TaskRun.WAITING).order_by("next_attempt_at").first()
    assert first is not None and first.next_attempt_at < task.next_run

    [line] = [line for line in demo().splitlines() if "demo:every_minute" in line]

    zone = timing.zone(settings.TIME_ZONE)
    shown = first.next_attempt_at.astimezone(zone).isoformat(timespec="seconds")
    assert line.endswith(f"next run {shown}"), line


# A time the demo prints: ISO 8601 with its offset.
PRINTED_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?([+-]\d\d:\d\d|Z)")


@pytest.mark.parametrize("args", [(), ("--tz", "Europe/Berlin")], ids=["default", "--tz"])
def test_demo__prints_every_time_in_the_project_s_time_zone(settings, args):
    settings.TIME_ZONE = "Asia/Shanghai"
    out = demo(*args)
    offsets = PRINTED_TIME.findall(out)
    assert len(offsets) >= len(demo_tasks(timezone.now(), "Asia/Shanghai")), out
    assert set(offsets) == {"+08:00"}, out
    if args:  # a schedule of another zone says which
        [line] = [line for line in out.splitlines() if "demo:weekly_report" in line]
        assert "0 9 * * 1 (Europe/Berlin)" in line, line


@pytest.mark.parametrize(
    ("utc", "greeted"),
    [
        # 07:30 in Shanghai: at 09:00 that morning.
        (datetime(2026, 12, 3, 23, 30, tzinfo=UTC), datetime(2026, 12, 4, 1, 0, tzinfo=UTC)),
        # 10:00: now, before the kind's 12:00 deadline.
        (datetime(2026, 12, 4, 2, 0, tzinfo=UTC), datetime(2026, 12, 4, 2, 0, tzinfo=UTC)),
        # 23:52, past the deadline: 09:00 the next day, never a run made to expire.
        (datetime(2026, 12, 4, 15, 52, tzinfo=UTC), datetime(2026, 12, 5, 1, 0, tzinfo=UTC)),
    ],
)
def test_demo__the_birthday_greeting_is_never_made_past_its_deadline(utc, greeted):
    [birthday] = [t for t in demo_tasks(utc, "Asia/Shanghai") if t.kind == "birthday"]
    assert birthday.at == greeted


def test_demo__the_inquiry_card_has_an_escalation_its_click_cancels():
    now = datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    tasks = {t.key: t for t in demo_tasks(now, "Asia/Shanghai")}
    first, escalation = tasks[INQUIRY_KEY], tasks[escalation_key(INQUIRY_KEY)]
    assert first.at == now and escalation.at == now + ESCALATE_AFTER
    assert escalation.payload["escalated_from"] == first.recipient != escalation.recipient
    # Cards, not the CRM's own text (which stays text).
    assert "content" not in first.payload and "content" not in tasks["demo:follow_up"].payload


def test_demo__one_salesperson_takes_the_follow_ups_as_one_digest(settings):
    settings.REMINDERS_DIGEST_SECONDS = 300
    out = demo()
    assert f"{DIGEST_MEMBER} takes follow-ups as one digest" in out
    assert preferences.get(DIGEST_MEMBER)["follow_up"].digest
    later = timezone.now() + timedelta(minutes=10)  # past the window of the last one
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=later)
        dispatch.claim("test", 100, now=later)
        run_queued(now=later)
    [row] = SendLog.objects.filter(recipient=DIGEST_MEMBER, task__kind="follow_up")
    assert "3 follow-ups due:" in row.body
    assert all(customer in row.body for customer in DIGEST_CUSTOMERS)
    items = TaskRun.objects.filter(task__key__startswith="demo:digest:")
    assert {run.status for run in items} == {TaskRun.Status.SENT}
    assert {run.digest_id for run in items} == {row.run_id}
