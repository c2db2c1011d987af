"""The task's page shows its next message as the recipient will see it: rendered by the
path delivery takes, in the task's language, stamped; and a builder's failure there
rather than first at send time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from reminders import kinds
from reminders.admin import preview
from reminders.messages import builders
from reminders.models import ScheduledTask
from tests.reminders.test_admin import task_form

pytestmark = pytest.mark.django_db


def page(admin_client: Client, task: ScheduledTask) -> str:
    return admin_client.get(f"/admin/reminders/scheduledtask/{task.pk}/change/").content.decode()


def test_the_next_message_is_the_one_delivery_would_render(admin_client, make_task) -> None:
    task = make_task(
        "follow_up",
        "alice",
        cron="0 9 * * *",
        tz="Asia/Shanghai",
        payload={"customer": "ACME", "lang": "en"},
    )
    html = page(admin_client, task)
    assert 'class="reminders-preview"' in html
    assert "ACME" in html
    # The stamp of the occurrence and the task, as delivery adds it.
    assert f"· #{task.pk}" in html


def test_the_next_message_is_in_the_task_s_language(admin_client, make_task) -> None:
    task = make_task(
        "follow_up", "alice", cron="0 9 * * *", payload={"customer": "ACME", "lang": "zh-hans"}
    )
    html = page(admin_client, task)
    assert "ACME" in html
    assert any("\u4e00" <= char <= "\u9fff" for char in html.split("reminders-preview", 1)[1][:400])


def test_a_builder_that_fails__is_shown_on_the_page(admin_client, make_task, monkeypatch) -> None:
    task = make_task("follow_up", "alice", cron="0 9 * * *", payload={"customer": "ACME"})

    def broken(task, run):
        raise ZeroDivisionError("no customer today")

    monkeypatch.setitem(builders._decorated, "follow_up", broken)
    html = page(admin_client, task)
    assert "The message cannot be built" in html
    assert "no customer today" in html


def bad_sql(task, run):
    """A builder whose query fails: on PostgreSQL, the transaction it ran in is aborted."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM reminders_no_such_table")


def test_a_builder_that_runs_bad_sql__is_shown_and_the_page_still_renders(
    admin_client, make_task, monkeypatch
) -> None:
    task = make_task("follow_up", "alice", cron="0 9 * * *", payload={"customer": "ACME"})
    monkeypatch.setitem(builders._decorated, "follow_up", bad_sql)
    response = admin_client.get(f"/admin/reminders/scheduledtask/{task.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    assert "The message cannot be built" in html
    assert "reminders_no_such_table" in html


def test_an_ended_task__has_no_next_message(admin_client, make_task) -> None:
    task = make_task("follow_up", "alice", at=datetime(2020, 1, 1, tzinfo=UTC))
    task.status = ScheduledTask.Status.COMPLETED
    task.save()
    assert "None: the task has ended." in page(admin_client, task)


def test_the_render_is_what_kinds_render_gives(make_task) -> None:

    task = make_task("follow_up", "alice", cron="0 9 * * *", payload={"customer": "ACME"})
    content = kinds.Content("text", {"content": "Hello <b>"})
    assert (
        str(preview.render(content)) == '<pre class="reminders-preview-text">Hello &lt;b&gt;</pre>'
    )
    assert task.pk


# --- The add form previews before saving ----------------------------------------------


def test_the_add_form__previews_the_message_and_saves_nothing(admin_client) -> None:
    data = task_form(kind="follow_up", cron="0 9 * * *", payload='{"customer": "Globex"}')
    data["_preview"] = "Preview"
    response = admin_client.post(reverse("admin:reminders_scheduledtask_add"), data)
    html = response.content.decode()
    assert response.status_code == 200
    assert "reminders-form-preview" in html and "Globex" in html
    assert "Preview only: nothing was saved." in html
    assert not ScheduledTask.objects.exists()


def test_the_add_form__shows_a_builder_s_failure_before_saving(admin_client, monkeypatch) -> None:
    def broken(task, run):
        raise ZeroDivisionError("no customer today")

    monkeypatch.setitem(builders._decorated, "follow_up", broken)
    data = task_form(kind="follow_up", cron="0 9 * * *", payload='{"customer": "Globex"}')
    data["_preview"] = "Preview"
    html = admin_client.post(reverse("admin:reminders_scheduledtask_add"), data).content.decode()
    assert "no customer today" in html
    assert not ScheduledTask.objects.exists()


@pytest.mark.parametrize("button", ["_preview", "_save"])
def test_the_add_form__refuses_a_builder_that_runs_bad_sql_and_still_renders(
    admin_client, monkeypatch, button
) -> None:
    monkeypatch.setitem(builders._decorated, "follow_up", bad_sql)
    data = task_form(kind="follow_up", cron="0 9 * * *", payload='{"customer": "Globex"}')
    data[button] = "Go"
    response = admin_client.post(reverse("admin:reminders_scheduledtask_add"), data)
    assert response.status_code == 200
    html = response.content.decode()
    assert "cannot render a message from this payload" in html
    assert "reminders_no_such_table" in html
    assert not ScheduledTask.objects.exists()


def test_the_add_form__saves_as_before_without_preview(admin_client) -> None:
    data = task_form(kind="follow_up", cron="0 9 * * *", payload='{"customer": "Globex"}')
    response = admin_client.post(reverse("admin:reminders_scheduledtask_add"), data)
    assert response.status_code == 302
    assert ScheduledTask.objects.count() == 1
