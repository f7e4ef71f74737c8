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
    describer="refwire.pravega.describe:describer",
    dissector="refwire.dissector.pravega:PART",
    layout="refwire.pravega.describe:LAYOUT",
    cli="refwire.pravega.cli:register",
    scenario="refwire.sim.scenarios.pravega:SCENARIO",
    decoder="refwire.pipeline.dialects.pravega:decode",
    conform="refwire.conform.cases.pravega:CATALOGUE",
    chaos="refwire.chaos.adapters.pravega:ADAPTER",
    rules="refwire.pipeline.dialects.pravega:RULES",
    reference_server="refwire.pravega.server:serve_reference",
    fixture="pravega_store",
    machines=(
        ("client", "refwire.pravega.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.pravega.connection:SERVER_TRANSITIONS"),
    ),
)
