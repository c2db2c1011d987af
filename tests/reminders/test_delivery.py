import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reminders import kinds
from reminders.engine import dispatch
from reminders.engine.delivery import deliver
from reminders.exceptions import PermanentSendError, ThrottledSendError, TransientSendError
from reminders.models import RateBucket, ScheduledTask, SendLog, TaskRun
from reminders.ratelimit import database as ratelimit_database
from reminders.senders.base import SendResult
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued, tick
from tests.support.transactions import transactions

pytestmark = pytest.mark.django_db


def test_deliver__records_sent_in_ledger_and_run(make_task, outbox, received):
    task = make_task(recipient="alice", payload={"content": "Call ACME back"})
    assert tick() == 1
    run = task.runs.get()
    log = SendLog.objects.get()
    assert (run.status, run.attempts, run.lease_token, run.lease_expires_at) == (
        "sent",
        1,
        "",
        None,
    )
    assert run.finished_at >= run.started_at and run.duration is not None
    assert (log.status, log.run_id, log.recipient, log.channel) == (
        "sent",
        run.pk,
        "alice",
        "memory",
    )
    assert log.key == run.ledger_key
    content = json.dumps(f"Call ACME back\n{kinds.stamp(task, run)}", ensure_ascii=False)
    assert log.body == f'{{"msgtype":"text","text":{{"content":{content}}}}}'
    assert log.provider_message_id.startswith("memory-")
    assert outbox[0].rendered == log.body
    assert received == [("run_sent", run.pk, "sent")]
    task.refresh_from_db()
    assert task.last_run_at is not None


def test_deliver__a_redelivered_job_sends_nothing_twice(make_task, outbox):
    make_task()
    dispatch.materialize()
    dispatch.claim("test", 10)
    assert run_queued(keep=True) == 1
    assert run_queued() == 0  # the broker hands out the same job again
    assert len(outbox) == 1
    assert SendLog.objects.get().attempts == 1


def test_deliver__a_passing_error_is_retried_with_the_same_body_and_sent_once(
    make_task, outbox, received
):
    task = make_task()
    MemorySender.script[:] = [TransientSendError("busy", code="-1")]
    assert tick() == 0
    run = task.runs.get()
    assert (run.status, run.attempts, run.error_code) == ("retrying", 1, "-1")
    assert timedelta(seconds=59) < run.next_attempt_at - timezone.now() <= timedelta(seconds=60)
    assert SendLog.objects.get().status == "failed"
    assert tick() == 0  # not before its time
    assert tick(now=run.next_attempt_at) == 1
    run.refresh_from_db()
    assert (run.status, run.attempts, run.error_code) == ("sent", 2, "")
    assert len(outbox) == 1
    log = SendLog.objects.get()
    assert (log.status, log.attempts, log.body) == ("sent", 2, outbox[0].rendered)
    assert ScheduledTask.objects.get(pk=task.pk).retry_count == 1
    assert [name for name, *_ in received] == ["run_sent"]


def test_deliver__retries_follow_the_configured_delays_then_fail_and_alert(
    make_task, outbox, received, settings
):
    settings.REMINDERS_RETRY_DELAYS = "60,300,900"
    task = make_task()
    MemorySender.script[:] = [TransientSendError("timeout", code="timeout")] * 4
    now = timezone.now()
    gaps = []
    for _ in range(4):
        tick(now=now)
        run = task.runs.get()
        if run.status == "retrying":
            gaps.append(round((run.next_attempt_at - timezone.now()).total_seconds()))
            now = run.next_attempt_at
    assert gaps == [60, 300, 900]
    assert (run.status, run.attempts) == ("failed", 4)
    assert received == [("run_failed", run.pk, "failed")]
    assert outbox == []
    assert SendLog.objects.get().status == "failed"


def test_deliver__a_permanent_error_fails_at_once_without_retry(make_task, outbox, received):
    task = make_task()
    MemorySender.script[:] = [PermanentSendError("invalid user", code="81013")]
    tick()
    run = task.runs.get()
    assert (run.status, run.attempts, run.error_code, run.next_attempt_at) == (
        "failed",
        1,
        "81013",
        None,
    )
    assert received == [("run_failed", run.pk, "failed")]
    assert tick(now=timezone.now() + timedelta(hours=1)) == 0


@pytest.mark.parametrize(
    ("channel", "status", "ledger"),
    [("memory_dedup", "retrying", "unknown"), ("memory", "unknown", "unknown")],
)
def test_deliver__an_unexpected_sender_exception_leaves_delivery_in_doubt(
    make_task, outbox, received, channel, status, ledger
):
    # Nothing says the request had not left: retried only where a re-send is dropped.
    task = make_task(channel=channel)
    MemorySender.script[:] = [ZeroDivisionError("bug in a sender")]
    tick()
    run = task.runs.get()
    assert (run.status, run.error_code) == (status, "exception")
    assert "ZeroDivisionError" in run.error_message
    assert SendLog.objects.get().status == ledger
    if status == "unknown":
        assert received == [("run_unknown", run.pk, "unknown")]


def test_deliver__a_channel_removed_from_settings_fails_the_run(make_task, outbox, settings):
    task = make_task(channel="console")
    settings.REMINDERS_CHANNELS = {"memory": {"BACKEND": "reminders.senders.memory.MemorySender"}}
    tick()
    assert task.runs.get().status == "failed"
    assert task.runs.get().error_code == "channel"


def crash_mid_send(task: ScheduledTask) -> TaskRun:
    """Leave ``task``'s run as a worker that died between reserve and record leaves it."""
    dispatch.materialize()
    claim = dispatch.claim("doomed", 10)
    from reminders.engine.delivery import reserve, start

    [job] = start(claim.token, claim.run_ids)
    assert reserve([job]) == ([job], [])  # reserved 'sending'; the process died in the send
    run = task.runs.get()
    assert (run.status, SendLog.objects.get().status) == ("running", "sending")
    return run


def test_deliver__after_a_crash_mid_send_marks_unknown_and_does_not_send_again(
    make_task, outbox, received, settings
):
    run = crash_mid_send(make_task())
    after_lease = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert tick(now=after_lease) == 0
    run.refresh_from_db()
    assert (run.status, run.error_code) == ("unknown", "unknown")
    assert SendLog.objects.get().status == "unknown"
    assert received == [("run_unknown", run.pk, "unknown")]
    assert outbox == []


def test_deliver__after_a_crash_mid_send_resends_where_the_provider_deduplicates(
    make_task, tmp_path, monkeypatch, settings
):
    monkeypatch.setenv("RECORD_FILE", str(tmp_path / "delivered.jsonl"))
    run = crash_mid_send(make_task(channel="recording_dedup"))
    after_lease = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert tick(now=after_lease) == 1
    run.refresh_from_db()
    log = SendLog.objects.get()
    # Two sends of the key, one provider attempt of the run: the first died with its worker.
    assert (run.status, run.attempts, run.crashes) == ("sent", 1, 1)
    assert (log.status, log.attempts) == ("sent", 2)
    lines = (tmp_path / "delivered.jsonl").read_text().splitlines()
    assert len(lines) == 1


@pytest.mark.usefixtures("reports_every_day")
def test_deliver__a_second_run_with_an_already_sent_key_is_skipped(make_task, outbox):
    task = make_task("daily_report", cron="0 9 * * *", tz="UTC")
    first = task.next_run
    tick(now=first + timedelta(minutes=10))
    # Moved to 10:00 the same day: a new occurrence, but the same day's report.
    ScheduledTask.objects.filter(pk=task.pk).update(
        cron="0 10 * * *", next_run=first + timedelta(hours=1)
    )
    tick(now=first + timedelta(hours=1, minutes=10))
    statuses = list(task.runs.order_by("occurrence").values_list("status", "error_code"))
    assert statuses == [("sent", ""), ("skipped", "duplicate")]
    assert len(outbox) == 1


def test_deliver__query_budget_per_sent_message(make_task, outbox, monkeypatch):
    # The pause read once stays trusted however slow the machine is.
    monkeypatch.setattr(ratelimit_database, "PAUSES_FRESH_SECONDS", 3600.0)
    for _ in range(20):
        make_task()
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    with CaptureQueriesContext(connection) as queries:
        assert deliver(claim.token, claim.run_ids) == 20
    # Per job: the record that it took its runs (INSERT, committed before any builder
    # runs; DELETEd as it starts them), start (UPDATE, SELECT runs+tasks, SELECT
    # ledger), the channel's pause (SELECT: an unlimited channel is never locked; found
    # clear, not read again for a second) and the closing UPDATE of the tasks; per
    # message: the ledger row INSERTed ('sending'), then it and the run UPDATEd ('sent').
    per_job, per_message = 7, 3
    statements = [q for q in queries.captured_queries if not _is_transaction_control(q["sql"])]
    assert len(statements) == per_job + per_message * 20, "\n".join(
        q["sql"][:120] for q in statements
    )
    # A savepoint for each of the job's transactions (the test's own transaction makes
    # them savepoints): the take, the start, each message's and the end. None per run:
    # builders that raise nothing are called without one.
    savepoints = [q for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 3 + 20


def test_deliver__a_deduplicating_channel_sends_a_claim_as_one_batch(make_task, outbox):
    for _ in range(20):
        make_task(channel="memory_dedup")
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    MemorySender.script[:] = [SendResult(f"m-{n}") for n in range(20)]
    with CaptureQueriesContext(connection) as queries:
        assert deliver(claim.token, claim.run_ids) == 20
    # The take (INSERT, DELETE), start (3), the channel's pause, one INSERT of the keys,
    # one UPDATE of them and one of the runs when sent, the tasks' closing UPDATE: the
    # same for 1 message or 20.
    statements = [q for q in queries.captured_queries if not _is_transaction_control(q["sql"])]
    assert len(statements) == 10, "\n".join(q["sql"][:120] for q in statements)
    # Each key got the message id of its own reply.
    assert dict(SendLog.objects.values_list("key", "provider_message_id")) == {
        message.idempotency_key: f"m-{n}" for n, message in enumerate(outbox)
    }
    assert set(SendLog.objects.values_list("status", "attempts")) == {("sent", 1)}
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_deliver__throttled_mid_batch_hands_the_rest_back_unspent(make_task, outbox):
    tasks = [make_task(channel="memory_dedup") for _ in range(5)]
    MemorySender.script[:] = [None, ThrottledSendError("api freq out of limit", code="45009")]
    assert tick() == 1
    # The refused key may be sent again; the three never tried hold no key at all.
    assert sorted(SendLog.objects.values_list("status", flat=True)) == ["failed", "sent"]
    waiting = TaskRun.objects.exclude(status="sent")
    assert {(r.status, r.attempts, r.error_code) for r in waiting} == {
        ("scheduled", 0, "rate_limited")
    }
    RateBucket.objects.filter(name="memory_dedup:channel").update(paused_until=timezone.now())
    assert tick(now=timezone.now() + timedelta(seconds=61)) == 4
    assert sorted(m.recipient for m in outbox) == sorted(t.recipient for t in tasks)
    # Only the refused key was handed to the provider twice.
    assert sorted(SendLog.objects.values_list("status", "attempts")) == [("sent", 1)] * 4 + [
        ("sent", 2)
    ]


@pytest.fixture
def slow_first_reply(monkeypatch):
    """The first reply takes 0.5 s, longer than a paced channel's slot may wait (0.3 s)."""
    from reminders.engine import sending

    monkeypatch.setattr(sending, "STALE_SLOT_SECONDS", 0.3)
    MemorySender.script[:] = [0.5]


def test_deliver__a_batch_fallen_behind_its_slots_hands_the_rest_back(
    make_task, outbox, slow_first_reply, settings
):
    settings.REMINDERS_HIGH_RATE_SHARE = 0  # the channel's whole burst: one batch of three
    for _ in range(3):
        make_task(channel="paced_dedup")
    # The other two are not sent late: they go back in line.
    assert tick() == 1
    assert list(SendLog.objects.values_list("status", flat=True)) == ["sent"]
    waiting = TaskRun.objects.exclude(status="sent")
    assert {(r.status, r.attempts) for r in waiting} == {("scheduled", 0)}
    assert tick(now=timezone.now() + timedelta(seconds=1)) == 2
    assert len(outbox) == 3


def test_deliver__without_limits_a_slow_reply_does_not_cut_the_batch(
    make_task, outbox, slow_first_reply
):
    for _ in range(3):
        make_task(channel="memory_dedup")
    assert tick() == 3
    assert set(TaskRun.objects.values_list("status", "attempts")) == {("sent", 1)}


def test_deliver__a_crash_mid_batch_is_settled_by_resending_the_batch(make_task, outbox, settings):
    tasks = [make_task(channel="memory_dedup") for _ in range(3)]
    dispatch.materialize()
    claim = dispatch.claim("doomed", 10)
    MemorySender.script[:] = [None, WorkerDied()]
    with pytest.raises(WorkerDied):
        deliver(claim.token, claim.run_ids)
    # The first message went, but the batch is recorded only as a whole: all in doubt.
    assert len(outbox) == 1
    assert set(SendLog.objects.values_list("status", flat=True)) == {"sending"}
    after_lease = timezone.now() + timedelta(seconds=settings.REMINDERS_LEASE_SECONDS + 1)
    assert tick(now=after_lease) == 3
    # Re-sent as the same bytes: the provider dropped the copy of the first.
    assert sorted(m.recipient for m in outbox) == sorted(t.recipient for t in tasks)
    # The dead worker's attempt is not the provider's: one attempt, one death each.
    assert set(TaskRun.objects.values_list("status", "attempts", "crashes")) == {("sent", 1, 1)}


class WorkerDied(BaseException):
    """What a sender's call never returns from: the process is gone."""


def _is_transaction_control(sql: str) -> bool:
    first = sql.split()[0].upper()
    return first in {"BEGIN", "COMMIT", "SAVEPOINT", "RELEASE", "ROLLBACK", "SET"}


def test_deliver__keeps_what_else_the_provider_said_in_the_ledger(make_task, outbox):
    from reminders.senders.base import SendResult

    make_task()
    MemorySender.script[:] = [SendResult("m-1", "0", {"invaliduser": "ghost"})]
    tick()
    log = SendLog.objects.get()
    assert (log.provider_message_id, log.reply_detail) == ("m-1", {"invaliduser": "ghost"})


@pytest.mark.django_db(transaction=True)
def test_deliver__one_transaction_per_message_where_each_is_its_own_batch(make_task, outbox):
    for _ in range(20):
        make_task()
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    with transactions() as counted:
        assert deliver(claim.token, claim.run_ids) == 20
    # The take (its own commit, before any builder runs); the start; for each message,
    # its key reserved with the message before it recorded (the channel's pause read
    # with the first); the end: the last one recorded, the tasks stamped.
    if connection.vendor != "postgresql":
        assert counted.count == 1 + 1 + 20 + 1, str(counted)
    else:
        # Each message one statement, atomic on its own (no BEGIN, no COMMIT): its key
        # reserved, and the one before it recorded in data-modifying WITH queries; the
        # pause read on its own.
        assert counted.count == 1 + 1 + 1 + 20 + 1, str(counted)
        alone = [group[0][:40] for group in counted.groups if len(group) == 1]
        assert sum(sql.startswith('INSERT INTO "reminders_sendlog"') for sql in alone) == 1
        assert sum(sql.startswith('WITH u0 AS (UPDATE "reminders_sendlog"') for sql in alone) == 19
    assert set(SendLog.objects.values_list("status", flat=True)) == {"sent"}
    assert set(TaskRun.objects.values_list("status", flat=True)) == {"sent"}


@pytest.mark.django_db(transaction=True)
def test_deliver__a_deduplicating_channel_sends_a_claim_in_four_transactions(make_task, outbox):
    for _ in range(20):
        make_task(channel="memory_dedup")
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    with transactions() as counted:
        assert deliver(claim.token, claim.run_ids) == 20
    # The take; the start; the pause read and the keys reserved (on PostgreSQL each a
    # statement on its own, no BEGIN nor COMMIT); the record and the tasks stamped.
    assert counted.count == (5 if connection.vendor == "postgresql" else 4), str(counted)


@pytest.mark.parametrize(
    "transactions_real",
    [
        pytest.param(False, marks=pytest.mark.django_db),
        # On PostgreSQL the key and the record go as one statement outside a transaction.
        pytest.param(True, marks=pytest.mark.django_db(transaction=True)),
    ],
    ids=["in_a_test_transaction", "transactions_real"],
)
def test_deliver__a_key_taken_while_the_message_before_it_was_sent__waits_and_that_one_is_recorded(
    make_task, outbox, monkeypatch, transactions_real
):
    from reminders.engine import sending

    first, second = make_task(), make_task()
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    second_key = second.runs.get().ledger_key
    call = sending._call

    def another_run_takes_the_next_key(job):
        # Another run reserves the second message's key while the first is being sent.
        if not SendLog.objects.filter(key=second_key).exists():
            SendLog.objects.create(key=second_key, task=second, recipient="x", channel="memory")
        return call(job)

    monkeypatch.setattr(sending, "_call", another_run_takes_the_next_key)
    assert deliver(claim.token, claim.run_ids) == 1
    # The reservation that met the taken key was rolled back with the record it carried,
    # and both were done again one by one: the first message is recorded, the second waits.
    assert [m.idempotency_key for m in outbox] == [first.runs.get().ledger_key]
    assert (first.runs.get().status, SendLog.objects.get(run__task=first).status) == (
        "sent",
        "sent",
    )
    assert second.runs.get().status == "scheduled"
    assert SendLog.objects.get(key=second_key).run_id is None


def test_one_message__the_rows_it_writes_are_those_accounted(make_task, outbox):
    """Rows written (inserted, updated, deleted) for 20 follow-ups that use no feature
    (no preference, quiet hours, digest or throttle), from materializing to the job's
    end, as ``docs/explanation/benchmarks.md`` accounts for them: a row more per message
    fails here."""
    from collections import Counter

    if connection.vendor == "sqlite":
        pytest.skip("SQLite's row count of an INSERT ... RETURNING is not known when it returns")
    written: Counter[str] = Counter()
    write = re.compile(
        r"^\s*(INSERT|UPDATE|DELETE)\s+(?:IGNORE\s+)?(?:INTO\s+|FROM\s+)?(\S+)", re.I
    )

    def counting(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        result = execute(sql, params, many, context)
        found = write.match(sql)
        if found:
            verb, table = found[1].upper(), found[2].strip('`"')
            written[f"{verb} {table}"] += max(context["cursor"].rowcount, 0)
        return result

    for _ in range(20):
        make_task()
    with connection.execute_wrapper(counting):
        assert tick() == 20
    per_message = {
        "INSERT reminders_taskrun": 1,  # the run, materialized
        "UPDATE reminders_scheduledtask": 2,  # its next run (none: a one-shot); its end
        "UPDATE reminders_taskrun": 3,  # claimed; started; sent
        "INSERT reminders_sendlog": 1,  # the key reserved ('sending') before the send
        "UPDATE reminders_sendlog": 1,  # 'sent'
    }
    per_job = {
        "INSERT django_q_ormq": 1,  # the job, enqueued by the claim
        "DELETE django_q_ormq": 1,  # ... and acknowledged
        "INSERT reminders_jobtake": 1,  # the job took its runs (committed on its own)
        "DELETE reminders_jobtake": 1,  # ... and started them
    }
    expected = Counter({name: 20 * n for name, n in per_message.items()}) + Counter(per_job)
    assert written == expected
    assert sum(written.values()) / 20 == 8.2


@pytest.mark.django_db(transaction=True)
def test_deliver__a_paused_channel_s_claim_waits_unspent_with_real_transactions(make_task, outbox):
    """Where the keys and the record go as one statement (PostgreSQL, outside a
    transaction), a batch the pause refuses whole, with nothing to record before it,
    sends nothing and writes nothing but the wait."""
    for _ in range(3):
        make_task()
    RateBucket.objects.create(
        name="memory:channel",
        paused_until=timezone.now() + timedelta(minutes=5),
        pause_reason="45009 elsewhere",
    )
    dispatch.materialize()
    claim = dispatch.claim("test", 100)
    assert deliver(claim.token, claim.run_ids) == 0
    assert outbox == []
    assert not SendLog.objects.exists()
    waiting = TaskRun.objects.all()
    assert {(run.status, run.attempts, run.error_code) for run in waiting} == {
        ("scheduled", 0, "rate_limited")
    }
