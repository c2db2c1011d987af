"""Sphinx configuration: Markdown pages (MyST), and the reference pages that are
generated from the code (docs/_ext/reminders_docs.py).

``make docs`` builds it with warnings as errors (``-W --keep-going -n``): a link to a
page or a heading that does not exist fails the build.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

# The generated pages read the commands' parsers and the models' choices: the
# standalone project's settings, which need no database to be set up.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from reminders import __version__  # noqa: E402

project = "reminders"
author = "the reminders authors"
copyright = "the reminders authors"
release = __version__
version = __version__

extensions = ["myst_parser", "reminders_docs"]
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
