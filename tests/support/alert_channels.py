"""Alert channels for the tests."""

from __future__ import annotations

from ops.alert_channels import AlertChannel


class Exploding(AlertChannel):
    """Raises whatever a careless backend might: an error that is not the channel's."""

    calls = 0

    @property
    def who(self) -> str:
        return "nobody"

    def deliver(self, title: str, body: str, key: str) -> None:
        type(self).calls += 1
        raise RuntimeError("the alert backend is down")


def admins_setting(*addresses: str) -> list:
    """``settings.ADMINS`` for these addresses as the running Django takes it: the
    addresses alone from Django 6 (which deprecates pairs), (name, address) pairs before."""
    import django

    if django.VERSION >= (6, 0):
        return list(addresses)
    return [(address, address) for address in addresses]
