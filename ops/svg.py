"""A tiny server-side SVG chart renderer: grouped bars and lines over labelled categories.

Why: the dashboard must draw without JavaScript and load nothing from elsewhere, so a
chart is an inline ``<svg>`` written here. Invariants:

* Accessible: the ``<svg>`` is ``role="img"`` and labelled by its own ``<title>`` and
  ``<desc>``; both axes are labelled; every bar and every point carries a ``<title>``
  (a tooltip and what a screen reader reads) stating its category, series and value.
  The page shows the same numbers in a table as well.
* Safe: every text goes through ``format_html`` (escaped); nothing is marked safe by
  hand.
* Styled by the page: elements carry classes (``series-0``, ``series-1``, ``axis``,
  ``grid``), colours live in the page's CSS, text is ``currentColor``, so the admin's
  dark mode applies.
* A missing value (None) is drawn as nothing: no bar, a gap in the line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

WIDTH = 720
HEIGHT = 230
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 44


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]
    # Per category, a URL the bar links to (bars only); None: no link.
    links: Sequence[str | None] | None = None


def nice_ceiling(value: float) -> tuple[float, float]:
    """An axis maximum at or above ``value`` and its tick step: 1, 2, 2.5 or 5 times a power
    of ten, in at most 5 steps (1 and step 0.2 for nothing to show)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0, 0.2
    raw = value / 5
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        step = factor * power
        if step * 5 >= value:
            return step * math.ceil(value / step), step
    return value, value / 5  # pragma: no cover - the loop always returns


def _num(value: float) -> str:
    return f"{value:.1f}"


def _join(parts: Sequence[SafeString]) -> SafeString:
    return format_html_join("", "{}", ((part,) for part in parts))


@dataclass(frozen=True)
class _Frame:
    labels: Sequence[str]
    top: float
    step: float

    @property
    def plot_width(self) -> float:
        return WIDTH - LEFT - RIGHT

    @property
    def plot_height(self) -> float:
        return HEIGHT - TOP - BOTTOM

    @property
    def band(self) -> float:
        return self.plot_width / max(1, len(self.labels))

    def y(self, value: float) -> float:
        return TOP + self.plot_height * (1 - max(0.0, value) / self.top)

    def x(self, index: int) -> float:
        """The centre of category ``index``."""
        return LEFT + self.band * (index + 0.5)


def _axes(frame: _Frame, x_label: str, y_label: str, fmt: Callable[[float], str]) -> SafeString:
    parts = []
    ticks = round(frame.top / frame.step)
    for i in range(ticks + 1):
        value = frame.step * i
        y = frame.y(value)
        parts.append(
            format_html(
                '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}</text>',
                LEFT,
                WIDTH - RIGHT,
                _num(y),
                _num(y),
                LEFT - 6,
                _num(y + 4),
                fmt(value),
            )
        )
    # At most about 12 category labels, evenly spaced, so they never overlap.
    every = max(1, math.ceil(len(frame.labels) / 12))
    for i, label in enumerate(frame.labels):
        if i % every == 0:
            parts.append(
                format_html(
                    '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
                    _num(frame.x(i)),
                    HEIGHT - BOTTOM + 16,
                    label,
                )
            )
    baseline = frame.y(0)
    parts.append(
        format_html(
            '<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>'
            '<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>'
            '<text class="axis-label" x="{}" y="{}" text-anchor="middle">{}</text>'
            '<text class="axis-label" x="{}" y="{}" text-anchor="middle" '
            'transform="rotate(-90 {} {})">{}</text>',
            LEFT,
            WIDTH - RIGHT,
            _num(baseline),
            _num(baseline),
            LEFT,
            LEFT,
            TOP,
            _num(baseline),
            LEFT + frame.plot_width / 2,
            HEIGHT - 6,
            x_label,
            14,
            TOP + frame.plot_height / 2,
            14,
            _num(TOP + frame.plot_height / 2),
            y_label,
        )
    )
    return _join(parts)


def _legend(series: Sequence[Series]) -> SafeString:
    parts = []
    x = float(LEFT)
    for i, one in enumerate(series):
        parts.append(
            format_html(
                '<rect class="series-{}" x="{}" y="8" width="12" height="12"/>'
                '<text class="legend" x="{}" y="18">{}</text>',
                i,
                _num(x),
                _num(x + 16),
                one.name,
            )
        )
        x += 24 + 8 * len(one.name)
    return _join(parts)


def _svg(chart_id: str, title: str, desc: str, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" '
        'role="img" aria-labelledby="{}-title {}-desc" width="100%">'
        '<title id="{}-title">{}</title><desc id="{}-desc">{}</desc>{}</svg>',
        WIDTH,
        HEIGHT,
        chart_id,
        chart_id,
        chart_id,
        title,
        chart_id,
        desc,
        body,
    )


def _top(series: Sequence[Series]) -> tuple[float, float]:
    values = [v for one in series for v in one.values if v is not None]
    return nice_ceiling(max(values, default=0.0))


def bar_chart(
    chart_id: str,
    *,
    title: str,
    desc: str,
    labels: Sequence[str],
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> SafeString:
    """Bars of each series side by side in each category."""
    top, step = _top(series)
    frame = _Frame(labels, top, step)
    inner = frame.band * 0.8
    width = inner / max(1, len(series))
    parts = [_axes(frame, x_label, y_label, fmt), _legend(series)]
    for s, one in enumerate(series):
        for i, value in enumerate(one.values):
            if value is None:
                continue
            x = frame.x(i) - inner / 2 + s * width
            y = frame.y(value)
            bar = format_html(
                '<rect class="series-{}" x="{}" y="{}" width="{}" height="{}">'
                "<title>{}: {} {}</title></rect>",
                s,
                _num(x),
                _num(y),
                _num(max(width - 1, 1)),
                _num(frame.y(0) - y),
                labels[i],
                fmt(value),
                one.name,
            )
            link = one.links[i] if one.links is not None else None
            if link:
                bar = format_html('<a href="{}">{}</a>', link, bar)
            parts.append(bar)
    return _svg(chart_id, title, desc, _join(parts))


def line_chart(
    chart_id: str,
    *,
    title: str,
    desc: str,
    labels: Sequence[str],
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
) -> SafeString:
    """One line per series through its values; a None leaves a gap."""
    top, step = _top(series)
    frame = _Frame(labels, top, step)
    parts = [_axes(frame, x_label, y_label, fmt), _legend(series)]
    for s, one in enumerate(series):
        run: list[str] = []
        segments: list[list[str]] = [run]
        for i, value in enumerate(one.values):
            if value is None:
                run = []
                segments.append(run)
                continue
            run.append(f"{_num(frame.x(i))},{_num(frame.y(value))}")
        for points in segments:
            if len(points) > 1:
                parts.append(
                    format_html(
                        '<polyline class="line series-{}" fill="none" points="{}"/>',
                        s,
                        " ".join(points),
                    )
                )
        for i, value in enumerate(one.values):
            if value is not None:
                parts.append(
                    format_html(
                        '<circle class="series-{}" cx="{}" cy="{}" r="3">'
                        "<title>{}: {} {}</title></circle>",
                        s,
                        _num(frame.x(i)),
                        _num(frame.y(value)),
                        labels[i],
                        fmt(value),
                        one.name,
                    )
                )
    return _svg(chart_id, title, desc, _join(parts))


def stacked_bar_chart(
    chart_id: str,
    *,
    title: str,
    desc: str,
    labels: Sequence[str],
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    fmt: Callable[[float], str] = lambda v: f"{v:g}",
    limits: Sequence[tuple[str, float]] = (),
) -> SafeString:
    """The series stacked in each category, the first at the bottom; ``limits``, each a
    dashed line across the plot with its label (a provider's pace, say). The axis reaches
    the tallest stack and the highest limit: how far the bars stay under a limit is
    what the line is there to show."""
    totals = [sum(one.values[i] or 0.0 for one in series) for i in range(len(labels))]
    top, step = nice_ceiling(max([*totals, *(limit for _name, limit in limits)], default=0.0))
    frame = _Frame(labels, top, step)
    width = frame.band * 0.8
    parts = [_axes(frame, x_label, y_label, fmt), _legend(series)]
    for name, limit in limits:
        level = _num(frame.y(limit))
        parts.append(
            format_html(
                '<line class="limit" x1="{}" y1="{}" x2="{}" y2="{}"><title>{}</title></line>'
                '<text class="limit" x="{}" y="{}" text-anchor="end">{}</text>',
                LEFT,
                level,
                WIDTH - RIGHT,
                level,
                name,
                WIDTH - RIGHT,
                _num(frame.y(limit) - 4),
                name,
            )
        )
    base = [0.0] * len(labels)
    for s, one in enumerate(series):
        for i, value in enumerate(one.values):
            if not value:
                continue
            y = frame.y(base[i] + value)
            parts.append(
                format_html(
                    '<rect class="series-{}" x="{}" y="{}" width="{}" height="{}">'
                    "<title>{}: {} {}</title></rect>",
                    s,
                    _num(frame.x(i) - width / 2),
                    _num(y),
                    _num(max(width - 1, 1)),
                    _num(frame.y(base[i]) - y),
                    labels[i],
                    fmt(value),
                    one.name,
                )
            )
            base[i] += value
    return _svg(chart_id, title, desc, _join(parts))
