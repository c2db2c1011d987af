"""The dashboard page and its JSON: who may see them, what they show (the numbers of
``stats_world``, worked out there), and that their links lead to exactly the runs behind
each number in the admin, from where the retry action works."""

# ruff: noqa: RUF001

from __future__ import annotations

import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django_q.models import OrmQ

from ops.stats.format import NOTHING
from reminders.models import SchedulerHeartbeat, SendLog, TaskRun

from .stats_world import DAY, World, build, local

pytestmark = pytest.mark.django_db

PAGE = "/admin/ops/dashboard/"
DATA = "/admin/ops/dashboard/data.json"
SVG = "{http://www.w3.org/2000/svg}"
CHART = '<svg class="chart"'


@pytest.fixture
def world() -> World:
    """The fortnight, with two schedulers on the real clock (the page's): alpha ticked 5 s
    ago, beta 5 minutes ago."""
    built = build(heartbeats=False)
    now = timezone.now()
    for owner, host, pid, age in [("a:1", "alpha", 11, 5), ("b:2", "beta", 22, 300)]:
        at = now - timedelta(seconds=age)
        SchedulerHeartbeat.objects.beat(owner, host=host, pid=pid, started_at=at, now=at)
    return built


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)  # noqa: S314 - our own output


def user(username: str, *, staff: bool, perms: tuple[str, ...] = ()) -> User:
    person = User.objects.create_user(username, password="pw", is_staff=staff)
    for codename in perms:
        person.user_permissions.add(Permission.objects.get(codename=codename))
    return person


# Access -----------------------------------------------------------------------------------


def test_urls_are_in_the_admin():
    assert reverse("ops_dashboard:dashboard") == PAGE
    assert reverse("ops_dashboard:data") == DATA


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_anonymous_goes_to_the_admin_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    login = urlsplit(response["Location"])
    assert login.path == reverse("admin:login")
    assert parse_qs(login.query)["next"] == [url]


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_non_staff_is_refused(client, url):
    client.force_login(user("clerk", staff=False, perms=("view_taskrun",)))
    response = client.get(url)
    assert response.status_code == 403
    if url == DATA:
        assert response.json() == {"error": "forbidden"}


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_staff_who_may_not_view_runs_is_refused(client, url):
    client.force_login(user("intern", staff=True))
    assert client.get(url).status_code == 403


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_staff_who_may_view_runs_gets_it(client, url):
    client.force_login(user("ops", staff=True, perms=("view_taskrun",)))
    response = client.get(url)
    assert response.status_code == 200
    assert "no-cache" in response["Cache-Control"]


@pytest.mark.parametrize("url", [PAGE, DATA])
def test_superuser_gets_it(admin_client, url):
    assert admin_client.get(url).status_code == 200


def test_not_for_writing(admin_client):
    assert admin_client.post(PAGE).status_code == 405
    assert admin_client.post(DATA).status_code == 405


@pytest.mark.parametrize("bad", ["yesterday", "2026-13-01", "2026-3-1", "0001-01-01", "9999-12-31"])
def test_a_bad_date_is_400(admin_client, bad):
    assert admin_client.get(PAGE, {"date": bad}).status_code == 400
    response = admin_client.get(DATA, {"date": bad})
    assert response.status_code == 400
    assert "not a date" in response.json()["error"]


def test_admin_index_links_to_the_dashboard(admin_client):
    response = admin_client.get(reverse("admin:index"))
    assert response.status_code == 200
    assert f'href="{PAGE}"' in response.content.decode()


# JSON ---------------------------------------------------------------------------------------


def test_json_is_the_days_numbers(admin_client, world):
    data = admin_client.get(DATA, {"date": DAY.isoformat()}).json()
    assert data["date"] == "2026-03-10"
    assert data["totals"]["planned"] == 16
    assert (data["totals"]["sent"], data["totals"]["failed"]) == (7, 2)
    assert [k["kind"] for k in data["kinds"]] == ["birthday", "daily_report", "follow_up"]
    assert data["kinds"][2]["lateness"] == {"count": 5, "p50": 4.0, "p95": 50.0}
    assert data["duration"] == {"count": 6, "p50": 0.75, "p95": 1.875}
    assert data["channels"][1]["week"]["success_rate"] == 0.5
    assert [g["code"] for g in data["failures"]["by_code"]] == ["recipient", "deadline", "in_doubt"]
    assert len(data["hours"]) == 24 and len(data["days"]) == 14


# The page -----------------------------------------------------------------------------------


def page(client, **params):  # type: ignore[no-untyped-def]
    response = client.get(PAGE, {"date": DAY.isoformat(), **params})
    assert response.status_code == 200
    return response


def test_page_shows_the_days_numbers(admin_client, world):
    response = page(admin_client)
    html = response.content.decode()
    ctx = response.context
    totals = {cell.label: cell.value for cell in ctx["totals"]}
    assert totals == {
        "Planned": "16",
        "Pending": "4",
        "Sent": "7",
        "Failed": "2",
        "Unknown": "1",
        "Expired": "1",
        "Skipped": "1",
    }
    assert ctx["totals_rate"] == "63.6 %"
    assert ctx["duration"] == ("750 ms", "1.88 s")
    assert ctx["lateness"] == ("10.0 s", "4 min 0 s")
    rows = {row["kind"]: row for row in ctx["kinds"]}
    assert [c.value for c in rows["follow_up"]["cells"]] == ["10", "2", "5", "2", "1", "0", "0"]
    assert rows["follow_up"]["lateness"] == ("4.00 s", "50.0 s")
    assert rows["daily_report"]["duration"] == ("200 ms", "200 ms")
    assert rows["birthday"]["duration"] == (NOTHING, NOTHING)
    channels = {row["channel"]: row for row in ctx["channels"]}
    assert channels["memory"]["day"] == {"sent": 5, "ended": 8, "rate": "62.5 %", "low": True}
    assert channels["memory_dedup"]["week"]["rate"] == "50.0 %"
    assert [(r["status"], r["code"], r["count"]) for r in ctx["failures"]] == [
        ("failed", "recipient", 2),
        ("expired", "deadline", 1),
        ("unknown", "in_doubt", 1),
    ]
    assert "81013 user not found" in html  # the latest failures, with their messages
    assert [row["beat"].host for row in ctx["schedulers"]] == ["alpha", "beta"]
    assert html.count('class="alert">stale</span>') == 1
    assert "Reminders dashboard" in html
    assert 'href="?date=2026-03-09"' in html and 'href="?date=2026-03-11"' in html
    assert f'{DATA}?date=2026-03-10"' in html


def test_page_draws_four_accessible_charts(admin_client, world):
    html = page(admin_client).content.decode()
    assert html.count(CHART) == 4
    # Nothing from elsewhere, and no script but the admin's own chrome.
    assert "https://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    scripts = re.findall(r"<script[^>]*>", html)
    assert all('src="/static/admin/js/' in tag for tag in scripts), scripts
    charts = [html[html.index(CHART, i) : html.index("</svg>", i) + 6] for i in _starts(html)]
    titles = []
    for svg in charts:
        root = parse(svg)
        assert root.get("role") == "img"
        labelled = root.get("aria-labelledby").split()
        ids = {el.get("id"): el.text for el in root.iter() if el.get("id")}
        titles.append(ids[labelled[0]])
        assert ids[labelled[1]]  # the description
        texts = [el.text for el in root.iter(f"{SVG}text")]
        assert {"hour due (Asia/Shanghai)", "day due", "minute (Asia/Shanghai)"} & set(texts)
    assert titles == [
        "The next hour, minute by minute",
        "Sent and failed per hour, 2026-03-10",
        "Lateness per hour, 2026-03-10",
        "Sent and failed per day, the last 14 days",
    ]
    hours = parse(charts[1])
    tips = [el.text for el in hours.iter(f"{SVG}title")]
    assert "09:00: 5 sent" in tips and "10:00: 1 failed" in tips
    lateness = parse(charts[2])
    tips = [el.text for el in lateness.iter(f"{SVG}title")]
    assert "09:00: 10 p50" in tips and "09:00: 260 p95" in tips
    # The numbers in a table too.
    assert "<summary>The numbers</summary>" in html


def test_page_in_chinese_for_a_browser_that_asks_for_it(admin_client, world):
    OrmQ.objects.create(key="reminders", payload="-", lock=timezone.now() - timedelta(seconds=90))
    response = admin_client.get(
        PAGE, {"date": DAY.isoformat()}, headers={"accept-language": "zh-hans"}
    )
    html = response.content.decode()
    ctx = response.context

    assert response.headers["Content-Language"] == "zh-hans"
    totals = {cell.label: cell.value for cell in ctx["totals"]}
    assert totals == {
        "计划": "16",
        "待发送": "4",
        "已发送": "7",
        "失败": "2",
        "未知": "1",
        "已过期": "1",
        "已跳过": "1",
    }
    assert ctx["duration"] == ("750 毫秒", "1.88 秒")
    assert ctx["lateness"] == ("10.0 秒", "4 分 0 秒")
    for heading in ("提醒仪表盘", "各渠道成功率", "当前计划", "调度器", "工作进程", "图表"):
        assert heading in html, heading
    assert "2026年3月10日（Asia/Shanghai）到期的运行记录" in html
    assert [row["status_label"] for row in ctx["failures"]] == ["失败", "已过期", "结果未知"]
    assert html.count('class="alert">心跳超时</span>') == 1
    titles = [chart["svg"] for chart in ctx["charts"]]
    assert "2026-03-10 每小时发送成功与失败数" in titles[0]
    assert "到期小时（Asia/Shanghai）" in titles[0]
    assert "最近 14 天每天发送成功与失败数" in titles[2]
    assert [chart["head"] for chart in ctx["charts"]] == [
        ["小时", "已发送", "失败"],
        ["小时", "p50", "p95"],
        ["日期", "已发送", "失败"],
    ]
    assert re.search(r"1 个作业等待工作进程处理（最久已等待 1 分 3\d 秒）；", html)
    for english in ("Reminders dashboard", "Success rate by channel", "The plan, now", "Charts"):
        assert english not in html, english


def _starts(html: str) -> list[int]:
    found, at = [], html.find(CHART)
    while at != -1:
        found.append(at)
        at = html.find(CHART, at + 1)
    return found


# Links into the admin -----------------------------------------------------------------------------


def changelist(client, url: str) -> list[int]:  # type: ignore[no-untyped-def]
    """The run ids the admin's changelist at ``url`` lists (refusing a bad lookup)."""
    response = client.get(url)
    assert response.status_code == 200, url
    assert "e" not in response.wsgi_request.GET  # not the "bad lookup" redirect
    return sorted(run.pk for run in response.context["cl"].result_list)


def test_every_count_links_to_its_runs(admin_client, world):
    ctx = page(admin_client).context
    checked = 0
    for row in ctx["kinds"]:
        for cell in row["cells"]:
            if cell.link:
                assert len(changelist(admin_client, cell.link)) == int(cell.value), cell
                checked += 1
    for cell in ctx["totals"]:
        assert cell.link is not None
        assert len(changelist(admin_client, cell.link)) == int(cell.value), cell
    assert checked >= 9
    runs = world.runs
    failed = next(row for row in ctx["failures"] if row["code"] == "recipient")
    assert changelist(admin_client, failed["link"]) == sorted([runs["5"].pk, runs["6"].pk])


def test_chart_bars_link_to_their_hour(admin_client, world):
    ctx = page(admin_client).context
    svg = ctx["charts"][0]["svg"]
    root = parse(str(svg))
    links = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert len(links) == 5  # sent at 00, 09, 10; failed at 10, 11
    sent_at_nine = [link for link in links if "09%3A00%3A00" in link and "sent" in link]
    assert len(changelist(admin_client, sent_at_nine[0])) == 5


def test_plan_links_to_the_backlog_and_the_next_hour(admin_client, db):
    now = timezone.now()
    w = World()
    w.task("i", "inquiry_timeout", "memory", "high")
    w.run("due", "i", now - timedelta(minutes=3), "scheduled", rank=0)
    w.run("soon", "i", now + timedelta(minutes=10), "scheduled", rank=0)
    w.run("later", "i", now + timedelta(minutes=70), "scheduled", rank=0)
    ctx = page(admin_client).context
    high = next(row for row in ctx["plan"] if row["priority"] == "high")
    assert (high["backlog"].value, high["next_hour"].value) == ("1", "1")
    assert changelist(admin_client, high["backlog"].link) == [w.runs["due"].pk]
    assert changelist(admin_client, high["next_hour"].link) == [w.runs["soon"].pk]


def test_failed_runs_are_retried_from_where_the_dashboard_links(admin_client, world):
    ctx = page(admin_client).context
    failed = next(row for row in ctx["failures"] if row["code"] == "recipient")
    ids = changelist(admin_client, failed["link"])
    action = {"action": "retry_runs", "_selected_action": ids}
    confirm = admin_client.post(failed["link"], action)
    assert confirm.status_code == 200  # the page saying what the retry will do
    assert TaskRun.objects.filter(pk__in=ids, status="failed").count() == len(ids)
    response = admin_client.post(failed["link"], {**action, "post": "yes"})
    assert response.status_code == 302
    assert set(TaskRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"retrying"}


def test_no_links_where_the_admin_would_refuse_the_lookup(admin_client, world):
    from django.contrib import admin

    run_admin = admin.site.get_model_admin(TaskRun)
    ctx = page(admin_client).context
    for row in ctx["channels"]:
        allowed = run_admin.lookup_allowed("task__channel__exact", row["channel"], None)
        assert (row["link"] is not None) == allowed
        if row["link"]:
            changelist(admin_client, row["link"])


def test_an_empty_day_renders(admin_client, db):
    response = admin_client.get(PAGE, {"date": "2030-01-01"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "No run is due on this day." in html
    assert "No scheduler is running (no heartbeat)." in html
    assert html.count(CHART) == 4


def test_json_and_page_agree(admin_client, world):
    ctx = page(admin_client).context
    data = json.loads(admin_client.get(DATA, {"date": DAY.isoformat()}).content)
    assert [int(c.value) for c in ctx["totals"]] == [
        data["totals"][key]
        for key in ("planned", "pending", "sent", "failed", "unknown", "expired", "skipped")
    ]


def test_page_query_count_does_not_grow_with_the_data(admin_client, world):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            page(admin_client)
        return len(captured)

    page(admin_client)  # the calendars' entries, read once in a while per process
    first = queries()
    # ops.stats' queries (the recalls' count among them), the health strip's two (the
    # calendars in use, the alerts of the last 24 hours), and the request's session and user.
    assert first == (19 if connection.vendor == "postgresql" else 17) + 2 + 2
    more = World()
    more.task("x", "inquiry_timeout", "console", "low")
    for n in range(200):
        status = ("sent", "failed", "unknown", "skipped")[n % 4]
        more.run(f"x{n}", "x", local(n % 24, n % 60, days=-(n % 14)), status, late=n % 50)
    assert queries() == first


def test_page_names_kinds_by_their_translated_label(admin_client, world):
    """The "By kind" table and the latest failures name each kind as the admin does."""
    for language, labels in [
        ("en", ("Follow-up reminder", "Daily report", "Birthday greeting")),
        ("zh-hans", ("跟进提醒", "日报", "生日祝福")),
    ]:
        response = admin_client.get(
            PAGE, {"date": DAY.isoformat()}, headers={"accept-language": language}
        )
        html = response.content.decode()
        shown = re.sub(r'(href|value|id|name|class)="[^"]*"', "", html)
        for code in ("follow_up", "daily_report", "birthday"):
            assert f">{code}<" not in shown, (language, code)
        for label in labels:
            assert f">{label}<" in shown, (language, label)


# Recalls ------------------------------------------------------------------------------------


def a_recall(key: str, ago: timedelta) -> SendLog:
    """A ledger row whose message was recalled ``ago`` before now."""
    now = timezone.now()
    return SendLog.objects.create(
        key=key,
        recipient="lisi",
        channel="wecom",
        status="sent",
        sent_at=now - ago - timedelta(minutes=5),
        recalled_at=now - ago,
        recalled_by="operator",
        recall_reason="wrong customer",
        recalled_ids=[f"msg-{key}"],
    )


def test_recalls__the_messages_recalled_in_the_last_24_hours_linked_to_them(admin_client, world):
    recent = [a_recall("a", timedelta(minutes=3)), a_recall("b", timedelta(hours=23, minutes=59))]
    a_recall("c", timedelta(hours=24, minutes=1))  # too long ago
    SendLog.objects.create(key="d", recipient="lisi", channel="wecom", status="sent")  # never

    response = page(admin_client)
    cell = response.context["recalled"]
    assert (cell.value, cell.label) == ("2", "recalled in the last 24 hours")
    ledger = reverse("admin:reminders_sendlog_changelist")
    assert cell.link == f"{ledger}?recall=day"
    assert f'<a href="{ledger}?recall=day">2</a>' in response.content.decode()
    listed = admin_client.get(cell.link).context["cl"].result_list
    assert {row.pk for row in listed} == {row.pk for row in recent}
    data = admin_client.get(DATA, {"date": DAY.isoformat()}).json()
    assert data["recalled_last_24_hours"] == 2


def test_recalls__none_is_zero_and_links_nowhere(admin_client, db):
    response = admin_client.get(PAGE)
    assert response.context["recalled"].value == "0"
    assert response.context["recalled"].link is None
    assert admin_client.get(DATA).json()["recalled_last_24_hours"] == 0


def test_recalls__in_chinese(admin_client, db):
    a_recall("a", timedelta(minutes=3))
    response = admin_client.get(PAGE, headers={"accept-language": "zh-hans"})
    html = response.content.decode()
    assert "最近 24 小时撤回" in html
