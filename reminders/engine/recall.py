"""Taking a delivered message back from its recipient (WeCom's ``message/recall``).

The one service every caller uses: the admin's button and action, and any command or
API later. ``why_not`` says whether a ledger row (``SendLog``) can be recalled, and why
not; ``recall`` takes it back, part by part, and records who did it and why.

Invariants:

* Only a ``sent`` or ``partly_sent`` row not recalled yet, whose channel is still
  configured and can take a message back (``BaseSender.recall_window``: WeCom's app,
  24 hours; never a group robot), with a message id for every part, within the window
  of its sending is recalled: a ``sent`` row's ``sent_at``; a ``partly_sent`` row's
  reservation (``created_at``), which is no later than its first part went, so every
  part delivered is still in WeCom's window. Anything else is refused
  (``ActionRefused``, its reason in words) before the provider is called, with nothing
  changed: the provider would refuse it anyway, and a refusal said up front is one ops
  can read.
* A recall is always someone's, for a reason: an empty ``by`` or ``reason`` is a
  ``ValidationError`` naming the field, and nothing is called. The database holds the
  same rule for the finished record (``reminders_sendlog_recall_sent``).
* A message split in parts is recalled whole: every part's id
  (``reply_detail["msgids"]``, else ``provider_message_id``), in order; of a message
  partly sent, the parts delivered (``parts_sent``). Each part the
  provider takes back is added to ``recalled_ids`` in a commit of its own before the
  next is asked for, so a crash or a refusal midway keeps what was recalled, and a
  second attempt asks only for the rest (WeCom takes a message id back once).
* No transaction is held while the provider is called: the rows and SQLite's one writer
  are never kept waiting on WeCom. Each write is a short transaction that locks the row
  and merges into what it holds, so two operators' parts are both kept.
* The row is marked recalled (``recalled_at``, ``recalled_by``, ``recall_reason``) once
  every part is, by one conditional UPDATE (only where ``recalled_at`` is null): of two
  operators finishing at once, the first marks it and the other is told it was
  recalled already. ``message_recalled`` is sent by the one whose UPDATE marked it,
  once, after that commits.
* A recall ends what the message would still cause: the reminder its card's snooze
  made (``RunAction.follow_up``), not started yet, is cancelled (code ``recalled``), and
  its card's update, not made yet, is not made (``failed``, saying why: WeCom updates no
  recalled card). In the transaction that marks the row, by the one that marks it; the
  row says what was cancelled (``recall_cancelled``), and ``still_to_come`` says so
  beforehand (the admin's confirmation page). Without that, a card snoozed and then
  recalled came back an hour later. A snooze already sent is a message of its own.
  A message partly sent and recalled sends none of the rest: its run's retry finds
  the row recalled and ends ``cancelled`` (code ``recalled``, ``engine.starting``), and
  a retry that took the row to send meanwhile (``sending``) makes the recall refused
  at its end, as changed meanwhile: the row is marked only while ``partly_sent``, and
  a retry takes only a row not recalled (``engine.reservations``).
  A click at the same moment (``intake.clicks``) reads the recall under the row's lock,
  which the marking UPDATE takes: it acts first (and its snooze is cancelled here) or
  is refused after, never a snooze that outlives the recall.
* A refusal of the provider is kept in ``recall_error`` (which part, what it said) and
  raised. Progress clears it, and so does the recall's end.

Two operators at once: before each part the row is read again, and a part another has
recalled meanwhile is not asked for. A part both ask for is taken back by the first
request WeCom gets; the second is refused, and that refusal is no error once the row
records the part (read again after it). Only in the instant between WeCom's answer to
one and its record can the other's refusal be kept as an error; the first's record
then clears it. A recall whose reply was lost (``InDoubtSendError``) may have taken the
part back, which no reply of WeCom's can tell: it is kept as an error, a next attempt
is refused for that part, and ops ask the recipient.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import transaction
from django.utils import formats, timezone
from django.utils.translation import gettext, ngettext

from .. import signals
from ..exceptions import ActionRefused, SendError
from ..models import RunAction, SendLog, TaskRun
from ..senders import BaseSender, get_sender
from .actions import Refusal

__all__ = [
    "RECALLABLE",
    "RECALLED_CODE",
    "message_ids",
    "recall",
    "refusal",
    "still_to_come",
    "why_not",
]

# A reminder cancelled because the message it repeats was recalled says so by this code.
RECALLED_CODE = "recalled"
# The rows whose message went, whole or in part: the ones a recall may take back.
RECALLABLE = (SendLog.Status.SENT, SendLog.Status.PARTLY_SENT)
# recall_error keeps this much of what the provider said.
ERROR_CHARS = 2000


def message_ids(log: SendLog) -> list[str]:
    """The ids the provider gave the row's message, in order: every part's for a message
    split in parts, else its one id; of a message partly sent, the parts delivered.
    An empty string stands for a part without one; a card WeCom answered "delivered
    before" has none at all."""
    if log.status == SendLog.Status.PARTLY_SENT:
        return [str(part or "") for part in log.parts_sent or ()]
    detail = log.reply_detail if isinstance(log.reply_detail, dict) else {}
    parts = detail.get("msgids")
    if isinstance(parts, list) and parts:
        return [str(part or "") for part in parts]
    return [log.provider_message_id] if log.provider_message_id else []


def refusal(log: SendLog, now: datetime | None = None) -> Refusal | None:
    """Why ``log`` cannot be recalled at ``now`` (default: the clock's), as a code and
    words for ops; None when it can."""
    if log.status not in RECALLABLE:
        return Refusal(
            "not_sent",
            gettext("it was not delivered (%(status)s)") % {"status": log.get_status_display()},
        )
    if log.recalled_at is not None:
        return _recalled(log, log.recalled_at)
    sender = _sender(log)
    if sender is None:
        return Refusal(
            "no_channel",
            gettext("its channel %(channel)s is no longer configured") % {"channel": log.channel},
        )
    window = sender.recall_window
    if window is None:
        return Refusal(
            "cannot_recall",
            gettext("its channel %(channel)s cannot take a message back (a group robot cannot)")
            % {"channel": log.channel},
        )
    ids = message_ids(log)
    if not ids or not all(ids):
        return Refusal(
            "no_message_id",
            gettext(
                "the provider gave it no message id to take it back by (a card it "
                "delivered before has none)"
            ),
        )
    sent_at = _sent_at(log)
    if sent_at is None:
        return Refusal("too_late", gettext("when it was sent is not recorded"))
    if (now or timezone.now()) - sent_at > window:
        return Refusal(
            "too_late",
            gettext(
                "it was sent more than %(window)s ago: its channel takes a message back "
                "within %(window)s of its sending"
            )
            % {"window": _duration(window)},
        )
    return None


def _sent_at(log: SendLog) -> datetime | None:
    """When the row's message went, as far as the recall window goes: a partly sent
    row has no ``sent_at``, and its reservation is no later than its first part."""
    if log.status == SendLog.Status.PARTLY_SENT:
        return log.created_at
    return log.sent_at


def _recalled(log: SendLog, at: datetime) -> Refusal:
    return Refusal(
        "recalled",
        gettext("it was recalled already, by %(by)s at %(when)s")
        % {"by": log.recalled_by, "when": _when(at)},
    )


def why_not(log: SendLog, now: datetime | None = None) -> str | None:
    """None if ``log`` can be recalled at ``now``; else why not, in words for ops."""
    found = refusal(log, now)
    return None if found is None else str(found.message)


def recall(log: SendLog, *, by: str, reason: str, now: datetime | None = None) -> SendLog:
    """Take ``log``'s message back from its recipient, every part of it; record that
    ``by`` (a username) did, for ``reason``, at ``now`` (default: the clock's, when the
    last part is taken back). Returns the row as it is then.

    Raises ``ValidationError`` for an empty ``by`` or ``reason``, ``ActionRefused`` for
    a row ``refusal`` refuses (or one another operator recalled meanwhile), and the
    provider's ``SendError`` when it refuses a part, kept in ``recall_error``.
    """
    by, reason = (by or "").strip(), (reason or "").strip()
    _validate(by, reason)
    log.refresh_from_db()
    found = refusal(log, now)
    if found is not None:
        raise ActionRefused(found.code, str(found.message))
    sender = get_sender(log.channel)
    for msgid in message_ids(log):
        if _done(log, msgid):
            continue
        try:
            sender.recall(msgid)
        except SendError as exc:
            if _done(log, msgid):
                continue  # another operator's request took it back first
            _keep_error(log, msgid, exc)
            raise
        _keep_part(log, msgid)
    return _finish(log, by, reason, now)


def _validate(by: str, reason: str) -> None:
    errors = {}
    if not reason:
        errors["reason"] = ValidationError(
            gettext("Say why the message is recalled."), code="required"
        )
    if not by:
        errors["by"] = ValidationError(gettext("Say who recalls the message."), code="required")
    if errors:
        raise ValidationError(errors)


def _sender(log: SendLog) -> BaseSender | None:
    try:
        return get_sender(log.channel)
    except ImproperlyConfigured:  # ChannelNotConfigured, or its options no longer valid
        return None


def _done(log: SendLog, msgid: str) -> bool:
    """Whether ``msgid`` is recalled already, as the row says now (``log`` read again).
    A row another operator finished meanwhile is refused: it was recalled already."""
    log.refresh_from_db(fields=["recalled_ids", "recalled_at", "recalled_by", "recall_error"])
    if log.recalled_at is not None:
        found = _recalled(log, log.recalled_at)
        raise ActionRefused(found.code, str(found.message))
    return msgid in (log.recalled_ids or [])


def _keep_part(log: SendLog, msgid: str) -> None:
    """``msgid`` recalled: added to the row's ``recalled_ids`` (merged under its lock)
    and committed before the next part is asked for; its error is cleared."""
    with transaction.atomic():
        row = SendLog.objects.select_for_update().only("recalled_ids").get(pk=log.pk)
        ids = list(row.recalled_ids or [])
        if msgid not in ids:
            ids.append(msgid)
        SendLog.objects.filter(pk=log.pk).update(
            recalled_ids=ids, recall_error="", updated_at=timezone.now()
        )
    log.recalled_ids, log.recall_error = ids, ""


def _keep_error(log: SendLog, msgid: str, exc: SendError) -> None:
    """What the provider said to the part ``msgid``, kept unless the row meanwhile
    records that part recalled (the error is then someone else's success)."""
    ids = message_ids(log)
    text = gettext("part %(part)d of %(parts)d (%(msgid)s): %(error)s") % {
        "part": ids.index(msgid) + 1,
        "parts": len(ids),
        "msgid": msgid,
        "error": str(exc),
    }
    with transaction.atomic():
        row = SendLog.objects.select_for_update().only("recalled_ids").get(pk=log.pk)
        if msgid in (row.recalled_ids or []):
            return
        SendLog.objects.filter(pk=log.pk).update(
            recall_error=text[:ERROR_CHARS], updated_at=timezone.now()
        )
    log.recall_error = text[:ERROR_CHARS]


def _finish(log: SendLog, by: str, reason: str, now: datetime | None) -> SendLog:
    """Every part recalled: the row marked, once, and ``message_recalled`` sent after
    the commit by the one that marked it."""
    moment = now or timezone.now()
    with transaction.atomic():
        marked = SendLog.objects.filter(
            pk=log.pk, status__in=RECALLABLE, recalled_at__isnull=True
        ).update(
            recalled_at=moment,
            recalled_by=by[:150],
            recall_reason=reason,
            recall_error="",
            updated_at=timezone.now(),
        )
        if marked:
            _cancel_what_comes(log)
        log.refresh_from_db()
        if not marked:
            found = refusal(log) or Refusal("changed", gettext("it changed meanwhile"))
            raise ActionRefused(found.code, str(found.message))
        signals.after_commit(
            signals.message_recalled, SendLog, log=log, by=log.recalled_by, reason=reason
        )
    return log


@dataclass(frozen=True)
class _Aftermath:
    """What a sent message would still cause: the reminder its card's snooze made, not
    started yet, and its card's update, not made yet (``RunAction``); of a message
    partly sent, its parts not sent yet (``rest``: its run never sends them)."""

    snoozed: TaskRun | None
    card: RunAction | None
    rest: bool = False

    @classmethod
    def of(cls, log: SendLog) -> _Aftermath:
        rest = log.status == SendLog.Status.PARTLY_SENT
        action = (
            RunAction.objects.select_related("follow_up").filter(run_id=log.run_id).first()
            if log.run_id is not None
            else None
        )
        if action is None:
            return cls(None, None, rest)
        later = action.follow_up
        pending = (*TaskRun.WAITING, TaskRun.Status.QUEUED)  # as ``cancel_pending`` reads it
        snoozed = later if later is not None and later.status in pending else None
        card = action if action.card_state == RunAction.CardState.PENDING else None
        return cls(snoozed, card, rest)

    def words(self) -> list[str]:
        said = []
        if self.snoozed is not None:
            said.append(
                gettext("the reminder its snooze made, due %(when)s")
                % {"when": _when(self.snoozed.due_at)}
            )
        if self.card is not None:
            said.append(gettext("its card's update"))
        if self.rest:
            said.append(gettext("the parts not sent yet"))
        return said


def still_to_come(log: SendLog) -> list[str]:
    """What recalling ``log`` would cancel with it, in words: the reminder its card's
    snooze made, not sent yet, its card's update, not made yet, and the parts of a
    message partly sent not sent yet; [] for nothing."""
    return _Aftermath.of(log).words()


def _cancel_what_comes(log: SendLog) -> None:
    """The message recalled (in the caller's transaction): what it would still cause is
    cancelled, each saying why, and the row says what was."""
    found = _Aftermath.of(log)
    if found.snoozed is not None:
        later = TaskRun.objects.filter(pk=found.snoozed.pk)
        later.cancel_pending()
        later.filter(status=TaskRun.Status.CANCELLED).update(
            error_code=RECALLED_CODE,
            error_message="The message it repeats was recalled.",
        )
    if found.card is not None:
        RunAction.objects.filter(pk=found.card.pk, card_state=RunAction.CardState.PENDING).update(
            card_state=RunAction.CardState.FAILED,
            card_detail="The message was recalled: its card is not updated.",
        )
    said = found.words()
    if said:
        SendLog.objects.filter(pk=log.pk).update(recall_cancelled="; ".join(said))


def _when(moment: datetime) -> str:
    return formats.date_format(timezone.localtime(moment), "Y-m-d H:i")


def _duration(window: timedelta) -> str:
    """``window`` in words: whole hours, else minutes."""
    seconds = int(window.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return ngettext("%(count)d hour", "%(count)d hours", hours) % {"count": hours}
    minutes = max(1, seconds // 60)
    return ngettext("%(count)d minute", "%(count)d minutes", minutes) % {"count": minutes}
