"""Priorities, why an occurrence was skipped, and how a make-up run is marked and keyed:
the vocabulary the models, the planner and delivery share.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import NamedTuple

from django.db import models
from django.utils.translation import gettext_lazy as _


def longest(choices: type[models.TextChoices]) -> int:
    return max(len(value) for value in choices.values)


class Priority(models.TextChoices):
    HIGH = "high", _("High")
    NORMAL = "normal", _("Normal")
    LOW = "low", _("Low")

    @property
    def rank(self) -> int:
        """Claim order: lower goes first."""
        return [Priority.HIGH, Priority.NORMAL, Priority.LOW].index(self)

    @classmethod
    def from_rank(cls, rank: int) -> Priority:
        """The priority of a run's ``priority`` rank; an unknown rank is bulk work."""
        ranked = [cls.HIGH, cls.NORMAL, cls.LOW]
        return ranked[rank] if 0 <= rank < len(ranked) else cls.LOW


class SkipReason(NamedTuple):
    """Why an occurrence was recorded as a ``skipped`` run instead of being run."""

    code: str
    message: str


MISSED = SkipReason("missed", "Occurrence passed while no scheduler was running.")


PASSED_WHILE_PAUSED = SkipReason("paused", "Occurrence passed while the task was paused.")


PASSED_IN_ERROR = SkipReason("task_error", "Occurrence passed while the task could not be planned.")


# The error code of a run that reached its deadline unsent.
EXPIRED_CODE = "deadline"

# The error code of a run skipped because its recipient opted out of its kind.
OPTED_OUT_CODE = "opted_out"

# The error code of a run waiting for the end of its quiet hours (``engine.holds``).
QUIET_CODE = "quiet_hours"

# The error codes of a run waiting for its digest's window to end, and for its kind's
# hourly throttle to allow another message (``engine.digests``).
DIGEST_CODE = "digest"
THROTTLED_CODE = "throttled"

# The payload key that makes a task a digest of its kind's occurrences
# (``messages.digests``): the engine's own, refused in a CRM's payload.
DIGEST_KEY = "reminders_digest"


# Why a run in doubt that was to be cancelled ended ``unknown`` (``cancel_pending``) while
# its task goes on (a schedule changed, a snooze's reminder no longer wanted): a retry
# of it is allowed (``engine.actions.retry_refusal``).
CANCELLED_IN_DOUBT = SkipReason(
    "cancelled_in_doubt",
    "Cancelled while waiting to send again: an earlier attempt may have delivered it. "
    "Retry it if it did not arrive, or mark it handled.",
)


# The same, its task cancelled: a cancelled task's run is never retried
# (``engine.actions.retry_refusal``), so it says only what ops can do.
CANCELLED_WITH_TASK_IN_DOUBT = SkipReason(
    CANCELLED_IN_DOUBT.code,
    "Its task was cancelled while it waited to send again what an earlier attempt may "
    "have delivered, and it is not sent again: check with the recipient, or the "
    "provider's statistics, whether it arrived, then mark it handled.",
)


# Why a run waiting to send the rest of a text sent in parts (its own key
# ``partly_sent``) ended ``unknown`` rather than ``cancelled`` when cancelled
# (``RunQuerySet.cancel_pending``): parts reached the recipient, and ``{parts}`` names
# them. Its task goes on: a retry sends the rest.
CANCELLED_PARTLY_SENT = SkipReason(
    "cancelled_partly_sent",
    "Cancelled while waiting to send the rest of a message sent in parts; the parts "
    "delivered: {parts}. Retry it to send the rest, or mark it handled.",
)


# The same, its task cancelled (a retry is refused): the rest is never sent.
CANCELLED_WITH_TASK_PARTLY_SENT = SkipReason(
    CANCELLED_PARTLY_SENT.code,
    "Its task was cancelled while it waited to send the rest of a message sent in parts, "
    "and the rest is not sent; the parts delivered: {parts}. Tell the recipient if need "
    "be, then mark it handled.",
)


# Why a run whose task was cancelled while its message was on its way (a worker that
# died sending it, an answer lost) ended ``unknown`` rather than ``cancelled``
# (``engine.starting``, ``engine.retries``): the same code, said of a send.
CANCELLED_MID_SEND = SkipReason(
    CANCELLED_IN_DOUBT.code,
    "Its task was cancelled while it was being sent, and the provider may have it: "
    "mark it handled once you know whether it arrived.",
)


# Skipped runs whose occurrence passed unsent: the ``compensate`` rule makes them up.
MISSED_CODES = (MISSED.code, PASSED_WHILE_PAUSED.code, PASSED_IN_ERROR.code)


# Runs that ended for good without sending (``TaskRun`` is defined below): the
# ``compensate`` rule makes them up too.
LOST_STATUSES = ("failed", "expired")


# A make-up run's occurrence is its missed occurrence plus this: one run per task and
# occurrence holds for both, while its stamp (to the second) and run date are the
# missed occurrence's. Its ledger key is the missed occurrence's plus the suffix.
MAKEUP_OFFSET = timedelta(microseconds=1)


MAKEUP_SUFFIX = ":makeup"


# What a skipped run says of its make-up: which occurrence's run it goes with, or that it
# was cancelled before it went (the day is then owed again: ``lost_occurrences``).
MADE_UP_WITH = "It is made up with the occurrence of {when}."


MAKEUP_CANCELLED = (
    "Its make-up was cancelled before it went: the next occurrence the task plans makes it up."
)


_MAKEUP_SENTENCE = re.compile(
    r" (?:It is made up with the occurrence of|Its make-up was cancelled)[^.]*\."
)


def _saying(message: str, sentence: str) -> str:
    """``message`` with what it said of its make-up replaced by ``sentence``."""
    return f"{_MAKEUP_SENTENCE.sub('', message)} {sentence}"


# The ledger key of a run made on request (``ScheduledTask.run_now``): one per task and
# minute.
RUN_NOW_KEY = "{task}:now:{minute:%Y-%m-%dT%H:%MZ}"


class RunStatus(models.TextChoices):
    """A run's status (``TaskRun.Status``), and its groups below."""

    SCHEDULED = "scheduled", _("Scheduled")
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    RETRYING = "retrying", _("Waiting to retry")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")
    SKIPPED = "skipped", _("Skipped")
    CANCELLED = "cancelled", _("Cancelled")
    UNKNOWN = "unknown", _("Outcome unknown")
    EXPIRED = "expired", _("Expired")
    # Folded into a digest (``TaskRun.digest``), whose run decides how it ends.
    FOLDED = "folded", _("In a digest")


WAITING = (RunStatus.SCHEDULED, RunStatus.RETRYING)
LEASED = (RunStatus.QUEUED, RunStatus.RUNNING)
FINISHED = (
    RunStatus.SENT,
    RunStatus.FAILED,
    RunStatus.SKIPPED,
    RunStatus.CANCELLED,
    RunStatus.UNKNOWN,
    RunStatus.EXPIRED,
)
UNFINISHED = (*WAITING, *LEASED, RunStatus.FOLDED)
# Ended without a delivery: what ops look after (``mark_handled``) or retry.
UNSENT_ENDS = (RunStatus.FAILED, RunStatus.UNKNOWN, RunStatus.EXPIRED)
RETRYABLE = (*WAITING, *UNSENT_ENDS)
