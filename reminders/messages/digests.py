"""A digest's message: one recipient's occurrences of one kind folded into one text
(``reminders.engine.digests``), one item a line with its time and its link, in the
recipient's language: "3 follow-ups due:", then "1. ACME · Renewal (09:00)" and the link.

What a digest lists is written down when the items are folded (``entry``: each one's
title, local time and link, read from its task), kept in the digest task's payload under
``DIGEST_KEY``, and rendered from there (``content``). So a digest rendered again, to be
sent again after a crash, is the same bytes, whatever became of its items' tasks since.

Invariants:

* Every item is listed, never cut, and a digest fits one text message (2,048 bytes):
  items beyond what fits go in another digest (``chunks``), so that no channel refuses
  a digest as too long (one that does not split messages, a group robot say). It is
  sized by exactly the text ``content`` writes: the heading and each item's lines in
  the digest's language, the kind's label for an item with no title, the links, and
  the widest stamp ``kinds.render`` may add (``stamps.STAMP_BYTES``). An item too long
  to share a digest goes as its own message.
* A digest is in one language, its items' (``payload["lang"]``): items of one recipient
  in two languages go in two digests.
* What the CRM wrote is one line of plain text (``wording.crm_text``); a link is the
  item's own ``payload["url"]``, refused when bad (``wording.link``), as is a language
  the project does not declare, as its own message would be: an item whose entry cannot
  be written fails alone, when it is folded.
* ``kinds.render`` stamps a digest as any message (its own task and occurrence), so two
  digests to one member never render the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.utils import translation
from django.utils.translation import ngettext

from .. import registry
from ..models.choices import DIGEST_KEY
from ..schedule import timing
from . import builders
from .content import Content
from .stamps import STAMP_BYTES
from .wording import TEXT_LIMIT, crm_text, cut, link, size

if TYPE_CHECKING:
    from ..models import ScheduledTask, TaskRun

# An item's title, at most (the CRM's text is cut, marked "…").
TITLE_BYTES = 120


def is_digest(task: ScheduledTask) -> bool:
    """Whether ``task`` is a digest the engine folded (its payload lists the items)."""
    return isinstance(task.payload, dict) and DIGEST_KEY in task.payload


def item_tasks(task: ScheduledTask) -> list[int]:
    """The tasks of the items a digest's task lists (``entry``); none for any other."""
    if not is_digest(task):
        return []
    listed = task.payload[DIGEST_KEY].get("items", [])
    return [item["task"] for item in listed if isinstance(item.get("task"), int)]


def entry(task: ScheduledTask, run: TaskRun) -> dict[str, Any]:
    """One item of a digest as it is listed: its run and task, a title from what the CRM
    wrote (customer and subject, a name, its own text; else the kind's name), its local
    time and its link. ``BadPayload`` for a payload its own message would refuse."""
    builders.language(task)  # a language its own message would refuse, refused here
    customer, subject = crm_text(task, "customer"), crm_text(task, "subject")
    title = " · ".join(part for part in (customer, subject) if part)
    title = title or crm_text(task, "name") or crm_text(task, "content")
    local = run.occurrence.astimezone(timing.zone(task.timezone))
    return {
        "run": run.pk,
        "task": task.pk,
        "title": cut(title, TITLE_BYTES) if title else "",
        "at": local.strftime("%m-%d %H:%M"),
        "url": link(task),
    }


def chunks(
    kind: str, language: str, entries: Sequence[dict[str, Any]], limit: int = TEXT_LIMIT
) -> list[list[int]]:
    """``entries`` (by index, in order) in groups, each a digest of its own whose text,
    as ``content`` writes it in ``language`` (its heading, each item's line with the
    kind's label for an untitled one, its link) with the widest stamp under it
    (``stamps.STAMP_BYTES``), takes at most ``limit`` bytes: no channel refuses one as
    too long. An entry too long to share a digest is a group of its own (it goes as its
    own message)."""
    groups: list[list[int]] = []
    lines = 0  # the bytes of the last group's item lines, each with its line break
    with translation.override(language):
        label = str(registry.label(kind))
        for index, item in enumerate(entries):
            if groups:
                count = len(groups[-1]) + 1
                more = _bytes(_lines(count, item, _title(item, label)))
                if _text_bytes(kind, count, lines + more) <= limit:
                    groups[-1].append(index)
                    lines += more
                    continue
            groups.append([index])
            lines = _bytes(_lines(1, item, _title(item, label)))
    return groups


def _text_bytes(kind: str, count: int, lines: int) -> int:
    """The bytes of a digest of ``count`` items whose lines take ``lines`` bytes: its
    heading, those lines, and the widest stamp on a line of its own."""
    return size(heading(kind, count)) + lines + 1 + STAMP_BYTES


def _bytes(lines: list[str]) -> int:
    """The bytes ``lines`` take in a text, each after a line break."""
    return sum(size(line) + 1 for line in lines)


def _title(item: dict[str, Any], label: str) -> str:
    """What an item's line shows: its title, or the kind's label for an untitled one."""
    return str(item["title"]) or label


def _lines(number: int, item: dict[str, Any], title: str) -> list[str]:
    """One item's lines: numbered, its title and time, and its link on its own line."""
    lines = [f"{number}. {title} ({item['at']})"]
    if item["url"]:
        lines.append(f"   {item['url']}")
    return lines


def content(task: ScheduledTask) -> Content:
    """The digest's text, in the language ``kinds.render`` made active: a heading
    counting the items, then each one, numbered, with its link on a line of its own."""
    items: list[dict[str, Any]] = task.payload[DIGEST_KEY]["items"]
    lines = [heading(task.kind, len(items))]
    label = str(registry.label(task.kind))
    for number, item in enumerate(items, start=1):
        lines += _lines(number, item, _title(item, label))
    return Content("text", {"content": "\n".join(lines)})


def heading(kind: str, count: int) -> str:
    """ "3 follow-ups due:", in the active language; a kind of the CRM's own is named."""
    if kind == "follow_up":
        text = ngettext("%(count)d follow-up due:", "%(count)d follow-ups due:", count)
    elif kind == "inquiry_timeout":
        text = ngettext(
            "%(count)d inquiry waiting too long:", "%(count)d inquiries waiting too long:", count
        )
    elif kind == "birthday":
        text = ngettext("%(count)d birthday:", "%(count)d birthdays:", count)
    else:
        text = ngettext("%(count)d reminder: %(kind)s", "%(count)d reminders: %(kind)s", count)
        return text % {"count": count, "kind": registry.label(kind)}
    return text % {"count": count}
