"""The release a CRM pins: ``reminders.__version__`` is pyproject's version, and
CHANGELOG.md has a released section for it."""

import re
import tomllib
from pathlib import Path

import reminders

REPO = Path(__file__).resolve().parents[2]


def pyproject_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def test_the_installed_version_is_pyproject_s():
    assert reminders.__version__ == pyproject_version()


def test_the_version__is_read_under_the_distribution_s_name():
    with (REPO / "pyproject.toml").open("rb") as f:
        assert tomllib.load(f)["project"]["name"] == reminders.DISTRIBUTION


def test_code_no_installer_recorded_says_its_version_is_unknown():
    assert reminders.installed_version(reminders.providing_distribution()) == pyproject_version()
    assert reminders.installed_version("no-such-distribution-here") == "0+unknown"


def test_the_changelog_names_the_version_as_released():
    text = (REPO / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d[^\]]*)\] - (\d{4}-\d{2}-\d{2})$", text, re.MULTILINE)
    assert pyproject_version() in [version for version, _ in released], released
    # Work not yet released is kept above the releases, under its own heading.
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert headings[0] == "Unreleased", headings
    assert headings[1] == pyproject_version(), "the newest release comes first"
