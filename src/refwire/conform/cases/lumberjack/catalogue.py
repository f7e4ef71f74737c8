"""The Lumberjack catalogue: the server cases (S1-S6), then the client cases."""

from __future__ import annotations

from ...model import CaseBook
from ...runner import Catalogue
from . import client, server, server_compression, server_errors, server_timing
from ._common import FEATURES, PROFILES, SPEC, ServerObserver
from ._serving import ClientObserver
from .server_compression import _bomb_body
from .simulation import client_for_simulation, holding_server_for_simulation, serve_for_simulation

#: The cases, part by part in catalogue order, each part's in the order it registers
#: them (an id or slug used twice anywhere in the catalogue is refused here).
BOOK = CaseBook(SPEC)
for _case in (
    *server.BOOK.cases,
    *server_compression.BOOK.cases,
    *server_timing.BOOK.cases,
    *server_errors.BOOK.cases,
    *client.BOOK.cases,
):
    BOOK.add(_case)

CATALOGUE = Catalogue(
    protocol="lumberjack",
    prefix="lj",
    cases=tuple(BOOK.cases),
    profiles=PROFILES,
    features=FEATURES,
    server_observer=ServerObserver,
    client_observer=ClientObserver,
    spec=SPEC,
    sim_server=serve_for_simulation,
    warm=_bomb_body,
    sim_client=client_for_simulation,
    sim_server_holding=holding_server_for_simulation,
)
