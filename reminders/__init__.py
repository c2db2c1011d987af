"""Scheduled WeCom messages for a Django CRM, sent once per occurrence.

``reminders.__version__`` is the installed release's version, read from the package's
metadata (pyproject.toml's ``version`` as built; CHANGELOG.md says what each changed).
The distribution is ``DISTRIBUTION`` (pyproject's name, what ``pip install`` takes); the
packages it installs import as ``reminders`` and ``ops``. An install made under another
distribution name (an older checkout's) still reports its version: the one of whichever
distribution provides this package.
"""

from importlib import metadata

from .moved import MOVED, install

# What a copy of the code no installer recorded reports: a version that sorts before
# every release and says it is none.
UNKNOWN_VERSION = "0+unknown"
# pyproject.toml's name: what pip installs, distinct from the import packages' names.
DISTRIBUTION = "django-wecom-reminders"


def installed_version(distribution: str = DISTRIBUTION) -> str:
    """The version pip recorded for ``distribution``, or ``UNKNOWN_VERSION`` when the
    code runs without being installed (a bare copy on ``sys.path``)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return UNKNOWN_VERSION


def providing_distribution() -> str:
    """``DISTRIBUTION`` when installed under that name, else the distribution that
    provides this package (an install under an older name); ``DISTRIBUTION`` when none
    does. Only the fallback scans the installed distributions."""
    if installed_version(DISTRIBUTION) != UNKNOWN_VERSION:
        return DISTRIBUTION
    return next(iter(metadata.packages_distributions().get(__name__, [])), DISTRIBUTION)


__version__ = installed_version(providing_distribution())

# Old module paths (``reminders.delivery``...) import as their new homes, with a warning.
install(MOVED)
