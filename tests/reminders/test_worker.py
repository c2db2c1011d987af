import pytest

from reminders.models import ScheduledTask, TaskRun
from reminders.worker import ReminderWorker
from tests.support.jobs import queued, run_queued

pytestmark = pytest.mark.django_db


def test_tick__materializes_and_claims_due_work(make_task, outbox):
    for _ in range(3):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is False  # all of it fit in one tick
    assert set(TaskRun.objects.values_list("status", "lease_owner")) == {("queued", worker.owner)}
    assert run_queued() == 3
    assert len(outbox) == 3


def test_tick__claims_no_more_than_max_in_flight(make_task, settings):
    settings.REMINDERS_MAX_IN_FLIGHT = 4
    settings.REMINDERS_CLAIM_BATCH = 3
    for _ in range(10):
        make_task()
    worker = ReminderWorker(with_cluster=False)
    assert worker.tick() is True  # a full batch: more may be waiting
    assert worker.tick() is False  # only one more fits under the ceiling
    assert TaskRun.objects.filter(status="queued").count() == 4
    assert worker.tick() is False
    assert TaskRun.objects.filter(status="queued").count() == 4
    run_queued()
    worker.tick()
    assert TaskRun.objects.filter(status="queued").count() == 3


@pytest.mark.django_db(transaction=True)
def test_shutdown__hands_back_claimed_runs_no_worker_started(make_task):
    make_task()
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    worker.shutdown()
    assert TaskRun.objects.get().status == "scheduled"
    assert len(queued()) == 1  # the job stays; when it runs it finds nothing to start
    assert run_queued() == 0


def test_tick__a_task_of_a_kind_this_process_does_not_know_stops_nothing(make_task, outbox):
    good = [make_task(recipient=f"good{i}") for i in range(2)]
    bad = make_task(recipient="bad")
    ScheduledTask.objects.filter(pk=bad.pk).update(kind="registered_elsewhere")
    worker = ReminderWorker(with_cluster=False)
    worker.tick()
    assert sorted(TaskRun.objects.values_list("task", flat=True)) == [t.pk for t in good]
    assert run_queued() == 2
    assert sorted(m.recipient for m in outbox) == ["good0", "good1"]
    assert ScheduledTask.objects.get(pk=bad.pk).status == "error"
    worker.tick()  # and again: the bad task is not retried every tick
    assert not TaskRun.objects.filter(task=bad).exists()
