"""Digests crash after crash: each follow-up in exactly one message, none lost.

As in test_kill_loop.py, three real ``run_reminders`` processes send through the
``wecom`` channel to a WeCom sandbox process that answers some sends busy or HTTP 5xx,
loses some replies after delivering and answers a few late, while the test SIGKILLs
whole process trees over and over, each replaced by a fresh process. Here follow-ups
fold into digests (``tests.support.digest_settings``: windows of 15 s): each member has
2 to 4 follow-ups in one window, a few members one alone. A kill comes at a random
moment of each window, and three after its end, each as soon as a process holds a
digest mid-send (its ledger key ``sending``).

The sandbox's ledger is the truth. At the end every follow-up (named by its customer in
the message) was delivered in exactly one message, and each member got one message a
window, listing all its follow-ups of that window; every follow-up run ended ``sent``
with that message (``unknown`` only when its message ended in doubt, and then delivered
once at most), none is left folded, waiting or mid-flight; each digest run lists the
runs folded into it, and our ledger agrees with the sandbox's.

``DIGEST_KILL_LOOP_SEED`` (environment) picks the follow-ups, the faults and the kills;
the default is fixed.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from reminders import registry
from reminders.models import DIGEST_KEY, Priority, ScheduledTask, SendLog, TaskRun
from reminders.schedule import timing
from tests.support import digest_settings, kill_loop
from tests.support.processes import (
    TREE,
    ReminderProcess,
    freeze,
    kill_tree,
    ledger_statuses,
    run_statuses,
    wait_exit,
    wait_until,
)
from tests.support.sandbox import (
    SandboxProcess,
    assert_ledger_matches,
    wecom_settings,
)
from wecom_sandbox import LedgerEntry

pytestmark = kill_loop.MARKS

SEED = int(os.environ.get("DIGEST_KILL_LOOP_SEED", "20261204"))
MEMBERS = [f"member{n:03d}" for n in range(300)]  # 2 to 4 follow-ups each
SINGLES = [f"single{n:02d}" for n in range(20)]  # one follow-up each: sent on its own
WINDOWS = 3  # consecutive digest windows the follow-ups fall in
LEAD = 3.0  # seconds from scheduling to the first follow-up
TARGETED = 3  # kills after each window's end, each of a process holding a digest mid-send
TARGET_WAIT = 6.0  # seconds such a kill waits for one before it strikes anyway
CUSTOMER = re.compile(r"\bC\d{4}\b")
ENGINE = {
    **kill_loop.ENGINE,
    # The test settings with follow-ups folded into digests.
    "DJANGO_SETTINGS_MODULE": digest_settings.__name__,
}
UNFINISHED = [*TaskRun.UNFINISHED]


@pytest.fixture
def faulty_sandbox() -> Iterator[SandboxProcess]:
    with kill_loop.faulty_sandbox(SEED) as box:
        yield box


@pytest.fixture
def digests_of_follow_ups(settings: Any) -> int:
    """This process folds follow-ups as its children do; returns the window, in seconds."""
    settings.REMINDERS_KINDS = digest_settings.REMINDERS_KINDS
    return registry.policy("follow_up").digest_seconds


@dataclass(frozen=True)
class FollowUp:
    """One follow-up: its customer (``C0042``, the line that names it in a message), its
    member, the start of its digest window and its time."""

    customer: str
    member: str
    window: datetime
    at: datetime


def plan_follow_ups(rng: random.Random, width: int) -> list[FollowUp]:
    """Each member's follow-ups at random times in one of ``WINDOWS`` consecutive digest
    windows of ``width`` seconds, none sooner than ``LEAD`` seconds from now; in a random
    order, as a CRM creates them."""
    first = timezone.now() + timedelta(seconds=LEAD)
    start, end = timing.window(first, settings.TIME_ZONE, width)
    if end - first < timedelta(seconds=2):
        start = end
    starts = [start + timedelta(seconds=width * n) for n in range(WINDOWS)]
    counts = [(member, rng.randint(2, 4)) for member in MEMBERS] + [(m, 1) for m in SINGLES]
    times = []
    for member, count in counts:
        window = rng.choice(starts)
        begin = max(window, first)
        span = (window + timedelta(seconds=width) - begin).total_seconds() - 0.01
        for _ in range(count):
            at = begin + timedelta(milliseconds=int(rng.uniform(0, span) * 1000))
            assert timing.window(at, settings.TIME_ZONE, width)[0] == window
            times.append((member, window, at))
    rng.shuffle(times)
    return [
        FollowUp(f"C{number:04d}", member, window, at)
        for number, (member, window, at) in enumerate(times)
    ]


def schedule(follow_ups: list[FollowUp]) -> None:
    now = timezone.now()
    tasks = []
    for follow_up in follow_ups:
        task = ScheduledTask(
            kind="follow_up",
            recipient=follow_up.member,
            run_at=follow_up.at,
            timezone=settings.TIME_ZONE,
            channel="wecom",
            priority=Priority.NORMAL,
            payload={"customer": follow_up.customer},
        )
        task.plan_first_run(now)
        tasks.append(task)
    ScheduledTask.objects.bulk_create(tasks, batch_size=500)


def digest_runs() -> QuerySet[TaskRun]:
    """The digest runs: those that runs were folded into."""
    return TaskRun.objects.filter(items__isnull=False).distinct()


def explain(box: SandboxProcess) -> Callable[[], str]:
    def state() -> str:
        digests = Counter(digest_runs().values_list("status", flat=True))
        return (
            f"runs: {dict(run_statuses())}; digests: {dict(digests)}; "
            f"ledger: {dict(ledger_statuses())}; sandbox: {box.client.stats()}"
        )

    return state


@dataclass(frozen=True)
class Held:
    """What a killed process held when it died: runs claimed (queued) and started, the
    messages mid-send (their key ``sending``), and of those the digests, with the runs
    folded into them."""

    queued: int
    running: int
    sending: int
    digests_sending: int
    folded: int


def kill_and_replace(
    victim: ReminderProcess, spawn: Callable[..., ReminderProcess], name: str, env: dict[str, str]
) -> tuple[ReminderProcess, Held]:
    """SIGKILL ``victim``'s whole tree, frozen first so that what it held is what it died
    with, and start a fresh process in its place; returns that process and what it held."""
    runs = TaskRun.objects.filter(lease_owner__in=kill_loop.owners(freeze(victim)))
    running = runs.filter(status=TaskRun.Status.RUNNING)
    sending = SendLog.objects.filter(run__in=running, status=SendLog.Status.SENDING)
    digests = sending.filter(run__items__isnull=False).values_list("run", flat=True).distinct()
    held = Held(
        queued=runs.filter(status=TaskRun.Status.QUEUED).count(),
        running=running.count(),
        sending=sending.count(),
        digests_sending=len(digests),
        folded=TaskRun.objects.filter(
            digest__in=list(digests), status=TaskRun.Status.FOLDED
        ).count(),
    )
    kill_tree(victim)
    return spawn(name, **env), held


def sleep_until(moment: datetime) -> None:
    time.sleep(max((moment - timezone.now()).total_seconds(), 0))


def names(row: SendLog, entry: LedgerEntry) -> bool:
    """Whether the ``sent`` row names the delivery ``entry``: by its msgid (one a part), or
    for a card sent again after its first reply was lost (WeCom answers "task_id taken"),
    by the card's task_id, as ``ledger_mismatches`` reads it."""
    detail = row.reply_detail or {}
    if detail.get("delivered_before"):
        card = (entry.request or {}).get("template_card") or {}
        return str(detail.get("task_id")) == str(card.get("task_id"))
    return entry.msgid in (detail.get("msgids") or [row.provider_message_id])


def test_digest_kill_loop__every_follow_up_in_exactly_one_message(
    spawn: Callable[..., ReminderProcess],
    faulty_sandbox: SandboxProcess,
    digests_of_follow_ups: int,
) -> None:
    box, width = faulty_sandbox, digests_of_follow_ups
    rng = random.Random(SEED)
    env = {**wecom_settings(box.base_url), **ENGINE}
    processes = [spawn(f"p{n}", **env) for n in range(3)]
    wait_until(
        lambda: all(len(p.tree()) >= TREE for p in processes),
        timeout=60,
        what="three processes with their clusters",
        processes=processes,
    )
    started = time.monotonic()
    follow_ups = plan_follow_ups(rng, width)
    schedule(follow_ups)

    held_at_kills: list[Held] = []
    kills = 0
    # Digests mid-send: their key ``sending``.
    digests_sending = SendLog.objects.filter(
        status=SendLog.Status.SENDING, run__items__isnull=False
    )

    def kill(slot: int) -> None:
        nonlocal kills
        kills += 1
        processes[slot], held = kill_and_replace(
            processes[slot], spawn, f"p{slot}-after-kill{kills}", env
        )
        held_at_kills.append(held)

    for start in sorted({follow_up.window for follow_up in follow_ups}):
        # While the window's follow-ups wait for its end.
        sleep_until(start + timedelta(seconds=rng.uniform(0.2, 0.8) * width))
        kill(rng.randrange(len(processes)))
        sleep_until(start + timedelta(seconds=width))
        for _ in range(TARGETED):
            found = kill_loop.in_hand(processes, digests_sending, TARGET_WAIT)
            kill(rng.randrange(len(processes)) if found is None else found)
    killed_at = time.monotonic() - started

    def all_finished() -> bool:
        items = TaskRun.objects.exclude(task__payload__has_key=DIGEST_KEY)
        return (
            items.count() == len(follow_ups)
            and not TaskRun.objects.filter(status__in=UNFINISHED).exists()
        )

    wait_until(
        all_finished,
        timeout=60,
        what="every run to finish after the kills",
        processes=processes,
        explain=explain(box),
    )
    finished_at = time.monotonic() - started
    for process in processes:
        os.kill(process.pid, signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(Exception):
            wait_exit(process, timeout=30)

    entries = box.client.ledger()
    delivered = [e for e in entries if e.endpoint == "message/send" and e.delivered]
    sends = Counter(e.status for e in entries if e.endpoint == "message/send")
    runs = list(TaskRun.objects.select_related("task", "digest"))
    digests = {run.pk: run for run in runs if DIGEST_KEY in run.task.payload}
    sizes = Counter(len(run.task.payload[DIGEST_KEY]["items"]) for run in digests.values())
    print(
        f"seed {SEED}: {kills} kills in {killed_at:.0f} s, all finished at {finished_at:.0f} s; "
        f"held at the kills (queued, running, sending, digests sending, folded in them): "
        f"{[(h.queued, h.running, h.sending, h.digests_sending, h.folded) for h in held_at_kills]}"
        f"; {len(follow_ups)} follow-ups, digests by size {dict(sorted(sizes.items()))}; "
        f"sandbox sends {dict(sends)}, stats {box.client.stats()}; runs {dict(run_statuses())}"
    )
    # Else the kills proved nothing: at least one caught a digest between send and record.
    assert any(h.digests_sending for h in held_at_kills), held_at_kills

    by_customer = {follow_up.customer: follow_up for follow_up in follow_ups}
    items = {run.task.payload["customer"]: run for run in runs if run.pk not in digests}
    assert set(items) == set(by_customer)
    check_runs(items, digests)
    messages = check_deliveries(delivered, by_customer, items)
    assert not SendLog.objects.filter(status=SendLog.Status.SENDING).exists()
    assert_ledger_matches(box.client)
    # One message a member and window: every follow-up of its window in it.
    split = two_messages_a_window(messages, items)
    assert split == {}, (
        f"{len(split)} members got two messages or more in a window: (sandbox entry, "
        "its follow-ups, their digest run or own run)"
    )


def two_messages_a_window(
    messages: dict[tuple[str, datetime], list[tuple[LedgerEntry, set[str]]]],
    items: dict[str, TaskRun],
) -> dict[str, list[tuple[int, list[str], list[int]]]]:
    """The members and windows with more than one message: each message's sandbox entry,
    its follow-ups and the runs it was sent as (their digest run, or their own)."""
    return {
        f"{member} {window:%H:%M:%S}": [
            (
                entry.id,
                sorted(customers),
                sorted({items[c].digest_id or items[c].pk for c in customers}),
            )
            for entry, customers in sent
        ]
        for (member, window), sent in messages.items()
        if len(sent) > 1
    }


def check_runs(items: dict[str, TaskRun], digests: dict[int, TaskRun]) -> None:
    """Each follow-up's run ended ``sent`` (``unknown`` only as its message, in doubt) and
    as its digest did; each digest run ended so, listing the runs folded into it."""
    ends = (TaskRun.Status.SENT, TaskRun.Status.UNKNOWN)
    assert {c: run.status for c, run in items.items() if run.status not in ends} == {}
    assert {pk: run.status for pk, run in digests.items() if run.status not in ends} == {}
    assert {
        c: (run.status, run.digest.status)
        for c, run in items.items()
        if run.digest is not None and run.status != run.digest.status
    } == {}
    folded_into: dict[int, set[int]] = defaultdict(set)
    for run in items.values():
        if run.digest_id is not None:
            folded_into[run.digest_id].add(run.pk)
    listed = {
        pk: {item["run"] for item in run.task.payload[DIGEST_KEY]["items"]}
        for pk, run in digests.items()
    }
    assert folded_into == listed
    assert {pk: runs for pk, runs in listed.items() if len(runs) < 2} == {}


def check_deliveries(
    delivered: list[LedgerEntry], by_customer: dict[str, FollowUp], items: dict[str, TaskRun]
) -> dict[tuple[str, datetime], list[tuple[LedgerEntry, set[str]]]]:
    """The sandbox's deliveries against the follow-ups and their runs: each follow-up in
    one message to its member (at most one for a run in doubt), and each sent run names,
    through its digest's ledger row or its own, the message the sandbox delivered it in.
    Returns the messages by member and window, with the follow-ups each named."""
    rows = {row.run_id: row for row in SendLog.objects.filter(status=SendLog.Status.SENT)}
    times: Counter[str] = Counter()
    message_of: dict[str, LedgerEntry] = {}
    messages: dict[tuple[str, datetime], list[tuple[LedgerEntry, set[str]]]] = defaultdict(list)
    for entry in delivered:
        # A card names its customer in its title and its lines: once a message.
        customers = set(CUSTOMER.findall(entry.content))
        assert customers, entry
        assert {by_customer[c].member for c in customers} == set(entry.delivered_to), entry
        times.update(customers)
        message_of.update(dict.fromkeys(customers, entry))
        for member, window in {(by_customer[c].member, by_customer[c].window) for c in customers}:
            messages[member, window].append((entry, customers))
    assert {c: n for c, n in times.items() if n > 1} == {}, "follow-ups delivered twice"
    never = sorted(c for c, run in items.items() if run.status != "unknown" and c not in times)
    assert never == [], "follow-ups never delivered"
    unnamed = []
    for customer, run in items.items():
        if run.status == TaskRun.Status.SENT:
            row = rows.get(run.digest_id if run.digest_id is not None else run.pk)
            if row is None or not names(row, message_of[customer]):
                unnamed.append((customer, run.pk, run.digest_id, row and row.reply_detail))
    assert unnamed == [], "sent runs whose ledger row names another message"
    return messages
