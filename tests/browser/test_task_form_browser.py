# ruff: noqa: RUF001
"""The task form in a real browser: the payload as the chosen kind's fields, the JSON of
other keys behind a toggle, and the message beside the form, kept up to date as the form
changes, without saving; a bad value shown on its field in place; then saved, sent, and
the same card found in the WeCom sandbox. In en-US and zh-CN alike.

Everything on the way is real: the admin's login form, add form and its live preview on
the live server (pytest-django's ``live_server``), the scheduler's tick and the delivery
job (run in this process, as a django-q2 worker would), the WeCom sender over HTTP and
the sandbox standing in for WeCom, with the callback configured (so that a follow-up is
a card with buttons). Run on SQLite under the suite's main Django only, as the other
browser tests are, and for the same reasons.

``TASK_FORM_SCREENSHOTS=DIR`` also saves the form with its preview as a PNG per
language in DIR (``task-form-en-US.png``, ``task-form-zh-CN.png``); without it nothing
is written.
"""

from __future__ import annotations

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Browser, Page

from reminders.models import ScheduledTask
from reminders.schedule import timing
from tests.browser.conftest import MARKS, PASSWORD, engine_pass, signed_in
from wecom_sandbox import WeComSandbox

pytestmark = MARKS

ZONE = "Asia/Shanghai"
# What each language's page says where the test reads words; the message's language
# (the task's: payload["lang"], else the site's, English here) and its "Done" button.
WORDS = {
    "en-US": {
        "customer": "Customer",
        "toggle": "Other payload keys (JSON)",
        "lang": "",
        "button": "Done",
    },
    "zh-CN": {
        "customer": "客户",
        "toggle": "其他 payload 键（JSON）",
        "lang": "zh-hans",
        "button": "已完成",
    },
}


def preview_text(page: Page) -> str:
    return page.locator(".reminders-live .reminders-live-body").inner_text()


def shown_rows(page: Page) -> list[str]:
    """The payload fields whose rows the page shows, by name."""
    names = []
    for field in page.locator("[data-kinds]").all():
        if field.is_visible():
            names.append(str(field.get_attribute("name")))
    return names


def screenshot(page: Page, locale: str) -> None:
    target = os.environ.get("TASK_FORM_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"task-form-{locale}.png"), full_page=True)


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_a_follow_up_filled_in__its_card_beside_the_form__saved__the_same_card_sent(
    live_server: Any, browser: Browser, callback_sandbox: WeComSandbox, locale: str
) -> None:
    User.objects.create_superuser("olga", password=PASSWORD)
    words = WORDS[locale]
    wecom = callback_sandbox
    add = reverse("admin:reminders_scheduledtask_add")
    page = signed_in(browser, live_server.url, add, "olga", locale)
    try:
        page.select_option("#id_kind", "follow_up")
        # The follow-up's fields, in its own order, then the two every kind has.
        assert shown_rows(page) == [
            "payload_customer",
            "payload_subject",
            "payload_url",
            "payload_content",
            "payload_lang",
        ]
        page.select_option("#id_kind", "inquiry_timeout")
        assert shown_rows(page)[:4] == [
            "payload_customer",
            "payload_subject",
            "payload_minutes",
            "payload_url",
        ]
        page.select_option("#id_kind", "follow_up")
        assert (
            page.locator("label[for=id_payload_customer]")
            .inner_text()
            .startswith(words["customer"])
        )
        # The JSON of other keys waits behind its toggle.
        assert not page.locator("#id_payload").is_visible()
        page.get_by_role("button", name=words["toggle"]).click()
        assert page.locator("#id_payload").is_visible()

        due = timezone.now() + timedelta(minutes=2)
        local = due.astimezone(timing.zone(ZONE))
        page.fill("#id_recipient", "sales.li")
        page.select_option("#id_channel", "wecom")
        page.fill("#id_cron", "")
        page.fill("#id_run_at_0", f"{local:%Y-%m-%d}")
        page.fill("#id_run_at_1", f"{local:%H:%M:%S}")
        page.fill("#id_timezone", ZONE)
        page.fill("#id_payload_customer", "Acme Ltd")
        page.fill("#id_payload_subject", "Send the quote")
        if words["lang"]:
            page.select_option("#id_payload_lang", words["lang"])

        # The card beside the form, with its buttons, as typed.
        live = page.locator(".reminders-live[data-state=shown]")
        live.wait_for()
        page.wait_for_function(
            "() => document.querySelector('.reminders-live-body').innerText"
            ".includes('Send the quote')"
        )
        assert "Acme Ltd" in preview_text(page)
        assert page.locator(".reminders-live button", has_text=words["button"]).count() == 1

        # A change shows at once, unsaved.
        page.fill("#id_payload_customer", "Globex")
        page.wait_for_function(
            "() => document.querySelector('.reminders-live-body').innerText.includes('Globex')"
        )
        assert "Acme Ltd" not in preview_text(page)
        assert not ScheduledTask.objects.exists()

        # A bad value: the error in place, on its field.
        page.fill("#id_payload_url", "ftp://crm.example.com/c/7")
        error = page.locator(".field-payload_url ul.errorlist.reminders-live-errors")
        error.wait_for()
        assert 'payload["url"]' in error.inner_text()
        assert page.locator(".reminders-live").get_attribute("data-state") == "errors"
        page.fill("#id_payload_url", "https://crm.example.com/c/7")
        page.locator(".reminders-live[data-state=shown]").wait_for()
        assert page.locator("ul.errorlist.reminders-live-errors").count() == 0
        previewed = preview_text(page)
        screenshot(page, locale)

        page.click("input[name=_save]")
        page.wait_for_url(re.compile(r"/admin/reminders/scheduledtask/$"))
        task = ScheduledTask.objects.get()
        assert task.payload == {
            "customer": "Globex",
            "subject": "Send the quote",
            "url": "https://crm.example.com/c/7",
            **({"lang": words["lang"]} if words["lang"] else {}),
        }
    finally:
        page.context.close()

    # Its time comes: the card in the sandbox is the one the form showed.
    assert engine_pass(task.run_at + timedelta(seconds=1)) == 1
    [entry] = [e for e in wecom.delivered("sales.li") if e.msgtype == "template_card"]
    card = entry.request["template_card"] if entry.request else {}
    title = card["main_title"]["title"]
    assert title in previewed
    for line in card.get("horizontal_content_list", []):
        assert line["value"] in previewed
    assert card["button_list"][0]["text"] in previewed
