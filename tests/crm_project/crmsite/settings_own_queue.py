"""The same CRM running django-q2 for its own jobs: a Redis broker and a queue name of
its own. Reminders go through a channel of the CRM's own."""

import os

from .settings import *  # noqa: F403

Q_CLUSTER = {
    "name": os.environ["CRM_QUEUE"],
    "redis": os.environ["CRM_REDIS_URL"],
    "workers": 1,
    "timeout": 30,
    "retry": 60,
}

REMINDERS_CHANNELS = {"crm_file": {"BACKEND": "crm.senders.FileSender"}}
REMINDERS_DEFAULT_CHANNEL = "crm_file"
REMINDERS_TICK_SECONDS = 0.2
