"""Preferences in the admin: an operator changes one on a recipient's behalf, through the
API's own checks, and the change is kept with who and why; a viewer only looks."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from ops.roles import OPERATOR, VIEWER
from reminders.models import Preference, PreferenceChange, QuietHours, QuietHoursChange

pytestmark = pytest.mark.django_db

ADD = "/admin/reminders/preference/add/"


def signed_in(client: Client, role: str) -> Client:
    user = User.objects.create_user(role, is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    return client


def test_operator__opts_a_recipient_out_saying_why(client: Client) -> None:
    operator = signed_in(client, OPERATOR)
    form = {"recipient": "alice", "kind": "birthday", "opted_out": "on", "reason": "asked by mail"}
    response = operator.post(ADD, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    row = Preference.objects.get()
    assert (row.recipient, row.kind, row.opted_out, row.changed_by) == (
        "alice",
        "birthday",
        True,
        OPERATOR,
    )
    change = PreferenceChange.objects.get()
    assert (change.changed_by, change.reason) == (OPERATOR, "asked by mail")
    # Opting back in is a change of its own, kept too; recipient and kind stay as they are.
    page = f"/admin/reminders/preference/{row.pk}/change/"
    response = operator.post(page, {"reason": "she asked back"})
    assert response.status_code == 302
    assert Preference.objects.get().opted_out is False
    assert PreferenceChange.objects.count() == 2


def test_operator__a_mandatory_kind_is_refused_and_nothing_saved(client: Client) -> None:
    operator = signed_in(client, OPERATOR)
    form = {"recipient": "alice", "kind": "daily_report", "opted_out": "on", "reason": "x"}
    response = operator.post(ADD, form)
    assert response.status_code == 200
    assert "mandatory" in response.content.decode()
    assert not Preference.objects.exists() and not PreferenceChange.objects.exists()


def test_operator__a_reason_is_required(client: Client) -> None:
    operator = signed_in(client, OPERATOR)
    response = operator.post(ADD, {"recipient": "alice", "kind": "birthday", "opted_out": "on"})
    assert response.status_code == 200
    assert not Preference.objects.exists()


def test_viewer__looks_and_changes_nothing(client: Client) -> None:
    viewer = signed_in(client, VIEWER)
    assert viewer.get("/admin/reminders/preference/").status_code == 200
    assert viewer.get("/admin/reminders/preferencechange/").status_code == 200
    form = {"recipient": "alice", "kind": "birthday", "opted_out": "on", "reason": "x"}
    assert viewer.post(ADD, form).status_code == 403
    assert not Preference.objects.exists()


def test_history__is_read_only_even_for_a_superuser(admin_client: Client) -> None:
    assert admin_client.get("/admin/reminders/preferencechange/add/").status_code == 403


QUIET = "/admin/reminders/quiethours/add/"


def test_operator__sets_a_recipients_own_quiet_hours_saying_why(client: Client) -> None:
    operator = signed_in(client, OPERATOR)
    form = {
        "recipient": "alice",
        "hours": "22:00-07:00",
        "calendar": "",
        "timezone": "Europe/Berlin",
        "reason": "asked",
    }
    assert operator.post(QUIET, form).status_code == 302
    row = QuietHours.objects.get()
    assert (row.hours, row.timezone, row.changed_by) == ("22:00-07:00", "Europe/Berlin", OPERATOR)
    assert QuietHoursChange.objects.get().reason == "asked"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hours", "late"),
        ("hours", "08:00-07:59"),
        ("calendar", "nowhere"),
        ("timezone", "Mars/Olympus"),
    ],
)
def test_operator__bad_quiet_hours_are_refused_naming_the_field(
    client: Client, field: str, value: str
) -> None:
    operator = signed_in(client, OPERATOR)
    form = {
        "recipient": "alice",
        "hours": "22:00-07:00",
        "calendar": "",
        "timezone": "Asia/Shanghai",
        "reason": "x",
    }
    response = operator.post(QUIET, {**form, field: value})
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert not QuietHours.objects.exists() and not QuietHoursChange.objects.exists()


def test_quiet_hours_without_a_zone__show_the_projects_zone_saying_it_is_the_default(
    admin_client: Client, settings
) -> None:
    # Rows written before the field existed have no zone: they are read in the project's.
    settings.TIME_ZONE = "Europe/Berlin"
    row = QuietHours.objects.create(
        recipient="alice", hours="21:00-08:00", changed_by="ops", changed_at="2026-12-01T00:00Z"
    )
    QuietHours.objects.filter(pk=row.pk).update(timezone="")
    listing = admin_client.get("/admin/reminders/quiethours/").content.decode()
    assert "Europe/Berlin (the default)" in listing
    page = admin_client.get(f"/admin/reminders/quiethours/{row.pk}/change/").content.decode()
    assert 'name="timezone" value="Europe/Berlin"' in page
    assert "read in the project's zone, the default" in page
