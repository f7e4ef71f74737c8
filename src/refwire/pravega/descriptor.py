"""Pravega (wire protocol v17) in refwire's protocol registry (see :mod:`refwire.protocols`).

Every piece is named lazily: importing this module imports none of them.
"""

from __future__ import annotations

from refwire.protocols import Descriptor

DESCRIPTOR = Descriptor(
    name="pravega",
    title="Pravega segment store wire protocol v17",
    spec="pravega",
    package="refwire.pravega",
    cli="refwire.pravega.cli:register",
    scenario="refwire.sim.scenarios.pravega:SCENARIO",
    decoder="refwire.pipeline.decode_pravega:decode",
    conform="refwire.pravega.conform:CATALOGUE",
    rules="refwire.pipeline.rules_pravega:PRAVEGA_RULES",
    machines=(
        ("client", "refwire.pravega.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.pravega.connection:SERVER_TRANSITIONS"),
    ),
)
