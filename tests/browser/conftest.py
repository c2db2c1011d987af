"""A real Chromium for the browser tests, driven by Playwright, and what they share.

The browser is Debian's Chromium (``bin/system-deps`` installs the ``chromium`` package),
never one Playwright downloads: ``CHROMIUM`` (a path) names another binary, otherwise it
is ``chromium`` on ``PATH``. Without one the tests are skipped, saying so, except in CI
(``CI=true``), where a missing browser fails them: a browser test that silently ran
nowhere would look like a passing one.

Why ``DJANGO_ALLOW_ASYNC_UNSAFE`` is set while the browser is open: Playwright's sync API
keeps its event loop marked as running in the test's thread between its calls, and
Django refuses every ORM call from a thread where a loop runs (``SynchronousOnlyOperation``),
though nothing runs concurrently here: the loop only carries Playwright's own messages,
and the test's ORM calls are plain synchronous code. The variable is set for this
module's browser only and taken back when it closes, so the rest of the suite keeps
Django's check.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connection
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright

from reminders.engine.worker import ReminderWorker
from tests.support.jobs import run_queued
from tests.support.sandbox import running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

# Each step waits at most this long (ms) for an element or a page: a page of this app
# answers in well under a second on the test database, so a longer wait is a failure.
STEP_TIMEOUT_MS = 10_000
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}

# Every browser test module's ``pytestmark``: marked ``browser``, and run on SQLite under
# Django 5.2 only (``BROWSER_TEST_ON_EVERY_RUN=1`` runs them everywhere).
MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not os.environ.get("BROWSER_TEST_ON_EVERY_RUN")
        and (connection.vendor != "sqlite" or django.VERSION >= (6, 0)),
        reason="the browser test runs on SQLite under Django 5.2 (BROWSER_TEST_ON_EVERY_RUN=1 "
        "runs it everywhere): the pages do not depend on the database, and it costs seconds",
    ),
]


# The callback's credentials the browser tests' sandbox signs clicks with.
CALLBACK_TOKEN = "browser-callback-token"
CALLBACK_KEY = "bRowserCallbackKey0123456789abcdefghijklmnO"
PASSWORD = "a-browser-test-password"


def engine_pass(now: datetime | None = None) -> int:
    """One scheduler tick and the jobs it queued (deliveries, card updates); returns
    messages sent."""
    ReminderWorker(with_cluster=False).tick(now)
    return run_queued(now=now)


def chromium_binary() -> str | None:
    """The Chromium to drive: ``$CHROMIUM`` if set, else ``chromium`` on ``PATH``."""
    named = os.environ.get("CHROMIUM")
    if named:
        return named if Path(named).is_file() and os.access(named, os.X_OK) else None
    return shutil.which("chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium for the module's tests (each gets a fresh context of its own)."""
    binary = chromium_binary()
    if binary is None:
        where = os.environ.get("CHROMIUM") or "chromium on PATH"
        message = (
            f"no Chromium ({where}): the browser tests did NOT run; bin/system-deps "
            "installs Debian's chromium package"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message} (failing: CI=true)", pytrace=False)
        pytest.skip(message)
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = playwright.chromium.launch(executable_path=binary, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def new_page(browser: Browser) -> Iterator[Page]:
    """A page in a context of its own (no cookies shared between tests)."""
    context = browser.new_context(viewport=VIEWPORT, locale="en-US")
    context.set_default_timeout(STEP_TIMEOUT_MS)
    try:
        yield context.new_page()
    finally:
        context.close()


@pytest.fixture
def callback_sandbox(settings: Any, live_server: Any) -> Iterator[WeComSandbox]:
    """The app on the live server, with its callback set up; a sandbox that sends the
    clicks on its page's cards there, as WeCom does; the ``wecom`` channel pointed at it
    (so that a follow-up is a card with buttons)."""
    callback = f"{live_server.url}/reminders/wecom/callback"
    with running_sandbox(
        callback_url=callback, callback_token=CALLBACK_TOKEN, callback_aes_key=CALLBACK_KEY
    ) as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.WECOM_CALLBACK_TOKEN = CALLBACK_TOKEN
        settings.WECOM_CALLBACK_AES_KEY = CALLBACK_KEY
        settings.WECOM_TIMEOUT = 2.0
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
        }
        yield box


def signed_in(browser: Browser, base: str, url: str, username: str, locale: str) -> Page:
    """``url`` in a context of its own in ``locale``, reached through the admin's login
    form as ``username`` (password ``PASSWORD``); the caller closes its context."""
    context = browser.new_context(viewport=VIEWPORT, locale=locale)
    context.set_default_timeout(STEP_TIMEOUT_MS)
    page = context.new_page()
    page.goto(f"{base}/admin/login/?next={url}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(url.partition("?")[0])))
    return page
