"""The admin for ops staff: a task's schedule in words, its next occurrences and last
runs; run now; the run history's filters, "failed today", retry and mark handled with
their confirmation pages. Permissions are walked in tests/ops/test_permissions.py."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from reminders.admin.filters import FAILED_TODAY, local_days
from reminders.engine import actions, planning
from reminders.models import ScheduledTask, TaskRun
from reminders.schedule import timing

pytestmark = pytest.mark.django_db

TASKS = reverse("admin:reminders_scheduledtask_changelist")
RUNS = reverse("admin:reminders_taskrun_changelist")
RUN_LINK = re.compile(r'href="/admin/reminders/taskrun/(\d+)/change/"')


def change_page(client, task: ScheduledTask) -> str:
    response = client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
    assert response.status_code == 200
    return response.content.decode()


def reported(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def listed(response) -> set[int]:
    return {run.pk for run in response.context["cl"].result_list}


def a_run(task: ScheduledTask, due_at: datetime, status: str = "sent", **fields) -> TaskRun:
    """A run of ``task`` due at ``due_at``, ended (or waiting) in ``status``."""
    run = planning.new_run(task, due_at)
    run.status = status
    waiting = status in TaskRun.WAITING
    run.next_attempt_at = due_at if waiting else None
    run.finished_at = None if waiting else due_at
    for name, value in fields.items():
        setattr(run, name, value)
    run.save()
    return run


@pytest.fixture
def four_day_week(settings) -> str:
    """A working-day calendar of Mondays to Thursdays, covering every year the tests
    may run in."""
    settings.REMINDERS_CALENDARS = {
        "cn": {"BACKEND": "reminders.calendars.ChineseCalendar"},
        "four": {
            "BACKEND": "tests.support.calendars.FourDayWeek",
            "OPTIONS": {"years": (1970, 2099)},
        },
    }
    return "four"


# Tasks -----------------------------------------------------------------------------------


def test_task_list__shows_the_schedule_in_words_with_the_cron_beside(admin_client, make_task):
    make_task("daily_report", cron="0 9 * * 1-5")
    page = admin_client.get(TASKS).content.decode()
    assert '<span title="0 9 * * 1-5">At 09:00 on Monday to Friday</span>' in page


@pytest.mark.parametrize("term", ["wang.fang", "crm:follow:42"])
def test_task_list__searches_by_recipient_and_by_key(admin_client, make_task, term):
    wanted = make_task("follow_up", "wang.fang", cron="0 9 * * *", key="crm:follow:42")
    make_task("follow_up", "li.si", cron="0 9 * * *", key="crm:follow:43")
    response = admin_client.get(TASKS, {"q": term})
    assert [task.pk for task in response.context["cl"].result_list] == [wanted.pk]


def test_change_form__the_next_five_occurrences_in_the_tasks_zone_say_which_are_skipped(
    admin_client, make_task, four_day_week
):
    task = make_task("follow_up", cron="0 9 * * *", tz="America/New_York")
    ScheduledTask.objects.filter(pk=task.pk).update(calendar=four_day_week)
    page = change_page(admin_client, task)
    assert "At 09:00 every day" in page
    assert "In America/New_York:" in page
    zone = ZoneInfo("America/New_York")
    first = timing.next_occurrence("0 9 * * *", "America/New_York", timezone.now())
    days = [(first + timedelta(days=n)).astimezone(zone) for n in range(5)]
    items = re.findall(r"<li>([^<]*)</li>", page.split('class="reminders-upcoming"')[1])[:5]
    assert [item.split()[0] for item in items] == [f"{day:%Y-%m-%d}" for day in days]
    for day, item in zip(days, items, strict=True):
        assert item.endswith("09:00 (holiday: skipped)") == (day.weekday() >= 4), item


def test_change_form__a_paused_tasks_occurrences_say_it_and_an_ended_one_has_none(
    admin_client, make_task
):
    paused = make_task("follow_up", cron="0 9 * * *")
    actions.pause(paused)
    assert "none of these is sent until it is resumed" in change_page(admin_client, paused)
    ended = make_task("follow_up", cron="0 9 * * *")
    actions.cancel(ended)
    assert "None: the task has ended." in change_page(admin_client, ended)


def test_change_form__lists_its_runs_planned_ahead_then_the_last_20_due_newest_first(
    admin_client, make_task
):
    task = make_task("follow_up", cron="* * * * *", tz="UTC")
    now = timezone.now().replace(second=0, microsecond=0)
    past = [a_run(task, now - timedelta(minutes=n)) for n in range(1, 26)]
    ahead = [a_run(task, now + timedelta(minutes=n), "scheduled") for n in (5, 6)]
    page = change_page(admin_client, task)
    recent = page.split('class="reminders-recent-runs"')[1]
    expected = [ahead[1].pk, ahead[0].pk, *(run.pk for run in past[:20])]
    assert [int(pk) for pk in RUN_LINK.findall(recent)] == expected


# Run now ---------------------------------------------------------------------------------


def test_run_now_button__asks_first_then_makes_the_run_and_says_so(admin_client, make_task):
    task = make_task("follow_up", cron="0 9 * * *")
    url = reverse("admin:reminders_scheduledtask_run_now", args=[task.pk])
    assert f'href="{url}"' in change_page(admin_client, task)
    confirm = admin_client.get(url)
    assert confirm.status_code == 200
    assert "1 task will get a run due now" in confirm.content.decode()
    assert not task.runs.exists()  # the page changes nothing
    response = admin_client.post(url, {"post": "yes"})
    assert response.status_code == 302
    assert response.url == reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    run = task.runs.get()
    assert (run.is_manual, run.requested_by, run.status) == (True, "admin", "scheduled")
    assert reported(response)[-1] == "1 task has a run due now."
    again = admin_client.post(url, {"post": "yes"})
    assert task.runs.count() == 1
    assert reported(again)[-1].startswith("1 task already had a run requested this minute")


def test_run_now_button__a_paused_task_is_refused_with_the_reason(admin_client, make_task):
    task = make_task("follow_up", cron="0 9 * * *")
    actions.pause(task)
    url = reverse("admin:reminders_scheduledtask_run_now", args=[task.pk])
    page = admin_client.get(url).content.decode()
    assert "0 tasks will get a run due now" in page
    assert "1 selected task left as it was: the task is paused: resume it first." in page
    assert '<input type="submit"' not in page
    response = admin_client.post(url, {"post": "yes"})
    assert reported(response) == [
        "0 tasks have a run due now.",
        "1 selected task left as it was: the task is paused: resume it first.",
    ]
    assert not task.runs.exists()


def test_run_now_action__confirms_then_runs_each_task_it_can(admin_client, make_task):
    active, paused = make_task(cron="0 9 * * *"), make_task(cron="0 9 * * *")
    actions.pause(paused)
    data = {"action": "run_now_tasks", "_selected_action": [active.pk, paused.pk]}
    confirm = admin_client.post(TASKS, data)
    assert confirm.status_code == 200
    assert confirm.templates[0].name == "admin/reminders/confirm.html"
    assert not TaskRun.objects.exists()
    response = admin_client.post(TASKS, {**data, "post": "yes"})
    assert response.status_code == 302
    assert reported(response) == [
        "1 task has a run due now.",
        "1 selected task left as it was: the task is paused: resume it first.",
    ]
    assert list(TaskRun.objects.values_list("task_id", "is_manual")) == [(active.pk, True)]


@pytest.mark.parametrize("given", [["run_now"], ["run_now", "view"]], ids=["no view", "view"])
def test_run_now__needs_the_view_permission_too(client, django_user_model, make_task, given):
    from django.contrib.auth.models import Permission

    task = make_task("follow_up", cron="0 9 * * *")
    user = django_user_model.objects.create_user("runner", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=[f"{p}_scheduledtask" for p in given])
    )
    client.force_login(user)
    url = reverse("admin:reminders_scheduledtask_run_now", args=[task.pk])
    allowed = "view" in given
    assert client.get(url).status_code == (200 if allowed else 403)
    assert client.post(url, {"post": "yes"}).status_code == (302 if allowed else 403)
    action = {"action": "run_now_tasks", "_selected_action": [task.pk], "post": "yes"}
    assert client.post(TASKS, action).status_code == (302 if allowed else 403)
    assert task.runs.filter(is_manual=True).exists() == allowed


def test_run_now__a_task_the_admin_does_not_show_is_not_found(admin_client, make_task, monkeypatch):
    from reminders.admin import ScheduledTaskAdmin

    shown, hidden = make_task(cron="0 9 * * *"), make_task(cron="0 9 * * *")
    narrowed = ScheduledTaskAdmin.get_queryset

    def get_queryset(self, request):  # as a CRM's admin may narrow what each one sees
        return narrowed(self, request).exclude(pk=hidden.pk)

    monkeypatch.setattr(ScheduledTaskAdmin, "get_queryset", get_queryset)
    for task, status in ((hidden, 404), (shown, 302)):
        url = reverse("admin:reminders_scheduledtask_run_now", args=[task.pk])
        assert admin_client.post(url, {"post": "yes"}).status_code == status
    assert list(TaskRun.objects.values_list("task_id", flat=True)) == [shown.pk]


# Runs: columns and filters ---------------------------------------------------------------


def test_run_list__shows_the_error_code_and_the_message_cut_short(admin_client, make_task):
    task = make_task("follow_up", cron="0 9 * * *")
    long = "recipient not found: " + "x" * 200
    a_run(task, timezone.now(), "failed", error_code="60111", error_message=long)
    page = admin_client.get(RUNS).content.decode()
    assert "60111" in page
    assert f'<span title="{long}">{long[:79]}…</span>' in page


def test_local_days__are_the_sites_midnights_across_a_dst_change(settings):
    settings.TIME_ZONE = "Europe/Berlin"
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 3, 30, 10, 0, tzinfo=berlin)  # the Monday after clocks went forward
    start, end = local_days("yesterday", now)
    assert (start, end) == (
        datetime(2026, 3, 29, tzinfo=berlin),
        datetime(2026, 3, 30, tzinfo=berlin),
    )
    assert end.astimezone(UTC) - start.astimezone(UTC) == timedelta(hours=23)
    start, end = local_days("7d", now)
    assert (start, end) == (
        datetime(2026, 3, 24, tzinfo=berlin),
        datetime(2026, 3, 31, tzinfo=berlin),
    )


def test_run_list__due_filter_uses_local_days_of_the_sites_zone(admin_client, make_task, settings):
    settings.TIME_ZONE = "Asia/Shanghai"
    task = make_task("follow_up", cron="* * * * *", tz="UTC")
    midnight = (
        timezone.now()
        .astimezone(ZoneInfo("Asia/Shanghai"))
        .replace(hour=0, minute=0, second=0, microsecond=0)
    )
    today = a_run(task, midnight)
    now = a_run(task, timezone.now() - timedelta(seconds=1))
    yesterday = a_run(task, midnight - timedelta(seconds=1))
    week_start = a_run(task, midnight - timedelta(days=6))
    older = a_run(task, midnight - timedelta(days=6, seconds=1))
    assert listed(admin_client.get(RUNS, {"due": "today"})) == {today.pk, now.pk}
    assert listed(admin_client.get(RUNS, {"due": "yesterday"})) == {yesterday.pk}
    week = listed(admin_client.get(RUNS, {"due": "7d"}))
    assert week == {today.pk, now.pk, yesterday.pk, week_start.pk}
    assert older.pk not in week


def test_run_list__filters_by_kind_channel_status_make_up_run_now_and_handled(
    admin_client, make_task
):
    now = timezone.now()
    report = make_task("daily_report", cron="0 9 * * *", channel="memory_dedup")
    follow = make_task("follow_up", cron="0 9 * * *")
    makeup = a_run(report, now - timedelta(hours=1), is_compensation=True)
    failed = a_run(follow, now - timedelta(hours=2), "failed")
    handled = a_run(follow, now - timedelta(hours=3), "failed", handled_at=now, handled_by="bo")
    manual, _ = actions.run_now(follow, now)
    cases = {
        "task__kind": ("daily_report", {makeup.pk}),
        "task__channel": ("memory_dedup", {makeup.pk}),
        "status__exact": ("failed", {failed.pk, handled.pk}),
        "is_compensation__exact": ("1", {makeup.pk}),
        "is_manual__exact": ("1", {manual.pk}),
        "handled": ("yes", {handled.pk}),
    }
    for parameter, (value, expected) in cases.items():
        assert listed(admin_client.get(RUNS, {parameter: value})) == expected, parameter
    unhandled = listed(admin_client.get(RUNS, {"handled": "no"}))
    assert unhandled == {makeup.pk, failed.pk, manual.pk}


def test_failed_today__one_click_from_the_index_lists_todays_unhandled_failures(
    admin_client, make_task
):
    task = make_task("follow_up", cron="* * * * *", tz="UTC")
    now = timezone.now()
    wanted = a_run(task, now - timedelta(seconds=5), "failed")
    a_run(task, now - timedelta(seconds=65), "failed", handled_at=now, handled_by="bo")
    a_run(task, now - timedelta(days=2), "failed")
    a_run(task, now - timedelta(seconds=125), "sent")
    entry = reverse("admin:reminders_failedtoday_changelist")
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{entry}"' in index and "Failed today" in index
    response = admin_client.get(entry)
    assert response.status_code == 302 and response.url == f"{RUNS}?{FAILED_TODAY}"
    assert listed(admin_client.get(response.url)) == {wanted.pk}


# Runs: retry and mark handled, confirmed -------------------------------------------------


def test_retry_action__the_confirmation_says_what_will_be_retried_and_what_is_left_and_why(
    admin_client, make_task
):
    now = timezone.now()
    follow = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    birthday = make_task("birthday", cron="0 9 * * *", tz="UTC")
    failed = a_run(follow, now - timedelta(minutes=1), "failed")
    expired_in_time = a_run(
        follow, now - timedelta(minutes=2), "expired", deadline=now + timedelta(minutes=30)
    )
    too_late = a_run(birthday, now - timedelta(minutes=3), "expired", deadline=now)
    sent = a_run(follow, now - timedelta(minutes=4))
    data = {
        "action": "retry_runs",
        "_selected_action": [failed.pk, expired_in_time.pk, too_late.pk, sent.pk],
    }
    page = admin_client.post(RUNS, data).content.decode()
    assert "2 runs will be put back in line for an immediate attempt" in page
    assert (
        "1 selected run left as it was: its deadline has passed: a message is never sent "
        "after it." in page
    )
    assert "1 selected run left as it was: not failed, unknown or expired." in page
    assert TaskRun.objects.filter(status="retrying").count() == 0  # nothing yet
    response = admin_client.post(RUNS, {**data, "post": "yes"})
    assert reported(response) == [
        "2 runs put back in line for an immediate attempt.",
        "1 selected run left as it was: its deadline has passed: a message is never sent after it.",
        "1 selected run left as it was: not failed, unknown or expired.",
    ]
    statuses = dict(TaskRun.objects.values_list("pk", "status"))
    assert statuses == {
        failed.pk: "retrying",
        expired_in_time.pk: "retrying",
        too_late.pk: "expired",
        sent.pk: "sent",
    }


def test_mark_handled_action__records_who_and_the_run_drops_out_of_failed_today(
    admin_client, make_task
):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    now = timezone.now()
    failed = a_run(task, now - timedelta(seconds=5), "failed")
    unknown = a_run(task, now - timedelta(seconds=65), "unknown")
    done = a_run(task, now - timedelta(seconds=125), "failed", handled_at=now, handled_by="bo")
    sent = a_run(task, now - timedelta(seconds=185))
    data = {"action": "mark_handled", "_selected_action": [failed.pk, unknown.pk, done.pk, sent.pk]}
    page = admin_client.post(RUNS, data).content.decode()
    assert "2 runs will be marked handled by you, now." in page
    assert "1 selected run left as it was: already handled." in page
    assert "1 selected run left as it was: not failed, unknown or expired." in page
    before = timezone.now()
    response = admin_client.post(RUNS, {**data, "post": "yes"})
    assert reported(response) == [
        "2 runs marked handled.",
        "1 selected run left as it was: already handled.",
        "1 selected run left as it was: not failed, unknown or expired.",
    ]
    marked = TaskRun.objects.filter(handled_by="admin")
    assert {run.pk for run in marked} == {failed.pk, unknown.pk}
    assert all(run.handled_at >= before for run in marked)
    assert TaskRun.objects.get(pk=done.pk).handled_by == "bo"
    assert listed(admin_client.get(f"{RUNS}?{FAILED_TODAY}")) == set()


def test_run_page__shows_who_handled_it(admin_client, make_task):
    task = make_task("follow_up", cron="0 9 * * *", tz="UTC")
    run = a_run(task, timezone.now(), "failed")
    actions.mark_handled(run, "admin", datetime(2026, 12, 3, 2, 0, tzinfo=UTC))
    page = admin_client.get(reverse("admin:reminders_taskrun_change", args=[run.pk]))
    assert b"handled by" in page.content.lower() and b"admin" in page.content
