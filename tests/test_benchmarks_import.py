"""Every benchmark imports: they share helpers (``benchmarks.throughput``), and one
renamed there must not leave ``make bench`` broken until someone runs it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted(
    path.stem
    for path in (Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py")
    if path.stem != "__init__"
)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_a_benchmark_imports(name):
    module = importlib.import_module(f"benchmarks.{name}")
    assert module.__doc__, f"benchmarks/{name}.py says what it measures"
