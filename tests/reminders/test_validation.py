"""A task is refused when it is scheduled if its channel could never send it as asked."""

from collections.abc import Iterator

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from reminders import api, kinds
from reminders.intake import validation
from reminders.models import ScheduledTask
from reminders.senders.wecom import CONTENT_LIMIT, MAX_PARTS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("carrier_channels")]

# Kinds add a few dozen bytes of their own at most (an occurrence stamp): well under this.
ROOM = 200


def refused(**kwargs) -> dict[str, list[str]]:
    """The errors of ``api.schedule`` of a follow-up to alice now, with ``kwargs``."""
    args = {"kind": "follow_up", "recipient": "alice", "at": timezone.now(), **kwargs}
    with pytest.raises(ValidationError) as excinfo:
        api.schedule(args.pop("kind"), args.pop("recipient"), **args)
    assert not ScheduledTask.objects.exists()
    return excinfo.value.message_dict


@pytest.mark.parametrize("channel", ["wecom", "robot"])
def test_schedule__content_larger_than_the_channel_carries_is_refused_on_payload(channel):
    errors = refused(channel=channel, payload={"content": "x" * (CONTENT_LIMIT + 1)})

    [message] = errors["payload"]
    assert channel in message and f"over WeCom's limit of {CONTENT_LIMIT}" in message


def test_schedule__content_that_fits_only_without_the_occurrence_stamp_is_refused():
    # What is checked is what would be sent: the content and the stamp under it.
    errors = refused(channel="wecom", payload={"content": "x" * CONTENT_LIMIT})
    [message] = errors["payload"]
    assert f"over WeCom's limit of {CONTENT_LIMIT}" in message


@pytest.mark.parametrize("channel", ["wecom", "robot"])
def test_schedule__content_the_channel_carries_is_accepted(channel):
    task = api.schedule(
        "follow_up",
        "alice",
        at=timezone.now(),
        channel=channel,
        payload={"content": "x" * (CONTENT_LIMIT - ROOM)},
    )
    assert task.pk is not None


def test_schedule__a_splitting_channel_takes_long_content_up_to_its_parts():
    task = api.schedule(
        "daily_report",
        "alice",
        cron="0 9 * * *",
        channel="wecom_split",
        payload={"content": "line\n" * 1000},
    )
    assert task.pk is not None
    ScheduledTask.objects.all().delete()

    errors = refused(channel="wecom_split", payload={"content": "x" * CONTENT_LIMIT * MAX_PARTS})
    assert "payload" in errors


def test_schedule__a_channel_may_narrow_the_recipients():
    errors = refused(channel="sms", recipient="alice")
    [message] = errors["recipient"]
    assert "'sms'" in message

    assert api.schedule("follow_up", "13800138000", at=timezone.now(), channel="sms").pk


def test_schedule__a_channel_never_widens_the_member_id_rule():
    assert "recipient" in refused(channel="sms", recipient="+8613800138000")


def test_schedule__a_channel_that_cannot_be_built_is_refused_on_channel(settings):
    settings.REMINDERS_CHANNELS = {
        **settings.REMINDERS_CHANNELS,
        "broken": {"BACKEND": "reminders.senders.http.HttpSender", "OPTIONS": {}},
    }
    [message] = refused(channel="broken")["channel"]
    assert "url" in message


@pytest.fixture
def stamped_kind() -> Iterator[str]:
    """A kind that adds a stamp to the payload's content, as kinds may."""

    def render(task: ScheduledTask, run) -> kinds.Content:
        stamp = f" [{run.occurrence.isoformat()} {'#' * ROOM}]"
        return kinds.Content("text", {"content": task.payload["content"] + stamp})

    kinds.register(kinds.Kind("stamped", "Stamped", render))
    yield "stamped"
    kinds._registry.pop("stamped")


def test_schedule__the_message_checked_is_the_one_the_kind_renders(stamped_kind):
    fits_alone = "x" * (CONTENT_LIMIT - ROOM)

    errors = refused(kind=stamped_kind, channel="wecom", payload={"content": fits_alone})

    [message] = errors["payload"]
    assert "over WeCom's limit" in message


def test_schedule__a_payload_the_kind_cannot_render_is_refused_on_payload(stamped_kind):
    errors = refused(kind=stamped_kind, payload={"customer": "ACME"})

    [message] = errors["payload"]
    assert "KeyError" in message and "stamped" in message


def test_schedule__the_first_occurrence_of_a_cron_is_rendered(stamped_kind):
    task = api.schedule(
        stamped_kind, "alice", cron="0 9 * * *", channel="wecom", payload={"content": "hi"}
    )
    assert task.pk is not None


# Checking reads no table ---------------------------------------------------------------


def valid_task(**fields) -> ScheduledTask:
    task = ScheduledTask(
        kind="follow_up",
        recipient="alice",
        channel="memory",
        run_at=timezone.now(),
        timezone="Asia/Shanghai",
        priority="normal",
    )
    for name, value in fields.items():
        setattr(task, name, value)
    return task


# Each check constraint, a task that breaks it, and the field validation says it on.
BROKEN = {
    "reminders_task_cron_xor_run_at": ({"cron": "0 9 * * *"}, "cron"),
    "reminders_task_recipient_is_member_id": ({"recipient": "a\nb"}, "recipient"),
    "reminders_task_about_whole": ({"object_id": "42"}, "object_id"),
}


def test_clean_task__says_on_a_field_whatever_a_check_constraint_would_refuse():
    constraints = {c.name for c in ScheduledTask._meta.constraints}
    assert constraints == set(BROKEN), "a new constraint needs a validator or clean() rule"
    for name, (fields, field) in BROKEN.items():
        with pytest.raises(ValidationError) as excinfo:
            validation.clean_task(valid_task(**fields))
        assert field in excinfo.value.message_dict, name


def test_clean_task__reads_no_table(django_assert_num_queries):
    from django.contrib.contenttypes.models import ContentType

    content_type = ContentType.objects.get_for_model(ScheduledTask)
    task = valid_task(content_type=content_type, object_id="1", key="k", calendar="cn")
    with django_assert_num_queries(0):
        validation.clean_task(task, exclude=("content_type",))
