"""Digests and throttles: a recipient's occurrences of one kind due in one window go as
one message listing them, each item ``sent`` with the digest (its key and message id),
exactly once; a throttled kind's excess folds into the next digest, never dropped. Every
clock is the tests': a window's boundaries, a throttle's hour, quiet hours on a holiday
and a year no calendar package covers."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import hypothesis
import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext
from django.utils import translation
from hypothesis import strategies as st

from reminders import api, kinds, preferences, registry
from reminders.calendars.backends import day_off
from reminders.engine import actions, cluster, digests, dispatch
from reminders.exceptions import InDoubtSendError, PermanentSendError, TransientSendError
from reminders.models import DIGEST_KEY, JobTake, Priority, ScheduledTask, SendLog, TaskRun
from reminders.schedule import timing
from reminders.schedule.policies import Policy, PolicyError
from reminders.senders.memory import MemorySender
from tests.support.digests import SHANGHAI, THURSDAY, TZ, at, follow_up, release, tick_at
from tests.support.jobs import run_queued


@pytest.fixture
def digested(settings: Any) -> None:
    # Late by days at most: a retry's delay counts on the real clock, these on the tests'.
    settings.REMINDERS_KINDS = {
        "follow_up": {"digest_seconds": 900, "max_lateness_seconds": 400 * 24 * 3600}
    }


# --- The window and the policy ---------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "window"),
    [
        (at(THURSDAY, 9, 0), (at(THURSDAY, 9, 0), at(THURSDAY, 9, 15))),  # its first second
        (at(THURSDAY, 9, 14, 59), (at(THURSDAY, 9, 0), at(THURSDAY, 9, 15))),
        (at(THURSDAY, 9, 15), (at(THURSDAY, 9, 15), at(THURSDAY, 9, 30))),  # the next one's
        (at(THURSDAY, 23, 50), (at(THURSDAY, 23, 45), at(THURSDAY + timedelta(days=1), 0, 0))),
    ],
)
def test_window__counted_from_local_midnight(moment: datetime, window: tuple) -> None:
    assert timing.window(moment, TZ, 900) == window


def test_window__the_days_last_ends_at_midnight() -> None:
    # 7 hours: 00-07, 07-14, 14-21, 21-24 (never into the next day).
    assert timing.window(at(THURSDAY, 22), TZ, 7 * 3600) == (
        at(THURSDAY, 21),
        at(THURSDAY + timedelta(days=1), 0),
    )


def test_window__on_the_wall_clock_across_a_dst_change() -> None:
    # New York springs forward at 02:00 on 8 March 2026: 7-hour windows stay 07:00-14:00.
    york = ZoneInfo("America/New_York")
    moment = datetime(2026, 3, 8, 8, 30, tzinfo=york)
    assert timing.window(moment, "America/New_York", 7 * 3600) == (
        datetime(2026, 3, 8, 7, 0, tzinfo=york),
        datetime(2026, 3, 8, 14, 0, tzinfo=york),
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("digest_seconds", -1),
        ("digest_seconds", 86401),
        ("digest_seconds", "900"),
        ("throttle_per_hour", -2),
        ("throttle_per_hour", 1.5),
    ],
)
def test_policy__refuses_a_bad_digest_or_throttle_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(PolicyError, match=field):
        Policy(**{field: value})


@pytest.mark.django_db
def test_payload__the_digest_mark_is_the_engines_own() -> None:
    with pytest.raises(ValidationError, match=DIGEST_KEY):
        ScheduledTask(
            kind="follow_up",
            recipient="alice",
            channel="memory",
            run_at=at(THURSDAY, 9),
            timezone=TZ,
            priority="normal",
            payload={DIGEST_KEY: {"items": []}},
        ).full_clean()


# --- Folding ---------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__three_follow_ups_of_one_window_go_as_one_message_listing_them(
    outbox: list,
) -> None:
    tasks = [
        follow_up("alice", at(THURSDAY, 9, 0), "ACME"),
        follow_up("alice", at(THURSDAY, 9, 5), "Globex"),
        follow_up("alice", at(THURSDAY, 9, 14), "Initech"),
    ]
    goes = release("alice", at(THURSDAY, 9, 15))
    assert tick_at(at(THURSDAY, 9, 0)) == 0
    runs = TaskRun.objects.filter(task__in=tasks)
    assert {run.due_at for run in runs} == {goes}  # planned at the window's end
    assert tick_at(goes - timedelta(seconds=1)) == 0
    assert tick_at(goes) == 1
    assert len(outbox) == 1
    text = outbox[0].body["content"]
    assert text.startswith("3 follow-ups due:")
    for number, customer in enumerate(["ACME", "Globex", "Initech"], start=1):
        assert f"{number}. {customer} (" in text
        assert f"https://crm.example/c/{customer}" in text
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    row = SendLog.objects.get()
    assert (row.run, row.status) == (digest, SendLog.Status.SENT)
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.digest, run.error_message) == (TaskRun.Status.SENT, digest, "")
        # No ledger row of its own: the digest's is its key and message id.
        assert not SendLog.objects.filter(key=run.ledger_key).exists()
        assert run.task.last_run_at is not None
    assert tick_at(goes + timedelta(minutes=5)) == 0
    assert len(outbox) == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
@pytest.mark.parametrize("listening", [False, True], ids=["unheard", "run_sent-heard"])
def test_digest__the_job_that_sends_it_stamps_and_completes_its_items_tasks(
    listening: bool, request: pytest.FixtureRequest, outbox: list
) -> None:
    """An item's one-shot task ends with its digest, in the job's end (``jobs.tried``),
    whether or not anyone receives ``run_sent``: not at a later sweep."""
    if listening:
        request.getfixturevalue("received")
    tasks = [follow_up("alice", at(THURSDAY, 9, minute), f"C{minute}") for minute in (0, 7)]
    goes = release("alice", at(THURSDAY, 9, 15))
    assert tick_at(goes) == 1
    assert len(outbox) == 1
    for task in tasks:
        task.refresh_from_db()
        assert task.status == ScheduledTask.Status.COMPLETED
        assert task.last_run_at is not None


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_release__a_kind_with_no_stagger_spreads_its_digests_over_a_fifth_of_the_window() -> None:
    # follow_up has no jitter: 10,000 digests due at 09:15 sharp would all go at once.
    members = [f"m{n:03d}" for n in range(60)]
    for member in members:
        follow_up(member, at(THURSDAY, 9, 2), "ACME")
        follow_up(member, at(THURSDAY, 9, 9), "Globex")
    dispatch.materialize(now=at(THURSDAY, 9))
    due: dict[str, set[datetime]] = {}
    for run in TaskRun.objects.select_related("task"):
        due.setdefault(run.task.recipient, set()).add(run.due_at)
    # A member's runs go together, when the member's digest goes.
    assert due == {member: {release(member, at(THURSDAY, 9, 15))} for member in members}
    moments = {moment for (moment,) in due.values()}
    assert min(moments) >= at(THURSDAY, 9, 15)
    assert max(moments) < at(THURSDAY, 9, 18)  # a fifth of 15 minutes
    assert len(moments) >= 50  # spread, not a handful of instants


@pytest.mark.django_db
def test_release__a_kind_with_a_stagger_keeps_its_own(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {
            "digest_seconds": 900,
            "jitter_seconds": 30,
            "batches": 3,
            "batch_interval_seconds": 120,
            "max_lateness_seconds": 400 * 24 * 3600,
        }
    }
    policy = Policy(jitter_seconds=30, batches=3, batch_interval_seconds=120)
    members = [f"m{n:03d}" for n in range(30)]
    for member in members:
        follow_up(member, at(THURSDAY, 9, 2), "ACME")
    dispatch.materialize(now=at(THURSDAY, 9))
    for run in TaskRun.objects.select_related("task"):
        assert run.due_at == release(run.task.recipient, at(THURSDAY, 9, 15), policy)
    assert TaskRun.objects.latest("due_at").due_at < at(THURSDAY, 9, 15) + timedelta(
        seconds=2 * 120 + 30
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_claim__takes_a_recipients_runs_due_together_whole_beyond_its_limit() -> None:
    members = [f"m{n}" for n in range(5)]
    for member in members:
        for minute in (0, 1, 2):
            follow_up(member, at(THURSDAY, 9, minute), f"C{minute}")
    dispatch.materialize(now=at(THURSDAY, 9))
    latest = max(release(member, at(THURSDAY, 9, 15)) for member in members)
    claimed = dispatch.claim("test", 4, now=latest)
    runs = TaskRun.objects.filter(pk__in=claimed.run_ids).select_related("task")
    counts = {run.task.recipient: 0 for run in runs}
    for run in runs:
        counts[run.task.recipient] += 1
    assert set(counts.values()) == {3}  # whole recipients, never a part of one


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
@pytest.mark.parametrize("only_high", [False, True])
def test_claim__under_its_limit_takes_its_recipients_runs_without_reading_them_again(
    only_high: bool,
) -> None:
    """A claim that took fewer runs than its limit, of every priority, took every due run
    of its recipients it could: it reads no more of them. One of high runs only reads
    their others, of any priority."""
    members = ["m0", "m1"]
    firsts = []
    for member in members:
        tasks = [follow_up(member, at(THURSDAY, 9, minute), f"C{minute}") for minute in (0, 1, 2)]
        firsts.append(tasks[0])
    dispatch.materialize(now=at(THURSDAY, 9))
    TaskRun.objects.filter(task__in=firsts).update(priority=Priority.HIGH.rank)
    latest = max(release(member, at(THURSDAY, 9, 15)) for member in members)
    with CaptureQueriesContext(connection) as queries:
        claimed = dispatch.claim("test", 100, now=latest, only_high=only_high)
    assert len(claimed.run_ids) == 6
    by_recipient = [q for q in queries.captured_queries if re.search(r"recipient\W* IN", q["sql"])]
    assert len(by_recipient) == (1 if only_high else 0)


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_claims_side_by_side__the_first_job_takes_the_others_runs_not_started(
    outbox: list,
) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1, 2)]
    dispatch.materialize(now=at(THURSDAY, 9))
    goes = release("alice", at(THURSDAY, 9, 15))
    # Another process's claim took one of her runs a moment before this one's.
    other = TaskRun.objects.get(task=tasks[2])
    TaskRun.objects.filter(pk=other.pk).update(
        status=TaskRun.Status.QUEUED,
        lease_token="other",
        lease_owner="elsewhere",
        lease_expires_at=goes + timedelta(minutes=5),
    )
    with TestCase.captureOnCommitCallbacks(execute=True):
        cluster.enqueue(cluster.bulk_queue(), dispatch.DELIVER, "other", [other.pk], task_name="o")
        dispatch.claim("test", 100, now=goes)
        run_queued(now=goes)
    assert len(outbox) == 1
    assert outbox[0].body["content"].startswith("3 follow-ups due:")
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


def _taken_by_a_dead_job(run: TaskRun, lease_until: datetime) -> None:
    """``run`` claimed by another process, whose job took it (``JobTake``) and died."""
    TaskRun.objects.filter(pk=run.pk).update(
        status=TaskRun.Status.QUEUED,
        lease_token="other",
        lease_owner="elsewhere",
        lease_expires_at=lease_until,
    )
    JobTake.objects.take("dead", "other", [run.pk])


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
@pytest.mark.parametrize("lease_ran_out", [False, True], ids=["leased", "lease_ran_out"])
def test_claims_side_by_side__a_dead_job_s_runs_taken_in_leave_no_job_take(
    outbox: list, settings: Any, lease_ran_out: bool
) -> None:
    settings.REMINDERS_MAX_JOB_FAILURES = 1
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1, 2)]
    dispatch.materialize(now=at(THURSDAY, 9))
    goes = release("alice", at(THURSDAY, 9, 15))
    dead = TaskRun.objects.get(task=tasks[2])
    _taken_by_a_dead_job(dead, goes + timedelta(minutes=5))
    # This job starts while the dead job's lease holds, or after it ran out.
    starts = goes + timedelta(minutes=10 if lease_ran_out else 1)
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.claim("test", 100, now=goes)
        run_queued(now=starts)
    assert not JobTake.objects.exists()
    dead.refresh_from_db()
    if lease_ran_out:
        # Counted as the claim that took it over would: one lost job is the limit here.
        assert (dead.status, dead.error_code) == (TaskRun.Status.FAILED, "job_failures")
        assert outbox[0].body["content"].startswith("2 follow-ups due:")
    else:
        # Its job may be alive, waiting to start: not counted.
        assert (dead.status, dead.job_failures) == (TaskRun.Status.SENT, 0)
        assert outbox[0].body["content"].startswith("3 follow-ups due:")
    assert len(outbox) == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__one_item_alone_goes_as_its_own_message(outbox: list) -> None:
    task = follow_up("bob", at(THURSDAY, 9, 3), "ACME")
    tick_at(release("bob", at(THURSDAY, 9, 15)))
    assert len(outbox) == 1
    assert "3 follow-ups" not in str(outbox[0].body)
    run = TaskRun.objects.get(task=task)
    assert (run.status, run.digest) == (TaskRun.Status.SENT, None)


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__one_per_recipient_and_window(outbox: list) -> None:
    for recipient in ("alice", "bob"):
        follow_up(recipient, at(THURSDAY, 9, 0), "ACME")
        follow_up(recipient, at(THURSDAY, 9, 1), "Globex")
    follow_up("alice", at(THURSDAY, 9, 20), "Initech")  # the next window
    latest = max(release(r, at(THURSDAY, 9, 15)) for r in ("alice", "bob"))
    tick_at(at(THURSDAY, 9, 0))
    tick_at(latest)
    assert sorted(m.recipient for m in outbox) == ["alice", "bob"]
    assert all(m.body["content"].startswith("2 follow-ups due:") for m in outbox)
    tick_at(release("alice", at(THURSDAY, 9, 30)))
    assert len(outbox) == 3
    assert "Initech" in str(outbox[2].body) and "ACME" not in str(outbox[2].body)


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__in_the_recipients_language(outbox: list) -> None:
    follow_up("alice", at(THURSDAY, 9, 0), "ACME", lang="zh-hans")
    follow_up("alice", at(THURSDAY, 9, 1), "Globex", lang="zh-hans")
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    with translation.override("zh-hans"):
        heading = digests.wording.heading("follow_up", 2)
    assert heading != "2 follow-ups due:"
    assert outbox[0].body["content"].startswith(heading)


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__an_item_with_a_bad_link_fails_alone(outbox: list) -> None:
    good = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1)]
    bad = follow_up("alice", at(THURSDAY, 9, 2), "Bad")
    ScheduledTask.objects.filter(pk=bad.pk).update(payload={"url": "javascript:alert(1)"})
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    assert TaskRun.objects.get(task=bad).status == TaskRun.Status.FAILED
    assert [TaskRun.objects.get(task=t).status for t in good] == [TaskRun.Status.SENT] * 2
    assert outbox[0].body["content"].startswith("2 follow-ups due:")


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__an_item_in_a_language_not_declared_fails_alone(outbox: list) -> None:
    bad = follow_up("alice", at(THURSDAY, 9, 0), "Bad")  # the first: it would lead
    good = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (1, 2)]
    ScheduledTask.objects.filter(pk=bad.pk).update(payload={"customer": "Bad", "lang": "xx"})
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    run = TaskRun.objects.get(task=bad)
    assert (run.status, run.digest) == (TaskRun.Status.FAILED, None)
    assert 'payload["lang"]' in run.error_message
    assert [TaskRun.objects.get(task=t).status for t in good] == [TaskRun.Status.SENT] * 2
    assert outbox[0].body["content"].startswith("2 follow-ups due:")


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__each_item_is_decided_on_its_own_first(outbox: list) -> None:
    kept = follow_up("alice", at(THURSDAY, 9, 0), "ACME")
    follow_up("alice", at(THURSDAY, 9, 1), "Globex")
    paused = follow_up("alice", at(THURSDAY, 9, 2), "Initech")
    actions.pause(paused)
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    assert outbox[0].body["content"].startswith("2 follow-ups due:")
    assert "Initech" not in outbox[0].body["content"]
    assert not TaskRun.objects.filter(task=paused).exclude(status__in=TaskRun.WAITING).exists()
    assert TaskRun.objects.get(task=kept).status == TaskRun.Status.SENT


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__a_run_made_on_request_goes_at_once_on_its_own(outbox: list) -> None:
    task = follow_up("alice", at(THURSDAY, 9, 0), "ACME")
    now = at(THURSDAY, 8, 0)
    actions.run_now(task, now, by="ops")
    tick_at(now)
    assert len(outbox) == 1 and "follow-ups due" not in str(outbox[0].body)


@pytest.mark.django_db
def test_digest__a_deadline_before_the_windows_end_is_never_waited_past(
    settings: Any, outbox: list
) -> None:
    settings.REMINDERS_KINDS = {"follow_up": {"digest_seconds": 3 * 3600, "send_by": "11:30"}}
    task = follow_up("alice", at(THURSDAY, 10, 0), "ACME")  # its window ends at 12:00
    assert tick_at(at(THURSDAY, 10, 0)) == 1
    assert TaskRun.objects.get(task=task).status == TaskRun.Status.SENT


def _untitled(recipient: str, when: datetime, url: str, **payload: Any) -> ScheduledTask:
    """A follow-up the CRM gave a link and no title: its line shows the kind's label."""
    return api.schedule(
        "follow_up", recipient, at=when, tz=TZ, channel="memory", payload={"url": url, **payload}
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__more_items_than_one_text_holds_go_in_several_digests_none_cut(
    outbox: list,
) -> None:
    # Untitled: each line shows the kind's label, "NN. Follow-up reminder (12-03 09:00)",
    # and its link of 116 bytes or so: 12 items fit 2,048 bytes with the heading and the
    # widest stamp (1,908), 13 do not (2,062).
    long_path = "x" * 90
    tasks = [
        _untitled("alice", at(THURSDAY, 9, 0), f"https://crm.example/{long_path}/{n}")
        for n in range(40)
    ]
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    texts = [m.body["content"] for m in outbox]
    assert [text.splitlines()[0] for text in texts] == ["12 follow-ups due:"] * 3 + [
        "4 follow-ups due:"
    ]
    assert all(len(text.encode()) <= 2048 for text in texts)
    listed = "".join(texts)
    assert all(listed.count(f"/{long_path}/{n}\n") == 1 for n in range(40))
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_digest__untitled_items_with_links_fit_several_digests_each_delivered_once(
    outbox: list, lang: str
) -> None:
    urls = [f"https://crm.example/records/follow-up/{n:04d}" for n in range(120)]
    tasks = [
        _untitled("alice", at(THURSDAY, 9, n % 15), url, lang=lang) for n, url in enumerate(urls)
    ]
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    texts = [m.body["content"] for m in outbox]
    assert len(texts) >= 3
    assert max(len(text.encode()) for text in texts) <= 2048
    with translation.override(lang):
        label = str(registry.label("follow_up"))
    assert all(f". {label} (" in text for text in texts)  # sized by the label it writes
    listed = "\n".join(texts).splitlines()
    assert sorted(line.strip() for line in listed if "/records/" in line) == urls  # each once
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


# An item, told briefly (so that a failing example reads): its customer and subject
# (none, short text, or a character repeated: multibyte, emoji, an accent), the length
# of its link's path (-1: none, up to WeCom's longest) and its language.
_CRM_TEXT = st.one_of(
    st.just(""),
    st.text(max_size=30),
    st.tuples(st.sampled_from(["客", "🎉", "e\u0301", "a"]), st.integers(1, 300)),
)
_ITEM = st.tuples(
    _CRM_TEXT,
    _CRM_TEXT,
    st.one_of(st.integers(-1, 80), st.integers(-1, 1900)),
    st.sampled_from(["en", "zh-hans", "zh-CN"]),
)


def _ready(n: int, item: tuple[Any, Any, int, str]) -> digests.Ready:
    customer, subject, path, lang = item
    texts = {
        name: text if isinstance(text, str) else text[0] * text[1]
        for name, text in (("customer", customer), ("subject", subject))
    }
    url = {"url": "https://crm.example/" + "r" * path} if path >= 0 else {}
    task = ScheduledTask(
        pk=10**15 + n,
        kind="follow_up",
        recipient="alice",
        channel="memory",
        timezone=TZ,
        payload={**{k: v for k, v in texts.items() if v}, **url, "lang": lang},
    )
    run = TaskRun(pk=10**15 + n, task=task, occurrence=at(THURSDAY, 9, n % 15, n % 60))
    rule = digests.Rule(900, 0, Policy())
    return digests.Ready(run, None, rule, digests.wording.entry(task, run))


# Items of every sort, or many alike (as the CRM writes a morning's follow-ups).
_ITEMS = st.one_of(
    st.lists(_ITEM, min_size=1, max_size=150),
    st.tuples(_ITEM, st.integers(1, 150)).map(lambda alike: [alike[0]] * alike[1]),
)


@hypothesis.settings(max_examples=80, deadline=None)
@hypothesis.given(items=_ITEMS)
def test_digest__whatever_the_items_each_is_in_one_message_and_every_digest_fits(
    items: list[tuple[Any, Any, int, str]],
) -> None:
    ready = [_ready(n, item) for n, item in enumerate(items)]
    now = at(THURSDAY, 9, 15, 59)
    plan = digests.plan(ready, now)
    went = plan.alone + [item for folded in plan.folds for item in folded]
    assert sorted(map(id, went)) == sorted(map(id, ready))  # each in one message
    for folded in plan.folds:
        task = digests._digest_task(folded, now)
        task.pk = 10**18  # the widest id a digest's stamp may show
        text = kinds.render(task, TaskRun(task=task, occurrence=now)).body["content"]
        assert len(text.encode()) <= 2048


# --- A digest's end is its items' end ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__retried_as_one_message_with_the_same_items(outbox: list) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1, 2)]
    goes = release("alice", at(THURSDAY, 9, 15))
    MemorySender.script.append(TransientSendError("busy", code="-1"))
    tick_at(goes)
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    assert digest.status == TaskRun.Status.RETRYING
    folded = [TaskRun.objects.get(task=t) for t in tasks]
    assert {run.status for run in folded} == {TaskRun.Status.FOLDED}
    assert {run.error_message for run in folded} == {f"In digest run {digest.pk}."}
    late = follow_up("alice", at(THURSDAY, 9, 16), "Late")  # the next window's
    tick_at(digest.next_attempt_at)
    [text] = [m.body["content"] for m in outbox if m.body.get("content", "").startswith("3 ")]
    assert "Late" not in text
    assert TaskRun.objects.get(task=late).digest is None  # it went on its own
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}
    assert TaskRun.objects.filter(task__payload__has_key=DIGEST_KEY).count() == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__failed_for_good_fails_its_items_saying_why(outbox: list, received: list) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1)]
    MemorySender.script.append(PermanentSendError("no such member", code="81013"))
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    assert digest.status == TaskRun.Status.FAILED
    for task in tasks:
        run = TaskRun.objects.get(task=task)
        assert (run.status, run.error_code) == (TaskRun.Status.FAILED, "81013")
        assert f"digest, run {digest.pk}" in run.error_message
    failed = [pk for name, pk, _ in received if name == "run_failed"]
    assert sorted(failed) == sorted([digest.pk, *(TaskRun.objects.get(task=t).pk for t in tasks)])
    assert outbox == []


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__one_that_ended_is_not_retried_its_runs_are(outbox: list) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1)]
    MemorySender.script.append(PermanentSendError("refused", code="40003"))
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    refusal = actions.retry_refusal(digest, at(THURSDAY, 9, 30))
    assert refusal is not None and refusal.code == "digest"
    assert actions.retry_now(digest, at(THURSDAY, 9, 30)) is False
    items = [TaskRun.objects.get(task=t) for t in tasks]
    for item in items:
        assert actions.retry_now(item, at(THURSDAY, 9, 30))
        item.refresh_from_db()
        assert (item.status, item.digest) == (TaskRun.Status.RETRYING, None)
    tick_at(at(THURSDAY, 9, 30))
    assert len(outbox) == 1 and outbox[0].body["content"].startswith("2 follow-ups due:")
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


def _keyed(customer: str, minute: int) -> ScheduledTask:
    """A follow-up of alice's 09:00 window that the CRM may correct (its ``key``)."""
    return api.schedule(
        "follow_up",
        "alice",
        at=at(THURSDAY, 9, minute),
        tz=TZ,
        channel="memory",
        key=f"follow-up-{customer}",
        payload={"customer": customer, "url": f"https://crm.example/c/{customer}"},
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__its_runs_tasks_changed_while_it_waits_to_retry_decide_as_runs_not_sent(
    outbox: list, time_machine: Any
) -> None:
    # The retry's delay counts on the real clock: here it is the tests'.
    time_machine.move_to(at(THURSDAY, 8, 30))
    kept, paused, cancelled, corrected, moved = (
        _keyed(customer, minute)
        for minute, customer in enumerate(["Kept", "Paused", "Cancelled", "Typo", "Moved"])
    )
    goes = release("alice", at(THURSDAY, 9, 15))
    time_machine.move_to(goes)
    MemorySender.script.append(TransientSendError("busy", code="-1"))
    tick_at(goes)
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    assert digest.status == TaskRun.Status.RETRYING and outbox == []
    # While it waits: ops pause one task, the CRM cancels one, corrects one's text and
    # moves another to 11:04.
    actions.pause(paused)
    actions.cancel(cancelled)
    ScheduledTask.objects.filter(pk=corrected.pk).update(
        payload={"customer": "Fixed", "url": "https://crm.example/c/Fixed"}
    )
    api.schedule(
        "follow_up",
        "alice",
        at=at(THURSDAY, 11, 4),
        tz=TZ,
        channel="memory",
        key="follow-up-Moved",
        payload={"customer": "Moved", "url": "https://crm.example/c/Moved"},
    )
    retry = digest.next_attempt_at
    for later in (0, 1, 2):
        tick_at(retry + timedelta(seconds=later))
    [text] = [message.body["content"] for message in outbox]
    assert text.startswith("2 follow-ups due:")
    assert "Kept (" in text and "Fixed (" in text
    assert not any(word in text for word in ("Typo", "Paused", "Cancelled", "Moved"))

    def run_of(task: ScheduledTask) -> TaskRun:
        return TaskRun.objects.filter(task=task).order_by("pk").first()  # type: ignore[return-value]

    assert run_of(kept).status == run_of(corrected).status == TaskRun.Status.SENT
    assert run_of(cancelled).status == TaskRun.Status.CANCELLED
    assert run_of(moved).status == TaskRun.Status.CANCELLED  # re-planned: 11:04's goes
    held = run_of(paused)
    assert (held.status in TaskRun.WAITING, held.digest) == (True, None)
    assert TaskRun.objects.get(pk=digest.pk).status == TaskRun.Status.CANCELLED
    actions.resume(paused, now=retry + timedelta(seconds=3))
    tick_at(retry + timedelta(seconds=3))
    assert len(outbox) == 2 and "Paused" in str(outbox[1].body)


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__in_doubt_is_sent_again_as_it_was_whatever_its_runs_tasks_became(
    outbox: list, time_machine: Any
) -> None:
    time_machine.move_to(at(THURSDAY, 8, 30))
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}", "memory_dedup") for m in (0, 1)]
    goes = release("alice", at(THURSDAY, 9, 15))
    time_machine.move_to(goes)
    MemorySender.script.append(InDoubtSendError("timed out", code="timeout"))
    tick_at(goes)
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    assert digest.status == TaskRun.Status.RETRYING
    actions.cancel(tasks[1])  # it may have been delivered already: the same bytes go
    tick_at(digest.next_attempt_at)
    [text] = [message.body["content"] for message in outbox]
    assert text.startswith("2 follow-ups due:") and "C1 (" in text
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__retried_unchanged_is_the_same_digest(outbox: list) -> None:
    tasks = [_keyed(customer, minute) for minute, customer in enumerate(["A", "B"])]
    MemorySender.script.append(TransientSendError("busy", code="-1"))
    tick_at(release("alice", at(THURSDAY, 9, 15)))
    digest = TaskRun.objects.get(task__payload__has_key=DIGEST_KEY)
    ScheduledTask.objects.filter(pk=tasks[0].pk).update(priority="high")  # not in its line
    tick_at(digest.next_attempt_at)
    assert TaskRun.objects.get(pk=digest.pk).status == TaskRun.Status.SENT
    assert [TaskRun.objects.get(task=t).digest_id for t in tasks] == [digest.pk] * 2


@pytest.mark.django_db
@pytest.mark.usefixtures("digested")
def test_digest__a_folded_run_is_never_claimed_again(outbox: list) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 9, m), f"C{m}") for m in (0, 1)]
    MemorySender.script.append(TransientSendError("busy", code="-1"))
    goes = release("alice", at(THURSDAY, 9, 15))
    tick_at(goes)
    # Before the digest's retry: nothing of its items goes on its own.
    assert dispatch.claim("test", 100, now=goes + timedelta(seconds=5)).run_ids == []
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.FOLDED}


# --- A recipient's own choice ------------------------------------------------------------


@pytest.mark.django_db
def test_preference__a_kind_moved_to_a_digest_waits_for_its_window(
    settings: Any, outbox: list
) -> None:
    settings.REMINDERS_DIGEST_SECONDS = 3600
    preferences.set("alice", "birthday", digest=True, by="crm", reason="too many")
    for name in ("Li", "Wang"):
        api.schedule(
            "birthday", "alice", at=at(THURSDAY, 9), tz=TZ, channel="memory", payload={"name": name}
        )
    api.schedule(
        "birthday", "bob", at=at(THURSDAY, 9), tz=TZ, channel="memory", payload={"name": "Zhao"}
    )
    tick_at(at(THURSDAY, 9))
    assert [m.recipient for m in outbox] == ["bob"]  # bob did not move it
    waiting = TaskRun.objects.filter(task__recipient="alice")
    assert {run.error_code for run in waiting} == {"digest"}
    goes = release("alice", at(THURSDAY, 10), registry.policy("birthday"), window=3600)
    assert {run.next_attempt_at for run in waiting} == {goes}
    # Planned due then, as a kind whose policy folds is: no claim was spent on them.
    assert {(run.due_at, run.attempts) for run in waiting} == {(goes, 0)}
    tick_at(goes - timedelta(seconds=1))
    assert len(outbox) == 1
    tick_at(goes)
    assert outbox[1].recipient == "alice"
    assert outbox[1].body["content"].startswith("2 birthdays:")


@pytest.mark.django_db
def test_preference__the_wait_for_a_digest_is_said_in_the_project_s_language(
    settings: Any,
) -> None:
    settings.REMINDERS_DIGEST_SECONDS = 3600
    settings.LANGUAGE_CODE = "zh-hans"
    preferences.set("alice", "birthday", digest=True, by="crm")
    api.schedule("birthday", "alice", at=at(THURSDAY, 9), tz=TZ, channel="memory")
    tick_at(at(THURSDAY, 9))
    [run] = TaskRun.objects.filter(task__recipient="alice")
    goes = release("alice", at(THURSDAY, 10), registry.policy("birthday"), window=3600)
    when = goes.astimezone(SHANGHAI).strftime("%Y-%m-%d %H:%M:%S")
    assert run.error_code == "digest"
    assert run.error_message == f"等待汇总：将于 {when} {TZ} 与该时段内其他 birthday 一并发送。"  # noqa: RUF001


@pytest.mark.django_db
def test_preference__a_claim_takes_the_held_runs_of_a_recipient_whole(settings: Any) -> None:
    settings.REMINDERS_DIGEST_SECONDS = 3600
    members = [f"m{n}" for n in range(4)]
    for member in members:
        preferences.set(member, "birthday", digest=True, by="crm")
        for name in ("Li", "Wang", "Zhao"):
            api.schedule(
                "birthday",
                member,
                at=at(THURSDAY, 9),
                tz=TZ,
                channel="memory",
                payload={"name": name},
            )
    tick_at(at(THURSDAY, 9))  # all held for their 10:00 digests, spread after 10:00
    policy = registry.policy("birthday")
    latest = max(release(m, at(THURSDAY, 10), policy, window=3600) for m in members)
    claimed = dispatch.claim("test", 5, now=latest)
    runs = TaskRun.objects.filter(pk__in=claimed.run_ids).select_related("task")
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.task.recipient] = counts.get(run.task.recipient, 0) + 1
    assert set(counts.values()) == {3}


@pytest.mark.django_db
def test_preference__digest_and_opt_out_are_one_choice() -> None:
    with pytest.raises(ValidationError) as caught:
        preferences.set("alice", "follow_up", opted_out=True, digest=True, by="crm")
    assert "digest" in caught.value.message_dict
    with pytest.raises(ValidationError) as caught:
        preferences.set("alice", "follow_up", digest="yes", by="crm")  # type: ignore[arg-type]
    assert "digest" in caught.value.message_dict
    assert preferences.get("alice")["follow_up"].digest is False
    preferences.set("alice", "follow_up", digest=True, by="crm")
    assert preferences.get("alice")["follow_up"].digest is True


# --- The throttle ------------------------------------------------------------------------


@pytest.fixture
def throttled(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {"throttle_per_hour": 2, "max_lateness_seconds": 400 * 24 * 3600}
    }


@pytest.mark.django_db
@pytest.mark.usefixtures("throttled")
def test_throttle__the_excess_folds_into_the_next_digest_never_dropped(outbox: list) -> None:
    minutes = (0, 10, 20, 30, 40)
    tasks = [follow_up("alice", at(THURSDAY, 10, m), f"C{m}") for m in minutes]
    for m in minutes:
        tick_at(at(THURSDAY, 10, m))
    assert len(outbox) == 2  # 10:00 and 10:10; the rest held
    held = TaskRun.objects.filter(task__in=tasks[2:])
    assert {run.error_code for run in held} == {"throttled"}
    assert {run.next_attempt_at for run in held} == {at(THURSDAY, 11, 0)}
    tick_at(at(THURSDAY, 11, 0))
    assert len(outbox) == 3
    assert outbox[2].body["content"].startswith("3 follow-ups due:")
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}


@pytest.mark.django_db
@pytest.mark.usefixtures("throttled")
def test_throttle__a_burst_sends_what_the_hour_allows_and_folds_the_rest(outbox: list) -> None:
    tasks = [follow_up("alice", at(THURSDAY, 10), f"C{n}") for n in range(5)]
    tick_at(at(THURSDAY, 10))
    # Two an hour: one alone, the other four as one digest.
    assert len(outbox) == 2
    assert outbox[1].body["content"].startswith("4 follow-ups due:")
    assert {TaskRun.objects.get(task=t).status for t in tasks} == {TaskRun.Status.SENT}
    follow_up("alice", at(THURSDAY, 10, 30), "Later")
    tick_at(at(THURSDAY, 10, 30))
    assert len(outbox) == 2  # the hour is full until 11:00
    tick_at(at(THURSDAY, 11, 0))
    assert len(outbox) == 3


@pytest.mark.django_db
@pytest.mark.usefixtures("throttled")
def test_throttle__a_burst_of_more_lines_than_one_digest_holds_still_sends_two_an_hour(
    outbox: list,
) -> None:
    # 40 long lines need several digests: those the hour has no room for wait, none cut.
    long_path = "x" * 90
    tasks = [
        follow_up(
            "alice",
            at(THURSDAY, 10),
            f"Customer{n:02d}",
            url=f"https://crm.example/{long_path}/{n}",
        )
        for n in range(40)
    ]
    hour = at(THURSDAY, 10)
    sent_by_hour = []
    while TaskRun.objects.filter(task__in=tasks, status=TaskRun.Status.SENT).count() < 40:
        before = len(outbox)
        tick_at(hour)
        sent_by_hour.append(len(outbox) - before)
        assert len(sent_by_hour) < 10, sent_by_hour
        hour += timedelta(hours=1)
    assert max(sent_by_hour) == 2 and len(sent_by_hour) > 1, sent_by_hour
    listed = "".join(str(m.body) for m in outbox)
    assert all(f"Customer{n:02d}" in listed for n in range(40))


@pytest.mark.django_db
@pytest.mark.usefixtures("throttled")
def test_throttle__one_allowance_for_all_the_recipients_channels(outbox: list) -> None:
    for channel in ("memory", "memory_dedup"):
        for n in range(3):
            api.schedule(
                "follow_up",
                "alice",
                at=at(THURSDAY, 10),
                tz=TZ,
                channel=channel,
                payload={"customer": f"{channel}{n}"},
            )
    tick_at(at(THURSDAY, 10))
    assert len(outbox) == 2  # two an hour, whichever channel
    held = TaskRun.objects.filter(error_code="throttled")
    assert held.count() == 3 and {run.task.channel for run in held} == {"memory_dedup"}


# --- Quiet hours, a holiday, a year no package covers ------------------------------------


@pytest.fixture
def quiet_digested(settings: Any) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {
            "digest_seconds": 900,
            "quiet_hours": "21:00-08:30",
            "quiet_calendar": "cn",
            "max_lateness_seconds": 14 * 24 * 3600,
        }
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("day", "morning"),
    [
        (date(2026, 10, 1), date(2026, 10, 8)),  # National Day: quiet until it ends
        (date(2027, 1, 2), date(2027, 1, 4)),  # Saturday of a year no package covers
    ],
)
@pytest.mark.usefixtures("quiet_digested")
def test_quiet_hours__items_held_by_a_rest_day_go_as_one_digest_after_it(
    outbox: list, day: date, morning: date
) -> None:
    tasks = [follow_up("alice", at(day, 10, m), f"C{m}") for m in (0, 5)]
    tick_at(release("alice", at(day, 10, 15)))
    assert outbox == []
    held = TaskRun.objects.filter(task__in=tasks)
    assert {run.error_code for run in held} == {"quiet_hours"}
    until = held[0].next_attempt_at
    assert until.astimezone(SHANGHAI).date() == morning
    tick_at(until)
    assert len(outbox) == 1
    assert outbox[0].body["content"].startswith("2 follow-ups due:")


def _evening_and_morning(day: date) -> list[datetime]:
    """Every minute from 20:00 to 21:15, and from 07:55 to 09:00 the next morning."""
    evening = [at(day, 20) + timedelta(minutes=m) for m in range(76)]
    morning = [at(day + timedelta(days=1), 7, 55) + timedelta(minutes=m) for m in range(66)]
    return evening + morning


def _sent_outside(runs: list[TaskRun], begins: datetime, ends: datetime) -> None:
    """Each of ``runs`` went (never expired), before ``begins`` or from ``ends`` on."""
    for run in runs:
        run.refresh_from_db()
        assert (run.status, run.error_code) == (TaskRun.Status.SENT, "")
        sent = run.started_at if run.digest is None else run.digest.started_at
        assert sent < begins or sent >= ends, sent


@pytest.mark.django_db
def test_quiet_hours__an_item_due_just_before_them_goes_before_never_expired(
    settings: Any, outbox: list
) -> None:
    # The follow-ups' default deadline: two hours late at most.
    settings.REMINDERS_KINDS = {"follow_up": {"digest_seconds": 900, "quiet_hours": "21:00-08:30"}}
    tasks = [follow_up("alice", at(THURSDAY, 20, m), f"C{m}") for m in (50, 55)]
    for moment in _evening_and_morning(THURSDAY):
        tick_at(moment)
    runs = [TaskRun.objects.get(task=task) for task in tasks]
    _sent_outside(runs, at(THURSDAY, 21), at(THURSDAY + timedelta(days=1), 8, 30))


@pytest.mark.django_db
def test_quiet_hours__a_recipients_own_window_crossing_into_them_never_expires_an_item(
    settings: Any, outbox: list
) -> None:
    settings.REMINDERS_DIGEST_SECONDS = 3600
    preferences.set("alice", "follow_up", digest=True, by="crm")
    preferences.set_quiet_hours("alice", "20:30-08:00", by="crm")
    tasks = [follow_up("alice", at(THURSDAY, 20, m), f"C{m}") for m in (10, 20)]
    for moment in _evening_and_morning(THURSDAY):
        tick_at(moment)
    runs = [TaskRun.objects.get(task=task) for task in tasks]
    _sent_outside(runs, at(THURSDAY, 20, 30), at(THURSDAY + timedelta(days=1), 8))


@pytest.mark.django_db
@pytest.mark.usefixtures("quiet_digested")
def test_quiet_hours__a_make_up_working_saturday_is_not_quiet_its_digest_goes_on_time(
    outbox: list,
) -> None:
    saturdays = [date(2026, 1, 3) + timedelta(weeks=n) for n in range(52)]
    made_up = next(day for day in saturdays if day_off("cn", day) is None)
    for minute in (0, 5):
        follow_up("alice", at(made_up, 10, minute), f"C{minute}")
    assert tick_at(release("alice", at(made_up, 10, 15))) == 1
    assert outbox[0].body["content"].startswith("2 follow-ups due:")


# --- One message a day ------------------------------------------------------------------


@pytest.mark.django_db
def test_key_per_day__two_runs_of_one_day_folded_together_send_once(
    settings: Any, outbox: list
) -> None:
    settings.REMINDERS_KINDS = {
        "follow_up": {
            "digest_seconds": 900,
            "key_per": "day",
            "max_lateness_seconds": 400 * 24 * 3600,
        }
    }
    daily = api.schedule(
        "follow_up",
        "alice",
        cron="0,5 9 * * *",
        tz=TZ,
        channel="memory",
        payload={"customer": "Daily", "url": "https://crm.example/c/Daily"},
    )
    daily.plan_first_run(at(THURSDAY, 8))
    daily.save(update_fields=["next_run"])
    other = follow_up("alice", at(THURSDAY, 9, 7), "Other")
    for minute in (0, 5, 7):
        tick_at(at(THURSDAY, 9, minute))
    goes = release("alice", at(THURSDAY, 9, 15))
    assert TaskRun.objects.filter(task=daily, due_at=goes).count() == 2  # one day, two runs
    tick_at(goes)
    for later in (1, 2, 3):
        tick_at(goes + timedelta(minutes=later))
    listed = "".join(m.body["content"] for m in outbox)
    assert listed.count("Daily (") == 1
    assert listed.count("Other (") == 1
    first, second = TaskRun.objects.filter(task=daily, run_date=THURSDAY).order_by("pk")
    assert first.status == TaskRun.Status.SENT
    assert (second.status, second.error_code) == (TaskRun.Status.SKIPPED, "duplicate")
    assert TaskRun.objects.get(task=other).status == TaskRun.Status.SENT
