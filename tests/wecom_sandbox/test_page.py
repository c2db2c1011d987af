# ruff: noqa: RUF001
"""The page at ``/sandbox/`` says in words which limits hold and which faults are
pending, as a person reads them: never a Python dict or ``30/60``."""

from __future__ import annotations

import re
from html import unescape

import requests

from tests.support.sandbox import running_sandbox
from wecom_sandbox import FaultRates, WeComSandbox


def page_text(sandbox: WeComSandbox, language: str = "") -> str:
    """The page's words, asked in ``language`` (``Accept-Language``; none: no header):
    its style and tags dropped, entities read, spaces collapsed."""
    headers = {"Accept-Language": language} if language else {}
    html = requests.get(f"{sandbox.base_url}/sandbox/?refresh=0", headers=headers, timeout=10).text
    words = re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", html, flags=re.S))
    return " ".join(unescape(words).split())


def test_page__states_the_pending_faults_in_words():
    rates = FaultRates(busy=0.2, http_error=0.05, lost_reply=0.1, slow_reply=0.25, slow_delay=2)
    with running_sandbox(fault_rates=rates) as sandbox:
        sandbox.control(
            busy=2,
            http_errors=1,
            http_status=503,
            lost_replies=1,
            errcodes=[60020, 45009],
            gettoken_errcodes=[40013],
            delay=1.5,
            slow=3,
            seed=7,
        )
        text = page_text(sandbox)

    assert "Faults pending:" in text
    for words in (
        "the next send is answered HTTP 503",
        "the next 2 sends are answered busy (errcode -1)",
        "the next 2 sends are answered errcode 60020, then 45009",
        "the reply to the next send is lost after the send took effect",
        "the next 3 replies come 1.5 s late",
        "the next gettoken is answered errcode 40013",
        "at random (seed 7): 20% of sends are answered busy (errcode -1), 5% HTTP 503; "
        "10% of replies are lost after the send took effect, 25% come 2 s late",
    ):
        assert words in text
    assert "{" not in text
    assert "rates" not in text


def test_page__says_when_no_fault_is_pending_and_every_reply_is_late():
    with running_sandbox() as sandbox:
        none = page_text(sandbox)
        sandbox.control(delay=0.5)
        late = page_text(sandbox)

    assert "Faults pending: none; every send is answered as WeCom answers it." in none
    assert "Faults pending: every reply comes 0.5 s late." in late


def test_page__states_the_limits_in_words():
    with running_sandbox(rate_limit=10, rate_burst=20, token_ttl=600) as sandbox:
        limited = page_text(sandbox)
        sandbox.control(rate_limit=None, user_limits=None, robot_limit=None, overflow="reject")
        unlimited = page_text(sandbox)

    for words in (
        "app sends: at most 10 a second over all members, in bursts of up to 20 (errcode 45009)",
        "each member: at most 30 messages a minute and 1,000 an hour (errcode 45009)",
        "each robot: at most 20 messages a minute (errcode 45009)",
        "an access token lives 600 s",
        "a text or textcard over WeCom's length limit is cut to it, as WeCom does",
    ):
        assert words in limited
    for words in (
        "app sends: no limit a second",
        "each member: no limit",
        "each robot: no limit",
        "a text or textcard over WeCom's length limit is refused (errcode 45002)",
    ):
        assert words in unlimited
    assert "30/60" not in limited


def test_page__in_the_browser_s_language_else_the_site_s(settings):
    """A person reads the page in their browser's language where the project declares it;
    the words are the same limits and faults, the numbers unchanged."""
    settings.LANGUAGE_CODE = "en-us"
    with running_sandbox(rate_limit=10, rate_burst=20, token_ttl=600) as sandbox:
        sandbox.control(busy=2, errcodes=[60020, 45009], delay=1.5)
        chinese = page_text(sandbox, "zh-CN,zh;q=0.9,en;q=0.8")
        english = page_text(sandbox, "en-US,en;q=0.9")
        undeclared = page_text(sandbox, "fr-FR")
        none = page_text(sandbox)
        api = requests.get(
            f"{sandbox.base_url}/sandbox/control", headers={"Accept-Language": "zh-CN"}, timeout=10
        )

    for words in (
        "企业微信沙箱",
        "限制：",
        "每个成员：最多 每分钟 30 条、每小时 1,000 条（errcode 45009）",
        "应用发送：所有成员合计每秒最多 10 条，突发最多 20 条（errcode 45009）",
        "接下来 2 次发送应答系统繁忙（errcode -1）",
        "接下来 2 次发送依次应答 errcode 60020，然后 45009",
        "每个应答都晚 1.5 秒",
    ):
        assert words in chinese
    assert "each member" not in chinese
    assert "each member: at most 30 messages a minute and 1,000 an hour" in english
    # A language the project does not declare, or none asked: the site's.
    assert undeclared == none == english
    # WeCom's API answers as WeCom does, whatever the language asked.
    assert "限制" not in api.text
