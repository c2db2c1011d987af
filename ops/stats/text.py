"""``reminders_stats`` without ``--json``: the numbers of ``ops.stats`` as plain-text
tables, for a terminal or a mail. The same figures as the dashboard, written the same
way (``ops.stats.format``); charts are left to the page."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from django.utils.translation import gettext as _
from django.utils.translation import pgettext

from reminders import kinds as kind_registry

from . import format as fmt
from .counts import Counts
from .summary import Stats

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
    sections = [_kinds, _channels, _failures, _plan, _runners]
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


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
