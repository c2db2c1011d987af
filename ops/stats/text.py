"""``reminders_stats`` without ``--json``: the numbers of ``ops.stats`` as plain-text
tables, for a terminal or a mail. The same figures as the dashboard, written the same
way (``ops.stats.format``); charts are left to the page, the wave's minutes are a table
of the minutes that have runs."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import datetime

from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from reminders import kinds as kind_registry

from . import format as fmt
from .counts import Counts
from .days import label
from .summary import Stats
from .wave import PER_HOUR, PER_MINUTE, Quota, Wave

Row = Sequence[object]


def width(text: str) -> int:
    """The columns ``text`` takes in a terminal: a Chinese character (East Asian wide or
    full-width) takes two."""
    return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)


def table(head: Row, rows: Sequence[Row], align: str = "") -> list[str]:
    """Columns padded to their widest cell (by ``width``, so that Chinese headings line
    up too); ``align`` says per column ``l`` (text) or ``r`` (numbers), by default the
    first left and the others right."""
    cells = [[str(value) for value in row] for row in [head, *rows]]
    widths = [max(width(row[i]) for row in cells) for i in range(len(head))]
    align = align or "l" + "r" * (len(head) - 1)

    def line(row: list[str]) -> str:
        padded = []
        for value, column, side in zip(row, widths, align, strict=True):
            padding = " " * (column - width(value))
            padded.append(value + padding if side == "l" else padding + value)
        return "  ".join(padded).rstrip()

    return [line(cells[0]), "  ".join("-" * column for column in widths), *map(line, cells[1:])]


def _counts(counts: Counts) -> list[object]:
    return [
        counts.planned,
        counts.pending,
        counts.sent,
        counts.failed,
        counts.unknown,
        counts.expired,
        counts.skipped,
        counts.cancelled,
    ]


def render(stats: Stats) -> str:
    """The numbers as tables under a heading, one section after another."""
    sections = [_kinds, _channels, _failures, _plan, _wave, _runners]
    lines = [line for section in sections for line in section(stats)]
    return "\n".join(lines) + "\n"


def _kinds(stats: Stats) -> list[str]:
    """The heading, and the day's runs by kind, with their percentiles, and all kinds."""
    lines = [
        _("Runs due on %(day)s (%(zone)s), as of %(now)s")
        % {
            "day": stats.day.isoformat(),
            "zone": stats.time_zone,
            "now": stats.now.astimezone(stats.start.tzinfo).strftime("%Y-%m-%d %H:%M:%S"),
        },
        "",
    ]
    head = [
        _("kind"),
        _("planned"),
        _("pending"),
        # With a context: "sent" alone is the alert delivery's field (when it was sent).
        pgettext("runs", "sent"),
        pgettext("runs", "failed"),
        _("unknown"),
        _("expired"),
        _("skipped"),
        _("cancelled"),
        _("duration p50"),
        _("p95"),
        _("lateness p50"),
        _("p95"),
    ]
    rows: list[Row] = [
        [
            kind_registry.label(kind.kind),  # as the admin names it; --json keeps the code
            *_counts(kind.counts),
            fmt.seconds(kind.duration.p50),
            fmt.seconds(kind.duration.p95),
            fmt.seconds(kind.lateness.p50),
            fmt.seconds(kind.lateness.p95),
        ]
        for kind in stats.kinds
    ]
    rows.append(
        [
            _("all"),
            *_counts(stats.totals),
            fmt.seconds(stats.duration.p50),
            fmt.seconds(stats.duration.p95),
            fmt.seconds(stats.lateness.p50),
            fmt.seconds(stats.lateness.p95),
        ]
    )
    return lines + table(head, rows)


def _channels(stats: Stats) -> list[str]:
    lines = ["", _("Success rate: sent / (sent + failed + unknown + expired)"), ""]
    return lines + table(
        [_("channel"), _("day: sent/ended"), _("rate"), _("7 days: sent/ended"), _("rate")],
        [
            [
                channel.channel,
                f"{channel.day.sent}/{channel.day.ended}",
                fmt.rate(channel.day.success_rate),
                f"{channel.week.sent}/{channel.week.ended}",
                fmt.rate(channel.week.success_rate),
            ]
            for channel in stats.channels
        ],
    )


def _failures(stats: Stats) -> list[str]:
    lines = ["", _("Failed, unknown and expired runs by reason"), ""]
    return lines + table(
        [_("status"), _("code"), _("runs"), _("example")],
        [
            [group.status, group.code or fmt.NOTHING, group.count, _short(group.example)]
            for group in stats.failures
        ],
        align="llrl",
    )


def _plan(stats: Stats) -> list[str]:
    lines = ["", _("The plan, now"), ""]
    return lines + table(
        [
            _("priority"),
            _("next hour"),
            _("backlog"),
            _("oldest"),
            _("queued"),
            _("running"),
            _("paused"),
            # With a context: "in a digest" alone is a recipient's choice (Preference).
            pgettext("runs", "in a digest"),
        ],
        [
            [
                plan.priority,
                plan.next_hour,
                plan.backlog,
                fmt.seconds(plan.oldest_seconds),
                plan.queued,
                plan.running,
                plan.paused,
                plan.folded,
            ]
            for plan in stats.plan
        ],
    )


def _wave(stats: Stats) -> list[str]:
    """The wave ahead: the next hour's minutes that have runs, by kind; the members
    nearest WeCom's limits; the runs held by quiet hours; the daily quota."""
    wave = stats.wave
    if wave is None:
        return []
    return _minutes(wave) + _members(wave) + _quiet(wave) + _quota(wave.quota)


def _minutes(wave: Wave) -> list[str]:
    lines = ["", _("The next hour, minute by minute"), ""]
    rows: list[Row] = [
        [minute.label, *[minute.kinds.get(kind, 0) for kind in wave.kinds], minute.total]
        for minute in wave.minutes
        if minute.total
    ]
    if not rows:
        return [*lines, _("Nothing waits in the next hour.")]
    head = [_("minute"), *[kind_registry.label(kind) for kind in wave.kinds], _("total")]
    return lines + table(head, rows)


def _members(wave: Wave) -> list[str]:
    lines = [
        "",
        _("Members nearest WeCom's limits (%(minute)s a minute, %(hour)s an hour)")
        % {"minute": PER_MINUTE, "hour": PER_HOUR},
        "",
    ]
    if not wave.members:
        return [*lines, _("None.")]
    return lines + table(
        [_("recipient"), _("next hour"), _("busiest minute"), _("at"), _("of the limit")],
        [
            [
                member.recipient,
                member.next_hour,
                member.busiest_minute,
                _clock(member.busiest_at, "%H:%M"),
                fmt.rate(member.closeness),
            ]
            for member in wave.members
        ],
        align="lrrrr",
    )


def _quiet(wave: Wave) -> list[str]:
    lines = ["", _("Held by quiet hours"), ""]
    if not wave.quiet:
        return [*lines, _("None.")]
    return lines + table(
        [_("kind"), _("runs"), _("resume from"), _("resume until")],
        [
            [
                kind_registry.label(held.kind),
                held.runs,
                _clock(held.first_resume, "%Y-%m-%d %H:%M"),
                _clock(held.last_resume, "%Y-%m-%d %H:%M"),
            ]
            for held in wave.quiet
        ],
        align="lrll",
    )


def _quota(quota: Quota) -> list[str]:
    """The quota's figures, each marked when over the quota (or the quota unknown), and
    what they count: the Beijing day, of the WeCom app channels."""
    over = _("over the quota")
    rows: list[list[object]] = [
        [
            _("Daily quota"),
            fmt.NOTHING if quota.quota is None else quota.quota,
            _("set OPS_WECOM_SEATS") if quota.quota is None else "",
        ],
        [_("Sent today"), quota.used, ""],
        [_("Forecast for today"), quota.forecast, over if quota.today_over else ""],
        [_("Tomorrow"), quota.tomorrow, over if quota.tomorrow_over else ""],
        [_("Tomorrow: one-off runs planned"), quota.tomorrow_planned, ""],
        [_("Tomorrow: recurring runs estimated"), quota.tomorrow_estimated, ""],
    ]
    head: list[object] = ["", _("messages"), ""]
    if not any(row[2] for row in rows):  # no note: no empty column
        head, rows = head[:2], [row[:2] for row in rows]
    lines = ["", _("WeCom's daily quota"), ""]
    lines += table(head, rows, align="lrl"[: len(head)])
    lines.append(
        _("Beijing day %(day)s; WeCom app channels: %(channels)s.")
        % {
            "day": quota.day.isoformat() if quota.day else fmt.NOTHING,
            "channels": ", ".join(quota.channels) or fmt.NOTHING,
        }
    )
    return lines


def _runners(stats: Stats) -> list[str]:
    """The schedulers' heartbeats, and django-q2's queue."""
    lines = ["", _("Schedulers"), ""]
    lines += table(
        [_("host"), _("pid"), _("last tick"), _("state")],
        [
            [
                beat.host,
                beat.pid,
                fmt.seconds(beat.age_seconds),
                _("stale") if beat.stale else _("ticking"),
            ]
            for beat in stats.schedulers
        ],
        align="lrrl",
    )
    if not stats.schedulers:
        lines.append(_("No scheduler is running (no heartbeat)."))
    workers = stats.workers
    lines += [
        "",
        _("django-q2 queue: %(queued)d waiting (oldest %(oldest)s), %(taken)d held by workers")
        % {
            "queued": workers.queued,
            "oldest": fmt.seconds(workers.oldest_wait_seconds),
            "taken": workers.taken,
        },
    ]
    return lines


def _clock(moment: datetime | None, pattern: str) -> str:
    """``moment`` on the clock of ``TIME_ZONE``, as the dashboard shows it."""
    return fmt.NOTHING if moment is None else label(moment, pattern)


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
