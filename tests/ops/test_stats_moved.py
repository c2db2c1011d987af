"""``ops.stats_text`` and ``ops.stats_format``, moved into the ``ops.stats`` package: the
old names still import, warn that they are deprecated, and give the same objects."""

from __future__ import annotations

import importlib
import sys

import pytest

from ops.stats import format as stats_format
from ops.stats import text as stats_text


@pytest.mark.parametrize(
    ("old", "new", "names"),
    [
        ("ops.stats_text", stats_text, ["Row", "render", "table", "width"]),
        ("ops.stats_format", stats_format, ["NOTHING", "rate", "seconds"]),
    ],
)
def test_old_module__warns_and_re_exports_the_new_one_s_names(monkeypatch, old, new, names):
    monkeypatch.delitem(sys.modules, old, raising=False)

    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: import {new.__name__}"):
        shim = importlib.import_module(old)

    assert sorted(shim.__all__) == sorted(names)
    assert all(getattr(shim, name) is getattr(new, name) for name in names)
