"""Pravega v17 conformance cases (``refwire conform pravega``).

Server cases (``pv.S…``): refwire plays a client against the testee segment
store and judges its replies and how it closes.  Every case works on segments
of its own, named after the case id, the run id and a seeded suffix
(``conform/pv-S2-1-0a1b2c3d-5f3a09c1/0.#epoch.0``), so cases never meet on a
shared store, and neither do runs (:mod:`refwire.conform.ids`).

Client cases (``pv.C…``): refwire plays the segment store *and* a controller
(:class:`~refwire.pravega.controller.PravegaController`, whose every
``getURI`` points at the case's store), so a real client that finds segments
through a controller reaches the case's misbehaving store.  The testee
contract is ``specs/pravega/README.md`` §14.

Profiles are the behaviours the spec documents: ``strict`` (the spec;
refwire's store and client), ``java-server`` (the Java segment store, §8,
§10.3), ``rust-client`` (``pravega-client-rust``, the PyPI ``pravega``
package, §5.2, §10.2) and ``java-client`` (§5.2, §10.2).

Ids are never reused or renumbered.  The bytes a case sends depend only on
the run seed, the run id and the case id (:mod:`refwire.conform.ids`).

Modules: :mod:`._common` (spec, profiles, the store observer, helpers),
:mod:`.server` (S1-S2), :mod:`.server_reads` (S3) and :mod:`.client` (the
cases), :mod:`.simulation` (refwire's own store and client as ``--sim``
testees), :mod:`.catalogue`.
"""

from ._common import ServerObserver, segment_of
from .catalogue import CATALOGUE
from .client import ClientObserver, client_services
from .simulation import client_for_simulation, serve_for_simulation

__all__ = [
    "CATALOGUE",
    "ClientObserver",
    "ServerObserver",
    "client_for_simulation",
    "client_services",
    "segment_of",
    "serve_for_simulation",
]
