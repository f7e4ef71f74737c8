"""The stateful tests of the five dialects, from one harness: each dialect's
client/server machine pair (``support.stateful.<dialect>``, on
:class:`~support.stateful.wire.MachinePair`) joined by an in-memory wire cut
into hypothesis-chosen pieces, driven by its applications and a virtual clock,
its connections ending at any point (EOF from either side, a reset, a failed
write, a timeout) and new pairs following; every state a machine reaches is a
path of its transition table, and each model checks its protocol's promises
(what was acked is never lost or altered, resends, timeouts)."""

from __future__ import annotations

from types import ModuleType

import pytest
from hypothesis.stateful import run_state_machine_as_test
from support.stateful import lumberjack, pravega, pravega_draft, seastar_rpc, tank

MODELS: dict[str, ModuleType] = {
    "lumberjack": lumberjack,
    "pravega": pravega,
    "pravega_draft": pravega_draft,
    "seastar_rpc": seastar_rpc,
    "tank": tank,
}


@pytest.mark.parametrize("dialect", list(MODELS))
def test_client_and_server_over_a_chunked_wire(dialect: str) -> None:
    model = MODELS[dialect]
    run_state_machine_as_test(model.PAIR, settings=model.SETTINGS)
