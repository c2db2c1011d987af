"""The admin's old module paths, kept for CRMs that import them: each gives the very
objects of its new home in the ``reminders.admin`` package, and warns, naming the new
path, at the line that imports it."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

MOVED = [
    ("reminders.admin_run_now", "reminders.admin.run_now", "RunNowMixin"),
    ("reminders.admin_confirm", "reminders.admin.confirm", "Plan"),
    ("reminders.admin_display", "reminders.admin.display", "upcoming"),
    ("reminders.admin_filters", "reminders.admin.filters", "DueDayFilter"),
    ("reminders.admin_calendar", "reminders.admin.calendar", "CalendarDayAdmin"),
]


@pytest.mark.parametrize(("old", "new", "name"), MOVED, ids=[old for old, _, _ in MOVED])
def test_old_path__warns_with_the_new_one_and_gives_the_same_objects(old, new, name):
    # Python imports a module once: forgotten first, the shim runs (and warns) again.
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=re.escape(f"import from {new} instead")) as got:
        __import__(old)  # as an ``import`` statement does
    shim, moved = sys.modules[old], importlib.import_module(new)

    assert getattr(shim, name) is getattr(moved, name)
    assert all(getattr(shim, each) is getattr(moved, each) for each in shim.__all__)
    # stacklevel=2: the warning names the importing line, not the shim.
    assert [warning.filename for warning in got] == [__file__]
