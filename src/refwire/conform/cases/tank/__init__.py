"""TANK conformance cases (``refwire conform tank``).

Server cases (``tk.S…``): refwire plays a TANK client against the testee
broker and judges its answers and how it closes.  Every case works in a topic
of its own, named after the case id (``tk.S2.1`` -> ``conform-tk-S2-1``), so
cases never meet on a shared broker.

Profiles are the behaviours ``specs/tank/README.md`` documents: ``strict``
(the spec; refwire's broker) and ``tank-broker`` (the real C++ broker, and
tank-cli in the client cases), where the spec records differences: the real
broker keeps the low 32 bits of a 5-byte varint above 2^32 - 1 instead of
refusing it (§2), and stores a bundle whose messages do not parse (§6, a bug:
FAIL under every profile).

Ids are never reused or renumbered.  The bytes a case sends depend only on
the run seed, the run id (in its topic's name) and the case id
(:mod:`refwire.conform.ids`).

Modules: :mod:`._common` (spec, profiles, the broker observer, helpers),
:mod:`.server` and :mod:`.client` (the cases), :mod:`.simulation` (refwire's
own broker and client as ``--sim`` testees), :mod:`.catalogue`.
"""

from ._common import ServerObserver
from .catalogue import CATALOGUE
from .client import ClientObserver
from .simulation import client_for_simulation, serve_for_simulation

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver", "client_for_simulation", "serve_for_simulation"]
