"""``kinds.render``: every message carries its occurrence and task, so that a provider's
duplicate check, which compares bodies and not our keys, never merges two of them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from reminders import kinds
from reminders.engine import planning
from reminders.models import ScheduledTask, TaskRun
from reminders.senders.base import render_body

pytestmark = pytest.mark.django_db

NINE_IN_SHANGHAI = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)


def body(task: ScheduledTask, occurrence: datetime) -> str:
    """The bytes the run of ``task`` at ``occurrence`` would send."""
    content = kinds.render(task, planning.new_run(task, occurrence))
    return render_body(content.msgtype, content.body)


@pytest.fixture
def follow_up(make_task: Callable[..., ScheduledTask]) -> Callable[..., ScheduledTask]:
    """Factory: a follow-up to ``lisi`` whose text the CRM wrote."""

    def make(content: str = "Call ACME", **kwargs: object) -> ScheduledTask:
        kwargs.setdefault("tz", "Asia/Shanghai")
        return make_task("follow_up", "lisi", payload={"content": content}, **kwargs)

    return make


@pytest.fixture
def crm_kind() -> Iterator[Callable[[kinds.Content], str]]:
    """Factory: registers a CRM kind that renders the given content; returns its name."""
    added: list[str] = []

    def register(content: kinds.Content) -> str:
        name = f"crm_{content.msgtype}_{len(added)}"
        kinds.register(kinds.Kind(name, name, lambda task, run: content))
        added.append(name)
        return name

    yield register
    for name in added:
        kinds._registry.pop(name)


def test_render__stamps_the_local_occurrence_and_the_task_id_as_the_last_line(follow_up):
    task = follow_up(cron="0 9 * * *")
    content = kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI))
    assert content == kinds.Content(
        "text", {"content": f"Call ACME\n— 2026-12-03 09:00 · #{task.pk}"}
    )


def test_render__one_text_two_occurrences_to_one_member__different_bodies(follow_up):
    task = follow_up(cron="0 * * * *")
    assert body(task, NINE_IN_SHANGHAI) != body(task, NINE_IN_SHANGHAI + timedelta(hours=1))


def test_render__one_text_two_tasks_to_one_member__different_bodies(follow_up):
    first, second = follow_up(at=NINE_IN_SHANGHAI), follow_up(at=NINE_IN_SHANGHAI)
    assert body(first, NINE_IN_SHANGHAI) != body(second, NINE_IN_SHANGHAI)


def test_render__the_same_occurrence_twice__identical_bytes(follow_up):
    task = follow_up(cron="0 9 * * *")
    again = ScheduledTask.objects.get(pk=task.pk)  # as a retry in another process reads it
    assert body(task, NINE_IN_SHANGHAI) == body(again, NINE_IN_SHANGHAI)


def test_render__a_stored_run_renders_as_the_run_it_was_made_from(follow_up):
    task = follow_up(cron="0 9 * * *")
    planning.new_run(task, NINE_IN_SHANGHAI).save()
    stored = TaskRun.objects.select_related("task").get()
    assert body(stored.task, stored.occurrence) == body(task, NINE_IN_SHANGHAI)


def test_stamp__shows_seconds_only_when_the_occurrence_has_them(follow_up):
    task = follow_up(at=NINE_IN_SHANGHAI)
    at_seconds = NINE_IN_SHANGHAI + timedelta(seconds=5, microseconds=250)
    assert kinds.stamp(task, planning.new_run(task, NINE_IN_SHANGHAI)).startswith(
        "— 2026-12-03 09:00 ·"
    )
    assert kinds.stamp(task, planning.new_run(task, at_seconds)).startswith(
        "— 2026-12-03 09:00:05 ·"
    )


def test_stamp__a_wall_time_the_zone_shows_twice_gets_its_offset(follow_up):
    task = follow_up(at=NINE_IN_SHANGHAI, tz="America/New_York")
    # 01:30 on 2026-11-01 happens twice in New York: in summer time, then in winter time.
    first, second = (
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),
        datetime(2026, 11, 1, 6, 30, tzinfo=UTC),
    )
    stamps = [kinds.stamp(task, planning.new_run(task, moment)) for moment in (first, second)]
    assert stamps == [
        f"— 2026-11-01 01:30 UTC-0400 · #{task.pk}",
        f"— 2026-11-01 01:30 UTC-0500 · #{task.pk}",
    ]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (kinds.Content("markdown", {"content": "**Call** ACME"}), "content"),
        (
            kinds.Content(
                "textcard", {"title": "Follow-up", "description": "Call ACME", "url": "https://x"}
            ),
            "description",
        ),
    ],
)
def test_render__a_crms_own_kind_is_stamped_too(make_task, crm_kind, content, field):
    task = make_task(crm_kind(content), "lisi", cron="0 9 * * *", tz="Asia/Shanghai")
    rendered = kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI))
    assert rendered.msgtype == content.msgtype
    assert rendered.body == {
        **content.body,
        field: f"{content.body[field]}\n— 2026-12-03 09:00 · #{task.pk}",
    }


def test_render__built_in_wording_is_not_repeated_by_the_stamp(make_task):
    task = make_task("daily_report", "zhangsan", cron="0 9 * * *", tz="Asia/Shanghai")
    content = kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI))
    assert content.body["content"] == (
        f"Please submit your daily report.\n— 2026-12-03 09:00 · #{task.pk}"
    )


@pytest.mark.parametrize(
    "content",
    [
        kinds.Content("text", {"content": "  "}),
        kinds.Content("textcard", {"title": "Follow-up", "url": "https://x"}),
        kinds.Content("image", {"media_id": "MEDIA"}),
    ],
)
def test_render__leaves_what_has_no_text_to_stamp_as_the_kind_made_it(make_task, crm_kind, content):
    task = make_task(crm_kind(content), "lisi", cron="0 9 * * *")
    assert kinds.render(task, planning.new_run(task, NINE_IN_SHANGHAI)) == content
