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
    cli="refwire.tank.cli:register",
    scenario="refwire.sim.scenarios.tank:SCENARIO",
    decoder="refwire.pipeline.decode_tank:decode",
    rules="refwire.pipeline.rules_tank:TANK_RULES",
    conform="refwire.tank.conform:CATALOGUE",
    machines=(
        ("client", "refwire.tank.connection:CLIENT_TRANSITIONS"),
        ("broker", "refwire.tank.connection:BROKER_TRANSITIONS"),
    ),
)
