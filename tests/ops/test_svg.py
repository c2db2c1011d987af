"""ops.svg: well-formed, accessible, escaped charts whose marks say their numbers."""

from __future__ import annotations

from xml.etree import ElementTree

import pytest

from ops.svg import HEIGHT, TOP, Series, bar_chart, line_chart, nice_ceiling

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)  # noqa: S314 - our own output


def tips(root: ElementTree.Element, tag: str) -> list[str]:
    return [
        el.findtext(f"{NS}title") or ""
        for el in root.iter(f"{NS}{tag}")
        if el.find(f"{NS}title") is not None
    ]


@pytest.mark.parametrize(
    ("value", "top", "step"),
    [
        (0, 1.0, 0.2),
        (7, 8, 2),
        (100, 100, 20),
        (101, 125, 25),
        (4, 4, 1),
        (0.3, 0.3, 0.1),
        (12345, 12500, 2500),
    ],
)
def test_nice_ceiling(value, top, step):
    got_top, got_step = nice_ceiling(value)
    assert (got_top, got_step) == (pytest.approx(top), pytest.approx(step))
    assert got_top >= value and round(got_top / got_step) <= 5


def test_bar_chart_is_labelled_and_says_each_value():
    svg = bar_chart(
        "c1",
        title="Sent and failed",
        desc="Per hour",
        labels=["09:00", "10:00", "11:00"],
        series=[
            Series("sent", [5, 0, None]),
            Series("failed", [1, 2, 0], ["/a?x=1&y=2", None, None]),
        ],
        x_label="hour",
        y_label="runs",
    )
    root = parse(svg)
    assert root.get("role") == "img"
    assert root.get("aria-labelledby") == "c1-title c1-desc"
    assert root.findtext(f"{NS}title") == "Sent and failed"
    assert root.findtext(f"{NS}desc") == "Per hour"
    texts = [el.text for el in root.iter(f"{NS}text")]
    assert "hour" in texts and "runs" in texts  # axis labels
    assert {"09:00", "10:00", "11:00"} <= set(texts)
    assert {"sent", "failed"} <= set(texts)  # the legend
    bars = tips(root, "rect")
    # None draws nothing; zero is a bar of no height that still says so.
    assert bars == [
        "09:00: 5 sent",
        "10:00: 0 sent",
        "09:00: 1 failed",
        "10:00: 2 failed",
        "11:00: 0 failed",
    ]
    links = [a.get("href") for a in root.iter(f"{NS}a")]
    assert links == ["/a?x=1&y=2"]
    # The tallest bar (5 of an axis to 5) reaches the top of the plot.
    sent_nine = next(
        r for r in root.iter(f"{NS}rect") if r.findtext(f"{NS}title") == "09:00: 5 sent"
    )
    assert float(sent_nine.get("y")) == pytest.approx(TOP)
    assert float(sent_nine.get("height")) == pytest.approx(HEIGHT - 44 - TOP)


def test_text_is_escaped():
    svg = bar_chart(
        "c2",
        title="<script>alert(1)</script>",
        desc='"&',
        labels=["<b>"],
        series=[Series("a<b", [1])],
        x_label="x",
        y_label="y",
    )
    assert "<script>" not in svg and "<b>" not in svg
    root = parse(svg)
    assert root.findtext(f"{NS}title") == "<script>alert(1)</script>"
    assert tips(root, "rect") == ["<b>: 1 a<b"]


def test_line_chart_leaves_gaps():
    svg = line_chart(
        "c3",
        title="Lateness",
        desc="p50 and p95",
        labels=["00", "01", "02", "03", "04"],
        series=[Series("p50", [1, 2, None, 3, 4]), Series("p95", [None, None, 9, None, None])],
        x_label="hour",
        y_label="seconds",
    )
    root = parse(svg)
    lines = list(root.iter(f"{NS}polyline"))
    # p50: two runs of two points; p95: a single point has no line, only its dot.
    assert [el.get("class") for el in lines] == ["line series-0", "line series-0"]
    assert [len(el.get("points").split()) for el in lines] == [2, 2]
    assert tips(root, "circle") == ["00: 1 p50", "01: 2 p50", "03: 3 p50", "04: 4 p50", "02: 9 p95"]


def test_empty_chart_still_has_axes():
    root = parse(
        bar_chart(
            "c4", title="t", desc="d", labels=[], series=[Series("s", [])], x_label="x", y_label="y"
        )
    )
    assert len(list(root.iter(f"{NS}line"))) >= 2
    assert tips(root, "rect") == []


def test_many_labels_are_thinned():
    labels = [f"{h:02d}:00" for h in range(24)]
    root = parse(
        line_chart(
            "c5",
            title="t",
            desc="d",
            labels=labels,
            series=[Series("s", [1.0] * 24)],
            x_label="x",
            y_label="y",
        )
    )
    shown = [el.text for el in root.iter(f"{NS}text") if el.text in labels]
    assert shown == labels[::2]
