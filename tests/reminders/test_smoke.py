from reminders import dispatch
from tests.support.jobs import run_queued


def test_one_shot_due_now__is_sent_once(make_task, outbox):
    task = make_task(recipient="alice")
    dispatch.materialize()
    claim = dispatch.claim("test-owner", 10)
    assert len(claim.run_ids) == 1
    assert run_queued() == 1
    assert [m.recipient for m in outbox] == ["alice"]
    run = task.runs.get()
    assert run.status == "sent"
    assert task.send_logs.get().status == "sent"
