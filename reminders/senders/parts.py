"""How a text too long for one WeCom message is cut into parts (``oversize: "split"``).

Invariants, which WeCom's duplicate check makes necessary (it judges each part on its
own, as a message of its own):

* Every part ends with the content's last line: ``kinds.render`` makes that line the
  stamp of the occurrence and the task, so no part of one occurrence (or task) is
  byte-identical to a part of another sent to the same member, and none is dropped
  while the ledger says ``sent``. Parts of one message differ by their ``(k/n)``.
* The same content always gives the same parts: a re-send is byte-identical, and WeCom
  drops the parts it already delivered.
* A part is at most ``CONTENT_LIMIT`` UTF-8 bytes, stamp included, and never cut inside
  a character.
* Each part is a request of its own, so a message may be partly sent: a sender that
  splits names the parts delivered before a failure (``SendError.delivered_parts``),
  and sends only the parts after those a message names (``Message.sent_parts``); the
  parts being the same for the same content, they fit together.

The WeCom app sender sends these parts; ``MemorySender`` judges them the same way when a
test asks it to split as WeCom does.
"""

from __future__ import annotations

CONTENT_LIMIT = 2048  # bytes of WeCom text or markdown content
MAX_PARTS = 10
PART_MARKER_BYTES = 16  # room for "(10/10) " with margin
# The longest last line repeated on every part (a stamp is about 40 bytes, 50 with a
# UTC offset): what is left for the text of each part stays over 1,700 bytes.
TAIL_LIMIT = 256


def split_content(content: str, limit: int = CONTENT_LIMIT) -> list[str]:
    """``content`` cut into numbered parts of at most ``limit`` UTF-8 bytes each.

    Every part is ``"(k/n) "``, a piece of the text, then the content's last line (its
    tail, ``_tail``): ``kinds.render`` makes that line the stamp of the occurrence and
    the task, so every part names its occurrence. That is what keeps WeCom's duplicate
    check from dropping a part: two occurrences (or two tasks) with the same long text
    to one member would otherwise send byte-identical first parts, and the second would
    be dropped while its ledger row says ``sent``. Parts of one message differ by their
    ``(k/n)``, parts of two by their stamps; the same content always gives the same
    parts, so a re-send is byte-identical and WeCom drops what it already delivered.

    Cuts fall between lines where possible and never inside a character; the pieces,
    without markers and tails, join back to the content before its tail (a piece cut
    inside a line gets a line break before the tail).
    """
    head, tail = _tail(content)
    budget = limit - PART_MARKER_BYTES - (size(tail) + 1 if tail else 0)
    chunks: list[str] = []
    current = ""
    for line in head.splitlines(keepends=True):
        while size(line) > budget:
            if current:
                chunks.append(current)
                current = ""
            piece = line.encode()[:budget].decode(errors="ignore")
            chunks.append(piece)
            line = line[len(piece) :]
        if current and size(current) + size(line) > budget:
            chunks.append(current)
            current = ""
        current += line
    if current:
        chunks.append(current)
    if tail:
        chunks = [chunk if chunk.endswith("\n") else f"{chunk}\n" for chunk in chunks]
    return [f"({index}/{len(chunks)}) {chunk}{tail}" for index, chunk in enumerate(chunks, 1)]


def _tail(content: str) -> tuple[str, str]:
    """``content`` as its text and the last line repeated on every part: the stamp
    ``kinds.render`` appends. A content of one line, or one whose last line is blank or
    longer than ``TAIL_LIMIT``, has no tail (nothing else is a stamp)."""
    lines = content.splitlines(keepends=True)
    if len(lines) < 2:
        return content, ""
    last = lines[-1]
    if not last.strip() or size(last) > TAIL_LIMIT:
        return content, ""
    return "".join(lines[:-1]), last


def size(text: str) -> int:
    """``text``'s length in UTF-8 bytes, as WeCom counts it."""
    return len(text.encode())
