"""The CRM's own django-q2 jobs."""

from typing import Any

from django_q.tasks import async_task

from .records import record


def note(event: str, detail: str) -> None:
    record("crm_jobs", event=event, detail=detail)


def follow_up_sent(sender: Any, run: Any, **kwargs: Any) -> None:
    """A sent reminder is followed up by a job of the CRM's own: enqueued from the
    engine's worker, where the signal comes, and meant for the CRM's cluster."""
    async_task("crm.jobs.note", "run_sent", run.task.key)
