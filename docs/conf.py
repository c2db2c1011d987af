"""Sphinx configuration: Markdown pages (MyST). The reference pages' generated parts
are committed in the pages themselves (``bin/reference``, ``docs/_ext/reference.py``),
so the build imports none of the project: ``make docs`` needs Sphinx and MyST alone.

``make docs`` builds it with warnings as errors (``-W --keep-going -n``): a link to a
page or a heading that does not exist fails the build.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

DOCS = Path(__file__).resolve().parent
__version__ = tomllib.loads((DOCS.parent / "pyproject.toml").read_text())["project"]["version"]

project = "reminders"
author = "the reminders authors"
copyright = "the reminders authors"
release = __version__
version = __version__

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
# docs/README.md says how the pages are written and tested; it is not a page.
exclude_patterns = ["_build", "README.md"]

# Every heading down to ### gets an anchor, and a link to one that does not exist is a
# warning (an error under -W).
myst_heading_anchors = 3
myst_enable_extensions = ["deflist"]

nitpicky = True
html_theme = "alabaster"
html_title = f"reminders {release}"
html_static_path: list[str] = []
