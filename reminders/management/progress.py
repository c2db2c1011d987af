"""How far a long command has got: a bar redrawn in place on a terminal, a few plain
lines anywhere else (a log, a pipe, a test's buffer), where carriage returns would
only be noise. Django and the standard library only.
"""

from __future__ import annotations

from django.core.management.base import OutputWrapper
from django.utils.translation import gettext as _

BAR_WIDTH = 30
# Plain lines: one at each tenth of the way, and at the end.
PLAIN_STEPS = 10


class ProgressBar:
    """Call with ``(done, total)`` as the work advances; ``close()`` when it ends.
    Drawn on a command's ``stdout`` or ``stderr``."""

    def __init__(self, stream: OutputWrapper, label: str) -> None:
        self.stream = stream
        self.label = label
        self.tty = stream.isatty()
        self._drawn = False
        self._step = -1

    def __call__(self, done: int, total: int) -> None:
        if total <= 0:
            return
        if self.tty:
            filled = BAR_WIDTH * done // total
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self.stream.write(f"\r{self.label} [{bar}] {done:,}/{total:,}", ending="")
            self._drawn = True
        else:
            step = PLAIN_STEPS * done // total
            if step == self._step:
                return
            self._step = step
            self.stream.write(
                _("%(label)s: %(done)s of %(total)s")
                % {"label": self.label, "done": f"{done:,}", "total": f"{total:,}"}
            )
        self.stream.flush()

    def close(self) -> None:
        """End the bar's line, so that what is written next starts on its own."""
        if self._drawn:
            self.stream.write("")
            self.stream.flush()
            self._drawn = False
