"""Modules that moved keep their old paths for the CRMs that import them: each old path
gives the very module of its new home (the same object, so its names are the same and
patching one patches the other), and warns, naming the new path, at the importing line.
A django-q2 job queued before the move names ``reminders.delivery.deliver``: it runs."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

import pytest
from django.utils.module_loading import import_string

import ops
from reminders import moved
from reminders.engine import delivery

TABLE = sorted({**moved.MOVED, **ops.MOVED}.items())


@pytest.mark.parametrize(("old", "new"), TABLE, ids=[old for old, _ in TABLE])
def test_old_path__is_the_new_module_and_warns_with_its_path(monkeypatch, old, new):
    # Python imports a module once: forgotten first, the old path is found (and warns) again.
    monkeypatch.delitem(sys.modules, old, raising=False)
    home = importlib.import_module(new)

    with pytest.warns(DeprecationWarning, match=re.escape(f"import from {new} instead")) as got:
        __import__(old)  # as an ``import`` statement does

    assert sys.modules[old] is home
    # The module keeps its own spec: its name and file are the new path's.
    assert home.__spec__.name == new
    assert home.__spec__.origin == importlib.util.find_spec(new).origin
    # stacklevel=2: the warning names the importing line, not the finder.
    assert [warning.filename for warning in got] == [__file__]


@pytest.mark.parametrize(("old", "new"), TABLE, ids=[old for old, _ in TABLE])
def test_old_path__is_not_also_a_file(old, new):
    # A file or folder left at the old path would be imported instead of the new home.
    parent, _, name = old.rpartition(".")
    folder = Path(importlib.import_module(parent).__path__[0])
    assert not (folder / f"{name}.py").exists()
    assert not (folder / name).is_dir()


def test_a_job_queued_under_the_old_path__runs_the_delivery(monkeypatch):
    monkeypatch.delitem(sys.modules, "reminders.delivery", raising=False)
    with pytest.warns(DeprecationWarning):
        func = import_string("reminders.delivery.deliver")
    assert func is delivery.deliver


def test_an_unknown_path_under_the_package__is_still_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("reminders.no_such_module")
