import re
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from reminders import api
from reminders.engine import actions, dispatch, planning
from reminders.exceptions import PermanentSendError
from reminders.models import ScheduledTask, SendLog, TaskRun
from reminders.schedule import timing
from reminders.senders.memory import MemorySender
from tests.support.jobs import tick

pytestmark = pytest.mark.django_db

ACTION_URL = {
    "task": "admin:reminders_scheduledtask_changelist",
    "run": "admin:reminders_taskrun_changelist",
}


def act(client, model: str, action: str, objs) -> list[str]:
    """Post a changelist action on ``objs``, confirmed if it asks (``post=yes``, as its
    confirmation page posts); returns the messages the admin reported."""
    response = client.post(
        reverse(ACTION_URL[model]),
        {"action": action, "_selected_action": [obj.pk for obj in objs], "post": "yes"},
    )
    assert response.status_code == 302, response.content[:2000]
    return [str(m) for m in get_messages(response.wsgi_request)]


def task_form(**overrides) -> dict:
    data = {
        "kind": "daily_report",
        "recipient": "alice",
        "channel": "memory",
        "priority": "",
        "payload": "{}",
        "key": "",
        "cron": "0 9 * * *",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "Asia/Shanghai",
    }
    data.update(overrides)
    return data


@pytest.fixture
def make_run(make_task):
    """Factory: the first run of a fresh task (one-shot due now by default), put in ``status``."""

    def make(status: str = "scheduled", **task_kwargs) -> TaskRun:
        task = make_task(**task_kwargs)
        dispatch.materialize(now=task.next_run)
        run = task.runs.order_by("occurrence").first()  # the rest of the hour is planned too
        if status != run.status:
            finished = status in TaskRun.FINISHED
            TaskRun.objects.filter(pk=run.pk).update(
                status=status,
                next_attempt_at=None if finished else run.next_attempt_at,
                finished_at=timezone.now() if finished else None,
                error_code="test" if status in ("failed", "unknown") else "",
            )
            run.refresh_from_db()
            ScheduledTask.objects.filter(pk=run.task_id).complete_ended()  # as a tick does
        return run

    return make


@pytest.fixture
def staff_client(client, django_user_model):
    """Factory: a client logged in as staff holding only the permissions named."""

    def make(*codenames: str):
        user = django_user_model.objects.create_user("staff", is_staff=True)
        user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
        client.force_login(user)
        return client

    return make


# Pages render ------------------------------------------------------------------------


def test_changelists__render_every_model_with_its_rows(admin_client, make_task):
    make_task(recipient="alice")
    MemorySender.script.append(PermanentSendError("no such user", code="60111"))
    make_task(recipient="bob")
    tick()
    assert TaskRun.objects.filter(status="sent").count() == 1
    for name in ("scheduledtask", "taskrun", "sendlog"):
        response = admin_client.get(reverse(f"admin:reminders_{name}_changelist"))
        assert response.status_code == 200, name
        assert b"alice" in response.content and b"bob" in response.content, name


def test_changeforms__render_for_tasks_and_read_only_views_for_history(admin_client, make_task):
    task = make_task(recipient="alice")
    tick()
    run, log = task.runs.get(), SendLog.objects.get()
    pages = {
        "add task": reverse("admin:reminders_scheduledtask_add"),
        "change task": reverse("admin:reminders_scheduledtask_change", args=[task.pk]),
        "view run": reverse("admin:reminders_taskrun_change", args=[run.pk]),
        "view ledger row": reverse("admin:reminders_sendlog_change", args=[log.pk]),
    }
    for label, url in pages.items():
        response = admin_client.get(url)
        assert response.status_code == 200, label
    saveable = [
        label for label, url in pages.items() if b'name="_save"' in admin_client.get(url).content
    ]
    assert saveable == ["add task", "change task"]
    page = admin_client.get(pages["change task"]).content.decode()
    assert f"?task__id__exact={task.pk}" in page and "1 run<" in page


def test_run_changelist__status_filter_lists_the_failed_runs(admin_client, make_run):
    failed = make_run("failed", recipient="failing")
    make_run("sent", recipient="fine")
    response = admin_client.get(reverse(ACTION_URL["run"]), {"status__exact": "failed"})
    assert [run.pk for run in response.context["cl"].result_list] == [failed.pk]


def test_run_changelist__sorts_by_lateness_in_the_database(admin_client, make_run):
    late, punctual = make_run("sent", recipient="late"), make_run("sent", recipient="punctual")
    TaskRun.objects.filter(pk=late.pk).update(finished_at=late.due_at + timedelta(minutes=7))
    TaskRun.objects.filter(pk=punctual.pk).update(
        finished_at=punctual.due_at + timedelta(seconds=2)
    )
    columns = admin_client.get(reverse(ACTION_URL["run"])).context["cl"].list_display
    response = admin_client.get(reverse(ACTION_URL["run"]), {"o": f"-{columns.index('lateness')}"})
    rows = list(response.context["cl"].result_list)
    assert [run.pk for run in rows] == [late.pk, punctual.pk]
    assert b"0:07:00" in response.content and b"0:00:02" in response.content


def test_run_changelist__a_run_sent_before_its_due_time_reads_early_by_never_negative(
    admin_client, make_run
):
    early = make_run("sent", recipient="early")
    TaskRun.objects.filter(pk=early.pk).update(
        finished_at=early.due_at - timedelta(minutes=3, seconds=15)
    )
    content = admin_client.get(reverse(ACTION_URL["run"])).content.decode()
    assert "early by 0:03:15" in content
    assert "-1 day" not in content


def test_run_changelist__task_link_filter_lists_only_that_tasks_runs(admin_client, make_run):
    mine, other = make_run("sent"), make_run("sent")
    response = admin_client.get(reverse(ACTION_URL["run"]), {"task__id__exact": mine.task_id})
    assert response.status_code == 200
    assert [run.pk for run in response.context["cl"].result_list] == [mine.pk]
    unfiltered = admin_client.get(reverse(ACTION_URL["run"])).context["cl"].result_list
    assert {run.pk for run in unfiltered} == {mine.pk, other.pk}


# Saving a task plans it like the API -------------------------------------------------


def test_add_task__plans_next_run_and_takes_the_kinds_priority(admin_client):
    before = timezone.now()
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"),
        task_form(kind="birthday", cron="0 8 * * *", timezone="Europe/Berlin"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = ScheduledTask.objects.get()
    assert task.next_run == timing.next_occurrence("0 8 * * *", "Europe/Berlin", before)
    assert (task.priority, task.status) == ("high", "active")


def test_add_task__one_shot_is_planned_at_its_time(admin_client):
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"),
        task_form(kind="follow_up", cron="", run_at_0="2030-05-06", run_at_1="10:30:00"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = ScheduledTask.objects.get()
    local = timezone.localtime(task.next_run)
    assert (task.next_run, local.date().isoformat(), local.hour) == (task.run_at, "2030-05-06", 10)
    assert task.priority == "normal"


def test_change_task__new_schedule_replans_and_cancels_runs_not_started(admin_client, make_run):
    run = make_run("scheduled", cron="* * * * *")
    task = run.task
    old_next = ScheduledTask.objects.get(pk=task.pk).next_run
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    before = timezone.now()
    response = admin_client.post(
        url,
        task_form(
            kind=task.kind, recipient=task.recipient, cron="30 7 * * *", timezone=task.timezone
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task.refresh_from_db()
    run.refresh_from_db()
    assert task.next_run == timing.next_occurrence("30 7 * * *", task.timezone, before)
    assert task.next_run != old_next
    assert run.status == "cancelled"


def test_change_task__same_schedule_keeps_next_run_and_runs(admin_client, make_run):
    run = make_run("scheduled", cron="* * * * *")
    task = ScheduledTask.objects.get(pk=run.task_id)
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_change", args=[task.pk]),
        task_form(
            kind=task.kind,
            recipient="someone-else",
            cron=task.cron,
            timezone=task.timezone,
            priority=task.priority,
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    saved = ScheduledTask.objects.get(pk=task.pk)
    assert (saved.recipient, saved.next_run) == ("someone-else", task.next_run)
    assert TaskRun.objects.get(pk=run.pk).status == "scheduled"


def change_task(client, task, **overrides):
    """Post the task's change form with its stored values, but for ``overrides``."""
    data = task_form(
        kind=task.kind,
        recipient=task.recipient,
        channel=task.channel,
        priority=task.priority,
        key=task.key or "",
        cron=task.cron,
        timezone=task.timezone,
    )
    if task.run_at is not None:
        local = task.run_at.astimezone(timing.zone(task.timezone))
        data.update(run_at_0=f"{local:%Y-%m-%d}", run_at_1=f"{local:%H:%M:%S}")
    data.update(overrides)
    response = client.post(reverse("admin:reminders_scheduledtask_change", args=[task.pk]), data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    return [str(m) for m in get_messages(response.wsgi_request)][1:]  # after "changed"


def ended(make_task, status: str) -> ScheduledTask:
    """A task that has completed, been cancelled or been put in error."""
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    if status == "completed":
        ScheduledTask.objects.filter(pk=task.pk).update(status=status, next_run=None)
    elif status == "cancelled":
        actions.cancel(task)
    else:
        task.mark_error("unknown_kind", "not registered in run_reminders")
    return ScheduledTask.objects.get(pk=task.pk)


@pytest.mark.parametrize("status", ["completed", "cancelled", "error"])
def test_change_task__new_schedule_of_an_ended_task_makes_it_active_again(
    admin_client, make_task, status
):
    task = ended(make_task, status)
    before = timezone.now()
    assert change_task(admin_client, task, cron="30 7 * * *") == []
    task.refresh_from_db()
    assert (task.status, task.error_code) == ("active", "")
    assert task.next_run == timing.next_occurrence("30 7 * * *", "UTC", before)


@pytest.mark.parametrize(
    ("status", "why"),
    [
        ("completed", "has completed"),
        ("cancelled", "is cancelled"),
        ("error", "not registered in run_reminders"),
    ],
)
def test_change_task__an_ended_task_saved_with_the_same_schedule_says_why_it_will_not_run(
    admin_client, make_task, status, why
):
    task = ended(make_task, status)
    [warning] = change_task(admin_client, task, recipient="someone-else")
    assert why in warning
    assert ScheduledTask.objects.get(pk=task.pk).status == status


def test_change_task__new_schedule_of_a_paused_task_replans_it_and_it_stays_paused(
    admin_client, make_task
):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    actions.pause(task)
    before = timezone.now()
    change_task(admin_client, task, cron="30 7 * * *")
    task.refresh_from_db()
    assert task.status == "paused"
    assert task.next_run == timing.next_occurrence("30 7 * * *", "UTC", before)


# The one-shot time is read and shown in the task's own zone, as the API reads ``at`` --


@pytest.mark.parametrize(
    ("entered", "expected_utc"),
    [
        ("2030-05-06 10:30:00", datetime(2030, 5, 6, 8, 30, tzinfo=UTC)),
        # In the spring-forward gap: as far past it as the time was into it (03:30 CEST).
        ("2030-03-31 02:30:00", datetime(2030, 3, 31, 1, 30, tzinfo=UTC)),
        # Twice on fall-back day: its first instance (CEST).
        ("2030-10-27 02:30:00", datetime(2030, 10, 27, 0, 30, tzinfo=UTC)),
    ],
    ids=["summer", "dst gap", "dst overlap"],
)
def test_add_task__one_shot_time_is_read_in_the_tasks_zone(admin_client, entered, expected_utc):
    day, time = entered.split()
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"),
        task_form(kind="follow_up", cron="", run_at_0=day, run_at_1=time, timezone="Europe/Berlin"),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = ScheduledTask.objects.get()
    assert task.run_at == expected_utc
    same = api.schedule("follow_up", "bob", at=datetime.fromisoformat(entered), tz="Europe/Berlin")
    assert ScheduledTask.objects.get(pk=same.pk).run_at == task.run_at  # as the API reads it


def test_change_task__shows_the_one_shot_time_in_the_tasks_zone_and_keeps_it(
    admin_client, make_task
):
    task = make_task(at=datetime(2030, 5, 6, 8, 30, tzinfo=UTC), tz="America/New_York")
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    form = admin_client.get(url).context["adminform"].form
    assert form["run_at"].value() == datetime(2030, 5, 6, 4, 30)
    dispatch.materialize(now=task.run_at)  # a run planned: a re-plan would cancel it
    ScheduledTask.objects.filter(pk=task.pk).update(status="active", next_run=task.run_at)
    change_task(admin_client, task, recipient="someone-else", timezone="America/New_York")
    task.refresh_from_db()
    assert (task.recipient, task.run_at) == (
        "someone-else",
        datetime(2030, 5, 6, 8, 30, tzinfo=UTC),
    )
    assert task.runs.get().status == "scheduled"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        pytest.param({"cron": ""}, "cron", id="neither cron nor time"),
        pytest.param({"cron": "0 25 * * *"}, "cron", id="cron out of range"),
        pytest.param({"cron": "0 9 30 2 *"}, "cron", id="cron that never fires"),
        pytest.param(
            {"cron": "0 9 * * *", "run_at_0": "2026-01-01", "run_at_1": "09:00"},
            "run_at",
            id="both cron and time",
        ),
        pytest.param(
            {"cron": "", "run_at_0": "9999-12-31", "run_at_1": "23:59"},
            "run_at",
            id="time in the year 9999",
        ),
        pytest.param({"timezone": "Mars/Olympus"}, "timezone", id="unknown zone"),
        pytest.param({"kind": "no_such_kind"}, "kind", id="unknown kind"),
        pytest.param({"channel": "carrier_pigeon"}, "channel", id="unknown channel"),
        pytest.param({"recipient": "@all"}, "recipient", id="recipient @all is everyone"),
        pytest.param({"recipient": "u1|u2"}, "recipient", id="recipient lists several"),
        pytest.param({"recipient": "zhang san"}, "recipient", id="recipient with a space"),
        pytest.param({"recipient": "ali\x07ce"}, "recipient", id="recipient control char"),
        pytest.param({"channel": "sms", "recipient": "alice"}, "recipient", id="not for sms"),
        pytest.param({"key": "crm\x07key"}, "key", id="key control char"),
        pytest.param({"payload": "[1, 2]"}, "payload", id="payload not object"),
        pytest.param({"payload": '{"content": null}'}, "payload", id="content null"),
        pytest.param({"payload": '{"content": "  "}'}, "payload", id="content blank"),
        pytest.param({"payload": '{"score": NaN}'}, "payload", id="payload NaN"),
        pytest.param(
            {"channel": "wecom", "payload": '{"content": "%s"}' % ("x" * 2049)},
            "payload",
            id="content too large for the channel",
        ),
    ],
)
@pytest.mark.usefixtures("carrier_channels")
def test_add_task__invalid_input_is_reported_on_its_field(admin_client, overrides, field):
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"), task_form(**overrides)
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert not ScheduledTask.objects.exists()


@pytest.mark.usefixtures("carrier_channels")
def test_add_task__a_message_the_channel_carries_is_saved(admin_client):
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"),
        task_form(channel="wecom", recipient="Li.Si-01@corp", payload='{"content": "Call ACME"}'),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert ScheduledTask.objects.get().recipient == "Li.Si-01@corp"


# Task actions ------------------------------------------------------------------------


def test_pause_action__pauses_only_active_tasks_and_counts_both(admin_client, make_task):
    active, paused, cancelled = (make_task(cron="0 9 * * *") for _ in range(3))
    actions.pause(paused)
    actions.cancel(cancelled)
    reported = act(admin_client, "task", "pause_tasks", [active, paused, cancelled])
    statuses = dict(ScheduledTask.objects.values_list("pk", "status"))
    assert statuses == {active.pk: "paused", paused.pk: "paused", cancelled.pk: "cancelled"}
    assert reported == [
        "1 task paused.",
        "2 selected tasks left as they were (not active).",
    ]


def test_resume_action__resumes_only_paused_tasks_and_replans_them(admin_client, make_task):
    paused, active = make_task(cron="* * * * *"), make_task(cron="0 9 * * *")
    actions.pause(paused)
    ScheduledTask.objects.filter(pk=paused.pk).update(next_run=timezone.now() - timedelta(days=2))
    before = timezone.now()
    reported = act(admin_client, "task", "resume_tasks", [paused, active])
    paused.refresh_from_db()
    assert paused.status == "active"
    assert paused.next_run == timing.next_occurrence("* * * * *", paused.timezone, before)
    assert ScheduledTask.objects.get(pk=active.pk).next_run == active.next_run
    assert reported == [
        "1 task resumed.",
        "1 selected task left as it was (not paused or in error).",
    ]
    # Two days of minutes passed while paused: the latest runs, the last 50 others are
    # recorded as skipped (REMINDERS_MISSED_RUNS_RECORDED); none is lost silently.
    runs = list(paused.runs.values_list("status", "error_code"))
    assert sorted(runs) == [("scheduled", "")] + [("skipped", "paused")] * 50


def test_resume_action__says_why_a_task_in_error_still_cannot_run(admin_client, make_task):
    bad, fixed = make_task(cron="0 9 * * *"), make_task(cron="0 9 * * *", recipient="fixed")
    ScheduledTask.objects.filter(pk__in=[bad.pk, fixed.pk]).update(kind="registered_elsewhere")
    dispatch.materialize(now=bad.next_run)
    ScheduledTask.objects.filter(pk=fixed.pk).update(kind="daily_report")
    page = admin_client.get(reverse("admin:reminders_scheduledtask_change", args=[bad.pk]))
    assert b"registered_elsewhere" in page.content  # the reason is shown with the task
    reported = act(admin_client, "task", "resume_tasks", [bad, fixed])
    statuses = dict(ScheduledTask.objects.values_list("pk", "status"))
    assert statuses == {bad.pk: "error", fixed.pk: "active"}
    assert reported[0].startswith(f"{ScheduledTask.objects.get(pk=bad.pk)} cannot run: ")
    assert "'registered_elsewhere' is not a registered task kind." in reported[0]
    assert reported[1:] == ["1 task resumed."]


def test_cancel_action__cancels_live_tasks_and_their_pending_runs(
    admin_client, make_task, make_run
):
    pending = make_run("scheduled", cron="0 9 * * *")  # one run: the rest of the day is off
    paused_task = make_task(cron="0 9 * * *")
    actions.pause(paused_task)
    done = make_run("sent").task  # a one-shot that has fired: completed
    assert ScheduledTask.objects.get(pk=done.pk).status == "completed"
    reported = act(admin_client, "task", "cancel_tasks", [pending.task, paused_task, done])
    statuses = dict(ScheduledTask.objects.values_list("pk", "status"))
    assert statuses == {
        pending.task_id: "cancelled",
        paused_task.pk: "cancelled",
        done.pk: "completed",
    }
    assert TaskRun.objects.get(pk=pending.pk).status == "cancelled"
    assert reported == [
        "2 tasks cancelled, with 1 pending runs.",
        "1 selected task left as it was (already ended).",
    ]


def test_pause_action__needs_the_pause_permission_not_the_change_one(staff_client, make_task):
    task = make_task(cron="0 9 * * *")
    client = staff_client("view_scheduledtask", "change_scheduledtask")
    page = client.get(reverse(ACTION_URL["task"]))
    assert b"pause_tasks" not in page.content
    response = client.post(
        reverse(ACTION_URL["task"]), {"action": "pause_tasks", "_selected_action": [task.pk]}
    )
    assert response.status_code in (200, 302)
    assert ScheduledTask.objects.get(pk=task.pk).status == "active"


# Run history: read-only, but failed runs can be retried -----------------------------


def test_retry_action__requeues_only_failed_and_unknown_runs(admin_client, make_run):
    runs = {status: make_run(status) for status in ("failed", "unknown", "sent", "scheduled")}
    before = timezone.now()
    reported = act(admin_client, "run", "retry_runs", runs.values())
    after = {status: TaskRun.objects.get(pk=run.pk) for status, run in runs.items()}
    assert {status: run.status for status, run in after.items()} == {
        "failed": "retrying",
        "unknown": "retrying",
        "sent": "sent",
        "scheduled": "scheduled",
    }
    assert after["failed"].next_attempt_at >= before
    assert reported == [
        "2 runs put back in line for an immediate attempt.",
        "2 selected runs left as they were: not failed, unknown or expired.",
    ]


def test_retry_action__a_run_that_failed_once_is_sent_on_the_next_tick(
    admin_client, make_task, outbox
):
    task = make_task(recipient="alice")
    MemorySender.script.append(PermanentSendError("recipient not found", code="60111"))
    assert tick() == 0
    run = task.runs.get()
    assert run.status == "failed"
    act(admin_client, "run", "retry_runs", [run])
    assert tick() == 1
    assert TaskRun.objects.get(pk=run.pk).status == "sent"
    assert [m.recipient for m in outbox] == ["alice"]


def test_retry_action__a_run_that_used_up_its_retries_is_sent_on_the_next_tick(
    admin_client, make_task, outbox, settings
):
    settings.REMINDERS_RETRY_DELAYS = [1]
    task = make_task(recipient="alice")
    MemorySender.script.extend([PermanentSendError("down", code="x")])
    tick()
    run = task.runs.get()
    TaskRun.objects.filter(pk=run.pk).update(attempts=len(settings.REMINDERS_RETRY_DELAYS) + 1)
    act(admin_client, "run", "retry_runs", [run])
    assert tick() == 1
    assert [m.recipient for m in outbox] == ["alice"]


def test_retry_action__needs_the_retry_permission_not_the_change_one(staff_client, make_run):
    run = make_run("failed")
    client = staff_client("view_taskrun", "change_taskrun")
    assert b"retry_runs" not in client.get(reverse(ACTION_URL["run"])).content
    client.post(
        reverse(ACTION_URL["run"]),
        {"action": "retry_runs", "_selected_action": [run.pk], "post": "yes"},
    )
    assert TaskRun.objects.get(pk=run.pk).status == "failed"


def test_retry_action__refuses_runs_of_cancelled_tasks_and_says_so(admin_client, make_run):
    live, orphan = make_run("failed"), make_run("failed")
    actions.cancel(orphan.task)
    reported = act(admin_client, "run", "retry_runs", [live, orphan])
    statuses = dict(TaskRun.objects.values_list("pk", "status"))
    assert statuses == {live.pk: "retrying", orphan.pk: "failed"}
    assert reported == [
        "1 run put back in line for an immediate attempt.",
        "1 selected run left as it was: its task is cancelled.",
    ]


@pytest.mark.parametrize("model", ["taskrun", "sendlog"])
def test_history_admins__refuse_add_change_and_delete(admin_client, make_task, model):
    make_task(recipient="alice")
    tick()
    obj = (TaskRun if model == "taskrun" else SendLog).objects.get()
    original = {f.name: getattr(obj, f.name) for f in obj._meta.concrete_fields}
    add = reverse(f"admin:reminders_{model}_add")
    change = reverse(f"admin:reminders_{model}_change", args=[obj.pk])
    delete = reverse(f"admin:reminders_{model}_delete", args=[obj.pk])
    assert admin_client.get(add).status_code == 403
    assert admin_client.post(add, {"status": "sent"}).status_code == 403
    assert admin_client.post(change, {"status": "failed", "_save": "1"}).status_code == 403
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    changelist = admin_client.post(
        reverse(f"admin:reminders_{model}_changelist"),
        {"action": "delete_selected", "_selected_action": [obj.pk], "post": "yes"},
    )
    assert changelist.status_code in (200, 302)
    obj.refresh_from_db()
    assert {f.name: getattr(obj, f.name) for f in obj._meta.concrete_fields} == original


@pytest.mark.parametrize(
    ("choice", "stored", "in_force"),
    [("", None, "cn"), ("*", "", ""), ("cn", "cn", "cn")],
)
def test_add_task__calendar_is_the_kinds_every_day_or_a_named_one(
    admin_client, choice, stored, in_force
):
    response = admin_client.post(
        reverse("admin:reminders_scheduledtask_add"),
        task_form(kind="daily_report", cron="0 9 * * *", calendar=choice),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = ScheduledTask.objects.get()
    assert (task.calendar, planning.calendar_in_force(task)) == (stored, in_force)
    page = admin_client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
    assert f'<option value="{choice}" selected>' in page.content.decode()


def test_retry_action__a_run_in_doubt_of_a_cancelled_task_says_what_the_admin_allows(
    admin_client, make_task
):
    from reminders.exceptions import InDoubtSendError

    task = make_task(channel="memory_dedup")
    MemorySender.script[:] = [InDoubtSendError("no answer (read timeout)", code="timeout")]
    assert tick() == 0
    assert (task.runs.get().status, SendLog.objects.get().status) == ("retrying", "unknown")
    actions.cancel(task)
    run = task.runs.get()
    assert (run.status, run.error_code) == ("unknown", "cancelled_in_doubt")
    # What it says to do, the admin allows; what the admin refuses, it does not say.
    said = run.error_message.lower()
    assert "retry" not in said
    assert "recipient" in said and "statistics" in said and "mark it handled" in said
    assert act(admin_client, "run", "retry_runs", [run]) == [
        "0 runs put back in line for an immediate attempt.",
        "1 selected run left as it was: its task is cancelled.",
    ]
    admin_client.post(
        reverse(ACTION_URL["run"]),
        {"action": "mark_handled", "_selected_action": [run.pk], "post": "yes"},
    )
    run.refresh_from_db()
    assert (run.status, run.handled_by) == ("unknown", "admin")


def test_a_one_shot_s_schedule_in_words_names_its_zone_once(admin_client, make_task):
    task = make_task("follow_up", "lisi", tz="Asia/Shanghai")
    page = admin_client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
    [said] = re.findall(r"Once, at [^<]*", page.content.decode())
    assert said.count("(Asia/Shanghai)") == 1, said
