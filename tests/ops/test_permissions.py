"""The whole permission matrix of the ops staff's admin, action by action and page by
page, for a superuser, an ops operator, an ops viewer and staff in no group.

Every action is POSTed directly, confirmed (``post=yes``), whatever the page offered:
an allowed one changed the state, a refused one changed nothing. The dropdown is
checked apart: it offers exactly the allowed actions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from ops.roles import OPERATOR, VIEWER
from reminders.engine import actions, planning
from reminders.models import ScheduledTask, SendLog, TaskRun

pytestmark = pytest.mark.django_db

ROLES = ("superuser", "operator", "viewer", "staff")
TASKS = reverse("admin:reminders_scheduledtask_changelist")
RUNS = reverse("admin:reminders_taskrun_changelist")
CONFIRM = "admin/reminders/confirm.html"

# Which role may do what.
ALLOWED = {
    "superuser": {"pause", "resume", "cancel", "run_now", "retry", "mark_handled"},
    "operator": {"pause", "resume", "run_now", "retry", "mark_handled"},
    "viewer": set(),
    "staff": set(),
}
# Each action: its changelist, its name there, the state it starts from and the check
# that it happened.
ACTIONS = {
    "pause": (TASKS, "pause_tasks"),
    "resume": (TASKS, "resume_tasks"),
    "cancel": (TASKS, "cancel_tasks"),
    "run_now": (TASKS, "run_now_tasks"),
    "retry": (RUNS, "retry_runs"),
    "mark_handled": (RUNS, "mark_handled"),
}


@pytest.fixture
def login(client, django_user_model):
    """Factory: the client logged in as a user of ``role``."""

    def log_in(role: str):
        user = django_user_model.objects.create_user(
            role, is_staff=True, is_superuser=role == "superuser"
        )
        group = {"operator": OPERATOR, "viewer": VIEWER}.get(role)
        if group:
            user.groups.add(Group.objects.get(name=group))
        client.force_login(user)
        return client

    return log_in


@pytest.fixture
def world(make_task):
    """A task of each state the actions start from, and runs that failed."""
    now = timezone.now()
    active = make_task("follow_up", "active.one", cron="0 9 * * *", tz="UTC")
    paused = make_task("follow_up", "paused.one", cron="0 9 * * *", tz="UTC")
    actions.pause(paused)
    failed = planning.new_run(active, now.replace(second=0, microsecond=0) - timedelta(minutes=1))
    failed.status, failed.next_attempt_at, failed.finished_at = "failed", None, now
    failed.save()
    log = SendLog.objects.create(
        key=failed.ledger_key, task=active, run=failed, recipient="active.one", channel="memory"
    )
    return {"active": active, "paused": paused, "failed": failed, "log": log}


def subject_of(action: str, world: dict):
    return {
        "pause": world["active"],
        "resume": world["paused"],
        "cancel": world["active"],
        "run_now": world["active"],
        "retry": world["failed"],
        "mark_handled": world["failed"],
    }[action]


def state(world: dict) -> dict:
    """Everything an action could change."""
    return {
        "tasks": sorted(ScheduledTask.objects.values_list("pk", "status", "recipient")),
        "runs": sorted(
            TaskRun.objects.values_list("pk", "status", "handled_by", "is_manual", "attempts")
        ),
    }


def happened(action: str, world: dict) -> bool:
    task, run = subject_of(action, world), world["failed"]
    if action in ("retry", "mark_handled"):
        run = TaskRun.objects.get(pk=run.pk)
        return run.status == "retrying" if action == "retry" else bool(run.handled_by)
    status = ScheduledTask.objects.get(pk=task.pk).status
    return {
        "pause": status == "paused",
        "resume": status == "active",
        "cancel": status == "cancelled",
        "run_now": TaskRun.objects.filter(task=task, is_manual=True).exists(),
    }[action]


@pytest.mark.parametrize("action", list(ACTIONS))
@pytest.mark.parametrize("role", ROLES)
def test_action__allowed_changes_the_state_refused_changes_nothing(login, world, role, action):
    client = login(role)
    url, name = ACTIONS[action]
    before = state(world)
    response = client.post(
        url, {"action": name, "_selected_action": [subject_of(action, world).pk], "post": "yes"}
    )
    if action in ALLOWED[role]:
        assert response.status_code == 302
        assert happened(action, world)
    else:
        # Staff in no group may not even list; a viewer has no action at all (the list
        # again); an operator's list says "No action selected." and goes back.
        assert response.status_code == {"staff": 403, "viewer": 200}.get(role, 302)
        assert state(world) == before


@pytest.mark.parametrize("role", ROLES)
def test_action_dropdown__offers_exactly_the_allowed_actions(login, world, role):
    client = login(role)
    for url in (TASKS, RUNS):
        response = client.get(url)
        if role == "staff":
            assert response.status_code == 403
            continue
        offered = {
            choice
            for choice, _label in response.context["cl"].model_admin.get_action_choices(
                response.wsgi_request
            )
        }
        expected = {ACTIONS[a][1] for a in ALLOWED[role] if ACTIONS[a][0] == url}
        if role == "superuser" and url == TASKS:
            expected.add("delete_selected")  # run history is never deleted, tasks may be
        if role in ("superuser", "operator") and url == RUNS:
            # Recalling a run's message: tested with the recall itself (test_admin_recall).
            expected.add("recall_messages")
        assert offered - {""} == expected, url


@pytest.mark.parametrize("role", ROLES)
def test_run_now_button__and_its_page_only_for_who_may(login, world, role):
    client = login(role)
    task = world["active"]
    url = reverse("admin:reminders_scheduledtask_run_now", args=[task.pk])
    allowed = "run_now" in ALLOWED[role]
    page = client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
    if role == "staff":
        assert page.status_code == 403
    else:
        assert (f'href="{url}"' in page.content.decode()) == allowed
    confirm = client.get(url)
    assert confirm.status_code == (200 if allowed else 403)
    posted = client.post(url, {"post": "yes"})
    assert posted.status_code == (302 if allowed else 403)
    assert task.runs.filter(is_manual=True).exists() == allowed


PAGES = {
    "task list": lambda w: TASKS,
    "task change": lambda w: reverse("admin:reminders_scheduledtask_change", args=[w["active"].pk]),
    "run list": lambda w: RUNS,
    "run change": lambda w: reverse("admin:reminders_taskrun_change", args=[w["failed"].pk]),
    "ledger list": lambda w: reverse("admin:reminders_sendlog_changelist"),
    "ledger change": lambda w: reverse("admin:reminders_sendlog_change", args=[w["log"].pk]),
    "alert list": lambda w: reverse("admin:ops_alert_changelist"),
    "failed today": lambda w: reverse("admin:reminders_failedtoday_changelist"),
}


@pytest.mark.parametrize("page", list(PAGES))
@pytest.mark.parametrize("role", ROLES)
def test_pages__every_role_but_staff_in_no_group_may_look(login, world, role, page):
    response = login(role).get(PAGES[page](world))
    if role == "staff":
        assert response.status_code == 403
    elif page == "failed today":
        assert response.status_code == 302 and response.url.startswith(RUNS)
    else:
        assert response.status_code == 200


CONFIRMATIONS = {
    "run now": (TASKS, "run_now_tasks", "active"),
    "retry": (RUNS, "retry_runs", "failed"),
    "mark handled": (RUNS, "mark_handled", "failed"),
}


@pytest.mark.parametrize("confirmation", list(CONFIRMATIONS))
@pytest.mark.parametrize("role", ROLES)
def test_confirmation_pages__shown_only_to_who_may_act(login, world, role, confirmation):
    url, name, subject = CONFIRMATIONS[confirmation]
    action = {"run now": "run_now", "retry": "retry", "mark handled": "mark_handled"}
    before = state(world)
    response = login(role).post(url, {"action": name, "_selected_action": [world[subject].pk]})
    shown = response.status_code == 200 and CONFIRM in [t.name for t in response.templates]
    assert shown == (action[confirmation] in ALLOWED[role])
    if role == "staff":
        assert response.status_code == 403
    assert state(world) == before  # a confirmation page never changes anything


@pytest.mark.parametrize("role", ROLES)
def test_task_fields__only_the_superuser_edits_and_no_one_else_deletes(login, world, role):
    client = login(role)
    task = world["active"]
    change = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    page = client.get(change)
    if role != "staff":
        assert (b'name="_save"' in page.content) == (role == "superuser")
    data = {
        "kind": "follow_up",
        "recipient": "renamed",
        "channel": "memory",
        "priority": "normal",
        "payload": "{}",
        "key": "",
        "cron": "0 9 * * *",
        "run_at_0": "",
        "run_at_1": "",
        "timezone": "UTC",
        "calendar": "",
        "_save": "1",
    }
    edited = client.post(change, data)
    unrun = world["paused"]  # no history: a task with runs is not deleted in the admin
    deleted = client.post(
        reverse("admin:reminders_scheduledtask_delete", args=[unrun.pk]), {"post": "yes"}
    )
    recipient = ScheduledTask.objects.get(pk=task.pk).recipient
    if role == "superuser":
        assert (edited.status_code, deleted.status_code, recipient) == (302, 302, "renamed")
        assert not ScheduledTask.objects.filter(pk=unrun.pk).exists()
    else:
        assert (edited.status_code, deleted.status_code, recipient) == (403, 403, "active.one")
        assert ScheduledTask.objects.filter(pk=unrun.pk).exists()
