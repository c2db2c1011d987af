"""The ops staff's groups: made by migrate and by ``ops_roles``, exactly their role's
permissions, again and again."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, Permission
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal

from ops.roles import OPERATOR, VIEWER

pytestmark = pytest.mark.django_db


def held(group: str) -> set[str]:
    return {
        f"{app}.{codename}"
        for app, codename in Group.objects.get(name=group).permissions.values_list(
            "content_type__app_label", "codename"
        )
    }


def view_of_every_model() -> set[str]:
    from django.apps import apps

    return {
        f"{label}.view_{model._meta.model_name}"
        for label in ("reminders", "ops")
        for model in apps.get_app_config(label).get_models()
        if "view" in model._meta.default_permissions
    }


def test_migrate__made_both_groups_with_their_permissions():
    viewer, operator = held(VIEWER), held(OPERATOR)
    assert viewer == view_of_every_model() - {"reminders.view_providertoken"}
    assert "reminders.view_taskrun" in viewer and "ops.view_alert" in viewer
    assert operator == viewer | {
        "reminders.retry_taskrun",
        "reminders.mark_handled_taskrun",
        "reminders.pause_scheduledtask",
        "reminders.run_now_scheduledtask",
        "reminders.recall_sendlog",
        "reminders.edit_calendarday",
        "reminders.add_preference",
        "reminders.change_preference",
        "reminders.add_quiethours",
        "reminders.change_quiethours",
        "ops.mute_alert",
    }
    everything = viewer | operator
    # Preferences are changed on a recipient's behalf, through the API (who and why kept).
    edits = {p for p in everything if p.split(".")[1].startswith(("add_", "change_", "delete_"))}
    assert edits == {
        "reminders.add_preference",
        "reminders.change_preference",
        "reminders.add_quiethours",
        "reminders.change_quiethours",
    }


def test_ops_roles__is_idempotent_and_takes_back_what_was_added_by_hand():
    viewer = Group.objects.get(name=VIEWER)
    viewer.permissions.add(Permission.objects.get(codename="delete_taskrun"))
    before = {name: held(name) for name in (VIEWER, OPERATOR)}
    out = StringIO()
    call_command("ops_roles", stdout=out)
    call_command("ops_roles", stdout=out)
    assert held(VIEWER) == before[VIEWER] - {"reminders.delete_taskrun"}
    assert held(OPERATOR) == before[OPERATOR]
    assert Group.objects.filter(name__in=[VIEWER, OPERATOR]).count() == 2
    assert f"Ops viewer ({VIEWER}): {len(held(VIEWER))} permissions" in out.getvalue()


def test_migrate__brings_in_permissions_that_appeared_since():
    """A permission gone (as if its model were new) is created and granted by the next
    migrate's post_migrate, and the groups made again if someone deleted them."""
    Permission.objects.filter(codename="run_now_scheduledtask").delete()
    Group.objects.filter(name=OPERATOR).delete()
    emit_post_migrate_signal(verbosity=0, interactive=False, db="default")
    assert "reminders.run_now_scheduledtask" in held(OPERATOR)


def test_recall__the_operator_may_recall_a_sent_message_and_the_viewer_may_not(django_user_model):
    operator = django_user_model.objects.create_user("op", is_staff=True)
    operator.groups.add(Group.objects.get(name=OPERATOR))
    viewer = django_user_model.objects.create_user("look", is_staff=True)
    viewer.groups.add(Group.objects.get(name=VIEWER))
    assert operator.has_perm("reminders.recall_sendlog")
    assert not viewer.has_perm("reminders.recall_sendlog")
    assert viewer.has_perm("reminders.view_sendlog")
