"""The operator's morning, in a real browser: the dashboard shows the day's failures, its
link leads to those runs in the admin, the retry action (confirmed) puts them back in
line, the engine sends them, and the pages then say so. A viewer sees the same failures
and is offered no retry.

Everything on the way is real: the admin's login form, the live server
(pytest-django's ``live_server``, a threaded HTTP server on the test database), the
dashboard and the admin's changelist and action, the scheduler's tick
(``ReminderWorker.tick``, as ``run_reminders`` calls it) and the delivery jobs it
enqueues (run in this process, as a django-q2 worker would run them), the WeCom sender
over HTTP, and the WeCom sandbox (``wecom_sandbox``) standing in for WeCom. The runs fail
for real too: the sandbox answers 60020 (the server's IP is not on the app's allow list)
for the first sends, as WeCom does until an administrator adds it, and a retry after
that goes through.

Run on SQLite under the suite's main Django only (``BROWSER_TEST_ON_EVERY_RUN=1`` runs it
on every database and Django the suite runs on): what it checks, the pages and the
action as a browser sees them, does not change with the database, each of which the
rest of the suite covers through the test client; a browser costs seconds per run.

``DASHBOARD_SCREENSHOT=docs/dashboard.png`` also saves the dashboard, with the day's
failures and a fortnight of history in its charts, as a full-page PNG there (the
README's picture); without it nothing is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.utils import timezone
from django.utils.formats import date_format
from playwright.sync_api import Page

from ops.roles import OPERATOR, VIEWER
from reminders.engine import planning
from reminders.models import ScheduledTask, TaskRun
from reminders.schedule import timing
from tests.browser.conftest import MARKS, PASSWORD, VIEWPORT, engine_pass, signed_in
from tests.support.sandbox import running_sandbox, wecom_settings
from wecom_sandbox import WeComSandbox

pytestmark = MARKS

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = "/admin/ops/dashboard/"
RUNS = "/admin/reminders/taskrun/"
RETRY = "Retry selected runs now"
# WeCom's "not allowed to access from your ip": the app's allow list lacks the server.
NOT_ALLOWED = "60020"
SENT_EARLIER = ("sales.li", "sales.wang")
FAILING = ("sales.zhao", "sales.qian", "sales.sun")


@dataclass
class Day:
    """The day the test's runs are due, and the runs that failed on it."""

    date: date
    failed: list[TaskRun]
    sandbox: WeComSandbox

    @property
    def dashboard(self) -> str:
        return f"{DASHBOARD}?date={self.date.isoformat()}"


@pytest.fixture
def wecom(settings: Any) -> Iterator[WeComSandbox]:
    """The ``wecom`` channel (the WeCom app sender, configured from the ``WECOM_*``
    settings as ``make run`` does) pointed at a sandbox started for the test."""
    with running_sandbox() as box:
        for name, value in wecom_settings(box.base_url).items():
            setattr(settings, name, value)
        settings.WECOM_TIMEOUT = 2.0
        settings.REMINDERS_CHANNELS = {
            **settings.REMINDERS_CHANNELS,
            "wecom": {"BACKEND": "reminders.senders.wecom.WeComSender"},
        }
        yield box


@pytest.fixture
def failed_today(make_task: Callable[..., ScheduledTask], wecom: WeComSandbox) -> Day:
    """Two follow-ups sent, then three that failed: WeCom refused the server's IP."""
    now = timezone.now()
    for recipient in SENT_EARLIER:
        make_task("follow_up", recipient, at=now, channel="wecom", payload={"content": "Call back"})
    assert engine_pass() == 2
    wecom.control(config_error=len(FAILING))
    for recipient in FAILING:
        make_task("follow_up", recipient, at=now, channel="wecom", payload={"content": "Call back"})
    assert engine_pass() == 0
    failed = list(TaskRun.objects.filter(status="failed").order_by("pk"))
    assert [(run.task.recipient, run.error_code) for run in failed] == [
        (recipient, NOT_ALLOWED) for recipient in FAILING
    ]
    return Day(timing.local_date(now, django_settings.TIME_ZONE), failed, wecom)


@pytest.fixture
def fortnight(failed_today: Day) -> None:
    """Runs of the 13 days before (sent and a few failed, at several hours): a history
    for the charts, which the day's numbers must leave out. Rows written directly, as
    the dashboard's own tests do."""
    zone = django_settings.TIME_ZONE
    task = ScheduledTask.objects.create(
        kind="daily_report", recipient="team.sales", channel="wecom", cron="0 9 * * *",
        timezone=zone, priority="normal", calendar="",
    )  # fmt: skip
    runs = []
    for back in range(1, 14):
        start = timing.day_start(failed_today.date - timedelta(days=back), zone)
        for n in range(4 + back % 5):
            due = start + timedelta(hours=8 + 2 * n, minutes=back)
            failed = (back + n) % 7 == 0
            run = planning.new_run(task, due)
            run.status = "failed" if failed else "sent"
            run.next_attempt_at = None
            run.finished_at = due + timedelta(seconds=2 + 3 * n)
            run.duration = timedelta(milliseconds=150 + 40 * n)
            run.error_code = NOT_ALLOWED if failed else ""
            runs.append(run)
    TaskRun.objects.bulk_create(runs)


def make_user(username: str, role: str) -> User:
    """Active staff in the role's group, the way an admin sets ops staff up."""
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=role))  # made by migrate (ops.roles)
    return user


def log_in(page: Page, base: str, day: Day, username: str) -> None:
    """Open the dashboard signed out, get the admin's login form, sign in, land on it."""
    page.goto(base + day.dashboard)
    assert urlsplit(page.url).path == "/admin/login/"
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(re.compile(re.escape(DASHBOARD)))
    heading = f"Runs due on {date_format(day.date)} ({django_settings.TIME_ZONE})"
    assert page.locator("h2#ops-day").inner_text() == heading


def cards(page: Page) -> dict[str, str]:
    """The day's cards as the page shows them, label -> number: the counts and the
    success rate (not the durations and lateness: real timings, not the test's to say)."""
    shown = {}
    for text in page.locator("section[aria-labelledby=ops-day] ul.cards > li").all_inner_texts():
        value, _, label = text.strip().partition("\n")
        if "p50" not in label:
            shown[label.strip()] = value.strip()
    return shown


def failure_rows(page: Page) -> list[list[str]]:
    """The "by reason" table of the failures: status, code, runs, last, example."""
    table = page.locator("section[aria-labelledby=ops-failures] table").first
    return [
        [cell.strip() for cell in row.locator("td").all_inner_texts()]
        for row in table.locator("tbody tr").all()
    ]


def listed(page: Page) -> list[tuple[str, str]]:
    """The run changelist as shown: each row's recipient and status (its label)."""
    page.wait_for_selector("#changelist")
    if page.locator("#result_list").count() == 0:  # the admin's page of no results
        return []
    # The text, not as shown: the admin's style upper-cases the headings.
    heads = [h.strip() for h in page.locator("#result_list thead th").all_text_contents()]
    task, status = heads.index("Task"), heads.index("Status")
    shown = []
    for row in page.locator("#result_list tbody tr").all():
        cells = [c.strip() for c in row.locator("td, th").all_inner_texts()]
        # The kind's label (words), then the recipient (one member id).
        kind_and_recipient = re.match(r".+? → (\S+) ", cells[task])
        assert kind_and_recipient, cells[task]
        shown.append((kind_and_recipient.group(1), cells[status]))
    return shown


def day_cards(*, planned: int, sent: int, failed: int) -> dict[str, str]:
    """The cards of a day with nothing pending, unknown, expired or skipped."""
    return {
        "success rate": f"{100 * sent / (sent + failed):.1f} %",
        "Planned": str(planned),
        "Pending": "0",
        "Sent": str(sent),
        "Failed": str(failed),
        "Unknown": "0",
        "Expired": "0",
        "Skipped": "0",
    }


def statuses(runs: list[TaskRun]) -> list[str]:
    """What the database says of ``runs`` now, in their order."""
    now = dict(TaskRun.objects.filter(pk__in=[run.pk for run in runs]).values_list("pk", "status"))
    return [now[run.pk] for run in runs]


def save_screenshot(page: Page) -> None:
    """The README's picture, only when ``DASHBOARD_SCREENSHOT`` asks for it."""
    target = os.environ.get("DASHBOARD_SCREENSHOT")
    if target:
        path = Path(target) if Path(target).is_absolute() else REPO / target
        path.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(path), full_page=True)


@pytest.mark.usefixtures("fortnight")
def test_operator__retries_the_days_failures_from_the_dashboard_and_sees_them_sent(
    live_server: Any, new_page: Page, failed_today: Day
) -> None:
    page, day = new_page, failed_today
    make_user("olga", OPERATOR)
    log_in(page, live_server.url, day, "olga")

    # The day's failures, counted and grouped by reason; the history in the charts only.
    assert cards(page) == day_cards(planned=5, sent=2, failed=3)
    assert [row[:3] for row in failure_rows(page)] == [["Failed", NOT_ALLOWED, "3"]]
    assert "WeCom errcode 60020" in failure_rows(page)[0][4]
    # Sent and failed per hour, lateness per hour, the fortnight by day; the next hour.
    assert page.locator("svg.chart").count() == 4
    save_screenshot(page)

    # Its link: exactly those runs, in the admin.
    page.locator("section[aria-labelledby=ops-failures] td.num a").first.click()
    page.wait_for_url(re.compile(re.escape(RUNS)))
    query = parse_qs(urlsplit(page.url).query)
    assert (query["status__exact"], query["error_code__exact"]) == (["failed"], [NOT_ALLOWED])
    assert sorted(listed(page)) == [(recipient, "Failed") for recipient in sorted(FAILING)]

    # Select them all, retry, confirm.
    page.check("#action-toggle")
    page.select_option("select[name=action]", label=RETRY)
    page.click("button[name=index]")
    will = page.locator(".reminders-will").inner_text()
    assert will.startswith("3 runs will be put back in line for an immediate attempt")
    assert statuses(day.failed) == ["failed"] * 3  # asked, not done yet
    page.click("input[type=submit][value='Yes, do it']")
    page.wait_for_selector("ul.messagelist")
    assert page.locator("ul.messagelist li").all_inner_texts() == [
        "3 runs put back in line for an immediate attempt."
    ]
    assert listed(page) == []  # none of them is failed any more
    assert statuses(day.failed) == ["retrying"] * 3

    # The scheduler's next tick and its workers send them: WeCom receives each once.
    assert engine_pass() == 3
    assert statuses(day.failed) == ["sent"] * 3
    for recipient in FAILING:
        [message] = day.sandbox.delivered(to=recipient)
        assert "Call back" in message.content

    # The dashboard, reloaded, says so, and so does the run history.
    page.goto(live_server.url + day.dashboard)
    assert cards(page) == day_cards(planned=5, sent=5, failed=0)
    assert failure_rows(page) == [["None."]]
    page.goto(f"{live_server.url}{RUNS}?task__kind=follow_up")
    assert sorted(listed(page)) == [
        (recipient, "Sent") for recipient in sorted(SENT_EARLIER + FAILING)
    ]


def test_viewer__sees_the_failures_and_is_offered_no_retry(
    live_server: Any, new_page: Page, failed_today: Day
) -> None:
    page, day = new_page, failed_today
    make_user("vera", VIEWER)
    log_in(page, live_server.url, day, "vera")
    assert cards(page) == day_cards(planned=5, sent=2, failed=3)
    # The dashboard only reads: no form that posts (the header's log-out one aside), no
    # button to retry with.
    assert page.locator("#content-main form[method=post]").count() == 0
    assert page.get_by_role("button", name=re.compile("retry", re.IGNORECASE)).count() == 0

    page.locator("section[aria-labelledby=ops-failures] td.num a").first.click()
    page.wait_for_url(re.compile(re.escape(RUNS)))
    assert sorted(listed(page)) == [(recipient, "Failed") for recipient in sorted(FAILING)]
    actions = page.locator("select[name=action] option").all_inner_texts()
    assert not [action for action in actions if "retry" in action.lower()], actions
    assert statuses(day.failed) == ["failed"] * 3


def health_parts(page: Page) -> dict[str, tuple[str, str]]:
    """The first screen's parts as shown: key -> (state class, its text on one line)."""
    shown = {}
    for item in page.locator("ul.health > li").all():
        text = " ".join(item.inner_text().split())
        shown[str(item.get_attribute("data-part"))] = (str(item.get_attribute("class")), text)
    return shown


@pytest.mark.parametrize(
    ("locale", "words"),
    [
        (
            "en-US",
            {
                "heading": "Is anything wrong?",
                "wrong": "Needs attention",
                "help": "How these are counted",
            },
        ),
        ("zh-CN", {"heading": "有没有问题？", "wrong": "需要处理", "help": "这些数字如何计算"}),  # noqa: RUF001
    ],
)
def test_first_screen__says_what_is_wrong_and_leads_to_it(
    live_server: Any, browser: Any, failed_today: Day, locale: str, words: dict[str, str]
) -> None:
    """In the operator's language: the health strip is the first thing on the page and
    fits the first screen; the day's failures are marked and lead to those runs; the
    explanations are collapsed; the charts span the page."""
    make_user("olga", OPERATOR)
    page = signed_in(browser, live_server.url, failed_today.dashboard, "olga", locale)
    try:
        heading = page.locator("#content-main h2").first
        assert heading.inner_text() == words["heading"]
        strip = page.locator("ul.health").bounding_box()
        assert strip is not None and strip["y"] + strip["height"] <= VIEWPORT["height"]
        parts = health_parts(page)
        assert list(parts) == ["failures", "schedulers", "calendars", "quota", "alerts"]
        state, text = parts["failures"]
        assert state == "wrong"
        assert words["wrong"] in text and " 3 " in f" {text} "
        # The engine's passes of this test beat as a scheduler does: one ticking.
        assert parts["schedulers"][0] == "well"

        # The explanations wait behind their summaries.
        helps = page.locator("details.help")
        assert helps.count() >= 1
        assert helps.first.locator("summary").inner_text() == words["help"]
        assert not helps.first.evaluate("(element) => element.open")
        assert not page.locator("details.help p.note").first.is_visible()

        # The charts are as wide as the page lets them be: readable without zooming.
        widths = [
            box["width"]
            for box in (c.bounding_box() for c in page.locator("svg.chart").all())
            if box
        ]
        assert widths and min(widths) >= 700, widths

        # The failures part leads to exactly the day's failed runs.
        page.locator("ul.health > li[data-part=failures] a").click()
        page.wait_for_url(re.compile(re.escape(RUNS)))
        query = parse_qs(urlsplit(page.url).query)
        assert query["status__in"] == ["failed,unknown,expired"]
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == len(failed_today.failed) == 3
    finally:
        page.context.close()
