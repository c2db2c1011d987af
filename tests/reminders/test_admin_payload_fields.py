"""The task form's payload as fields: each kind declares the keys its builder reads
(``Kind.payload_fields``), the form shows them, saves the chosen kind's with the JSON's
other keys, shows a builder's refusal on the field it names; and the live preview beside
the form renders the message as it stands, saving nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from reminders import kinds
from reminders.messages.wording import follow_up
from reminders.models import ScheduledTask

from .test_admin import task_form

pytestmark = pytest.mark.django_db

ADD = reverse("admin:reminders_scheduledtask_add")
PREVIEW_ADD = reverse("admin:reminders_scheduledtask_preview_add")


def follow_up_form(**overrides: str) -> dict[str, str]:
    given = {
        "kind": "follow_up",
        "recipient": "lisi",
        "cron": "",
        "run_at_0": "2030-05-06",
        "run_at_1": "10:30:00",
        **overrides,
    }
    return task_form(**given)


def test_the_add_form_has_a_field_per_declared_key_marked_with_its_kinds(admin_client):
    form = admin_client.get(ADD).context["adminform"].form
    customer = form.fields["payload_customer"]
    assert str(customer.label) == "Customer"
    assert set(customer.widget.attrs["data-kinds"].split()) == {
        "follow_up",
        "inquiry_timeout",
        "inquiry_taken",
    }
    assert form.fields["payload_minutes"].widget.attrs["data-kinds"] == "inquiry_timeout"
    # Every kind's message reads these two, through kinds.render.
    assert "follow_up" in form.fields["payload_lang"].widget.attrs["data-kinds"].split()
    assert "birthday" in form.fields["payload_content"].widget.attrs["data-kinds"].split()
    assert str(form.fields["payload"].label) == "other payload keys (JSON)"


def test_saving__the_kind_s_fields_and_the_json_s_other_keys_make_the_payload(admin_client):
    response = admin_client.post(
        ADD,
        follow_up_form(
            payload_customer=" Acme Ltd ",
            payload_subject="Send the quote",
            payload_url="https://crm.example.com/c/7",
            payload_name="read by birthdays only",  # another kind's field: not read
            payload=json.dumps({"crm_id": 7}),
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    task = ScheduledTask.objects.get()
    assert task.payload == {
        "crm_id": 7,
        "customer": "Acme Ltd",
        "subject": "Send the quote",
        "url": "https://crm.example.com/c/7",
    }


def test_the_change_form_shows_stored_keys_in_their_fields_and_the_rest_as_json(
    admin_client, make_task
):
    task = make_task(
        "follow_up", "lisi", payload={"customer": "Acme", "subject": "Call", "crm_id": 7}
    )
    form = (
        admin_client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
        .context["adminform"]
        .form
    )
    assert form.initial["payload_customer"] == "Acme"
    assert form.initial["payload_subject"] == "Call"
    assert form.initial["payload"] == {"crm_id": 7}


@pytest.mark.parametrize(
    "stored",
    [
        {"kind": "daily_report", "payload": {"url": ""}},  # explicitly no link
        {"kind": "inquiry_timeout", "payload": {"minutes": "45"}},  # a number as text
        {"kind": "follow_up", "payload": {"lang": "fr"}},  # a language not declared
        {"kind": "follow_up", "payload": {"customer": " Acme "}},  # spaces the field strips
    ],
)
def test_a_stored_value_its_field_cannot_show_as_is_stays_in_the_json(admin_client, stored):
    task = ScheduledTask.objects.create(
        kind=stored["kind"], recipient="lisi", cron="0 9 * * *", timezone="Asia/Shanghai",
        payload=stored["payload"], priority="normal", channel="memory",
    )  # fmt: skip
    form = (
        admin_client.get(reverse("admin:reminders_scheduledtask_change", args=[task.pk]))
        .context["adminform"]
        .form
    )
    assert form.initial["payload"] == stored["payload"]
    assert not any(name.startswith("payload_") for name in form.initial)


def test_a_number_field_is_stored_as_a_number(admin_client):
    response = admin_client.post(
        ADD,
        task_form(
            kind="inquiry_timeout",
            recipient="lisi",
            cron="",
            run_at_0="2030-05-06",
            run_at_1="10:30:00",
            payload_minutes="45",
        ),
    )
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert ScheduledTask.objects.get().payload == {"minutes": 45}


def test_a_key_given_twice_differently_is_refused_on_its_field(admin_client):
    response = admin_client.post(
        ADD, follow_up_form(payload_customer="Acme", payload=json.dumps({"customer": "Other"}))
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "keep one" in errors["payload_customer"][0]
    assert not ScheduledTask.objects.exists()


def test_the_builder_s_refusal_shows_on_the_field_it_names(admin_client):
    response = admin_client.post(ADD, follow_up_form(payload_url="ftp://crm.example.com/c/7"))
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert 'payload["url"]' in errors["payload_url"][0]
    assert "__all__" not in errors
    assert not ScheduledTask.objects.exists()


def test_the_json_must_be_an_object(admin_client):
    response = admin_client.post(ADD, follow_up_form(payload="[1, 2]"))
    assert "JSON object" in response.context["adminform"].form.errors["payload"][0]


def test_a_crm_s_kind_declares_its_fields_the_same_way(admin_client):
    registered = dict(kinds._registry)
    kinds.register(
        kinds.Kind(
            "contract_renewal",
            "Contract renewal",
            follow_up,
            fields=(kinds.PayloadField("contract", "Contract", "Its number.", "text"),),
        )
    )
    try:
        form = admin_client.get(ADD).context["adminform"].form
        assert form.fields["payload_contract"].widget.attrs["data-kinds"] == "contract_renewal"
        # A CRM's kind without content_override reads no "content": only the language.
        assert "contract_renewal" not in form.fields["payload_content"].widget.attrs["data-kinds"]
        assert "contract_renewal" in form.fields["payload_lang"].widget.attrs["data-kinds"]
    finally:
        kinds._registry.clear()
        kinds._registry.update(registered)


def test_a_payload_field_is_checked_when_declared():
    with pytest.raises(ValueError, match="type 'date'"):
        kinds.PayloadField("due", "Due", type="date")
    with pytest.raises(ValueError, match="identifier"):
        kinds.PayloadField("due date", "Due")


# The live preview -------------------------------------------------------------------


def preview(client: Any, url: str, data: dict[str, str]) -> dict[str, Any]:
    response = client.post(url, data)
    assert response.status_code == 200, response.content[:500]
    return dict(response.json())


def test_live_preview__the_card_as_entered_and_nothing_saved(admin_client, settings):
    settings.LANGUAGE_CODE = "en"
    shown = preview(
        admin_client,
        PREVIEW_ADD,
        follow_up_form(payload_customer="Acme Ltd", payload_subject="Send the quote"),
    )
    assert shown["errors"] == {}
    assert "Acme Ltd" in shown["preview"] and "Send the quote" in shown["preview"]
    changed = preview(
        admin_client,
        PREVIEW_ADD,
        follow_up_form(payload_customer="Globex", payload_subject="Send the quote"),
    )
    assert "Globex" in changed["preview"] and "Acme Ltd" not in changed["preview"]
    assert not ScheduledTask.objects.exists()


def test_live_preview__errors_field_by_field_and_no_message(admin_client):
    shown = preview(admin_client, PREVIEW_ADD, follow_up_form(payload_url="ftp://x", recipient=""))
    assert shown["preview"] == ""
    assert set(shown["errors"]) >= {"recipient"}
    assert shown["errors"]["recipient"][0]["message"]
    shown = preview(admin_client, PREVIEW_ADD, follow_up_form(payload_url="ftp://x"))
    assert 'payload["url"]' in shown["errors"]["payload_url"][0]["message"]


def test_live_preview__of_a_saved_task_changes_nothing(admin_client, make_task):
    task = make_task("follow_up", "lisi", payload={"customer": "Acme"})
    url = reverse("admin:reminders_scheduledtask_preview", args=[task.pk])
    shown = preview(admin_client, url, follow_up_form(payload_customer="Globex"))
    assert "Globex" in shown["preview"]
    task.refresh_from_db()
    assert task.payload == {"customer": "Acme"} and task.recipient == "lisi"


def test_live_preview__only_for_who_may_add_or_change(client, make_task):
    viewer = User.objects.create_user("vera", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_scheduledtask"))
    client.force_login(viewer)
    assert client.post(PREVIEW_ADD, follow_up_form()).status_code == 403
    task = make_task("follow_up", "lisi")
    url = reverse("admin:reminders_scheduledtask_preview", args=[task.pk])
    assert client.post(url, follow_up_form()).status_code == 403


def test_live_preview__post_only_and_404_for_no_task(admin_client):
    assert admin_client.get(PREVIEW_ADD).status_code == 405
    missing = reverse("admin:reminders_scheduledtask_preview", args=[987654])
    assert admin_client.post(missing, follow_up_form()).status_code == 404
