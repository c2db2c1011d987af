"""The few statements every message costs, written without building an ORM query.

Sending one message records the one before it and reserves its own key: an UPDATE of
the ledger row, an UPDATE of the run, an INSERT and a read of the channel's pause; a job
reads its runs with their tasks (``select_joined``). For
statements this small, building them through the ORM (a ``QuerySet``, its ``WHERE``
tree, the compiler) costs the worker more CPU than the database spends running them:
0.55 ms against 0.24 ms for a run's closing UPDATE on PostgreSQL, the same statement
sent through the same cursor. The throughput of a busy host is its workers' CPU, so
these are written here once per shape, from the model's own table and column names.

What reaches the database is what the ORM would send: every value is what its field's
``get_db_prep_save`` (an UPDATE's values) or ``get_db_prep_value`` (a filter's) gives,
which adapt datetimes, durations and the like per backend as the ORM does; a plain
value the field would give back as it is, or only adapted by the backend, is prepared
so without calling the field (``for_save``, ``for_filter``). What is read goes through
the converters the ORM applies. The statements go through Django's cursor, so its error
translation (``IntegrityError``), its wrappers and the transaction in progress apply
unchanged. Only plain values are
taken, no expressions: anything else stays an ORM query. The SQL texts hold quoted
table and column names of our own models and placeholders only (S608 below); every
value is a parameter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, cast

from django.db import connections, models, router
from django.db.models.constants import OnConflict
from django.db.models.sql import UpdateQuery


@dataclass(frozen=True)
class Update:
    """``model.objects.filter(pk__in=pks, **equal).update(**values)`` for plain values and
    plain equality filters, as one statement."""

    model: type[models.Model]
    pks: Sequence[Any]
    values: Mapping[str, Any]
    equal: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def compiled(self, alias: str) -> tuple[str, list[Any]]:
        connection = connections[alias]
        model, values, equal = self.model, self.values, self.equal
        sets, filters = tuple(values), tuple(equal)
        params = [for_save(_field(model, name), values[name], connection) for name in sets]
        pk = _field(model, "pk")
        params += [for_filter(pk, value, connection) for value in self.pks]
        params += [for_filter(_field(model, name), equal[name], connection) for name in filters]
        return _update_sql(model, alias, sets, filters, len(self.pks)), params

    def run(self) -> int:
        """Send it; returns how many rows matched."""
        if not self.pks:
            return 0
        alias = router.db_for_write(self.model)
        text, params = self.compiled(alias)
        with cursor_of(connections[alias]) as cursor:
            cursor.execute(text, params)
            return int(cursor.rowcount)


def update(
    model: type[models.Model], pks: Sequence[Any], values: Mapping[str, Any], **equal: Any
) -> int:
    """``model.objects.filter(pk__in=pks, **equal).update(**values)`` for plain values
    and plain equality filters; returns how many rows matched."""
    return Update(model, pks, values, equal).run()


def update_returning(queryset: models.QuerySet[Any], values: Mapping[str, Any]) -> list[Any] | None:
    """``queryset.update(**values)`` that returns the primary keys of the rows it
    changed, on PostgreSQL (``UPDATE … RETURNING``): the rows this very statement
    changed, after any lock it waited for, whoever else updates them at once. None
    elsewhere: the caller marks the rows it changes instead."""
    rows = update_returning_rows(queryset, values, ("pk",))
    return None if rows is None else [pk for (pk,) in rows]


def update_returning_rows(
    queryset: models.QuerySet[Any], values: Mapping[str, Any], fields: Sequence[str]
) -> list[tuple[Any, ...]] | None:
    """``update_returning``, returning each changed row's ``fields`` (the model's own,
    ``pk`` for its primary key) as they are after the UPDATE, in the database's order."""
    alias = queryset.db
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return None
    query = cast("UpdateQuery", queryset.query.chain(UpdateQuery))
    query.add_update_values(dict(values))
    text, params = query.get_compiler(alias).as_sql()
    model: type[models.Model] = queryset.model
    columns = [_field(model, name) for name in fields]
    returned = _Columns.of(model, columns, alias)
    returning = ", ".join(connection.ops.quote_name(str(field.column)) for field in columns)
    with connection.cursor() as cursor:
        cursor.execute(f"{text} RETURNING {returning}", params)
        return [tuple(returned.values(row, 0, connection)) for row in cursor.fetchall()]


def together(updates: Sequence[Update], objs: Sequence[models.Model]) -> list[int]:
    """The ``updates`` and ``insert(objs)`` (new rows of one model, fewer than a
    statement may carry) as one statement, on PostgreSQL: each UPDATE a data-modifying
    ``WITH`` query of the INSERT (or of a SELECT, with no rows to insert). One round
    trip, atomic on its own: outside a transaction it needs no BEGIN nor COMMIT. Returns
    how many rows each UPDATE matched, and sets the inserted rows' primary keys. A key
    taken raises ``IntegrityError``, and nothing is written."""
    if not objs and not any(update.pks for update in updates):
        return [0] * len(updates)
    models_ = {update.model for update in updates} | {type(obj) for obj in objs}
    alias = router.db_for_write(next(iter(models_)))
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise NotImplementedError("data-modifying WITH queries are PostgreSQL's")
    queries, params, counts = [], [], []
    for n, update in enumerate(u for u in updates if u.pks):
        text, values = update.compiled(alias)
        queries.append(f"u{n} AS ({text} RETURNING 1)")
        counts.append(f"(SELECT count(*) FROM u{n})")  # noqa: S608
        params += values
    if objs:
        model = type(objs[0])
        fields = _inserted(model)
        prepared = _Prepared(connection)
        params += [prepared(field, obj) for obj in objs for field in fields]
        main = _insert_sql(model, alias, len(objs), True) + "".join(f", {c}" for c in counts)
    else:
        main = f"SELECT 0, {', '.join(counts) or '0'}"
    text = f"WITH {', '.join(queries)} {main}" if queries else main
    with cursor_of(connection) as cursor:
        cursor.execute(text, params)
        rows = cursor.fetchall()
    for obj, row in zip(objs, rows if objs else [], strict=True):
        obj.pk = row[0]
        obj._state.adding, obj._state.db = False, alias
    matched = [int(n) for n in rows[0][1:]] if rows and counts else []
    it = iter(matched)
    return [next(it) if update.pks else 0 for update in updates]


@dataclass(frozen=True)
class Extra:
    """A column a SELECT adds to its rows (an annotation): SQL in which ``{joined}``
    stands for the joined table, and its parameters."""

    sql: str
    params: tuple[Any, ...] = ()


def select_joined(
    model: type[models.Model],
    related: str,
    pks: Sequence[Any],
    equal: Mapping[str, Any],
    extra: Mapping[str, Extra],
    order: Sequence[str],
) -> list[Any]:
    """``model.objects.filter(pk__in=pks, **equal).select_related(related)
    .annotate(**extra).order_by(*order)`` for plain equality filters, ``related`` a
    foreign key that cannot be null and ``extra`` given as SQL: one statement, whose
    text is built once per shape and sent prepared where the connection prepares
    (``cursor_of``). Building that query through the ORM cost a job more CPU than
    reading its rows (2.8 ms against 2 ms for 20 runs). The rows' values
    go through the converters the ORM would apply (the backend's, then the field's),
    and each row's related object is cached on it as ``select_related`` caches it."""
    if not pks:
        return []
    alias = router.db_for_read(model)
    connection = connections[alias]
    fk = cast("models.ForeignKey[Any, Any]", _field(model, related))
    if fk.null or not fk.many_to_one:
        raise ValueError(f"{model.__name__}.{related}: not a foreign key that cannot be null")
    joined = fk.related_model
    names = tuple(extra)
    text = _select_joined_sql(
        model,
        related,
        alias,
        tuple(equal),
        tuple(extra[name].sql for name in names),
        tuple(order),
        len(pks),
    )
    params = [value for name in names for value in extra[name].params]
    pk = _field(model, "pk")
    params += [for_filter(pk, value, connection) for value in pks]
    params += [for_filter(_field(model, name), equal[name], connection) for name in equal]
    with cursor_of(connection) as cursor:
        cursor.execute(text, params)
        rows = cursor.fetchall()
    own, theirs = _read(model, alias), _read(joined, alias)
    objs = []
    for row in rows:
        obj = model.from_db(alias, own.attnames, own.values(row, 0, connection))
        fk.set_cached_value(
            obj, joined.from_db(alias, theirs.attnames, theirs.values(row, own.width, connection))
        )
        for at, name in enumerate(names, own.width + theirs.width):
            setattr(obj, name, row[at])
        objs.append(obj)
    return objs


@dataclass(frozen=True)
class _Columns:
    """A model's concrete columns as a SELECT reads them: their attribute names, and
    each one's converters (the backend's, then the field's), as the ORM applies them."""

    attnames: list[str]
    converters: list[tuple[Callable[..., Any], ...]]
    columns: list[Any]

    @property
    def width(self) -> int:
        return len(self.attnames)

    def values(self, row: Sequence[Any], start: int, connection: Any) -> list[Any]:
        values = list(row[start : start + self.width])
        for at, converters in enumerate(self.converters):
            if converters:
                value, column = values[at], self.columns[at]
                for convert in converters:
                    value = convert(value, column, connection)
                values[at] = value
        return values

    @classmethod
    def of(cls, model: type[models.Model], fields: Sequence[Any], alias: str) -> _Columns:
        connection = connections[alias]
        columns = [field.get_col(model._meta.db_table) for field in fields]
        converters = [
            tuple(connection.ops.get_db_converters(column) + column.get_db_converters(connection))
            for column in columns
        ]
        return cls([field.attname for field in fields], converters, columns)


@lru_cache(maxsize=32)
def _read(model: type[models.Model], alias: str) -> _Columns:
    return _Columns.of(model, model._meta.concrete_fields, alias)


@lru_cache(maxsize=256)
def _select_joined_sql(
    model: type[models.Model],
    related: str,
    alias: str,
    filters: tuple[str, ...],
    extra: tuple[str, ...],
    order: tuple[str, ...],
    n: int,
) -> str:
    quote = connections[alias].ops.quote_name
    fk = _field(model, related)
    joined = cast("type[models.Model]", fk.related_model)
    ours, theirs = quote("r"), quote("j")
    column = quoted_columns(model, alias)
    selected = [f"{ours}.{quote(str(field.column))}" for field in model._meta.concrete_fields]
    selected += [f"{theirs}.{quote(str(field.column))}" for field in joined._meta.concrete_fields]
    selected += [f"{text.format(joined=theirs)}" for text in extra]
    target = quote(str(cast("models.ForeignKey[Any, Any]", fk).target_field.column))
    tables = (
        f"{quote(model._meta.db_table)} {ours} INNER JOIN {quote(joined._meta.db_table)} {theirs}"
        f" ON {ours}.{column(related)} = {theirs}.{target}"
    )
    conditions = [f"{ours}.{column('pk')} IN ({', '.join(['%s'] * n)})"]
    conditions += [f"{ours}.{column(name)} = %s" for name in filters]
    ordering = ", ".join(
        f"{ours}.{column(name.lstrip('-'))} {'DESC' if name.startswith('-') else 'ASC'}"
        for name in order
    )
    where = " AND ".join(conditions)
    text = f"SELECT {', '.join(selected)} FROM {tables} WHERE {where}"  # noqa: S608
    return f"{text} ORDER BY {ordering}" if ordering else text


def insert(objs: Sequence[models.Model], *, ignore_conflicts: bool = False) -> int:
    """``bulk_create(objs)`` for new rows of one model whose primary key the database
    assigns: one INSERT (per ``bulk_batch_size`` rows), the primary keys set where the
    database returns them (else left None, as ``bulk_create`` leaves them). A key taken
    raises ``IntegrityError``; with ``ignore_conflicts`` its row is left out instead, and
    no primary key is set. Returns how many rows were inserted.

    On PostgreSQL, rows left out on a conflict go as one array a column
    (``INSERT … SELECT * FROM unnest(…)``): a statement of a few placeholders, whose
    text the driver parses once per shape, where 500 rows of ``VALUES`` would be 15,000
    placeholders it splits again on every call."""
    if not objs:
        return 0
    model = type(objs[0])
    alias = router.db_for_write(model)
    connection = connections[alias]
    fields = _inserted(model)
    prepared = _Prepared(connection)
    if ignore_conflicts and connection.vendor == "postgresql":
        columns = [[prepared(field, obj) for obj in objs] for field in fields]
        with cursor_of(connection) as cursor:
            cursor.execute(_unnest_sql(model, alias), columns)
            return int(cursor.rowcount)
    returning = bool(connection.features.can_return_rows_from_bulk_insert) and not ignore_conflicts
    size = max(1, connection.ops.bulk_batch_size(fields, objs))
    inserted = 0
    for start in range(0, len(objs), size):
        chunk = objs[start : start + size]
        params = [prepared(field, obj) for obj in chunk for field in fields]
        text = _insert_sql(model, alias, len(chunk), returning, ignore_conflicts)
        with cursor_of(connection) as cursor:
            cursor.execute(text, params)
            pks = [pk for (pk,) in cursor.fetchall()] if returning else [None] * len(chunk)
            inserted += len(chunk) if returning else int(cursor.rowcount)
        for obj, pk in zip(chunk, pks, strict=True):
            if not ignore_conflicts:
                obj.pk = pk
                obj._state.adding, obj._state.db = False, alias
    return inserted


class _Prepared:
    """A field's value of an object to insert, as its ``get_db_prep_save`` gives it,
    worked out once per distinct value of each column: rows planned together repeat
    most of their values (a status, a time, the empty defaults), and preparing each one
    through the field is most of what building the INSERT costs."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.known: dict[tuple[models.Field[Any, Any], type, Any], Any] = {}

    def __call__(self, field: models.Field[Any, Any], obj: models.Model) -> Any:
        value = field.pre_save(obj, True)
        prepared = _shortcut(field, value, self.connection)
        if prepared is not _THROUGH_THE_FIELD:
            return prepared
        try:
            # The type too: True, 1 and 1.0 are equal, and prepare differently.
            key = (field, type(value), value)
            return self.known[key]
        except KeyError:
            prepared = self.known[key] = field.get_db_prep_save(value, self.connection)
            return prepared
        except TypeError:  # unhashable (a dict for a JSON column): prepared each time
            return field.get_db_prep_save(value, self.connection)


# Field classes whose ``get_db_prep_save`` and ``get_db_prep_value`` give back a value of
# this type unchanged, on every backend: their ``get_prep_value`` only converts other
# types (``to_python``), and no backend adapts these. Text fields take any ``str`` (a
# ``TextChoices`` member too), the others their exact type; an automatic primary key's 0
# goes through the field (MySQL's backend refuses it there). Integer fields convert an
# ``int``, and date-time fields an aware ``datetime``, only as the backend adapts it
# (``adapt_integerfield_value``: psycopg 3's typed integers; ``adapt_datetimefield_value``).
# Any other value, and every other field class, goes through the field. A message's
# statements carry about 40 values, most of them such.
_AUTO = (models.AutoField, models.BigAutoField, models.SmallAutoField)
_AS_IS: dict[type[models.Field[Any, Any]], type] = {
    models.CharField: str,
    models.TextField: str,
    models.BooleanField: bool,
    **dict.fromkeys(_AUTO, int),
}
_INTEGERS = (
    models.IntegerField,
    models.BigIntegerField,
    models.SmallIntegerField,
    models.PositiveIntegerField,
    models.PositiveBigIntegerField,
    models.PositiveSmallIntegerField,
)
_THROUGH_THE_FIELD = object()


def _shortcut(field: models.Field[Any, Any], value: Any, connection: Any) -> Any:
    """What ``field`` prepares ``value`` as, where that is known without the field
    (``_AS_IS``, ``_INTEGERS``); else ``_THROUGH_THE_FIELD``. A foreign key prepares as
    its target field does."""
    if type(field) is models.ForeignKey:
        field = field.target_field
    kind = type(field)
    if kind in _INTEGERS:
        if value is None or type(value) is int:
            return connection.ops.adapt_integerfield_value(value, field.get_internal_type())
        return _THROUGH_THE_FIELD
    if kind is models.DateTimeField:
        if value is None or (type(value) is datetime and value.utcoffset() is not None):
            return connection.ops.adapt_datetimefield_value(value)
        return _THROUGH_THE_FIELD
    as_is = _AS_IS.get(kind)
    if as_is is None:
        return _THROUGH_THE_FIELD
    if value is None or (as_is is str and isinstance(value, str)):
        return value
    if type(value) is as_is and not (value == 0 and kind in _AUTO):
        return value
    return _THROUGH_THE_FIELD


def for_save(field: models.Field[Any, Any], value: Any, connection: Any) -> Any:
    """``field.get_db_prep_save(value, connection)``, without the field where it can."""
    prepared = _shortcut(field, value, connection)
    if prepared is _THROUGH_THE_FIELD:
        return field.get_db_prep_save(value, connection)
    return prepared


def for_filter(field: models.Field[Any, Any], value: Any, connection: Any) -> Any:
    """``field.get_db_prep_value(value, connection)``, without the field where it can."""
    prepared = _shortcut(field, value, connection)
    if prepared is _THROUGH_THE_FIELD:
        return field.get_db_prep_value(value, connection)
    return prepared


def any_set(model: type[models.Model], field: str, among: Sequence[Any], column_set: str) -> bool:
    """Whether a row whose ``field`` is one of ``among`` has ``column_set`` not NULL:
    ``model.objects.filter(field__in=among, column_set__isnull=False).exists()``."""
    if not among:
        return False
    alias = router.db_for_read(model)
    connection = connections[alias]
    params = [for_filter(_field(model, field), value, connection) for value in among]
    with cursor_of(connection) as cursor:
        cursor.execute(_any_set_sql(model, alias, field, column_set, len(among)), params)
        return cursor.fetchone() is not None


def cursor_of(connection: Any) -> Any:
    """Django's cursor for these statements; on PostgreSQL, where the connection
    prepares statements (``prepare_threshold`` in ``DATABASES[...]["OPTIONS"]``; Django
    leaves it off, which a transaction-mode pooler needs), one that binds parameters on
    the server, so that each shape becomes a prepared statement: PostgreSQL then plans a
    message's statement once per connection instead of for every message (0.26 to
    0.47 ms of its 0.7 to 1.1 ms). It is Django's cursor otherwise: the connection's
    health check, error translation and execute wrappers apply. Where queries are
    logged (``DEBUG``, ``CaptureQueriesContext``), Django's own cursor, whose log shows
    each statement with its values."""
    if connection.vendor != "postgresql" or connection.queries_logged:
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None:
        return connection.cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        # The stubs know the class as psycopg 2's, which takes no connection.
        return connection.make_cursor(ServerBindingCursor(raw))  # type: ignore[call-arg]


@lru_cache(maxsize=512)
def _field(model: type[models.Model], name: str) -> models.Field[Any, Any]:
    meta = model._meta
    return cast("models.Field[Any, Any]", meta.pk if name == "pk" else meta.get_field(name))


# Shapes differ by the number of rows (a batch's): bounded, as a job's runs are.
@lru_cache(maxsize=256)
def _update_sql(
    model: type[models.Model], alias: str, sets: tuple[str, ...], filters: tuple[str, ...], n: int
) -> str:
    column = quoted_columns(model, alias)
    assignments = ", ".join(f"{column(name)} = %s" for name in sets)
    conditions = [f"{column('pk')} IN ({', '.join(['%s'] * n)})"]
    conditions += [f"{column(name)} = %s" for name in filters]
    table = connections[alias].ops.quote_name(model._meta.db_table)
    where = " AND ".join(conditions)
    return f"UPDATE {table} SET {assignments} WHERE {where}"  # noqa: S608


@cache
def _inserted(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    """The columns an INSERT writes: all but the automatic primary key. A column the
    database fills by default (``db_default``) and Python does not (no ``default``) is
    refused: the ORM's INSERT leaves it out, which this one cannot; one with both (a
    column added for the release before it, ``test_migrations_online``) is written with
    the instance's value, as any other."""
    fields = [field for field in model._meta.concrete_fields if field is not model._meta.auto_field]
    defaulted = [
        field.name for field in fields if field.has_db_default() and not field.has_default()
    ]
    if defaulted:
        raise ValueError(
            f"{model.__name__}: columns with db_default {defaulted} are not inserted here"
        )
    return fields


@lru_cache(maxsize=256)
def _insert_sql(
    model: type[models.Model], alias: str, n: int, returning: bool, ignore_conflicts: bool = False
) -> str:
    ops = connections[alias].ops
    fields = _inserted(model)
    columns = ", ".join(ops.quote_name(str(field.column)) for field in fields)
    row = f"({', '.join(['%s'] * len(fields))})"
    table = ops.quote_name(model._meta.db_table)
    on_conflict = OnConflict.IGNORE if ignore_conflicts else None
    start = ops.insert_statement(on_conflict=on_conflict)
    text = f"{start} {table} ({columns}) VALUES {', '.join([row] * n)}"
    suffix = ops.on_conflict_suffix_sql(fields, on_conflict, None, None)
    if suffix:
        text += f" {suffix}"
    if returning:
        text += f" RETURNING {ops.quote_name(str(_field(model, 'pk').column))}"
    return text


@cache
def _unnest_sql(model: type[models.Model], alias: str) -> str:
    """PostgreSQL's INSERT of rows given as one array a column, leaving out those that
    conflict (``insert``)."""
    connection = connections[alias]
    ops = connection.ops
    fields = _inserted(model)
    columns = ", ".join(ops.quote_name(str(field.column)) for field in fields)
    arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in fields)
    table = ops.quote_name(model._meta.db_table)
    select = f"SELECT * FROM unnest({arrays})"  # noqa: S608
    return f"INSERT INTO {table} ({columns}) {select} ON CONFLICT DO NOTHING"


@lru_cache(maxsize=256)
def _any_set_sql(model: type[models.Model], alias: str, field: str, column_set: str, n: int) -> str:
    column = quoted_columns(model, alias)
    table = connections[alias].ops.quote_name(model._meta.db_table)
    where = f"{column(field)} IN ({', '.join(['%s'] * n)}) AND {column(column_set)} IS NOT NULL"
    return f"SELECT 1 FROM {table} WHERE {where} LIMIT 1"  # noqa: S608


def quoted_columns(model: type[models.Model], alias: str) -> Callable[[str], str]:
    """A field's column by its name, quoted."""
    quote = connections[alias].ops.quote_name
    return lambda name: quote(str(_field(model, name).column))
