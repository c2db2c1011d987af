"""Fewer indexes for every run, ledger row and task written: those another index already
serves.

- ``TaskRun.task``: the unique (task, occurrence) leads with it (it also serves MariaDB's
  foreign key).
- ``ScheduledTask.content_type``: ``reminders_task_about_idx`` (content type, object id)
  leads with it.
- On PostgreSQL, the ``varchar_pattern_ops`` copies Django adds beside a unique text
  column (``SendLog.key``, ``ScheduledTask.key``): they serve only ``LIKE 'prefix%'``,
  which nothing asks of a key (the admin's search is ``icontains``, which they cannot
  serve). A later migration that alters either column may add its copy back: drop it
  again there.

Each index dropped is one fewer to keep on every insert and on every update that moves
an indexed column (a run's status, a ledger row's, a task's next run).
"""

import django.db.models.deletion
from django.db import migrations, models

# (model, field) whose ``_like`` index PostgreSQL no longer keeps.
LIKE_COPIES = [("sendlog", "key"), ("scheduledtask", "key")]


def _like_index(schema_editor, apps, model_name, field_name):
    model = apps.get_model("reminders", model_name)
    column = model._meta.get_field(field_name).column
    return schema_editor._create_index_name(model._meta.db_table, [column], suffix="_like")


def drop_like_copies(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for model_name, field_name in LIKE_COPIES:
        name = _like_index(schema_editor, apps, model_name, field_name)
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")


def add_like_copies(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for model_name, field_name in LIKE_COPIES:
        model = apps.get_model("reminders", model_name)
        field = model._meta.get_field(field_name)
        sql = schema_editor._create_like_index_sql(model, field)
        if sql is not None:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("reminders", "0027_sendlog_recall_partly_sent"),
    ]

    operations = [
        migrations.AlterField(
            model_name="scheduledtask",
            name="content_type",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="contenttypes.contenttype",
                verbose_name="about (type)",
            ),
        ),
        migrations.AlterField(
            model_name="taskrun",
            name="task",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="runs",
                to="reminders.scheduledtask",
                verbose_name="task",
            ),
        ),
        migrations.RunPython(drop_like_copies, add_like_copies),
    ]
