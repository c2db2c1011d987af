"""Migrations that the code before them survives: hosts are upgraded one at a time, so
the previous release keeps writing to the migrated tables for a while (README, "Upgrades
with processes running").

A column added NOT NULL needs a database default (``db_default``): Django's Python
``default`` fills the existing rows and is then dropped, so the old code's INSERTs,
which do not name the column, would fail. A column or table is never renamed or
dropped in the release that stops using it. Migrations from before this rule are listed
with what upgrading across them needs.
"""

from __future__ import annotations

import pytest
from django.db import connection, migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.models import NOT_PROVIDED

APPS = ("reminders", "ops")
# Written before the rule: upgrading across them needs the old processes stopped first.
BEFORE_THE_RULE = {
    ("reminders", "0002_ledger_truth"),
    ("reminders", "0005_operator_actions"),
}
# Operations that break the code before them whatever their arguments.
BREAKING = (
    migrations.RemoveField,
    migrations.RenameField,
    migrations.DeleteModel,
    migrations.RenameModel,
)


def problems(operations: list[migrations.operations.base.Operation]) -> list[str]:
    found = []
    for operation in operations:
        if isinstance(operation, BREAKING):
            found.append(f"{operation.describe()}: breaks the code before it")
        elif isinstance(operation, migrations.AddField):
            field = operation.field
            if not field.null and field.db_default is NOT_PROVIDED:
                found.append(
                    f"{operation.describe()}: NOT NULL without db_default, so the code "
                    f"before it cannot insert"
                )
    return found


@pytest.mark.django_db
def test_every_migration_since_the_rule_is_survived_by_the_code_before_it():
    loader = MigrationLoader(connection, ignore_no_migrations=True)
    found = {
        key: problems(migration.operations)
        for key, migration in loader.disk_migrations.items()
        if key[0] in APPS and key not in BEFORE_THE_RULE
    }
    assert {key: p for key, p in found.items() if p} == {}
    # The list of exceptions is exact: each one still breaks the rule.
    for key in BEFORE_THE_RULE:
        assert problems(loader.disk_migrations[key].operations), key


def test_the_rule_refuses_what_it_names():
    operations = [
        migrations.AddField("taskrun", "a", models.BooleanField(default=False)),
        migrations.AddField("taskrun", "b", models.BooleanField(db_default=False)),
        migrations.AddField("taskrun", "c", models.DateTimeField(null=True)),
        migrations.RemoveField("taskrun", "d"),
        migrations.RenameField("taskrun", "e", "f"),
    ]
    assert [p.split(":")[0] for p in problems(operations)] == [
        "Add field a to taskrun",
        "Remove field d from taskrun",
        "Rename field e on taskrun to f",
    ]
