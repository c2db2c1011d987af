"""What a task is about: a CRM object, referenced through the content types framework.

A reference is the object's content type (of its concrete model, as
``GenericForeignKey`` stores it) and its primary key as text, ``str(obj.pk)``: integer,
UUID and text keys all fit one column and one index, and ``api.cancel_for`` finds the
tasks about an object by the same pair. Only a saved object can be referenced, since an
unsaved one has no key to be found by.

Reading the objects back never fails and never costs a query per task: ``prefetch``
fetches the objects of many tasks with one query per model, and an object deleted since,
or a model no longer installed, reads as absent (``target``), not as an error.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from ..models import OBJECT_ID_MAX_LENGTH, ScheduledTask

_ABOUT: GenericForeignKey = ScheduledTask._meta.get_field("about")


def reference(obj: object) -> tuple[ContentType, str]:
    """The content type and the primary key, as text, by which a task refers to
    ``obj``; ``ValidationError`` (for the caller to put on its parameter) when ``obj``
    cannot be referred to."""
    if not isinstance(obj, models.Model):
        raise ValidationError(
            _("A task can be about a model instance, not %(type)s."),
            code="about_type",
            params={"type": type(obj).__name__},
        )
    if obj.pk is None or obj._state.adding:
        raise ValidationError(
            _("The %(model)s is not saved yet: a task can be about a saved object only."),
            code="about_unsaved",
            params={"model": obj._meta.verbose_name},
        )
    object_id = str(obj.pk)
    if not object_id or len(object_id) > OBJECT_ID_MAX_LENGTH:
        raise ValidationError(
            _(
                "The %(model)s's primary key %(pk)r cannot be referred to: a task keeps "
                "1 to %(max)d characters of it."
            ),
            code="about_pk",
            params={"model": obj._meta.verbose_name, "pk": object_id, "max": OBJECT_ID_MAX_LENGTH},
        )
    return ContentType.objects.get_for_model(obj), object_id


def label(content_type: ContentType, object_id: str) -> str:
    """The object's type and key, for keys derived from it: ``"crm.inquiry:42"``."""
    return f"{content_type.app_label}.{content_type.model}:{object_id}"


def model_of(task: ScheduledTask) -> type[models.Model] | None:
    """The model of the object ``task`` is about; None when it is about nothing, or its
    content type's model is no longer installed. Reads no table after the first call
    for a type (the content types are cached)."""
    if task.content_type_id is None:
        return None
    return ContentType.objects.get_for_id(task.content_type_id).model_class()


def prefetch(tasks: Iterable[ScheduledTask]) -> None:
    """Fetch the objects ``tasks`` are about, one query per model, and keep each on its
    task, so that ``task.about`` reads no table; an object deleted since is kept as None.
    Tasks whose model is no longer installed are left alone (``target`` says None)."""
    by_model: dict[type[models.Model], list[tuple[ScheduledTask, object]]] = defaultdict(list)
    for task in tasks:
        model = model_of(task)
        if model is None or task.object_id is None:
            continue
        try:
            key = model._meta.pk.to_python(task.object_id)
        except ValidationError:
            key = None  # not a key of this model (raw SQL): no object has it
        by_model[model].append((task, key))
    for model, pairs in by_model.items():
        keys = {key for _, key in pairs if key is not None}
        found = model._base_manager.in_bulk(keys) if keys else {}
        for task, key in pairs:
            _ABOUT.set_cached_value(task, found.get(key))


def target(task: ScheduledTask) -> models.Model | None:
    """The object ``task`` is about; None when it is about nothing, the object was
    deleted, or its model is no longer installed. Never raises."""
    if model_of(task) is None:
        return None
    if not _ABOUT.is_cached(task):
        prefetch([task])
    return _ABOUT.get_cached_value(task, default=None)
