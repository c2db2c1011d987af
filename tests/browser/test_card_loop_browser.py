"""The loop a card closes, in a real browser: a follow-up card and an inquiry alert arrive
in the WeCom sandbox's page; "Done" is clicked there; the sandbox posts WeCom's signed and
encrypted callback to the app; a scheduler's tick has the card updated, and the page
shows "Done by ..."; the admin shows who acted; "I'll take it" on the inquiry means its
escalation never goes out; an operator recalls a message from the admin and the
sandbox's page shows it recalled.

Everything on the way is real: Chromium on the sandbox's page and the admin, the
sandbox's HTTP server posting to the live server (pytest-django's ``live_server``) at
``reminders/wecom/callback``, the callback's crypto, the scheduler's tick
(``ReminderWorker.tick``) and the jobs it queues (run in this process, as a django-q2
worker would), and the WeCom sender over HTTP. Run on SQLite under the suite's main
Django only, as the dashboard's browser test is, and for the same reasons.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Group, User
from django.utils import timezone
from playwright.sync_api import Page

from ops.roles import OPERATOR
from reminders import api
from reminders.models import RunAction, ScheduledTask, SendLog, TaskRun
from tests.browser.conftest import MARKS, PASSWORD, engine_pass
from tests.crm.models import Inquiry
from wecom_sandbox import WeComSandbox

pytestmark = MARKS

SALES, OWNER, MANAGER = "sales.li", "sales.wang", "sales.boss"


def entry_of(box: WeComSandbox, recipient: str) -> int:
    [entry] = [e for e in box.delivered(recipient) if e.msgtype == "template_card"]
    return entry.id


def click(page: Page, box: WeComSandbox, entry: int, key: str) -> None:
    """Open the sandbox's page (not refreshing itself) and click a button of a card."""
    page.goto(f"{box.base_url}/sandbox/?refresh=0")
    page.click(f"#entry-{entry} button[data-key='{key}']")
    page.wait_for_url(re.compile(r"/sandbox/"))
    outcome = page.locator(f"#entry-{entry} li.click[data-key='{key}']")
    assert outcome.get_attribute("data-status") == "200", outcome.inner_text()


def test_done_and_take_close_the_loop_and_an_operator_recalls(
    new_page: Page, callback_sandbox: WeComSandbox, live_server: Any, db: None
) -> None:
    page, now, loop = new_page, timezone.now(), callback_sandbox
    follow_up = api.schedule(
        "follow_up",
        SALES,
        at=now,
        channel="wecom",
        payload={"customer": "ACME", "subject": "Renewal quote"},
    )
    first, escalation = api.schedule_inquiry_timeout(
        OWNER,
        arrived_at=now - timedelta(minutes=30),
        minutes=30,
        about=Inquiry.objects.create(subject="500 units"),
        escalate_to=MANAGER,
        escalate_after_minutes=5,
        payload={"customer": "Globex"},
    )
    ScheduledTask.objects.filter(pk__in=[first.pk, escalation.pk]).update(channel="wecom")
    assert engine_pass() == 2
    done_card, inquiry_card = entry_of(loop, SALES), entry_of(loop, OWNER)

    # "Done" on the follow-up: the callback records it at once...
    click(page, loop, done_card, "done")
    run = TaskRun.objects.get(task=follow_up, status=TaskRun.Status.SENT)
    action = RunAction.objects.get(run=run)
    assert (action.action, action.member, action.card_state) == ("done", SALES, "pending")
    # ...and a scheduler's tick has the card updated, which the page then shows.
    engine_pass()
    page.reload()
    update = page.locator(f"#entry-{done_card} .card-update")
    assert f"Done by {SALES}" in update.inner_text()
    assert page.locator(f"#entry-{done_card} button[data-key='done']").count() == 0

    # "I'll take it" on the inquiry: its escalation never goes out.
    click(page, loop, inquiry_card, "take")
    engine_pass()
    assert engine_pass(now + timedelta(minutes=6)) == 0
    assert loop.delivered(MANAGER) == []
    assert TaskRun.objects.get(task=escalation).status == TaskRun.Status.CANCELLED

    # The admin shows who acted on the follow-up's card.
    user = User.objects.create_user("operator", password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=OPERATOR))
    page.goto(f"{live_server.url}/admin/login/?next=/admin/reminders/taskrun/{run.pk}/change/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(rf"/admin/reminders/taskrun/{run.pk}/change/"))
    assert f"done by {SALES}" in page.locator("#content").inner_text()

    # The operator recalls the inquiry's alert from its run's page, saying why.
    inquiry_run = TaskRun.objects.get(task=first, status=TaskRun.Status.SENT)
    page.goto(f"{live_server.url}/admin/reminders/taskrun/{inquiry_run.pk}/change/")
    page.click("a.reminders-recall")
    page.fill("#id_reason", "Sent to the wrong salesperson")
    page.click("form input[type=submit]")
    page.wait_for_url(re.compile(r"/admin/reminders/"))
    log = SendLog.objects.get(run=inquiry_run)
    assert (log.recalled_by, log.recall_reason) == ("operator", "Sent to the wrong salesperson")
    # The sandbox's page shows it recalled: struck through, nothing left to click.
    page.goto(f"{loop.base_url}/sandbox/?refresh=0")
    assert "recalled" in (page.locator(f"#entry-{inquiry_card}").get_attribute("class") or "")
    assert page.locator(f"#entry-{inquiry_card} button[data-key='done']").count() == 0
