"""The lines ``kinds.render`` adds under every message: a make-up run's mark, then the
stamp of the occurrence and the task.

Why they exist is ``reminders.kinds``'s invariant: a provider's duplicate check compares
bodies, so two occurrences must never render byte-identical bodies, while a run
rendered again must render the same bytes. Both lines are functions of the task and the
run alone (the make-up line also of the language ``kinds.render`` makes active, the
task's), never of the clock. ``tail`` is what ``kinds.render`` appends, in order; a
builder that fits its text to a provider's limit reserves room for exactly that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils.translation import gettext

from ..schedule import timing
from .content import Content

if TYPE_CHECKING:
    from ..models import ScheduledTask, TaskRun

# Where the stamp goes in each message type that has room for it (a template card's
# ``sub_title_text``: ``messages.cards`` never leaves it empty).
STAMPED_FIELDS: dict[str, str] = {
    "text": "content",
    "markdown": "content",
    "textcard": "description",
    "template_card": "sub_title_text",
}

# The widest stamp (``stamp``), in UTF-8 bytes: seconds, a UTC offset (to the second)
# and an id of 20 digits. A text sized before its task has an id (a digest, planned
# before it is stored) keeps this much room for the stamp.
STAMP_BYTES = len("— 0000-00-00 00:00:00 UTC+000000 · #".encode()) + 20


def stamp(task: ScheduledTask, run: TaskRun) -> str:
    """The occurrence's local date and time in the task's zone and the task's id:
    ``"— 2026-12-03 09:00 · #42"``, in every language (digits and signs only).

    Seconds appear when the occurrence has them: ledger keys tell occurrences apart to
    the second, so two runs of one task that both send differ here too. A wall-clock time
    that a zone shows twice (the hour the clocks go back) gets its UTC offset.
    """
    local = run.occurrence.astimezone(timing.zone(task.timezone))
    when = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        when += local.strftime(" UTC%z")
    # An unsaved task (a message checked before the task is stored) has no id yet.
    task_id = task.pk if task.pk is not None else "?"
    return f"— {when} · #{task_id}"


def makeup_line(task: ScheduledTask, run: TaskRun) -> str:
    """What marks a make-up run's message, the line before the stamp: the occurrence it
    makes up, ``"Make-up for 2026-12-02, missed."`` (with the time for a task that may
    fire more than once a day), in the active language. A function of the run alone, so
    a re-send is the same bytes."""
    local = run.occurrence.astimezone(timing.zone(task.timezone))
    when = local.strftime("%Y-%m-%d" if task.keyed_by_day else "%Y-%m-%d %H:%M")
    return gettext("Make-up for %(when)s, missed.") % {"when": when}


def tail(task: ScheduledTask, run: TaskRun) -> list[str]:
    """The lines ``kinds.render`` appends to the run's message, in order."""
    lines = [makeup_line(task, run)] if run.is_compensation else []
    return [*lines, stamp(task, run)]


def stamped(content: Content, line: str) -> Content:
    """``content`` with ``line`` appended as its last line, where its type has room. An
    empty text stays empty: the stamp must not turn it into a message the sender's
    check for empty content would let through."""
    name = STAMPED_FIELDS.get(content.msgtype)
    text = content.body.get(name, "") if name else ""
    if not name or not isinstance(text, str) or not text.strip():
        return content
    return Content(content.msgtype, {**content.body, name: f"{text}\n{line}"})
