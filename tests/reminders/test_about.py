"""A task may be about a CRM object: scheduled with it, shown with it, cancelled by it."""

import subprocess
import sys
import uuid

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from reminders import api
from reminders.engine import dispatch
from reminders.models import ScheduledTask, TaskRun
from tests.crm.models import Contract, Customer, Inquiry

pytestmark = pytest.mark.django_db


@pytest.fixture
def customer():
    return Customer.objects.create(name="ACME")


@pytest.fixture
def inquiry():
    return Inquiry.objects.create(subject="Price of 200 units?")


@pytest.fixture
def contract():
    return Contract.objects.create(number="HT-2026/0042")


def follow_up(about, key=None, **kwargs):
    return api.schedule("follow_up", "alice", at=timezone.now(), about=about, key=key, **kwargs)


# Scheduling about an object ----------------------------------------------------------


@pytest.mark.parametrize("obj_name", ["customer", "inquiry", "contract"])
def test_schedule__about_an_object_with_an_integer_uuid_or_text_key_finds_it_again(
    request, obj_name
):
    obj = request.getfixturevalue(obj_name)

    task = follow_up(obj)

    stored = ScheduledTask.objects.get(pk=task.pk)
    assert stored.content_type == ContentType.objects.get_for_model(obj)
    assert stored.object_id == str(obj.pk)
    assert stored.about == obj


def test_schedule__about_nothing_stores_neither_half(customer):
    task = api.schedule("follow_up", "alice", at=timezone.now())
    stored = ScheduledTask.objects.get(pk=task.pk)
    assert (stored.content_type_id, stored.object_id, stored.about) == (None, None, None)


def test_schedule__with_key_again_without_about_is_about_nothing_as_given(customer):
    follow_up(customer, key="fu:1")
    again = api.schedule("follow_up", "alice", at=timezone.now(), key="fu:1")
    assert ScheduledTask.objects.get(pk=again.pk).object_id is None


@pytest.mark.parametrize(
    ("about", "reason"),
    [
        pytest.param("customer:42", "not str", id="a string"),
        pytest.param(Customer(name="unsaved"), "not saved yet", id="unsaved"),
        pytest.param(Contract(number="x" * 65), "not saved yet", id="unsaved text key"),
    ],
)
def test_schedule__about_something_that_is_not_a_saved_object_is_refused_on_about(about, reason):
    with pytest.raises(ValidationError) as excinfo:
        follow_up(about)
    [message] = excinfo.value.message_dict["about"]
    assert reason in message
    assert not ScheduledTask.objects.exists()


def test_schedule__about_an_object_whose_key_does_not_fit_is_refused_on_about():
    contract = Contract.objects.create(number="x" * 65)
    with pytest.raises(ValidationError) as excinfo:
        follow_up(contract)
    [message] = excinfo.value.message_dict["about"]
    assert "1 to 64 characters" in message
    assert not ScheduledTask.objects.exists()


# The database holds it ---------------------------------------------------------------


@pytest.mark.parametrize(
    "half",
    [
        pytest.param({"object_id": None}, id="type without id"),
        pytest.param({"object_id": ""}, id="type with an empty id"),
        pytest.param({"content_type": None}, id="id without type"),
    ],
)
def test_database__refuses_half_an_object(customer, half):
    task = follow_up(customer)
    with pytest.raises(IntegrityError), transaction.atomic():
        ScheduledTask.objects.filter(pk=task.pk).update(**half)
    stored = ScheduledTask.objects.get(pk=task.pk)
    assert stored.about == customer


def test_model_clean__says_half_an_object_on_its_field(customer):
    task = follow_up(customer)
    task.object_id = None
    with pytest.raises(ValidationError) as excinfo:
        task.full_clean(validate_constraints=False)
    assert "object_id" in excinfo.value.message_dict


def test_database__has_an_index_on_type_and_id():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, ScheduledTask._meta.db_table)
    about = constraints["reminders_task_about_idx"]
    assert about["index"] and about["columns"] == ["content_type_id", "object_id"]


# cancel_for ----------------------------------------------------------------------------


def test_cancel_for__cancels_every_live_task_about_the_object_and_their_pending_runs(
    customer, inquiry
):
    due = follow_up(customer, key="fu:due")
    later = api.schedule("daily_report", "bob", cron="0 9 * * *", about=customer, key="report:acme")
    cancelled = follow_up(customer, key="fu:gone")
    api.cancel("fu:gone")
    other = follow_up(inquiry, key="fu:other")
    dispatch.materialize()
    assert due.runs.get().status == "scheduled"

    assert api.cancel_for(customer) == 2

    statuses = dict(ScheduledTask.objects.values_list("key", "status"))
    assert statuses == {
        due.key: "cancelled",
        later.key: "cancelled",
        cancelled.key: "cancelled",
        other.key: "active",  # about another object; its run waits
    }
    assert due.runs.get().status == "cancelled"
    assert TaskRun.objects.filter(task=other).exclude(status="cancelled").exists()
    assert api.cancel_for(customer) == 0


def test_cancel_for__an_object_with_a_uuid_key(inquiry):
    follow_up(inquiry)
    Inquiry.objects.create(id=uuid.uuid4(), subject="another")
    assert api.cancel_for(inquiry) == 1
    assert ScheduledTask.objects.get().status == "cancelled"


def test_cancel_for__something_that_is_not_a_saved_object_is_refused_on_obj():
    with pytest.raises(ValidationError) as excinfo:
        api.cancel_for(Customer(name="unsaved"))
    assert "obj" in excinfo.value.message_dict


# The admin -------------------------------------------------------------------------------


def changelist(client) -> str:
    response = client.get(reverse("admin:reminders_scheduledtask_changelist"))
    assert response.status_code == 200
    return response.content.decode()


def test_admin__links_to_an_object_its_site_registers_and_names_one_it_does_not(
    admin_client, customer, inquiry, contract
):
    follow_up(customer)
    follow_up(inquiry)
    follow_up(contract)
    page = changelist(admin_client)
    customer_url = reverse("admin:crm_customer_change", args=[customer.pk])
    inquiry_url = reverse("admin:crm_inquiry_change", args=[inquiry.pk])
    assert f'<a href="{customer_url}">ACME</a>' in page
    assert f'<a href="{inquiry_url}">Price of 200 units?</a>' in page
    assert "contract HT-2026/0042" in page


def test_admin__the_change_form_shows_the_object_and_saving_keeps_it(admin_client, customer):
    task = follow_up(customer)
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    page = admin_client.get(url).content.decode()
    assert reverse("admin:crm_customer_change", args=[customer.pk]) in page
    assert 'name="content_type"' not in page and 'name="object_id"' not in page

    data = {
        "kind": "follow_up",
        "recipient": "alice",
        "channel": "memory",
        "priority": "",
        "calendar": "",
        "payload": "{}",
        "key": "",
        "cron": "",
        "run_at_0": "2030-01-02",
        "run_at_1": "09:00",
        "timezone": "Asia/Shanghai",
        # What a forged form would add: the form has no such fields, so it changes nothing.
        "content_type": "",
        "object_id": "",
    }
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.content[:3000]
    stored = ScheduledTask.objects.get(pk=task.pk)
    assert stored.about == customer and stored.run_at.year == 2030


def test_admin__says_an_object_was_deleted_or_its_model_removed(admin_client, customer):
    follow_up(customer)
    gone = Customer.objects.create(name="Gone Ltd")
    follow_up(gone)
    gone_pk = gone.pk
    gone.delete()
    removed = ContentType.objects.create(app_label="legacy", model="lead")
    task = follow_up(customer)
    ScheduledTask.objects.filter(pk=task.pk).update(content_type=removed, object_id="7")

    page = changelist(admin_client)

    assert "ACME" in page
    assert f"customer {gone_pk} (deleted)" in page
    assert "legacy.lead 7 (its model is no longer installed)" in page
    url = reverse("admin:reminders_scheduledtask_change", args=[task.pk])
    assert "no longer installed" in admin_client.get(url).content.decode()


def test_admin__fetches_the_objects_of_a_page_with_one_query_per_model(admin_client):
    def queries_for_a_page_of(n: int) -> int:
        ScheduledTask.objects.all().delete()
        for i in range(n):
            follow_up(Customer.objects.create(name=f"c{i}"))
            follow_up(Inquiry.objects.create(subject=f"i{i}"))
        with CaptureQueriesContext(connection) as queries:
            changelist(admin_client)
        return len(queries)

    assert queries_for_a_page_of(2) == queries_for_a_page_of(20)


# contenttypes is required ------------------------------------------------------------


@pytest.mark.processes
def test_without_contenttypes_installed__the_error_says_what_to_add():
    script = (
        "import django\n"
        "from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['django_q', 'reminders'],"
        " DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
        "django.setup()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "'django.contrib.contenttypes' in INSTALLED_APPS" in result.stderr
