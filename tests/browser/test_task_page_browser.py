"""A fresh one-shot's page tells one story, in a real browser, before and after its run
goes: while the run waits, the task is active, its next run and title are on the clock
of its zone (never ISO UTC), and the runs listed include the waiting one; once the run
is sent, the task is completed and its last run says when. In en-US and zh-CN alike.

Everything on the way is real: the admin's login form and change page on the live
server (pytest-django's ``live_server``), the scheduler's tick (``ReminderWorker.tick``,
as ``run_reminders`` calls it) and the delivery job it enqueues (run in this process,
as a django-q2 worker would), and the memory channel. Run on SQLite under the suite's
main Django only, as the other browser tests are, and for the same reasons.

``TASK_PAGE_SCREENSHOTS=DIR`` also saves the page before and after the run goes as
full-page PNGs in DIR (``task-before.png``, ``task-after.png``); without it nothing is
written.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Browser, Page

from reminders import api
from reminders.models import ScheduledTask
from reminders.schedule import readable
from tests.browser.conftest import MARKS, PASSWORD, engine_pass, signed_in

pytestmark = MARKS

ZONE = "Asia/Shanghai"


def task_page(browser: Browser, base: str, task: ScheduledTask, locale: str) -> Page:
    """The task's change page, signed in through the admin's login form, in ``locale``."""
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    return signed_in(browser, base, url, "olga", locale)


def field(page: Page, name: str) -> str:
    """A read-only field's text as the page shows it."""
    return page.locator(f".field-{name} .readonly").inner_text().strip()


def run_rows(page: Page) -> list[list[str]]:
    """The runs listed on the page: each row's cells."""
    rows = page.locator("table.reminders-recent-runs tbody tr").all()
    return [[cell.strip() for cell in row.locator("td").all_inner_texts()] for row in rows]


def screenshot(page: Page, name: str) -> None:
    """The page as a PNG in ``TASK_PAGE_SCREENSHOTS``, only when it asks for one."""
    target = os.environ.get("TASK_PAGE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"task-{name}.png"), full_page=True)


def test_one_shot_page__tells_one_story_before_and_after_its_run_goes(
    live_server: Any, browser: Browser, time_machine: Any
) -> None:
    User.objects.create_superuser("olga", password=PASSWORD)
    at = timezone.now() + timedelta(minutes=5)
    task = api.schedule("follow_up", "demo-lisi", at=at, tz=ZONE, payload={"content": "Call"})
    assert engine_pass() == 0  # planned: its run waits
    run = task.runs.get()
    when = readable.moment(run.next_attempt_at, ZONE)
    title = f"Follow-up reminder → demo-lisi · {readable.moment(at, ZONE)}"

    page = task_page(browser, live_server.url, task, "en-US")
    assert page.title().startswith(title)
    assert field(page, "status") == "Active"
    assert field(page, "next_send") == when
    assert field(page, "last_run") == "Not yet: 1 run waits."
    assert field(page, "runs_link") == "1 run"
    assert [row[2] for row in run_rows(page)] == ["Scheduled"]
    assert "+00:00" not in page.content()
    screenshot(page, "before")

    chinese = task_page(browser, live_server.url, task, "zh-CN")
    assert field(chinese, "status") == "生效中"
    assert field(chinese, "next_send") == when
    chinese.context.close()

    # Its time comes (the clock of this process, the live server's included, moves on).
    time_machine.move_to(run.due_at + timedelta(seconds=1))
    assert engine_pass() == 1

    page.reload()
    assert field(page, "status") == "Completed"
    task.refresh_from_db()
    assert field(page, "last_run") == readable.moment(task.last_run_at, ZONE)
    assert [row[2] for row in run_rows(page)] == ["Sent"]
    assert "+00:00" not in page.content()
    screenshot(page, "after")
    page.context.close()
