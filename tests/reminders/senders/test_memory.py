"""``MemorySender`` with ``duplicate_check`` drops what WeCom's check drops: an identical
body to the same recipient inside the window, whatever our key; so tests see the loss."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from django.test import TestCase
from django.utils import timezone

from reminders import kinds
from reminders.engine import dispatch
from reminders.exceptions import PayloadSendError, TransientSendError
from reminders.models import SendLog
from reminders.senders import get_sender
from reminders.senders.base import Message
from reminders.senders.memory import MemorySender
from tests.support.jobs import run_queued


def text(to: str, content: str, key: str) -> Message:
    return Message(to, "text", {"content": content}, key)


def test_duplicate_check__an_identical_body_to_one_recipient_is_suppressed_whatever_the_key():
    sender = MemorySender("dedup", duplicate_check=True)
    first = sender.send(text("lisi", "Call ACME", "task-1:09:00"))
    second = sender.send(text("lisi", "Call ACME", "task-2:10:00"))

    assert [m.idempotency_key for m in MemorySender.outbox] == ["task-1:09:00"]
    assert [m.idempotency_key for m in MemorySender.suppressed] == ["task-2:10:00"]
    assert second.message_id == first.message_id  # as WeCom's sandbox answers


def test_duplicate_check__another_recipient_or_body_is_delivered():
    sender = MemorySender("dedup", duplicate_check=True)
    sender.send(text("lisi", "Call ACME", "k1"))
    sender.send(text("wangwu", "Call ACME", "k2"))
    sender.send(text("lisi", "Call Globex", "k3"))

    assert len(MemorySender.outbox) == 3
    assert MemorySender.suppressed == []


def test_duplicate_check__lapses_after_the_window(monkeypatch):
    sender = MemorySender("dedup", duplicate_check=True)
    sender.send(text("lisi", "Call ACME", "k1"))
    monkeypatch.setattr(MemorySender, "duplicate_check_seconds", 0)
    sender.send(text("lisi", "Call ACME", "k2"))

    assert len(MemorySender.outbox) == 2


def test_without_duplicate_check__everything_is_delivered():
    sender = MemorySender("plain")
    sender.send(text("lisi", "Call ACME", "k1"))
    sender.send(text("lisi", "Call ACME", "k1"))

    assert len(MemorySender.outbox) == 2
    assert MemorySender.suppressed == []


def test_re_sending_one_message__is_suppressed_like_a_retry_after_a_lost_reply():
    sender = MemorySender("dedup", duplicate_check=True)
    message = text("lisi", "Call ACME", "k1")
    first = sender.send(message)
    again = sender.send(Message.from_rendered("lisi", message.rendered, "k1"))

    assert (len(MemorySender.outbox), len(MemorySender.suppressed)) == (1, 1)
    assert again.message_id == first.message_id


# -- through the engine ------------------------------------------------------------------


def tick(now=None) -> int:
    with TestCase.captureOnCommitCallbacks(execute=True):
        dispatch.materialize(now=now)
        dispatch.claim("test", 1000, now=now)
        return run_queued()


def two_follow_ups_an_hour_apart(make_task) -> None:
    """Two follow-ups the CRM wrote the same text for, to one member, sent an hour apart."""
    now = timezone.now()
    for at in (now, now + timedelta(hours=1)):
        make_task(
            "follow_up", "lisi", at=at, channel="memory_dedup", payload={"content": "Call ACME"}
        )
    assert tick() == 1
    assert tick(now=now + timedelta(hours=1, minutes=1)) == 1


@pytest.mark.django_db
def test_engine__the_same_text_twice_to_one_member_is_delivered_twice(make_task):
    two_follow_ups_an_hour_apart(make_task)

    assert [m.recipient for m in MemorySender.outbox] == ["lisi", "lisi"]
    assert MemorySender.suppressed == []
    assert SendLog.objects.filter(status="sent").count() == 2


@pytest.mark.django_db
def test_engine__without_the_stamp_the_double_shows_the_silent_merge(make_task, monkeypatch):
    # What render did before it stamped messages: the CRM's text alone.
    monkeypatch.setattr(
        kinds, "render", lambda task, run: kinds.Content("text", dict(task.payload))
    )

    two_follow_ups_an_hour_apart(make_task)

    # The ledger says both were sent; the provider delivered one.
    assert SendLog.objects.filter(status="sent").count() == 2
    assert len(MemorySender.outbox) == len(MemorySender.suppressed) == 1
    assert len(set(SendLog.objects.values_list("provider_message_id", flat=True))) == 1


def test_get_sender__the_test_settings_dedup_channel_checks_duplicates():
    assert get_sender("memory_dedup").supports_duplicate_check is True


def test_duplicate_check__a_type_without_a_field_for_the_stamp_is_never_suppressed():
    # As the WeCom app channel sends it: without the check, since two occurrences of it
    # are the same bytes; so a re-send is a second delivery here too.
    sender = MemorySender("dedup", duplicate_check=True)
    news = {"articles": [{"title": "Q4 plan", "url": "https://crm.example/q4"}]}
    for key in ("k1", "k2"):
        sender.send(Message("lisi", "news", news, key))

    assert len(MemorySender.outbox) == 2
    assert MemorySender.suppressed == []
    assert sender.deduplicates(MemorySender.outbox[0]) is False
    assert sender.deduplicates(text("lisi", "Call ACME", "k3")) is True


def test_split__each_part_is_judged_on_its_own_as_wecom_judges_it():
    # Two texts whose first parts are the same bytes (no stamp on their last lines):
    # WeCom drops the second's first part, and so does the memory channel that splits.
    sender = MemorySender("dedup", duplicate_check=True, oversize="split")
    same_start = "x" * 3000 + "\n"
    first = sender.send(text("lisi", same_start + "y" * 300, "k1"))
    second = sender.send(text("lisi", same_start + "z" * 300, "k2"))

    assert [m.body["content"][:6] for m in MemorySender.outbox] == ["(1/2) ", "(2/2) ", "(2/2) "]
    [dropped] = MemorySender.suppressed
    assert (dropped.idempotency_key, dropped.body["content"][:6]) == ("k2", "(1/2) ")
    assert first.detail["parts"] == second.detail["parts"] == 2
    assert second.detail["msgids"][0] == first.detail["msgids"][0]  # merged, as WeCom answers


def test_split__each_part_meets_its_own_scripted_outcome_as_each_is_a_request_to_wecom():
    sender = MemorySender("split", oversize="split")
    MemorySender.script[:] = [None, TransientSendError("system busy", code="-1")]

    with pytest.raises(TransientSendError) as caught:
        sender.send(text("lisi", "x" * 5000, "k1"))

    assert [m.body["content"][:6] for m in MemorySender.outbox] == ["(1/3) "]
    assert caught.value.delivered_parts == ("memory-1",)


def test_split__a_message_with_parts_delivered_sends_only_the_rest():
    sender = MemorySender("split", oversize="split")
    message = replace(text("lisi", "x" * 5000, "k1"), sent_parts=("earlier-1",))

    result = sender.send(message)

    assert [m.body["content"][:6] for m in MemorySender.outbox] == ["(2/3) ", "(3/3) "]
    assert result.detail["msgids"] == ["earlier-1", "memory-1", "memory-2"]


def test_split__stamped_parts_of_two_occurrences_all_arrive():
    sender = MemorySender("dedup", duplicate_check=True, oversize="split")
    content = "".join(f"{n:03d} 客户跟进记录\n" for n in range(300))
    for day in ("03", "04"):
        sender.send(text("lisi", f"{content}— 2026-12-{day} 09:00 · #42", f"42:{day}"))

    assert len(MemorySender.outbox) > 4
    assert MemorySender.suppressed == []


def test_split__a_short_text_is_one_message_as_before():
    sender = MemorySender("dedup", duplicate_check=True, oversize="split")
    result = sender.send(text("lisi", "Call ACME", "k1"))

    assert [m.body["content"] for m in MemorySender.outbox] == ["Call ACME"]
    assert result.detail == {}


def test_oversize__a_text_over_wecoms_limit_is_refused_as_wecom_refuses_it():
    # A channel that does not split (the default) is no more forgiving than WeCom: a
    # text over 2,048 bytes is refused, not delivered.
    sender = MemorySender("memory")
    with pytest.raises(PayloadSendError, match="2049 bytes"):
        sender.send(text("lisi", "客" * 683, "k1"))  # 2,049 bytes
    sender.send(text("lisi", "客" * 682 + "xx", "k2"))  # 2,048: delivered

    assert [m.idempotency_key for m in MemorySender.outbox] == ["k2"]
