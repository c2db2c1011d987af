"""Who may read ``/metrics``: nobody, unless a setting says so.

* ``OPS_METRICS_TOKEN``: a request whose ``Authorization: Bearer <token>`` matches it
  (compared in constant time) is let in; a wrong one is refused with 401, also from an
  allowed network: a credential that is presented must be right.
* ``OPS_METRICS_ALLOWED_NETWORKS``: a request whose ``REMOTE_ADDR`` is in one of these
  networks is let in without a token.
* Anything else: 401 when a token is configured (one is needed), otherwise 403. The
  refusal says nothing more.

``REMOTE_ADDR`` is the address of whoever opened the connection to this server. Behind
a reverse proxy or load balancer that is the proxy, for every client: allowing the
proxy's address allows everyone who can reach the proxy. Scrape the application server
directly (not through the public proxy), refuse ``/metrics`` at the proxy, or use the
token. ``X-Forwarded-For`` is never read: any client can write it.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.http import HttpRequest

from .conf import Network
from .conf import settings as conf

ALLOWED = 0
WRONG_TOKEN = 401
FORBIDDEN = 403


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _address_in(address: str, networks: list[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in network for network in networks)


def metrics_access(request: HttpRequest) -> int:
    """``ALLOWED``, or the status to refuse ``request`` with (401 or 403)."""
    token = conf.METRICS_TOKEN
    given = _bearer(request)
    if token and given is not None:
        matched = hmac.compare_digest(given.encode(), token.encode())
        return ALLOWED if matched else WRONG_TOKEN
    if _address_in(request.META.get("REMOTE_ADDR", ""), conf.METRICS_ALLOWED_NETWORKS):
        return ALLOWED
    return WRONG_TOKEN if token else FORBIDDEN
