"""Ops act on an alert from WeCom, in a real browser: three follow-ups fail, the alert
step sends the on-call operator a card in the WeCom sandbox; "Retry 3 failed" is
clicked on the sandbox's page; the sandbox posts WeCom's signed and encrypted callback to
the app, which retries the runs as the operator's Django user; the engine sends them,
and its card job replaces the card with one saying what was done, which the page shows;
the alert's page in the admin shows who acted, how and from where.

Everything on the way is real but the failing channel (a memory channel scripted to
fail, then to take the retries): Chromium, the sandbox's HTTP server posting to the live
server's callback, the callback's crypto, the alert step, the WeCom sender over HTTP,
the scheduler's tick and the jobs it queues."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import Group, User
from django.utils import timezone
from playwright.sync_api import Browser, Page

from ops.alerts import run_step
from ops.models import AlertAction, WeComMember
from ops.roles import OPERATOR, sync_roles
from reminders import api
from reminders.exceptions import PermanentSendError
from reminders.models import TaskRun
from reminders.senders.memory import MemorySender
from tests.browser.conftest import MARKS, PASSWORD, engine_pass, signed_in
from wecom_sandbox import WeComSandbox

pytestmark = MARKS

ON_CALL = "ops.alice"


def test_retry_from_the_card_sends_the_runs_and_the_card_says_so(
    new_page: Page,
    browser: Browser,
    callback_sandbox: WeComSandbox,
    live_server: Any,
    settings: Any,
    db: None,
) -> None:
    page, box = new_page, callback_sandbox
    settings.OPS_ALERT_CHANNELS = {
        "on_call": {
            "BACKEND": "ops.alert_cards.WeComCards",
            "OPTIONS": {"channel": "wecom", "recipients": [ON_CALL]},
        }
    }
    settings.OPS_ADMIN_URL = f"{live_server.url}/admin/"
    sync_roles()
    alice = User.objects.create_user("alice", password=PASSWORD, is_staff=True)
    alice.groups.add(Group.objects.get(name=OPERATOR))
    WeComMember.objects.create(user=alice, member=ON_CALL)

    now = timezone.now()
    tasks = [api.schedule("follow_up", f"sales.{n}", at=now, channel="memory") for n in range(3)]
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")] * 3
    engine_pass()
    assert TaskRun.objects.filter(task__in=tasks, status="failed").count() == 3
    run_step(now + timedelta(minutes=1))  # the alert, as a card to the on-call operator
    [entry] = [e for e in box.delivered(ON_CALL) if e.msgtype == "template_card"]

    page.goto(f"{box.base_url}/sandbox/?refresh=0")
    page.click(f"#entry-{entry.id} button[data-key='retry']")
    page.wait_for_url(re.compile(r"/sandbox/"))
    clicked = page.locator(f"#entry-{entry.id} li.click[data-key='retry']")
    assert clicked.get_attribute("data-status") == "200", clicked.inner_text()
    assert TaskRun.objects.filter(task__in=tasks, status="retrying").count() == 3

    # A scheduler's tick: the runs go, and the card is replaced.
    assert engine_pass() == 3
    engine_pass()
    assert TaskRun.objects.filter(task__in=tasks, status="sent").count() == 3
    page.reload()
    update = page.locator(f"#entry-{entry.id} .card-update")
    assert "3 retried by alice" in update.inner_text()
    assert page.locator(f"#entry-{entry.id} button[data-key='retry']").count() == 0

    # The alert's page says who acted, as whom, and from where.
    action = AlertAction.objects.get()
    admin = signed_in(
        browser, live_server.url, f"/admin/ops/alert/{action.alert_id}/change/", "alice", "en-US"
    )
    try:
        text = admin.locator("#content").inner_text()
        assert "3 retried by alice" in text and ON_CALL in text
        assert "WeCom callback" in text
    finally:
        admin.context.close()
