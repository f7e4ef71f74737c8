"""TANK in refwire's protocol registry (see :mod:`refwire.protocols`).

Every piece is named lazily: importing this module imports none of them.
"""

from __future__ import annotations

from refwire.protocols import Descriptor

DESCRIPTOR = Descriptor(
    name="tank",
    title="TANK broker protocol",
    spec="tank",
    package="refwire.tank",
    describer="refwire.tank.describe:describer",
    layout="refwire.tank.describe:LAYOUT",
    dissector="refwire.dissector.tank:PART",
    cli="refwire.tank.cli:register",
    scenario="refwire.sim.scenarios.tank:SCENARIO",
    decoder="refwire.pipeline.dialects.tank:decode",
    rules="refwire.pipeline.dialects.tank:RULES",
    conform="refwire.conform.cases.tank:CATALOGUE",
    chaos="refwire.chaos.adapters.tank:ADAPTER",
    reference_server="refwire.tank.server:serve_reference",
    fixture="tank_broker",
    machines=(
        ("client", "refwire.tank.connection:CLIENT_TRANSITIONS"),
        ("broker", "refwire.tank.connection:BROKER_TRANSITIONS"),
    ),
)
