"""The Pravega 2017 draft catalogue: the server cases, then the client cases."""

from __future__ import annotations

from ...model import CaseBook
from ...runner import Catalogue
from . import client, server
from ._common import FEATURES, PROFILES, SPEC, ServerObserver
from .client import ClientObserver
from .segments import check_segments
from .simulation import client_for_simulation, serve_for_simulation

#: The cases, part by part in catalogue order, each part's in the order it registers
#: them (an id or slug used twice anywhere in the catalogue is refused here).
BOOK = CaseBook(SPEC)
for _case in (*server.BOOK.cases, *client.BOOK.cases):
    BOOK.add(_case)

CATALOGUE = Catalogue(
    protocol="pravega-draft-2017",
    prefix="pd",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    sim_client=client_for_simulation,
    prepare=check_segments,
)
