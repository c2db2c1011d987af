"""bin/check-dist passes a wheel and an sdist that hold what pyproject and the checkout
say, and names what is wrong with one that does not. The archives are made here from
the checkout, as setuptools lays them out (``make dist`` checks the real ones)."""

from __future__ import annotations

import io
import runpy
import tarfile
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.processes import REPO

checker = runpy.run_path(str(REPO / "bin" / "check-dist"))
with (REPO / "pyproject.toml").open("rb") as f:
    PROJECT = tomllib.load(f)["project"]
# The archives' and the .dist-info's names spell the distribution's name with
# underscores (the wheel and sdist file names' rule); METADATA's Name keeps pyproject's.
STEM = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}"


def metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.4",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
        "Description-Content-Type: text/markdown",
        *(f"Requires-Dist: {req}" for req in project["dependencies"]),
    ]
    for extra, reqs in project["optional-dependencies"].items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in reqs]
    return "\n".join(lines) + "\n\n" + (REPO / "README.md").read_text(encoding="utf-8")


def package_files() -> dict[str, bytes]:
    """What setuptools puts of the packages in both archives: what the apps load, and
    the catalogs' sources."""
    return {
        name: (REPO / name).read_bytes()
        for name in checker["committed_files"]()
        if checker["runtime_file"](name) or checker["source_file"](name)
    }


Change = Callable[[dict[str, bytes]], None]


def build(
    dist: Path,
    wheel_change: Change = lambda files: None,
    sdist_change: Change = lambda files: None,
    project: dict | None = None,
) -> Path:
    wheel = package_files()
    wheel[f"{STEM}.dist-info/METADATA"] = metadata(project or PROJECT).encode()
    wheel_change(wheel)
    with zipfile.ZipFile(dist / f"{STEM}-py3-none-any.whl", "w") as archive:
        for name, data in wheel.items():
            archive.writestr(name, data)
    sdist = package_files()
    for name in ("pyproject.toml", "README.md", "CHANGELOG.md"):
        sdist[name] = (REPO / name).read_bytes()
    sdist["PKG-INFO"] = metadata(PROJECT).encode()
    sdist_change(sdist)
    with tarfile.open(dist / f"{STEM}.tar.gz", "w:gz") as archive:
        for name, data in sdist.items():
            info = tarfile.TarInfo(f"{STEM}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return dist


def check(dist: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = checker["main"](["check-dist", str(dist)])
    return status, capsys.readouterr().err.splitlines()


def test_a_wheel_and_sdist_holding_what_the_checkout_says_pass(tmp_path, capsys):
    assert checker["main"](["check-dist", str(build(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert f"{STEM}: the wheel and the sdist hold the" in out


def test_a_template_left_out_is_named(tmp_path, capsys):
    banner = "reminders/templates/reminders/calendar_banner.html"
    status, errors = check(build(tmp_path, lambda files: files.pop(banner)), capsys)
    assert status == 1
    assert f"{STEM}-py3-none-any.whl: {banner} is missing" in errors
    assert errors[-1] == f"1 problem(s) in {tmp_path}"


def test_the_standalone_project_tests_and_stray_files_are_named(tmp_path, capsys):
    def add(files: dict[str, bytes]) -> None:
        files["config/settings.py"] = b""
        files["tests/conftest.py"] = b""
        files["reminders/__pycache__/api.cpython-311.pyc"] = b""
        files["reminders/api.py"] = b"# edited after the build\n"

    status, errors = check(build(tmp_path, add), capsys)
    wheel = f"{STEM}-py3-none-any.whl"
    assert status == 1
    assert errors[:-1] == [
        f"{wheel}: config/settings.py is the config/ folder's, which never ships",
        f"{wheel}: tests/conftest.py is the tests/ folder's, which never ships",
        f"{wheel}: reminders/api.py differs from the checkout's (stale? make dist)",
        f"{wheel}: reminders/__pycache__/api.cpython-311.pyc should not be there"
        " (not a file the apps load)",
    ]


def test_the_wecom_sandbox_in_the_wheel_is_named_it_never_ships(tmp_path, capsys):
    def add(files: dict[str, bytes]) -> None:
        files["wecom_sandbox/__init__.py"] = (REPO / "wecom_sandbox" / "__init__.py").read_bytes()

    status, errors = check(build(tmp_path, add), capsys)
    wheel = f"{STEM}-py3-none-any.whl"
    assert status == 1
    assert errors[:-1] == [
        f"{wheel}: wecom_sandbox/__init__.py is the wecom_sandbox/ folder's, which never ships"
    ]


def test_metadata_that_is_not_pyproject_s_is_named(tmp_path, capsys):
    other = {**PROJECT, "version": "0.0.9", "dependencies": PROJECT["dependencies"][1:]}
    status, errors = check(build(tmp_path, project=other), capsys)
    meta = f"{STEM}-py3-none-any.whl METADATA"
    assert status == 1
    assert f"{meta}: Version is '0.0.9', pyproject says {PROJECT['version']!r}" in errors
    assert f"{meta}: Requires-Dist lacks django<6.1,>=5.2" in errors


def test_an_sdist_without_the_changelog_is_named(tmp_path, capsys):
    status, errors = check(build(tmp_path, sdist_change=lambda f: f.pop("CHANGELOG.md")), capsys)
    assert status == 1
    assert errors[:-1] == [f"{STEM}.tar.gz: CHANGELOG.md is missing"]


def test_the_distribution__has_a_name_of_its_own_while_the_imports_stay(tmp_path, capsys):
    # Not the import package's bare name, which a registry may give to someone else.
    assert PROJECT["name"] == "django-wecom-reminders"
    assert checker["PACKAGES"] == ("reminders", "ops")
    assert checker["main"](["check-dist", str(build(tmp_path))]) == 0


def test_a_development_tool_outside_the_extras_is_named(tmp_path, capsys):
    tools = ["pytest>=8", "ruff>=0.6"]
    other = {**PROJECT, "dependencies": [*PROJECT["dependencies"], *tools]}
    status, errors = check(build(tmp_path, project=other), capsys)
    meta = f"{STEM}-py3-none-any.whl METADATA"
    assert status == 1
    for tool in ("pytest", "ruff"):
        assert f"{meta}: Requires-Dist names {tool}, a development tool, outside the extras" in (
            errors
        )
