"""What retention keeps of a keyed one-shot task it deletes once completed: its key and
time, so that scheduling them again sends nothing twice. A new table: online-safe."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("reminders", "0009_run_job_failures"),
    ]

    operations = [
        migrations.CreateModel(
            name="PrunedOneShot",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=200, verbose_name="key")),
                ("run_at", models.DateTimeField(verbose_name="one-shot time")),
                ("pruned_at", models.DateTimeField(auto_now_add=True, verbose_name="pruned")),
            ],
            options={
                "verbose_name": "pruned one-shot task",
                "verbose_name_plural": "pruned one-shot tasks",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("key", "run_at"), name="reminders_pruned_one_shot_once"
                    )
                ],
            },
        ),
    ]
