"""Alerts as WeCom cards: the cards sent, the clicks on them, the mutes they set, and
which Django user a WeCom member acts as.

Invariants:

* One card per alert delivery and member (``AlertCard``), its ``task_id`` unique: a
  delivery tried again sends the very same card, which WeCom answers "task_id taken"
  (42014) when the first went, and the sender reads as delivered. A later alert of the
  same group may reach a member by updating that card instead (``shows``), once: the
  code WeCom's send gave is spent (``code_spent_at``) before it is used.
* One click acts per alert (``AlertAction.acted_on``, unique; NULL for the others,
  which never collide): the first permitted click on any of the alert's cards, whoever
  it went to. Every other click is kept too (``already``: it changed nothing;
  ``declined``: the member may not act), with who, as which user, when and from where.
* A click's card is updated once, with the response code its click gave
  (``CardClick``, by ``reminders.engine.cards``), to say what became of it.
* A mute holds an alert's group (``AlertMute``, one row a group): while it lasts, the
  group's events wait, and go together in one alert once it ends.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from reminders.models.acting import CardClick
from reminders.recipients import member_id_problem


def _member_id(value: str) -> None:
    problem = member_id_problem(value)
    if problem is not None:
        raise ValidationError(problem.message, code=problem.code, params=problem.params)


class WeComMember(models.Model):
    """The WeCom member a Django user is: a click of that member on an alert card acts
    as that user, with that user's permissions."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        related_name="wecom_member",
        verbose_name=_("user"),
    )
    member = models.CharField(
        _("WeCom member id"),
        max_length=64,
        unique=True,
        validators=[_member_id],
        help_text=_("WeCom compares member ids whatever their case, and so do clicks."),
    )

    class Meta:
        verbose_name = _("WeCom member of a user")
        verbose_name_plural = _("WeCom members of users")

    def __str__(self) -> str:
        return f"{self.member} → {self.user}"

    def clean(self) -> None:
        taken = WeComMember.objects.filter(member__iexact=self.member).exclude(pk=self.pk)
        if self.member and taken.exists():
            raise ValidationError(
                {"member": _("Another user is WeCom member %(member)s already.")},
                params={"member": self.member},
                code="member_taken",
            )


class AlertCard(models.Model):
    """An alert's card, delivered by one alert channel to one member."""

    delivery = models.ForeignKey(
        "ops.AlertDelivery",
        on_delete=models.CASCADE,
        related_name="cards",
        verbose_name=_("alert delivery"),
    )
    member = models.CharField(_("WeCom member"), max_length=64)
    task_id = models.CharField(_("card id"), max_length=128, unique=True)
    # What WeCom's message/send answered: the code that updates the card once, within
    # 72 hours.
    response_code = models.TextField(_("response code"), blank=True)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True)
    # When ``response_code`` was taken to update the card (once: WeCom takes it once),
    # and the later alert of its group the card then showed.
    code_spent_at = models.DateTimeField(_("count updated"), null=True, blank=True)
    shows = models.ForeignKey(
        "ops.Alert",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("updated to show"),
    )

    class Meta:
        verbose_name = _("alert card")
        verbose_name_plural = _("alert cards")
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "member"], name="ops_alertcard_one_per_member"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} → {self.member}"


class AlertAction(CardClick):
    """A click on an alert card, and what it did."""

    class Action(models.TextChoices):
        RETRY = "retry", _("retry the failed runs")
        HANDLED = "handled", _("mark handled")
        MUTE = "mute_1h", _("mute for 1 hour")

    class Outcome(models.TextChoices):
        ACTED = "acted", _("acted")
        ALREADY = "already", _("acted on before: nothing changed")
        DECLINED = "declined", _("declined: nothing changed")

    alert = models.ForeignKey(
        "ops.Alert", on_delete=models.CASCADE, related_name="actions", verbose_name=_("alert")
    )
    # The one click that acted on its alert: set on that click only.
    acted_on = models.OneToOneField(
        "ops.Alert",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="acted_by",
        verbose_name=_("the alert acted on"),
    )
    card = models.ForeignKey(
        AlertCard, on_delete=models.SET_NULL, null=True, blank=True, verbose_name=_("card")
    )
    action = models.CharField(_("action"), max_length=1024)
    member = models.CharField(_("WeCom member"), max_length=64)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("as user"),
    )
    # Kept as it was: deleting a user never rewrites who acted.
    username = models.CharField(_("username"), max_length=150, blank=True)
    outcome = models.CharField(_("outcome"), max_length=8, choices=Outcome.choices)
    detail = models.TextField(_("what it did"), blank=True)
    acted_at = models.DateTimeField(_("acted at"))
    # From where: WeCom's callback, which corp and app.
    source = models.CharField(_("from where"), max_length=200, blank=True)

    class Meta:
        verbose_name = _("action on an alert card")
        verbose_name_plural = _("actions on alert cards")
        indexes = [
            # The schedulers' scan for cards to update (``reminders.engine.cards``).
            models.Index(
                fields=["card_attempted_at"],
                name="ops_alertaction_card_idx",
                condition=Q(card_state="pending"),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(card_state="") | ~Q(response_code=""),
                name="ops_alertaction_card_needs_code",
            ),
            models.CheckConstraint(
                condition=Q(acted_on__isnull=True) | Q(outcome="acted"),
                name="ops_alertaction_acted_on_when_acted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.member} on alert {self.alert_id}: {self.outcome}"


class AlertMute(models.Model):
    """An alert's group held quiet until ``until``: its events wait, then go together."""

    group_key = models.CharField(_("group"), max_length=255, unique=True)
    until = models.DateTimeField(_("muted until"))
    by = models.CharField(_("muted by"), max_length=150)
    created_at = models.DateTimeField(_("muted at"))

    class Meta:
        verbose_name = _("alert mute")
        verbose_name_plural = _("alert mutes")

    def __str__(self) -> str:
        return f"{self.group_key} until {self.until.isoformat()}"
