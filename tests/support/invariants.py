"""What must hold after every step of the model-based test, whatever came before: the
product's promises, checked against what WeCom (``FaithfulSender``) received and what
the database says.

``World`` is what the test did and when (cancels, pauses, resumes, recalls), which the
database alone cannot say; ``World.problems()`` checks every invariant and returns what
breaks, each as ``(rule, words)``; ``World.breaches()`` those that fail the test. The
rules:

* ``twice``: no ledger key, run, or occurrence of a task delivered twice (a digest
  delivers the occurrences folded into it);
* ``opted_out``: nothing of a kind that is not mandatory to a member opted out of it;
* ``stopped``: nothing of a task cancelled or paused before its run started;
* ``wecom_limits``: no delivered message over WeCom's content limits, and none dropped
  for going over WeCom's 30 a minute (or 1,000 an hour) to one member;
* ``digest_size``: the same limits, broken by a digest;
* ``throttle``: no member sent more of a throttled kind in an hour than it allows
  (``throttle_chunks``: a digest cut in chunks that goes over it;
  ``throttle_on_request``: a snooze that does);
* ``ends``: every run ends (sent, failed, skipped, cancelled, unknown, expired), those
  unsent with a reason, within ``BOUND`` of when it was due or made, or its task resumed
  (quiet hours hold a message 24 hours at most); ``cancel_reason``: a cancelled one too;
* ``ledger``: every delivered message has its ledger row, with its bytes, not
  ``failed``; every ``sent`` row was delivered (or dropped by WeCom's duplicate check
  as a body delivered before);
* ``snooze_after_recall``: a message recalled does not come back through its snooze.

``KNOWN_DEFECTS`` lists the rules the engine breaks today, each with the defect: their
problems are not failures until the fix lands and the rule leaves the list
(``MODEL_CHECK_KNOWN_DEFECTS=1`` checks them all the same, ``=digest_size,...`` those).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from reminders import registry
from reminders.messages.digests import is_digest
from reminders.models import Preference, RunAction, ScheduledTask, SendLog, TaskRun
from reminders.senders.base import Message
from tests.support.faithful import FaithfulSender, describe, limit_problem

KNOWN_DEFECTS: dict[str, str] = {
    "cancel_reason": (
        "a cancelled run says nothing of why (no error code, no message): a cancel by ops, "
        "a schedule changed by the CRM and an escalation made moot by a click all end "
        "alike (RunQuerySet.cancel_pending)"
    ),
    "throttle_on_request": (
        "a run made on request (a snooze) goes whatever its kind's throttle_per_hour: "
        "the hour's messages of the kind go over it"
    ),
}
# MODEL_CHECK_KNOWN_DEFECTS: "1" checks them all, or names some, comma-separated.
_CHECKED = os.environ.get("MODEL_CHECK_KNOWN_DEFECTS", "").strip()
CHECKED_DEFECTS = set(KNOWN_DEFECTS) if _CHECKED == "1" else set(_CHECKED.split(",")) - {""}
IGNORED = set(KNOWN_DEFECTS) - CHECKED_DEFECTS

# Quiet hours (24 hours at most), a throttle's hour, a digest's window and stagger,
# every retry and a lease or two: no run waits longer than this for its end.
BOUND = timedelta(hours=28)
STOPPED = (ScheduledTask.Status.CANCELLED, ScheduledTask.Status.PAUSED)

Problem = tuple[str, str]


@dataclass
class Delivered:
    """What one delivered ledger key was: its kind, whether a digest, and the runs it
    delivered (pk, task pk, occurrence)."""

    kind: str
    digest: bool
    manual: bool  # a run made on request (a snooze, run now), not by the schedule
    runs: list[tuple[int, int, datetime]]


@dataclass
class World:
    """What the test did that the rows do not keep; checked deliveries so far."""

    # task pk -> the runs of it that had started when it was paused or cancelled
    started_when_stopped: dict[int, set[int]] = field(default_factory=dict)
    resumed_at: dict[int, datetime] = field(default_factory=dict)
    # runs whose message was recalled: a snooze of one must not deliver it again
    recalled_runs: set[int] = field(default_factory=set)
    checked: int = 0
    delivered: dict[str, Delivered] = field(default_factory=dict)

    def stopped(self, task: ScheduledTask) -> None:
        started = task.runs.exclude(status=TaskRun.Status.SCHEDULED, attempts=0)
        self.started_when_stopped[task.pk] = set(started.values_list("pk", flat=True))

    def resumed(self, task: ScheduledTask) -> None:
        self.started_when_stopped.pop(task.pk, None)
        self.resumed_at[task.pk] = timezone.now()

    def breaches(self) -> list[Problem]:
        """``problems`` less those of the known defects not checked."""
        return [(rule, words) for rule, words in self.problems() if rule not in IGNORED]

    def problems(self) -> list[Problem]:
        """Every invariant broken now, known defects included."""
        new = FaithfulSender.deliveries[self.checked :]
        self.checked = len(FaithfulSender.deliveries)
        return [
            *(problem for _, message in new for problem in self._delivery(message)),
            *self._twice(),
            *self._dropped(),
            *self._throttles(),
            *self._ends(),
            *self._ledger(),
        ]

    # -- deliveries --------------------------------------------------------------------

    def _twice(self) -> Iterator[Problem]:
        keys = Counter(message.idempotency_key for _, message in FaithfulSender.deliveries)
        yield from (("twice", f"key {key} delivered {n} times") for key, n in keys.items() if n > 1)
        runs = [run for delivered in self.delivered.values() for run in delivered.runs]
        by_run = Counter(pk for pk, _, _ in runs)
        yield from (("twice", f"run {pk} delivered {n} times") for pk, n in by_run.items() if n > 1)
        by_occurrence = Counter((task, occurrence) for _, task, occurrence in runs)
        for (task, occurrence), n in by_occurrence.items():
            if n > 1:
                yield ("twice", f"task {task}'s occurrence {occurrence} delivered {n} times")

    def _delivery(self, message: Message) -> Iterator[Problem]:
        log = (
            SendLog.objects.filter(key=message.idempotency_key)
            .select_related("task", "run")
            .first()
        )
        problem = limit_problem(message)
        if problem:
            digest = log is not None and log.task is not None and is_digest(log.task)
            yield ("digest_size" if digest else "wecom_limits", f"{problem}: {describe(message)}")
        runs = covered(log)
        task = log.task if log is not None else None
        delivered = self.delivered.setdefault(
            message.idempotency_key,
            Delivered(
                task.kind if task else "",
                task is not None and is_digest(task),
                bool(log and log.run and log.run.is_manual),
                [],
            ),
        )
        delivered.runs += [(run.pk, run.task_id, run.occurrence) for run in runs]
        for run in runs:
            yield from self._delivered_run(run)

    def _delivered_run(self, run: TaskRun) -> Iterator[Problem]:
        task = run.task
        what = f"run {run.pk} of task {task.pk} ({task.kind})"
        if task.status in STOPPED and run.pk not in self.started_when_stopped.get(task.pk, ()):
            yield ("stopped", f"{what} delivered though its task is {task.status}")
        if not registry.policy(task.kind).mandatory and opted_out(task.recipient, task.kind):
            yield ("opted_out", f"{what} delivered to {task.recipient}, opted out of it")
        snoozed = RunAction.objects.filter(follow_up=run, run__in=self.recalled_runs)
        if snoozed.exists():
            yield ("snooze_after_recall", f"{what} delivered again after its recall")

    def _dropped(self) -> Iterator[Problem]:
        for message in FaithfulSender.dropped:
            yield ("wecom_limits", f"over WeCom's per-member limit, dropped: {describe(message)}")

    def _throttles(self) -> Iterator[Problem]:
        sent: dict[tuple[str, str], list[tuple[float, Delivered]]] = {}
        for at, message in FaithfulSender.deliveries:
            delivered = self.delivered[message.idempotency_key]
            sent.setdefault((message.recipient, delivered.kind), []).append((at, delivered))
        for (member, kind), moments in sent.items():
            allowed = registry.policy(kind).throttle_per_hour
            for first, _ in moments if allowed else ():
                hour = [(at, what) for at, what in moments if first <= at < first + 3600]
                if len(hour) > allowed:
                    words = f"{len(hour)} {kind} to {member} in an hour (at most {allowed})"
                    yield (throttle_rule(hour, allowed), words)
                    break

    # -- runs and the ledger -------------------------------------------------------------

    def _ends(self) -> Iterator[Problem]:
        now = timezone.now()
        for run in TaskRun.objects.select_related("task"):
            if run.status in TaskRun.FINISHED:
                if run.status != TaskRun.Status.SENT and not (run.error_code or run.error_message):
                    rule = "cancel_reason" if run.status == TaskRun.Status.CANCELLED else "ends"
                    yield (rule, f"run {run.pk} ended {run.status} without a reason")
                continue
            if run.task.status == ScheduledTask.Status.PAUSED:
                continue
            since = max(
                run.occurrence, run.created_at, self.resumed_at.get(run.task_id, run.created_at)
            )
            if now - since > BOUND:
                yield ("ends", f"run {run.pk} still {run.status} {now - since} after it was due")

    def _ledger(self) -> Iterator[Problem]:
        delivered = {m.idempotency_key: m for _, m in FaithfulSender.deliveries}
        bodies = {(m.recipient, m.rendered) for _, m in FaithfulSender.deliveries}
        rows = {log.key: log for log in SendLog.objects.all()}
        for key, message in delivered.items():
            log = rows.get(key)
            if log is None or log.status == SendLog.Status.FAILED:
                yield ("ledger", f"delivered, but the ledger says {log and log.status}: {key}")
            elif log.body != message.rendered:
                yield ("ledger", f"delivered other bytes than the ledger holds: {key}")
        for log in rows.values():
            if log.status == SendLog.Status.SENT and (log.recipient, log.body) not in bodies:
                yield ("ledger", f"the ledger says sent, WeCom never got it: {log.key}")


def throttle_rule(hour: list[tuple[float, Delivered]], allowed: int) -> str:
    """Which rule an hour over its throttle breaks: ``throttle_chunks`` when digests that
    went at one moment (one digest cut in chunks) count as one and the hour is within
    it, ``throttle_on_request`` when the runs made on request (a snooze) are the excess,
    else ``throttle``."""
    folds = {at for at, what in hour if what.digest}
    alone = sum(1 for _, what in hour if not what.digest)
    manual = sum(1 for _, what in hour if what.manual)
    if alone + len(folds) <= allowed:
        return "throttle_chunks"
    if len(hour) - manual <= allowed:
        return "throttle_on_request"
    return "throttle"


def covered(log: SendLog | None) -> list[TaskRun]:
    """The runs a delivered message delivers: its own, or a digest's items."""
    if log is None or log.run_id is None:
        return []
    items = list(TaskRun.objects.filter(digest_id=log.run_id).select_related("task"))
    return items or list(TaskRun.objects.filter(pk=log.run_id).select_related("task"))


def opted_out(member: str, kind: str) -> bool:
    return Preference.objects.filter(recipient=member, kind=kind, opted_out=True).exists()
