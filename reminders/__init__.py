"""Scheduled WeCom messages for a Django CRM, sent once per occurrence.

``reminders.__version__`` is the installed release's version, read from the package's
metadata (pyproject.toml's ``version`` as built; CHANGELOG.md says what each changed).
"""

from importlib import metadata

from .moved import MOVED, install

# What a copy of the code no installer recorded reports: a version that sorts before
# every release and says it is none.
UNKNOWN_VERSION = "0+unknown"


def installed_version(distribution: str = "reminders") -> str:
    """The version pip recorded for ``distribution``, or ``UNKNOWN_VERSION`` when the
    code runs without being installed (a bare copy on ``sys.path``)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


__version__ = installed_version()

# Old module paths (``reminders.delivery``...) import as their new homes, with a warning.
install(MOVED)
