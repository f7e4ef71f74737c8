"""Seastar RPC in refwire's protocol registry (see :mod:`refwire.protocols`).

Every piece is named lazily: importing this module imports none of them.
"""

from __future__ import annotations

from refwire.protocols import Descriptor

DESCRIPTOR = Descriptor(
    name="seastar-rpc",
    title="Seastar RPC",
    spec="seastar-rpc",
    package="refwire.seastar_rpc",
    cli="refwire.seastar_rpc.cli:register",
    scenario="refwire.sim.scenarios.seastar_rpc:SCENARIO",
    decoder="refwire.pipeline.decode_seastar:decode",
    rules="refwire.pipeline.rules_seastar:SEASTAR_RULES",
    conform="refwire.seastar_rpc.conform:CATALOGUE",
    machines=(
        ("client", "refwire.seastar_rpc.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.seastar_rpc.connection:SERVER_TRANSITIONS"),
    ),
)
