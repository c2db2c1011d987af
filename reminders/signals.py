"""What the engine tells the rest of the project; ``ops`` listens here.

Invariants, for every signal below:

* It is sent after the transaction that recorded the outcome has committed (at once
  when there is none), so a receiver reads what the signal says, never a row that a
  rollback will take back.
* It reaches every receiver even when one of them raises: a receiver's error is logged
  (logger ``reminders.signals``) and never raised into the engine. An alert that cannot
  go out must not stop a send, a tick or the other receivers.

The arguments, besides ``sender`` (the model class):

============================  =======================================================
``run_sent``                  ``run`` (TaskRun, ``sent``), ``result`` (SendResult:
                              the provider's message id and reply)
``run_failed``                ``run`` (``failed``), ``error`` (SendError: ``code``,
                              ``message``): retries exhausted or an error no retry can
                              mend (an invalid recipient, a message that cannot render)
``run_unknown``               ``run`` (``unknown``): the message may or may not have
                              been delivered, and sending it again was not safe
``run_expired``               ``run`` (``expired``): its deadline passed before it
                              could be sent; it never will be
``run_stuck``                 ``run``: still ``running`` after
                              ``REMINDERS_RUN_TIMEOUT``; sent once per run
``task_error``                ``task`` (ScheduledTask), ``code``, ``message``: the task
                              cannot be planned (``status`` ``error``) or one of its
                              runs cannot be rendered
``calendar_uncovered``        ``task``, ``calendar`` (its name), ``year``, ``rule``: an
                              occurrence fell in a year its working-day calendar does
                              not cover yet, and the fallback rule decided its day
                              (``weekdays``: Monday to Friday sent; ``skip``: skipped);
                              sent for each one
``run_acted``                 ``run`` (the run whose card was clicked), ``action`` (the
                              button's key: ``done``, ``snooze_1h``, ``take`` or a
                              CRM's own), ``member`` (who clicked), ``acted_at``: sent
                              by a scheduler after the callback recorded it
                              (``engine.announce``), never inside WeCom's request; at
                              least once: the action is marked told once its receivers
                              ran, and one a scheduler died telling is told again
``message_recalled``          ``log`` (SendLog, ``recalled_at`` set), ``by`` (who
                              recalled it: a username), ``reason`` (why): every part
                              of a delivered message was taken back from its
                              recipient (``engine.recall``); sent once per message,
                              by the recall that marked it recalled
============================  =======================================================
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from django.db import transaction
from django.dispatch import Signal

logger = logging.getLogger(__name__)

run_sent = Signal()
run_failed = Signal()
run_unknown = Signal()
run_expired = Signal()
run_stuck = Signal()
task_error = Signal()
calendar_uncovered = Signal()
run_acted = Signal()
message_recalled = Signal()


def after_commit(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` as the invariants above say: once the current transaction
    commits, to every receiver, a receiver's error logged and kept from the caller."""
    transaction.on_commit(partial(_send, signal, sender, kwargs))


def send(signal: Signal, sender: type, **kwargs: Any) -> None:
    """Send ``signal`` now, to every receiver, a receiver's error logged and kept from
    the caller: for a caller outside any transaction, the outcome committed before."""
    _send(signal, sender, kwargs)


def _send(signal: Signal, sender: type, kwargs: dict[str, Any]) -> None:
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "a receiver of a reminders signal failed: %s",
                getattr(receiver, "__qualname__", repr(receiver)),
                exc_info=result,
            )
