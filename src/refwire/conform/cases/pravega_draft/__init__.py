"""Pravega 2017 draft conformance cases (``refwire conform pravega-draft-2017``).

Server cases (``pd.S…``): refwire plays a draft client against the testee
segment store and judges its replies and how it closes.  The draft has no
CreateSegment, so the testee contract (specs/pravega-draft-2017/README.md §13)
asks for one empty segment per server case, named after the case id and the
run id (``pd.S2.1`` in run ``0a1b2c3d`` -> ``conform-pd-S2-1-0a1b2c3d``,
:func:`segment_of`), created before the run; :func:`precreate` creates them on
refwire's own store through the current dialect (``python -m
refwire.conform.cases.pravega_draft --run-id R HOST:PORT``), and the runner
checks they are there before the first case (:func:`check_segments`), stopping
with one line saying what to do when they are not.

Client cases (``pd.C…``): refwire plays the segment store (a memory store per
case, answering through the case's conversation), misbehaving where a case
says so; the client-role contract is §13 too.

Profiles: ``strict`` (the spec; refwire's store).  Ids are never reused or
renumbered.  The bytes a case sends depend only on the run seed, the run id
and the case id (:mod:`refwire.conform.ids`).

Modules: :mod:`._common` (spec, profile, the store observer, helpers),
:mod:`.server` and :mod:`.client` (the cases), :mod:`.segments` (the case
segments and §13's pre-create step, run by :mod:`.__main__`),
:mod:`.simulation` (refwire's own store and client as ``--sim`` testees),
:mod:`.catalogue`.
"""

from ._common import ServerObserver, segment_of
from .catalogue import CATALOGUE
from .client import ClientObserver
from .segments import check_segments, main, precreate, server_segments
from .simulation import client_for_simulation, serve_for_simulation

__all__ = [
    "CATALOGUE",
    "ClientObserver",
    "ServerObserver",
    "check_segments",
    "client_for_simulation",
    "main",
    "precreate",
    "segment_of",
    "serve_for_simulation",
    "server_segments",
]
