"""A local WeCom server API: the same endpoints, errcodes, limits and failures, on a socket.

``make run`` points the WeCom sender at it so that a newcomer sees messages arrive
(``/sandbox/`` in a browser); the tests drive it over real HTTP and inject faults.

* ``WeComSandbox`` runs one in a background thread of this process;
* ``python manage.py wecom_sandbox`` runs one as a process of its own;
* ``SandboxClient`` controls and reads either over HTTP.

Endpoints: ``GET /cgi-bin/gettoken``, ``POST /cgi-bin/message/send``,
``POST /cgi-bin/webhook/send``, ``POST /cgi-bin/message/recall``,
``POST /cgi-bin/message/update_template_card``, ``POST /cgi-bin/message/get_statistics``
(what the app delivered today or yesterday, Beijing time); and for people and tests
``GET /sandbox/`` (the page, where a card's buttons can be clicked),
``GET /sandbox/messages?since_id=&status=&limit=``, ``GET /sandbox/stats``,
``GET|POST /sandbox/control``, ``POST /sandbox/reset`` and ``POST /sandbox/click``
(a member clicks a card's button: the sandbox posts WeCom's encrypted
``template_card_event`` to the configured callback URL, ``wecom_sandbox.clicks``).
``wecom_sandbox/state.py`` says where WeCom's documentation left a choice and which
reading the sandbox takes; ``cards`` and ``updates`` which errcodes it chose where
WeCom documents none.
"""

from .clicks import ClickRefused
from .client import SandboxClient
from .config import (
    DEV_AGENT_ID,
    DEV_CALLBACK_AES_KEY,
    DEV_CALLBACK_TOKEN,
    DEV_CORP_ID,
    DEV_CORP_SECRET,
    DEV_ROBOT_KEY,
    CallbackTarget,
    FaultRates,
    SandboxConfig,
)
from .ledger import LedgerEntry
from .limits import Window
from .server import WeComSandbox

__all__ = [
    "DEV_AGENT_ID",
    "DEV_CALLBACK_AES_KEY",
    "DEV_CALLBACK_TOKEN",
    "DEV_CORP_ID",
    "DEV_CORP_SECRET",
    "DEV_ROBOT_KEY",
    "CallbackTarget",
    "ClickRefused",
    "FaultRates",
    "LedgerEntry",
    "SandboxClient",
    "SandboxConfig",
    "WeComSandbox",
    "Window",
]
