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
    describer="refwire.seastar_rpc.describe:describer",
    layout="refwire.seastar_rpc.describe:LAYOUT",
    dissector="refwire.dissector.seastar_rpc:PART",
    cli="refwire.seastar_rpc.cli:register",
    scenario="refwire.sim.scenarios.seastar_rpc:SCENARIO",
    decoder="refwire.pipeline.dialects.seastar_rpc:decode",
    rules="refwire.pipeline.dialects.seastar_rpc:RULES",
    conform="refwire.conform.cases.seastar_rpc:CATALOGUE",
    chaos="refwire.chaos.adapters.seastar_rpc:ADAPTER",
    reference_server="refwire.seastar_rpc.demo:serve_reference",
    fixture="seastar_server",
    machines=(
        ("client", "refwire.seastar_rpc.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.seastar_rpc.connection:SERVER_TRANSITIONS"),
    ),
)
