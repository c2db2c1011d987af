"""A CRM's own virtual environment: the wheel ``make dist`` built (or one built now),
``pip install``-ed into a fresh venv with the extras the server under test needs, as a
CRM installs the release it pins. Used by the throwaway CRM project and by the how-to
that builds one from its own page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import django
import pytest
from django.db import connection

from tests.support.processes import REPO

# The driver each server needs, as the package's extras name it.
EXTRAS = {"sqlite": "redis", "postgresql": "redis,postgres", "mysql": "redis,mysql"}
COMMAND_TIMEOUT = 180
# The throwaway CRMs install the package's own pins from PyPI whichever Django runs the
# suite, as a CRM would: one run is enough, the suite's on PostgreSQL under its main
# Django (CRM_PROJECT_ON_EVERY_RUN=1 runs them in the others too). Skipped elsewhere with
# this reason, to keep CI short.
IN_ONE_RUN = pytest.mark.skipif(
    not os.environ.get("CRM_PROJECT_ON_EVERY_RUN")
    and (connection.vendor != "postgresql" or django.VERSION >= (6, 0)),
    reason="the throwaway CRMs are built in the PostgreSQL run under Django 5.2",
)


def built_wheel(root: Path) -> Path:
    """The wheel ``make dist`` built, ``dist/django_wecom_reminders-<version>-*.whl``, when
    it is newer than every file it is built from; else one built now into ``root`` from a
    copy of the working tree (what git would commit), as ``make dist`` builds it."""
    with (REPO / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    # The wheel's file name spells the distribution's name with underscores.
    pattern = f"{project['name'].replace('-', '_')}-{project['version']}-*.whl"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    names = [name for name in listed.split("\0") if name and (REPO / name).is_file()]
    built = sorted((REPO / "dist").glob(pattern))
    sources = [name for name in names if name.startswith(("reminders/", "ops/", "pyproject"))]
    newest = max((REPO / name).stat().st_mtime for name in sources)
    if len(built) == 1 and built[0].stat().st_mtime >= newest:
        return built[0]
    source = root / "source"
    for name in names:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    run([sys.executable, "-m", "build", "--wheel", "--outdir", root / "dist", source], cwd=root)
    [wheel] = (root / "dist").glob(pattern)
    return wheel


def crm_venv(root: Path, vendor: str) -> Path:
    """A virtualenv under ``root`` with the wheel (``built_wheel``) installed with the
    extras ``vendor`` needs (``pip install "<wheel>[redis,postgres]"`` on PostgreSQL);
    its Python."""
    wheel = built_wheel(root)
    venv.create(root / "venv", with_pip=True)
    python = root / "venv" / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", f"{wheel}[{EXTRAS[vendor]}]"], cwd=root)
    return python


def run(args: list[Any], *, cwd: Path, env: Mapping[str, str] | None = None) -> Any:
    done = subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done
