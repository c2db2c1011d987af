"""Runs count the jobs in a row that ended before starting them (``job_failures``), so
that one whose message breaks every job that holds it is failed, not claimed forever.
The column has a database default: the code before it, still running on other hosts
during an upgrade, inserts runs without naming it."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reminders", "0008_calendar_days"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskrun",
            name="job_failures",
            field=models.PositiveSmallIntegerField(
                db_default=0,
                default=0,
                help_text=(
                    "Jobs in a row that held this run and ended before starting it "
                    "(failed, timed out or lost with their worker)."
                ),
                verbose_name="lost jobs",
            ),
        ),
    ]
