# ruff: noqa: RUF001
"""The WeCom sandbox's page in a real browser, in en-US and zh-CN: the limits that hold
and the faults pending, in words of the browser's language, one item each; never a
Python dict nor ``COUNT/SECONDS``. Run on SQLite under the suite's main Django only, as
the other browser tests are."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.browser.conftest import MARKS, STEP_TIMEOUT_MS, VIEWPORT
from tests.support.sandbox import running_sandbox

pytestmark = MARKS

SAID = {
    "en-US": {
        "title": "WeCom sandbox",
        "member": "each member: at most 30 messages a minute and 1,000 an hour (errcode 45009).",
        "busy": "the next 2 sends are answered busy (errcode -1).",
    },
    "zh-CN": {
        "title": "企业微信沙箱",
        "member": "每个成员：最多 每分钟 30 条、每小时 1,000 条（errcode 45009）。",
        "busy": "接下来 2 次发送应答系统繁忙（errcode -1）。",
    },
}


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_the_page_states_limits_and_faults_in_the_browser_s_language(
    browser: Browser, settings: Any, locale: str
) -> None:
    settings.LANGUAGE_CODE = "en-us"
    said = SAID[locale]
    with running_sandbox(rate_limit=10, rate_burst=20) as sandbox:
        sandbox.control(busy=2)
        context = browser.new_context(viewport=VIEWPORT, locale=locale)
        context.set_default_timeout(STEP_TIMEOUT_MS)
        page = context.new_page()
        try:
            page.goto(f"{sandbox.base_url}/sandbox/?refresh=0")
            assert page.locator("h1").inner_text() == said["title"]
            limits = page.locator("ul.limits > li").all_inner_texts()
            faults = page.locator("ul.faults > li").all_inner_texts()
            text = page.locator("body").inner_text()
        finally:
            context.close()
    assert said["member"] in limits
    assert faults == [said["busy"]]
    assert "{" not in text and "30/60" not in text
