"""The hand-written statements of ``reminders.engine.sql`` against the ORM queries they stand
for, on each database: the same rows written, the same rows counted."""

from datetime import datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from reminders.engine import dispatch
from reminders.models import RateBucket, SendLog, TaskRun, sql

pytestmark = pytest.mark.django_db(transaction=True)

CLOSED = ("status", "error_code", "error_message", "finished_at", "duration", "lease_token")


def two_runs(make_task) -> tuple[TaskRun, TaskRun]:
    make_task(recipient="alice")
    make_task(recipient="bob")
    dispatch.materialize()
    first, second = TaskRun.objects.order_by("pk")
    TaskRun.objects.update(lease_token="held", lease_expires_at=timezone.now())
    return first, second


def closing(now) -> dict:
    return {
        "status": TaskRun.Status.SENT,
        "error_code": "",
        "error_message": "it went",
        "finished_at": now,
        "duration": timedelta(seconds=1, microseconds=250_000),
        "lease_token": "",
        "lease_expires_at": None,
    }


def row(run: TaskRun) -> tuple:
    fresh = TaskRun.objects.get(pk=run.pk)
    return tuple(getattr(fresh, name) for name in (*CLOSED, "lease_expires_at"))


def test_update__writes_what_the_orm_s_update_writes(make_task):
    ours, orm = two_runs(make_task)
    now = timezone.now().replace(microsecond=123456)
    assert sql.update(TaskRun, [ours.pk], closing(now), lease_token="held") == 1
    assert TaskRun.objects.filter(pk=orm.pk, lease_token="held").update(**closing(now)) == 1
    assert row(ours) == row(orm)
    assert row(ours) == ("sent", "", "it went", now, timedelta(seconds=1.25), "", None)


def test_update__only_rows_that_match_every_filter(make_task):
    first, second = two_runs(make_task)
    TaskRun.objects.filter(pk=second.pk).update(lease_token="taken over")
    values = closing(timezone.now())
    assert sql.update(TaskRun, [first.pk, second.pk], values, lease_token="held") == 1
    assert TaskRun.objects.get(pk=first.pk).status == "sent"
    assert TaskRun.objects.get(pk=second.pk).status == "scheduled"
    assert sql.update(TaskRun, [], values, lease_token="held") == 0


def test_update__counts_rows_matched_even_if_nothing_changes(make_task):
    """MySQL counts changed rows unless told otherwise; a caller asks whether it still
    held the rows, so an UPDATE that writes the same values must count them."""
    first, _ = two_runs(make_task)
    values = {"lease_token": "held"}
    assert sql.update(TaskRun, [first.pk], values, lease_token="held") == 1


def test_update__belongs_to_the_transaction_in_progress(make_task):
    first, _ = two_runs(make_task)
    with pytest.raises(RuntimeError), transaction.atomic():
        sql.update(TaskRun, [first.pk], closing(timezone.now()), lease_token="held")
        raise RuntimeError("roll it back")
    assert TaskRun.objects.get(pk=first.pk).status == "scheduled"


def test_update_returning_rows__the_rows_it_changed_with_their_fields_as_written(make_task):
    first, second = two_runs(make_task)
    TaskRun.objects.filter(pk=second.pk).update(lease_token="taken over")
    later = timezone.now().replace(microsecond=654321)
    rows = sql.update_returning_rows(
        TaskRun.objects.filter(pk__in=[first.pk, second.pk], lease_token="held"),
        {"attempts": F("attempts") + 2, "next_attempt_at": later},
        ("pk", "attempts", "next_attempt_at"),
    )
    if connection.vendor == "postgresql":
        assert rows == [(first.pk, 2, later)]
        assert TaskRun.objects.get(pk=first.pk).attempts == 2
    else:  # the caller updates, and reads back what it needs
        assert rows is None
        assert TaskRun.objects.get(pk=first.pk).attempts == 0
    assert TaskRun.objects.get(pk=second.pk).attempts == 0


def test_any_set__as_the_orm_s_exists():
    RateBucket.objects.create(name="a:channel")
    RateBucket.objects.create(name="b:channel", paused_until=timezone.now(), pause_reason="x")
    cases = [[], ["a:channel"], ["b:channel"], ["a:channel", "b:channel"], ["c:channel"]]
    for names in cases:
        expected = RateBucket.objects.filter(name__in=names, paused_until__isnull=False).exists()
        assert sql.any_set(RateBucket, "name", names, "paused_until") is expected, names
    assert [sql.any_set(RateBucket, "name", n, "paused_until") for n in cases] == [
        False,
        False,
        True,
        True,
        False,
    ]


def ledger_row(run: TaskRun, key: str) -> SendLog:
    return SendLog(
        key=key,
        task=run.task,
        run=run,
        recipient="alice",
        channel="memory",
        body='{"msgtype": "text"}',
        reply_detail={"errmsg": "ok", "n": [1, 2]},
        attempts=1,
    )


def test_insert__writes_what_bulk_create_writes(make_task):
    run, _ = two_runs(make_task)
    ours = [ledger_row(run, "k1"), ledger_row(run, "k2")]
    sql.insert(ours)
    SendLog.objects.bulk_create([ledger_row(run, "k3")])
    columns = [f.attname for f in SendLog._meta.concrete_fields if f.attname not in ("id", "key")]
    stored = {
        row.key: {name: getattr(row, name) for name in columns}
        for row in SendLog.objects.order_by("key")
    }
    moments = ("created_at", "updated_at")
    assert {k: {n: v for n, v in row.items() if n not in moments} for k, row in stored.items()} == {
        key: {n: v for n, v in stored["k3"].items() if n not in moments} for key in stored
    }
    assert all(row["created_at"] and row["updated_at"] for row in stored.values())
    if connection.features.can_return_rows_from_bulk_insert:
        assert [row.pk for row in ours] == list(
            SendLog.objects.filter(key__in=["k1", "k2"])
            .order_by("key")
            .values_list("pk", flat=True)
        )
    assert not any(row._state.adding for row in ours)


def test_insert__a_key_taken_raises_integrity_error_and_inserts_none(make_task):
    run, _ = two_runs(make_task)
    sql.insert([ledger_row(run, "taken")])
    with pytest.raises(IntegrityError), transaction.atomic():
        sql.insert([ledger_row(run, "new"), ledger_row(run, "taken")])
    assert list(SendLog.objects.values_list("key", flat=True)) == ["taken"]


def test_insert__ignoring_conflicts_leaves_out_the_keys_taken_and_inserts_the_rest(make_task):
    run, _ = two_runs(make_task)
    sql.insert([ledger_row(run, "taken")])
    rows = [ledger_row(run, "new"), ledger_row(run, "taken"), ledger_row(run, "newer")]
    assert sql.insert(rows, ignore_conflicts=True) == 2
    assert sorted(SendLog.objects.values_list("key", flat=True)) == ["new", "newer", "taken"]
    # As bulk_create(ignore_conflicts=True): which rows went is not known, so no pk is set.
    assert [row.pk for row in rows] == [None, None, None]


def test_insert__ignoring_conflicts_writes_what_bulk_create_writes(make_task):
    """The same rows as ``bulk_create(ignore_conflicts=True)`` (on PostgreSQL one array a
    column), each value prepared once per distinct value and type: 1, True and 1.0 in
    a JSON column stay 1, true and 1.0."""
    run, _ = two_runs(make_task)
    values = [{"errmsg": "ok", "n": [1, 2]}, 1, True, 1.0, [1, "a"], "text", {"errmsg": "ok"}]
    ours = []
    for n, value in enumerate(values):
        row = ledger_row(run, f"ours{n}")
        row.reply_detail, row.attempts = value, n + 1
        ours.append(row)
    theirs = [ledger_row(run, f"theirs{n}") for n in range(len(values))]
    for mine, other in zip(ours, theirs, strict=True):
        other.reply_detail, other.attempts = mine.reply_detail, mine.attempts
    assert sql.insert(ours, ignore_conflicts=True) == len(values)
    SendLog.objects.bulk_create(theirs, ignore_conflicts=True)
    skipped = ("id", "key", "created_at", "updated_at")
    columns = [f.attname for f in SendLog._meta.concrete_fields if f.attname not in skipped]
    stored = {row.key: tuple(getattr(row, c) for c in columns) for row in SendLog.objects.all()}
    assert [stored[f"ours{n}"] for n in range(len(values))] == [
        stored[f"theirs{n}"] for n in range(len(values))
    ]
    details = [stored[f"ours{n}"][columns.index("reply_detail")] for n in range(len(values))]
    assert [(type(d), d) for d in details] == [(type(v), v) for v in values]


def test_insert__more_rows_than_one_statement_may_carry_go_in_several(make_task, monkeypatch):
    run, _ = two_runs(make_task)
    monkeypatch.setattr(connection.ops, "bulk_batch_size", lambda fields, objs: 2)
    statements = []
    with connection.execute_wrapper(
        lambda execute, sql_, *args: statements.append(sql_) or execute(sql_, *args)
    ):
        sql.insert([ledger_row(run, f"k{n}") for n in range(5)])
    assert sum(statement.startswith("INSERT") for statement in statements) == 3
    assert SendLog.objects.count() == 5


@pytest.mark.skipif(connection.vendor != "postgresql", reason="data-modifying WITH: PostgreSQL's")
def test_together__the_updates_and_the_insert_in_one_statement_each_counted(make_task):
    first, second = two_runs(make_task)
    now = timezone.now()
    updates = [
        sql.Update(TaskRun, [first.pk, second.pk], closing(now), {"lease_token": "held"}),
        sql.Update(TaskRun, [], closing(now)),  # nothing to update: counted 0, not sent
        sql.Update(TaskRun, [first.pk], {"error_code": "x"}, {"lease_token": "another"}),
    ]
    rows = [ledger_row(first, "k1"), ledger_row(second, "k2")]
    statements = []
    with connection.execute_wrapper(
        lambda execute, sql_, *args: statements.append(sql_) or execute(sql_, *args)
    ):
        assert sql.together(updates, rows) == [2, 0, 0]
    assert len(statements) == 1 and statements[0].startswith("WITH")
    assert row(first)[0] == row(second)[0] == TaskRun.Status.SENT
    assert [r.pk for r in rows] == list(
        SendLog.objects.filter(key__in=["k1", "k2"]).order_by("key").values_list("pk", flat=True)
    )
    # Nothing to insert: the updates alone.
    assert sql.together([sql.Update(SendLog, [rows[0].pk], {"error_message": "e"})], []) == [1]
    assert SendLog.objects.get(key="k1").error_message == "e"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="data-modifying WITH: PostgreSQL's")
def test_together__a_key_taken_writes_nothing(make_task):
    first, second = two_runs(make_task)
    sql.insert([ledger_row(first, "taken")])
    update = sql.Update(TaskRun, [first.pk], closing(timezone.now()), {"lease_token": "held"})
    with pytest.raises(IntegrityError):
        sql.together([update], [ledger_row(second, "new"), ledger_row(second, "taken")])
    assert list(SendLog.objects.values_list("key", flat=True)) == ["taken"]
    assert TaskRun.objects.get(pk=first.pk).status == TaskRun.Status.SCHEDULED


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements: PostgreSQL's")
def test_cursor_of__statements_become_prepared_where_the_connection_prepares(make_task):
    """With ``prepare_threshold`` (the standalone project's default, 5), a shape run that
    many times on a connection is a prepared statement, planned once; the rows are
    those the ORM's statement writes."""
    connection.ensure_connection()
    assert connection.connection.prepare_threshold == 5
    first, _ = two_runs(make_task)
    for n in range(6):
        assert sql.update(TaskRun, [first.pk], {"error_message": f"n{n}"}, lease_token="held") == 1
    assert any('UPDATE "reminders_taskrun"' in text for text in prepared_statements())
    assert TaskRun.objects.get(pk=first.pk).error_message == "n5"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="prepared statements: PostgreSQL's")
def test_cursor_of__nothing_is_prepared_where_the_connection_does_not(make_task, monkeypatch):
    """Django's default (no ``prepare_threshold``), which a pooler in transaction mode
    needs: the same statements, none of them prepared."""
    connection.ensure_connection()
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)
    first, _ = two_runs(make_task)
    for n in range(6):
        assert sql.update(TaskRun, [first.pk], {"error_message": f"n{n}"}, lease_token="held") == 1
    assert prepared_statements() == []
    assert TaskRun.objects.get(pk=first.pk).error_message == "n5"


def test_cursor_of__where_queries_are_logged_they_read_with_their_values(make_task):
    first, _ = two_runs(make_task)
    with CaptureQueriesContext(connection) as queries:
        sql.update(TaskRun, [first.pk], {"error_message": "logged"}, lease_token="held")
    assert "'logged'" in queries.captured_queries[-1]["sql"]


def orm_runs(ids, token):
    from django.db.models import OuterRef, Subquery

    from reminders.models import Preference, QuietHours

    def first(model, **where):
        return Subquery(model.objects.filter(**where).values("pk")[:1])

    same = {"recipient": OuterRef("task__recipient"), "kind": OuterRef("task__kind")}
    return list(
        TaskRun.objects.filter(pk__in=ids, lease_token=token)
        .select_related("task")
        .annotate(
            held_opt_out=first(Preference, **same, opted_out=True),
            held_digest=first(Preference, **same, digest=True, opted_out=False),
            held_quiet=first(QuietHours, recipient=OuterRef("task__recipient")),
        )
        .order_by("priority", "next_attempt_at")
    )


def values_of(obj) -> dict:
    return {field.attname: getattr(obj, field.attname) for field in obj._meta.concrete_fields}


def test_select_joined__reads_what_the_orm_s_select_related_reads(make_task):
    """Every column of the run and of its task (JSON, durations, times: the converters
    the ORM applies), the choices looked up, the order, and the task cached on the run,
    as the start's ORM query read them."""
    from reminders.engine import holds
    from reminders.models import Preference, QuietHours

    for name in ("alice", "bob", "carol", "dave"):
        make_task(recipient=name, payload={"title": f"{name}'s", "n": [1, 2], "none": None})
    dispatch.materialize()
    runs = list(TaskRun.objects.order_by("pk"))
    kind = runs[0].task.kind
    now = timezone.now()
    who = {"changed_by": "ops", "changed_at": now}
    Preference.objects.create(recipient="alice", kind=kind, opted_out=True, **who)
    Preference.objects.create(recipient="bob", kind=kind, digest=True, **who)
    QuietHours.objects.create(recipient="carol", hours="22:00-08:00", **who)
    TaskRun.objects.update(lease_token="job", duration=timedelta(seconds=3))
    TaskRun.objects.filter(pk=runs[1].pk).update(priority=0, next_attempt_at=now)
    TaskRun.objects.filter(pk=runs[2].pk).update(lease_token="another job")
    ids = [run.pk for run in runs]

    # Six times: the last ones as a prepared statement, where the connection prepares.
    for _ in range(6):
        ours = sql.select_joined(
            TaskRun, "task", ids, {"lease_token": "job"}, holds.lookups("default"), CHOSEN_ORDER
        )
    if connection.vendor == "postgresql":
        assert any("INNER JOIN" in text for text in prepared_statements())
    orm = orm_runs(ids, "job")

    assert [run.pk for run in ours] == [run.pk for run in orm]
    assert len(ours) == 3
    for mine, theirs in zip(ours, orm, strict=True):
        assert values_of(mine) == values_of(theirs)
        assert TaskRun.task.is_cached(mine)
        assert values_of(mine.task) == values_of(theirs.task)
        for name in ("held_opt_out", "held_digest", "held_quiet"):
            assert getattr(mine, name) == getattr(theirs, name), name
        assert not mine._state.adding and mine._state.db == "default"
    by_recipient = {run.task.recipient: run for run in ours}
    assert by_recipient["alice"].held_opt_out is not None
    assert by_recipient["bob"].held_digest is not None
    assert by_recipient["dave"].held_opt_out is None
    assert by_recipient["dave"].held_quiet is None
    assert by_recipient["dave"].task.payload == {"title": "dave's", "n": [1, 2], "none": None}
    assert sql.select_joined(TaskRun, "task", [], {}, {}, ()) == []


CHOSEN_ORDER = ("priority", "next_attempt_at")


def test_values_prepared_without_their_field_as_their_field_prepares_them():
    """The values ``sql`` prepares without going through their field are prepared as
    every field of the project's models would prepare them, on this database: each
    field, each kind of value, the same value of the same type."""
    from django.apps import apps

    now = timezone.now()
    samples = [None, "", "text", 0, 1, 7, -3, 2**40, True, False, 1.5, now, now.date()]
    samples += [TaskRun.Status.SENT, datetime(2027, 1, 9, 15, 30), timedelta(seconds=2)]
    checked = 0
    for model in apps.get_app_config("reminders").get_models():
        for field in model._meta.concrete_fields:
            for value in samples:
                shortcut = sql._shortcut(field, value, connection)
                if shortcut is sql._THROUGH_THE_FIELD:
                    continue
                for prepared, expected in [
                    (
                        sql.for_save(field, value, connection),
                        field.get_db_prep_save(value, connection),
                    ),
                    (
                        sql.for_filter(field, value, connection),
                        field.get_db_prep_value(value, connection),
                    ),
                ]:
                    assert prepared == expected, (field, value)
                    assert type(prepared) is type(expected), (field, value)
                checked += 1
    assert checked > 100
    through = sql._THROUGH_THE_FIELD
    assert sql._shortcut(TaskRun._meta.pk, 0, connection) is through  # MySQL refuses it
    naive = datetime(2027, 1, 9, 15, 30)  # made aware by the field, with a warning
    assert sql._shortcut(TaskRun._meta.get_field("due_at"), naive, connection) is through
    assert sql._shortcut(TaskRun._meta.get_field("priority"), True, connection) is through


def plan_of(text: str, params: list) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {text}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plans")
def test_a_job_s_statements_read_its_own_rows_whatever_the_statistics():
    """A job's start of its runs and its stamp of their tasks read those rows by key, not
    every leased run (the partial index of leased runs) nor every unfinished run (a
    hashed subplan through the runs' status), which PostgreSQL picks on statistics
    that undercount them: a wave planned since the last ANALYZE, as here."""
    from benchmarks.fixtures import make_tasks
    from reminders.models import ScheduledTask
    from reminders.models.run_queries import _start_sql
    from reminders.models.tasks import _ran_sql

    make_tasks(2000, "memory")
    while dispatch.materialize():
        pass
    claimed = dispatch.claim("me", 2000)
    ids = sorted(claimed.run_ids)[:20]
    now = timezone.now()
    start = [
        "running", "job", "me", now, 3, now, *ids, "queued",
        TaskRun.objects.get(pk=ids[0]).lease_token,
    ]  # fmt: skip
    plan = plan_of(_start_sql(TaskRun, "default", len(ids), 1, True), start)
    assert "leased_idx" not in plan, plan

    tasks = sorted(TaskRun.objects.filter(pk__in=ids).values_list("task_id", flat=True))
    ended = [ScheduledTask.Status.ACTIVE, *TaskRun.UNFINISHED]
    ran = [*ended, now, *ended, ScheduledTask.Status.COMPLETED, now, *tasks]
    plan = plan_of(_ran_sql("default", len(tasks)), ran)
    assert "hashed" not in plan and "run_day_idx" not in plan, plan
