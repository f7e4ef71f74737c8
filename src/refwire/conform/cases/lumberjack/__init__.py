"""Lumberjack conformance cases (``refwire conform lumberjack``).

Server cases (``lj.S…``): refwire plays a Beats-like client against the
testee server and judges its acks and how it closes.  Client cases
(``lj.C…``): refwire plays a server -- misbehaving on purpose where a case
says so -- and judges what the testee client sends and its exit status.

Profiles are the behaviours ``specs/lumberjack/README.md`` documents:
``strict`` (the spec; refwire's defaults), ``go-lumber`` (count acks, no
answer to ``W 0``, close on anything odd, §6) and ``logstash`` (highest-seq
acks with a signed compare, lenient framing, RST on errors, §6-§7).

Ids are never reused or renumbered: a retired case keeps its id, marked
retired in its title.  The bytes a case sends depend only on the run seed,
the run id (in lj.S5.3's sink marker) and the case id (:mod:`refwire.conform.ids`).

Modules: :mod:`._common` (spec, profiles, the server observer, frame
builders, helpers), :mod:`.server`, :mod:`.server_compression`,
:mod:`.server_timing` and :mod:`.server_errors` (the server cases, S1-S3, S4,
S5, S6), :mod:`._serving` (the client observer and the serving loop) and
:mod:`.client` (the client cases), :mod:`.simulation` (refwire's own server
and client as ``--sim`` testees), :mod:`.catalogue`.
"""

from ._common import ServerObserver, window
from ._serving import ClientObserver
from .catalogue import CATALOGUE
from .simulation import client_for_simulation, serve_for_simulation

__all__ = ["CATALOGUE", "ClientObserver", "ServerObserver", "client_for_simulation", "serve_for_simulation", "window"]
