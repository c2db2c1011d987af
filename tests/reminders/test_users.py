"""A CRM user as a recipient stands for their WeCom member id."""

import pytest
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils import timezone

from reminders import api
from reminders.models import ScheduledTask
from tests.crm.models import Member

pytestmark = pytest.mark.django_db

RESOLVER = "tests.crm.models.wecom_id"


def user(username: str = "zhangsan", **fields):
    return get_user_model().objects.create_user(username, **fields)


def refused(recipient, **kwargs) -> list[str]:
    with pytest.raises(ValidationError) as excinfo:
        api.schedule("follow_up", recipient, at=timezone.now(), **kwargs)
    assert not ScheduledTask.objects.exists()
    return excinfo.value.message_dict["recipient"]


def test_schedule__a_user_is_their_username_by_default():
    task = api.schedule("follow_up", user("zhangsan"), at=timezone.now())
    assert ScheduledTask.objects.get(pk=task.pk).recipient == "zhangsan"


def test_schedule__a_user_is_the_field_the_settings_name(settings):
    settings.REMINDERS_USER_ID_FIELD = "last_name"
    task = api.schedule("follow_up", user("zs", last_name="ZhangSan01"), at=timezone.now())
    assert task.recipient == "ZhangSan01"


def test_schedule__a_user_is_what_the_crms_resolver_says(settings):
    settings.REMINDERS_RECIPIENT_RESOLVER = RESOLVER
    someone = user("zhangsan")
    Member.objects.create(username=someone.username, wecom_id="wx.zhang-san")
    task = api.schedule("follow_up", someone, at=timezone.now())
    assert task.recipient == "wx.zhang-san"


def test_schedule__a_user_without_a_member_id_is_refused_naming_the_user(settings):
    settings.REMINDERS_RECIPIENT_RESOLVER = RESOLVER
    someone = user("lisi")
    Member.objects.create(username=someone.username, wecom_id="")
    [message] = refused(someone)
    assert "lisi" in message and "has no WeCom member id" in message and RESOLVER in message


def test_schedule__a_user_whose_field_is_empty_is_refused(settings):
    settings.REMINDERS_USER_ID_FIELD = "email"
    [message] = refused(user("wangwu", email=""))
    assert "wangwu" in message and "'email'" in message


def test_schedule__a_member_id_that_is_not_one_is_refused_as_any_recipient(settings):
    settings.REMINDERS_USER_ID_FIELD = "email"
    [message] = refused(user("zhaoliu", email="zhao liu@example.com"))
    assert "zhao liu@example.com" in message and "' '" in message


def test_schedule__a_member_id_that_is_not_text_is_refused(settings):
    settings.REMINDERS_USER_ID_FIELD = "pk"
    [message] = refused(user("qianqi"))
    assert "int, not text" in message


def test_schedule__a_recipient_that_is_neither_text_nor_a_user_is_refused():
    [message] = refused(ScheduledTask())
    assert "member id (text) or a user" in message


def test_schedule_many__users_are_resolved_item_by_item(settings):
    settings.REMINDERS_RECIPIENT_RESOLVER = RESOLVER
    users = [user(f"u{i}") for i in range(3)]
    for i, someone in enumerate(users):
        Member.objects.create(username=someone.username, wecom_id=f"wx{i}")
    tasks = api.schedule_many(
        {"kind": "follow_up", "recipient": someone, "at": timezone.now()} for someone in users
    )
    assert [task.recipient for task in tasks] == ["wx0", "wx1", "wx2"]


def test_checks__a_resolver_that_does_not_import_or_a_field_the_user_model_lacks(settings):
    settings.REMINDERS_RECIPIENT_RESOLVER = "tests.crm.models.no_such_function"
    [error] = [e for e in run_checks(tags=["reminders"]) if e.id == "reminders.E014"]
    assert "no_such_function" in error.msg

    settings.REMINDERS_RECIPIENT_RESOLVER = ""
    settings.REMINDERS_USER_ID_FIELD = "wecom_userid"
    [error] = [e for e in run_checks(tags=["reminders"]) if e.id == "reminders.E014"]
    assert "'wecom_userid'" in error.msg and "auth.User" in error.msg

    settings.REMINDERS_USER_ID_FIELD = "username"
    assert not [e for e in run_checks(tags=["reminders"]) if e.id == "reminders.E014"]


def test_schedule__a_resolver_that_does_not_import_is_a_configuration_error(settings):
    settings.REMINDERS_RECIPIENT_RESOLVER = "tests.crm.models.no_such_function"
    with pytest.raises(ImproperlyConfigured, match="REMINDERS_RECIPIENT_RESOLVER"):
        api.schedule("follow_up", user(), at=timezone.now())
