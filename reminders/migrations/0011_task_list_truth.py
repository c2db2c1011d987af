"""The task list tells the truth: a task is named a "scheduled message", apart from
django-q2's own "Scheduled tasks" shown beside it in a CRM that runs django-q2 of its
own (names only), and an index of each task's waiting runs serves its "next run" column.
Online-safe: no column changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reminders", "0010_pruned_one_shot"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="scheduledtask",
            options={
                "permissions": [
                    ("pause_scheduledtask", "Can pause and resume scheduled tasks"),
                    ("run_now_scheduledtask", "Can run scheduled tasks now"),
                ],
                "verbose_name": "scheduled message",
                "verbose_name_plural": "scheduled messages",
            },
        ),
        migrations.AddIndex(
            model_name="taskrun",
            index=models.Index(
                condition=models.Q(("status__in", ["scheduled", "retrying"])),
                fields=["task", "status", "next_attempt_at"],
                name="reminders_run_task_waiting_idx",
            ),
        ),
    ]
