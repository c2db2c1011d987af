"""``manage.py reminders_stats``: the day's numbers as tables, or the dashboard's JSON."""

# ruff: noqa: RUF001

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone, translation

from ops.stats import text as stats_text
from ops.stats.format import NOTHING

from .stats_world import DAY, build
from .test_wave import NOW, Builder, at, world  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("reminders_stats", *args, stdout=out)
    return out.getvalue()


def test_tables_for_a_day(db):
    build()
    text = run("--date", "2026-03-10")
    lines = text.splitlines()
    assert lines[0].startswith("Runs due on 2026-03-10 (Asia/Shanghai), as of ")
    head = lines[2].split()
    assert head[:9] == [
        "kind",
        "planned",
        "pending",
        "sent",
        "failed",
        "unknown",
        "expired",
        "skipped",
        "cancelled",
    ]
    # Each kind by its label, as the admin and the dashboard name it.
    labels = ("Follow-up reminder", "Daily report", "Birthday greeting", "all")
    rows = {
        label: [label, *line[len(label) :].split()]
        for line in lines[4:8]
        for label in labels
        if line.startswith(label + " ")
    }
    assert sorted(rows) == sorted(labels)
    assert rows["Follow-up reminder"][1:9] == ["10", "2", "5", "2", "1", "0", "0", "1"]
    assert rows["Daily report"][1:9] == ["4", "0", "2", "0", "0", "1", "1", "0"]
    assert rows["Birthday greeting"][1:9] == ["2", "2", "0", "0", "0", "0", "0", "0"]
    # all: duration p50 750 ms, p95 1.88 s; lateness p50 10.0 s, p95 4 min 0 s.
    assert lines[7].split() == [
        "all", "16", "4", "7", "2", "1", "1", "1", "1",
        "750", "ms", "1.88", "s", "10.0", "s", "4", "min", "0", "s",
    ]  # fmt: skip
    tokens = [line.split() for line in lines]
    assert ["memory", "5/8", "62.5", "%", "8/13", "61.5", "%"] in tokens
    assert ["memory_dedup", "2/3", "66.7", "%", "2/4", "50.0", "%"] in tokens
    assert ["failed", "recipient", "2", "81013", "user", "xyz"] in tokens
    assert ["unknown", "in_doubt", "1", "read", "timeout"] in tokens
    assert [t[0] for t in tokens if t and t[0] in ("high", "normal", "low")] == [
        "high",
        "normal",
        "low",
    ]
    assert [t[0] for t in tokens if t[-1:] in (["stale"], ["ticking"])] == ["alpha", "beta"]
    assert f"django-q2 queue: 0 waiting (oldest {NOTHING}), 0 held by workers" in text


def test_tables_in_chinese(db):
    build()
    with translation.override("zh-hans"):
        text = run("--date", "2026-03-10")
    lines = text.splitlines()

    assert lines[0].startswith("2026-03-10（Asia/Shanghai）到期的运行记录，截至 ")
    assert lines[2].split()[:9] == [
        "类型",
        "计划",
        "待发送",
        "已发送",
        "失败",
        "未知",
        "已过期",
        "已跳过",
        "已取消",
    ]
    assert lines[7].split()[:2] == ["全部", "16"]
    assert lines[7].split()[9:11] == ["750", "毫秒"]
    assert {line.split()[0] for line in lines[4:7]} == {"跟进提醒", "日报", "生日祝福"}
    # Lined up in a terminal, where a Chinese character takes two columns: the last
    # column is right-aligned, so every line of the table ends in the same column.
    assert len({stats_text.width(line) for line in lines[2:8]}) == 1
    for heading in ("当前计划", "调度器", "失败、结果未知和已过期的运行记录（按原因）"):
        assert heading in lines, heading
    assert f"django-q2 队列：0 个作业等待中（最久 {NOTHING}），0 个由工作进程处理中" in text


def test_a_table_pads_chinese_by_its_width_in_a_terminal():
    assert stats_text.width("类型 p50") == 8
    assert stats_text.table(["类型", "n"], [["follow_up", 10]]) == [
        "类型        n",
        "---------  --",
        "follow_up  10",
    ]


def test_json_equals_the_json_view(admin_client, db):
    build()
    printed = json.loads(run("--date", DAY.isoformat(), "--json"))
    served = admin_client.get("/admin/ops/dashboard/data.json", {"date": DAY.isoformat()}).json()
    # Only the ages the clock moves differ between the two calls.
    for data in (printed, served):
        del data["generated_at"]
        for beat in data["schedulers"]["heartbeats"]:
            del beat["age_seconds"]
        for plan in data["plan"]["priorities"]:
            del plan["oldest_seconds"]
    assert printed == served
    assert printed["totals"]["planned"] == 16
    assert printed["lateness"] == {"count": 7, "p50": 10.0, "p95": 240.0}


def test_default_day_is_today(db):
    data = json.loads(run("--json"))
    from ops import stats

    assert data["date"] == stats.today().isoformat()


def test_a_bad_date_is_refused(db):
    with pytest.raises(CommandError, match="not a day"):
        run("--date", "10/03/2026")


# The wave ahead ----------------------------------------------------------------------------


@pytest.fixture
def frozen(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def section(text: str, heading: str) -> list[str]:
    """The lines under ``heading``, up to the next blank line after its table."""
    lines = text.splitlines()
    start = lines.index(heading) + 2
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


def test_tables__the_wave_ahead(world, frozen):  # noqa: F811
    """The same figures as the JSON's ``wave`` (tests/ops/test_wave.py works them out)."""
    text = run("--date", "2026-03-10")

    assert section(text, "The next hour, minute by minute") == [
        "minute  Daily report  Follow-up reminder  total",
        "------  ------------  ------------------  -----",
        "15:05              3                  35     38",
        "15:10              0                   5      5",
    ]
    members = section(text, "Members nearest WeCom's limits (30 a minute, 1000 an hour)")
    assert [line.split() for line in members[2:]] == [
        ["alice", "40", "35", "15:05", "116.7", "%"],
        ["bob", "3", "3", "15:05", "10.0", "%"],
    ]
    assert members[0].split("  ")[:3] == ["recipient", "next hour", "busiest minute"]
    quiet = section(text, "Held by quiet hours")
    assert [line.split() for line in quiet[2:]] == [
        ["Follow-up", "reminder", "2", "2026-03-11", "08:30", "2026-03-11", "08:40"]
    ]
    assert section(text, "WeCom's daily quota") == [
        "                                    messages",
        "----------------------------------  --------  -------------------",
        "Daily quota                                \u2013  set OPS_WECOM_SEATS",
        "Sent today                                 5",
        "Forecast for today                        50",
        "Tomorrow                                   5",
        "Tomorrow: one-off runs planned             1",
        "Tomorrow: recurring runs estimated         4",
        "Beijing day 2026-03-10; WeCom app channels: wecom.",
    ]
    # Between the plan and the schedulers, as on the page.
    lines = text.splitlines()
    assert lines.index("The plan, now") < lines.index("The next hour, minute by minute")
    assert lines.index("WeCom's daily quota") < lines.index("Schedulers")


@override_settings(OPS_WECOM_SEATS=1)
def test_tables__the_quota_marks_a_figure_over_it(world, frozen):  # noqa: F811
    world.runs(world.task("birthday", "frank", cron=""), at(11, days=1), n=200)

    quota = section(run("--date", "2026-03-10"), "WeCom's daily quota")

    assert [line.split("  ")[0] for line in quota[2:6]] == [
        "Daily quota",
        "Sent today",
        "Forecast for today",
        "Tomorrow",
    ]
    assert quota[2].split() == ["Daily", "quota", "200"]
    assert quota[4].split() == ["Forecast", "for", "today", "50"]
    assert quota[5].split() == ["Tomorrow", "205", "over", "the", "quota"]


def test_tables__nothing_ahead(db, frozen):
    text = run("--date", "2026-03-10")
    assert section(text, "The next hour, minute by minute") == ["Nothing waits in the next hour."]
    assert section(text, "Members nearest WeCom's limits (30 a minute, 1000 an hour)") == ["None."]
    assert section(text, "Held by quiet hours") == ["None."]
    assert section(text, "WeCom's daily quota")[-1] == (
        f"Beijing day 2026-03-10; WeCom app channels: {NOTHING}."
    )


def test_tables__the_wave_in_chinese_lines_up(world, frozen):  # noqa: F811
    with translation.override("zh-hans"):
        text = run("--date", "2026-03-10")
    minutes = section(text, "未来一小时，逐分钟")
    assert minutes[0].split() == ["分钟", "日报", "跟进提醒", "合计"]
    assert len({stats_text.width(line) for line in minutes}) == 1
