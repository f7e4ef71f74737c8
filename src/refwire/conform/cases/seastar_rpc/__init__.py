"""Seastar RPC conformance cases (``refwire conform seastar-rpc``).

Server cases (``ss.S…``): refwire plays a Seastar client against the testee
server, which registers the conformance verbs of
``specs/seastar-rpc/README.md §11`` (echo, sleep_ms, raise, size); a case
whose verb the testee answers with UNKNOWN_VERB is UNSUPPORTED.  Client cases
(``ss.C…``): refwire plays a server -- delaying, reordering, failing and
closing on purpose -- and the testee client follows the testee contract of
``specs/seastar-rpc/README.md §12``.

Profiles: ``strict`` (the spec; refwire's server) and ``seastar`` (the real
Seastar 25.05 server as the spec records it).  The bytes a case sends depend
only on the run seed and the case id (``c.rng``).

Modules: :mod:`._common` (spec, profiles, verbs, the observers),
:mod:`.server` and :mod:`.client` (the cases), :mod:`.simulation` (the §12
contract client, and refwire's own server and client as ``--sim`` testees),
:mod:`.catalogue`.
"""

from ._common import ClientObserver, ServerObserver
from .catalogue import CATALOGUE
from .simulation import client_for_simulation, contract_client, serve_for_simulation

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver", "client_for_simulation", "contract_client", "serve_for_simulation"]
