"""The suite's clock: the real one, or Python's clock moved for the whole session.

``TEST_CLOCK=2027-01-09T15:30:00+08:00`` moves Python's clock (time-machine) to that
moment when the session starts, and lets it tick from there, so every test of the
session runs on a day, an hour and a year of our choosing. A test must either freeze
its own clock or pass at any moment: on a Saturday afternoon (after every ``send_by``,
on a rest day, in a year no holiday package covers), or in the last seconds of a year
(the day and the year end during the run). ``make test`` runs part of the suite under a
moved clock, so a test that reads "today" fails in CI, whatever the hour CI runs at.

Processes keep the real clock: time-machine moves this process alone. A moved session
therefore refuses the tests marked ``processes`` or ``browser`` (say ``-m "not processes
and not browser"``), and a test that starts a Python process without its ``processes``
mark fails, naming the mark, instead of running with two clocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

MOMENT = os.environ.get("TEST_CLOCK", "").strip()
REAL_CLOCK_MARKS = ("processes", "browser")


def moment() -> datetime | None:
    """The moment the session's clock was moved to, or None on the real clock."""
    if not MOMENT:
        return None
    try:
        when = datetime.fromisoformat(MOMENT)
    except ValueError as error:
        raise pytest.UsageError(f"TEST_CLOCK: {MOMENT!r} is not an ISO date and time") from error
    if when.tzinfo is None:
        raise pytest.UsageError(f"TEST_CLOCK: {MOMENT!r} needs an offset (+08:00)")
    return when


_traveller: Any = None


def pytest_configure(config: pytest.Config) -> None:
    global _traveller
    when = moment()
    if when is None:
        return
    import time_machine

    _traveller = time_machine.travel(when, tick=True)
    _traveller.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    global _traveller
    if _traveller is not None:
        _traveller.stop()
        _traveller = None


def pytest_report_header(config: pytest.Config) -> str:
    when = moment()
    if when is None:
        return "clock: the real one"
    return f"clock: Python's moved to {when.isoformat()} and ticking (TEST_CLOCK)"


@pytest.hookimpl(trylast=True)  # after ``-m`` has deselected what it deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if moment() is None:
        return
    real = [item.nodeid for item in items if _needs_real_clock(item)]
    if real:
        raise pytest.UsageError(
            f"TEST_CLOCK moves this process's clock only: {len(real)} selected tests start "
            f"processes or a browser, which keep the real one (first: {real[0]}). "
            'Deselect them: -m "not processes and not browser".'
        )


def _needs_real_clock(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(mark) for mark in REAL_CLOCK_MARKS)


def _is_python(args: Any) -> bool:
    argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args or [])
    if not argv:
        return False
    first = os.fsdecode(argv[0]) if not isinstance(argv[0], str) else argv[0]
    words = [os.path.basename(first.split()[0])] if first.split() else []
    return first == sys.executable or any(word.startswith("python") for word in words)


@pytest.fixture(autouse=True)
def _processes_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that starts a Python process carries the ``processes`` mark: its processes
    read the real clock, so it cannot run in a session whose clock is moved."""
    if _needs_real_clock(request.node):
        yield
        return
    real_init = subprocess.Popen.__init__
    nodeid = request.node.nodeid

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if _is_python(args):
            raise AssertionError(
                f"{nodeid} starts a Python process ({args!r}) without the `processes` "
                "mark: mark it, since its process keeps the real clock (tests/support/clock.py)"
            )
        real_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = init  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real_init  # type: ignore[method-assign]
