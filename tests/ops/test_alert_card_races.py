"""Races on real transactions (PostgreSQL and MariaDB): two operators click two cards of
one alert at once. The first is held inside its transaction, its action recorded but
not committed, while the second comes: it waits for the alert's lock, then finds the
alert acted on and changes nothing, whatever the order. And an alert's chain does not
grow past a click that is acting on it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group

from ops.alert_cards import HANDLED, RETRY, continues
from ops.alerts import open_alerts
from ops.models import Alert, AlertAction, AlertCard, WeComMember
from ops.roles import OPERATOR
from reminders.intake import clicks
from reminders.models import TaskRun
from tests.ops.conftest import Clock
from tests.ops.test_alert_cards import failed_wave, ops_cards
from tests.reminders.callback.test_click_races import press
from tests.reminders.callback.test_view import callback_settings
from tests.support.locks import Paused, Worker, require_row_locks, statement

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("callback_settings", "ops_cards"),
]
__all__ = ["callback_settings", "ops_cards"]


def press_card(member: str, key: str, nonce: str) -> clicks.Applied:
    return press(AlertCard.objects.get(member=member).task_id, member, key, nonce)


@pytest.fixture
def carol_operates(django_user_model: Any) -> None:
    carol = django_user_model.objects.create_user("carol.li", is_staff=True)
    carol.groups.add(Group.objects.get(name=OPERATOR))
    WeComMember.objects.create(user=carol, member="carol")


@pytest.mark.usefixtures("carol_operates")
def test_two_operators_at_once__one_acts_the_other_changes_nothing(make_task, clock: Clock) -> None:
    require_row_locks()
    runs = failed_wave(make_task)
    clock.step()
    alice = Paused(
        lambda: press_card("alice", RETRY, "1"), after=statement("INSERT", "ops_alertaction")
    )
    alice.hold()

    carol = Worker(lambda: press_card("carol", HANDLED, "2"))
    carol.start()
    assert carol.blocked_or_done() == "blocked"  # on the alert's lock alice holds
    alice.resume()

    assert alice.outcome().outcome == clicks.Outcome.ACTED
    assert carol.outcome().outcome == clicks.Outcome.ALREADY
    outcomes = dict(AlertAction.objects.values_list("member", "outcome"))
    assert outcomes == {"alice": "acted", "carol": "already"}
    assert TaskRun.objects.filter(pk__in=[r.pk for r in runs], status="retrying").count() == 3
    assert Alert.objects.get().handled_at is None


def test_a_chain_does_not_grow_past_a_click_acting_on_it(make_task, clock: Clock) -> None:
    require_row_locks()
    failed_wave(make_task)
    clock.step()
    failed_wave(make_task, 2)
    # The group's next alert is opened, not delivered yet: its chain is decided when
    # it is.
    clock.now += timedelta(seconds=600)
    [second] = open_alerts(clock.now)
    alice = Paused(
        lambda: press_card("alice", HANDLED, "1"), after=statement("INSERT", "ops_alertaction")
    )
    alice.hold()

    grows = Worker(lambda: continues(Alert.objects.get(pk=second.pk), clock.now))
    grows.start()
    assert grows.blocked_or_done() == "blocked"  # on the lock of the chain's first alert
    alice.resume()

    assert alice.outcome().outcome == clicks.Outcome.ACTED
    assert grows.outcome() is False  # acted on: the next alert starts afresh
    assert Alert.objects.get(pk=second.pk).continues is None
