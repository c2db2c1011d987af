"""Cards that are not a run's: who answers a click on them.

WeCom calls one URL back for every card of an app. A run's card names its run
(``models.acting.card_id``, ``r<run id>-…``) and ``intake.clicks`` acts on it; a card
another app sent through a reminders channel (ops' alert cards) names its owner by a
prefix of its ``task_id`` that no run's card starts with, and the owner registered for
that prefix answers the click. So there is one callback, one signature and replay
check, one nonce kept with what the click did, whoever owns the card; and
``reminders`` imports no owner: an owner registers itself (``register``, from its
``AppConfig.ready``).

An owner's ``act`` runs inside the callback's transaction, after the request's nonce
is kept and before it commits. It records the click exactly once in a model of its own
(a row the database keeps unique), and says what became of it:

* ``ACTED``: the first click that counts, done;
* ``ALREADY``: done before (WeCom's retry, a double click, another member): nothing
  changed;
* ``DECLINED``: the member may not do this (no user, no permission): nothing changed
  but the record of the refusal, and the card saying so;
* ``UNKNOWN_RUN``: no card of the owner's has this ``task_id``; ``NOT_RECIPIENT``: the
  card went to another member. These two keep nothing, the nonce neither, as for a run's
  card (``intake.clicks``), so that WeCom's retry is judged again.

A card's update after the click goes the way a run's does (``engine.cards.register``),
and the callback wakes the schedulers for it once it commits (``intake.clicks``): an
owner need not.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..callback.events import TemplateCardEvent


class Outcome(enum.Enum):
    ACTED = "acted"  # the first click: recorded and acted on
    ALREADY = "already"  # the run was acted on before: nothing changed
    REPLAYED = "replayed"  # the request's nonce was seen before: nothing changed
    UNKNOWN_RUN = "unknown_run"  # no sent run of ours has this card
    NOT_RECIPIENT = "not_recipient"  # the card went to another member (its send log's)
    RECALLED = "recalled"  # the card was recalled before the click reached us
    # A card another app owns (``card_owners``): the member may not do this. The refusal
    # is recorded and the card says so; nothing else changed.
    DECLINED = "declined"


Act = Callable[["TemplateCardEvent", datetime], Outcome]

# A prefix: letters, then ``-``; never ``r`` followed by a digit (a run's card).
PREFIX = re.compile(r"[a-z][a-z0-9]*-")

_OWNERS: dict[str, Act] = {}


def register(prefix: str, act: Act) -> None:
    """Have ``act(event, now)`` answer clicks on cards whose ``task_id`` starts with
    ``prefix``; registering the same prefix again replaces its owner (a reload)."""
    if not PREFIX.fullmatch(prefix) or re.match(r"r[0-9]", prefix):
        raise ValueError(
            f"A card owner's prefix is lower-case letters and digits then '-', and never "
            f"a run card's 'r<digit>': {prefix!r}."
        )
    _OWNERS[prefix] = act


def unregister(prefix: str) -> None:
    _OWNERS.pop(prefix, None)


def owner_of(task_id: str) -> Act | None:
    """The owner of the card ``task_id``, if one registered its prefix."""
    for prefix, act in _OWNERS.items():
        if task_id.startswith(prefix):
            return act
    return None
