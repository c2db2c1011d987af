"""A CRM builder that hangs for some recipients, for the processes the tests start."""

from __future__ import annotations

import time

from reminders.models import ScheduledTask, TaskRun

# A recipient starting so makes the builder hang (until django-q2's timeout ends it).
HANGS_FOR = "hang"


def build(task: ScheduledTask, run: TaskRun) -> str:
    if task.recipient.startswith(HANGS_FOR):
        time.sleep(3600)
    return f"Follow up, {task.recipient}"
