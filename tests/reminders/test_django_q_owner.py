"""Whose django-q2 a project's is, and what follows: where the engine owns it (no
``Q_CLUSTER`` of the project's own, or one that reads the engine's queue) django-q2's
admin is hidden, a schedule added there being never run, and django-q2 gets the engine's
cluster settings, so that it has nothing to warn about; where the CRM runs django-q2 for
its own jobs its admin stays, beside ours named apart."""

from __future__ import annotations

import subprocess

import pytest
from django.contrib import admin
from django.test import override_settings
from django.urls import reverse
from django.utils import translation
from django_q.admin import QueueAdmin, ScheduleAdmin
from django_q.models import OrmQ, Schedule

from reminders.engine import django_q_owner
from reminders.models import ScheduledTask
from tests.support import processes

WARNING = "Retry and timeout are misconfigured"
ENGINE = {"name": "reminders", "orm": "default", "timeout": 240, "retry": 360}
CRM_REDIS = {"name": "crm", "redis": "redis://127.0.0.1:6379/5", "timeout": 30, "retry": 60}


@pytest.mark.parametrize(
    ("q_cluster", "owned"),
    [
        (None, True),
        (ENGINE, True),
        ({**ENGINE, "name": "reminders-high"}, True),
        (CRM_REDIS, False),
        ({"name": "crm", "orm": "default"}, False),  # the CRM's own queue, on the ORM
        ({**ENGINE, "broker_class": "crm.brokers.Custom"}, False),
        ({**ENGINE, "orm": "crm_db"}, False),
    ],
    ids=["none", "engine", "engine-high", "crm-redis", "crm-orm", "crm-broker", "other-db"],
)
def test_owns_django_q__only_where_the_project_runs_none_of_its_own(q_cluster, owned):
    with override_settings(Q_CLUSTER=q_cluster):
        if q_cluster is None:
            from django.conf import settings

            del settings.Q_CLUSTER
        assert django_q_owner.owns_django_q() is owned


def fresh_site() -> admin.AdminSite:
    site = admin.AdminSite(name="probe")
    site.register(Schedule, ScheduleAdmin)
    site.register(OrmQ, QueueAdmin)
    return site


def test_hide_admin__unregisters_django_q2_where_the_engine_owns_it():
    site = fresh_site()
    with override_settings(Q_CLUSTER=ENGINE):
        assert django_q_owner.hide_django_q_admin(site) == 2
    assert not site.is_registered(Schedule) and not site.is_registered(OrmQ)


def test_hide_admin__keeps_a_crm_s_own_django_q2():
    site = fresh_site()
    with override_settings(Q_CLUSTER=CRM_REDIS):
        assert django_q_owner.hide_django_q_admin(site) == 0
    assert site.is_registered(Schedule) and site.is_registered(OrmQ)


@pytest.mark.django_db
def test_standalone_admin__has_no_django_q2_pages(admin_client):
    index = admin_client.get(reverse("admin:index"))
    apps = [app["app_label"] for app in index.context["app_list"]]
    assert "django_q" not in apps and "reminders" in apps
    assert admin_client.get("/admin/django_q/schedule/add/").status_code == 404
    assert not admin.site.is_registered(Schedule)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_our_tasks_are_not_named_like_django_q2_s_schedules(language):
    with translation.override(language):
        ours = {str(ScheduledTask._meta.verbose_name), str(ScheduledTask._meta.verbose_name_plural)}
        theirs = {str(Schedule._meta.verbose_name), str(Schedule._meta.verbose_name_plural)}
        assert {name.casefold() for name in ours}.isdisjoint(n.casefold() for n in theirs)


def manage(*args: str, settings: str) -> subprocess.CompletedProcess[str]:
    env = {"DJANGO_SETTINGS_MODULE": settings, "PYTHONWARNINGS": "default"}
    return processes.manage(*args, env=env, drop=["Q_CLUSTER_NAME"])


@pytest.mark.processes
def test_a_project_without_q_cluster_gets_no_warning_about_a_cluster_nobody_runs():
    done = manage(
        "shell",
        "-c",
        "from django_q.conf import Conf; print(Conf.CLUSTER_NAME, Conf.TIMEOUT, Conf.RETRY)",
        settings="tests.settings_no_q_cluster",
    )
    assert done.returncode == 0, done.stderr
    assert WARNING not in done.stderr, done.stderr
    # django-q2 runs as the engine's cluster: a `qcluster` there executes its queue.
    assert done.stdout.splitlines()[-1].split() == ["reminders", "240", "360"], done.stdout
