"""What people did with the cards they got, and the callback's replay guard.

* ``RunAction``: a member clicked a button of a run's card (``done``, ``snooze_1h``,
  ``take``, or a CRM's own key). One per run, in the database: the first click acts and
  every later one, WeCom's retries and double clicks alike, changes nothing. It keeps
  who acted, how and when, the card's response code (to update the card, once, within
  72 hours), the run a snooze made, and when the CRM was told (``run_acted``, sent by a
  scheduler once the action has committed, never inside WeCom's request, and marked
  told only once its receivers ran: at least once).
  The card is then updated (``engine.cards``), where WeCom gave a response code and the
  action is a built-in one: its buttons become one that cannot be clicked, "Done by
  alice". ``card_state`` follows that: ``pending`` until a scheduler updated it
  (``updated``), WeCom refused (``failed``), or 72 hours passed (``expired``: WeCom
  takes a response code within 72 hours); blank for an action that updates no card.
  A built-in click on an alert of an inquiry someone had taken on already ("I'll take
  it" holds the whole inquiry, ``intake.clicks``) is kept too, for its card and for ops,
  with ``held_by`` saying who had it: it did nothing, and its card reads "Taken by bob".
  The CRM is not told of it: it is recorded told (``announced_at``), there being nothing
  to tell. A recall of the run's message ends its card's pending update (``failed``,
  saying so) and cancels the run its snooze made (``engine.recall``).
* ``CallbackNonce``: a nonce of a signed callback request, a click's or a URL
  verification's, kept while its timestamp is inside the accepted window, unique: the
  same request replayed is refused (``spend``).
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from django.db import IntegrityError, models, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

if TYPE_CHECKING:
    from .runs import TaskRun

# What the built-in buttons' keys are (``messages.cards`` names them on the cards).
DONE, SNOOZE, TAKE = "done", "snooze_1h", "take"
# What ops read for each, in the active language; a CRM's own key reads as itself.
SAID = {DONE: _("done"), SNOOZE: _("remind me in 1 hour"), TAKE: _("taken on")}
_CARD_ID = re.compile(r"r([1-9][0-9]{0,18})-[0-9a-f]{10}")


def card_id(run: TaskRun) -> str:
    """The ``task_id`` of ``run``'s card, as WeCom allows one (at most 128 bytes of
    ``0-9a-zA-Z_-@``, unique within the app): ``r<run id>-<digest>``, the digest the
    first 10 hex characters of the SHA-1 of the run's ledger key and creation time.

    A re-send of the run is byte-identical (both are stored); two runs never share one;
    a click names its run (``run_pk``). The creation time is there because WeCom takes
    a task_id once per app, for good, and answers a second send of it "taken" (42014),
    which delivery reads as "delivered before": a database restored from a backup, or
    reset under the same app, hands out run ids and ledger keys again, and without it a
    new run could carry an old card's id and be recorded delivered unsent. A run not
    saved yet (a message checked or previewed, never sent) has id 0, which ``run_pk``
    reads as no run."""
    created = run.created_at.isoformat() if run.created_at else ""
    name = f"{run.ledger_key}|{created}".encode()
    digest = hashlib.sha1(name).hexdigest()[:10]  # noqa: S324 - a name, not a secret
    return f"r{run.pk or 0}-{digest}"


def run_pk(task_id: str) -> int | None:
    """The run a card's ``task_id`` names (``card_id``), or None for any other text, a
    run never saved among them."""
    match = _CARD_ID.fullmatch(task_id) if isinstance(task_id, str) else None
    return int(match.group(1)) if match else None


class CardClick(models.Model):
    """A click on a card, as far as updating that card goes: WeCom's response code (one
    update, within 72 hours of the click: ``engine.cards``), and where that update
    stands. ``RunAction`` is one; an app that owns cards of its own
    (``intake.card_owners``) keeps its clicks in a model of this shape, and
    ``engine.cards.register`` has them updated as a run's are."""

    class CardState(models.TextChoices):
        NONE = "", pgettext_lazy("card state", "not updated")
        PENDING = "pending", pgettext_lazy("card state", "to update")
        UPDATED = "updated", pgettext_lazy("card state", "updated")
        FAILED = "failed", pgettext_lazy("card state", "update failed")
        EXPIRED = "expired", pgettext_lazy("card state", "too late to update")

    received_at = models.DateTimeField(_("received"), auto_now_add=True)
    # WeCom's, whole: it publishes no length, and a code cut short updates no card.
    response_code = models.TextField(_("response code"), blank=True)
    # db_default: the release before these columns inserts rows without them.
    card_state = models.CharField(
        _("card"), max_length=7, choices=CardState.choices, default="", db_default="", blank=True
    )
    # What the card reads now, or why it could not be updated.
    card_detail = models.TextField(_("card update"), blank=True, default="", db_default="")
    # When a scheduler last took the update on: another takes it over a while later.
    card_attempted_at = models.DateTimeField(_("card update tried"), null=True, blank=True)

    class Meta:
        abstract = True


class RunAction(CardClick):
    run = models.OneToOneField(
        "TaskRun", on_delete=models.CASCADE, related_name="action", verbose_name=_("run")
    )
    # A button's key, whole: WeCom takes up to 1,024 bytes (``callback.events.KEY_BYTES``).
    action = models.CharField(_("action"), max_length=1024)
    member = models.CharField(_("acted by"), max_length=64)
    acted_at = models.DateTimeField(_("acted at"))
    follow_up = models.ForeignKey(
        "TaskRun",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("reminder it made"),
    )
    announced_at = models.DateTimeField(_("CRM told"), null=True, blank=True)
    # A click on an inquiry someone else had taken on already: who had it. The click did
    # nothing (there is nothing to tell the CRM either); its card says who has it.
    held_by = models.CharField(
        _("taken on already by"), max_length=64, blank=True, default="", db_default=""
    )
    # When a scheduler took on telling the CRM: another tells it again a while later,
    # unless ``announced_at`` says it was told (``engine.announce``).
    announcing_at = models.DateTimeField(_("CRM being told"), null=True, blank=True)

    class Meta:
        verbose_name = _("action on a card")
        verbose_name_plural = _("actions on cards")
        indexes = [
            # The schedulers' scan for actions the CRM has not been told of yet.
            models.Index(
                fields=["received_at"],
                name="reminders_action_untold_idx",
                condition=Q(announced_at__isnull=True),
            ),
            # The schedulers' scan for cards to update.
            models.Index(
                fields=["card_attempted_at"],
                name="reminders_action_card_idx",
                condition=Q(card_state="pending"),
            ),
        ]
        constraints = [
            # A card is updated with the response code WeCom gave: none, no update.
            models.CheckConstraint(
                condition=Q(card_state="") | ~Q(response_code=""),
                name="reminders_action_card_needs_code",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.member} on run {self.run_id}"

    @property
    def said(self) -> str:
        """The action as ops read it: a built-in button's words, or a CRM's key."""
        return str(SAID.get(self.action, self.action))


class CallbackNonceQuerySet(models.QuerySet["CallbackNonce"]):
    def spend(self, nonce: str, timestamp: int) -> bool:
        """Keep ``nonce``: True the first time, False when it was kept before (the
        request is a replay). In a savepoint of its own: a replay leaves the caller's
        transaction as it was."""
        try:
            with transaction.atomic():
                self.create(nonce=nonce, timestamp=timestamp)
        except IntegrityError:
            return False
        return True


class CallbackNonce(models.Model):
    nonce = models.CharField(_("nonce"), max_length=64, unique=True)
    timestamp = models.BigIntegerField(_("timestamp"))
    received_at = models.DateTimeField(_("received"), auto_now_add=True, db_index=True)

    objects = CallbackNonceQuerySet.as_manager()

    class Meta:
        verbose_name = _("callback nonce")
        verbose_name_plural = _("callback nonces")

    def __str__(self) -> str:
        return self.nonce
