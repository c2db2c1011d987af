"""The wave on the dashboard page: its chart, the members, the quiet hours and the quota,
and the same numbers in the JSON."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from .test_wave import NOW, world  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def frozen(monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setattr(timezone, "now", lambda: NOW)


def test_page_shows_the_wave(admin_client, world, frozen):  # noqa: F811
    response = admin_client.get(reverse("ops_dashboard:dashboard"), {"date": "2026-03-10"})
    html = response.content.decode()
    assert "The next hour, minute by minute" in html
    assert "15:05: 35" in html  # a stacked bar's tooltip
    wave = response.context["wave"]
    assert [row["member"].recipient for row in wave["members"]] == ["alice", "bob"]
    assert wave["members"][0]["busiest"].alert
    assert [row["held"].runs for row in wave["quiet"]] == [2]
    assert "set OPS_WECOM_SEATS" in html
    # What the quota counts: WeCom app messages, by Beijing's day.
    assert "by Beijing's day (2026-03-10)" in html
    assert "only the channels that send as a WeCom app count (wecom)" in html
    data = admin_client.get(reverse("ops_dashboard:data"), {"date": "2026-03-10"}).json()
    assert data["wave"]["minutes"][5]["total"] == wave["peak"] == 38


@override_settings(OPS_WECOM_SEATS=1)
def test_page_marks_a_forecast_over_the_quota(admin_client, world, frozen):  # noqa: F811
    html = admin_client.get(reverse("ops_dashboard:dashboard")).content.decode()
    assert "set OPS_WECOM_SEATS" not in html
    assert '<span class="n">200</span>' in html
