"""The 2017 Pravega wire-protocol draft in refwire's protocol registry (see :mod:`refwire.protocols`).

Every piece is named lazily: importing this module imports none of them.
"""

from __future__ import annotations

from refwire.protocols import Descriptor

DESCRIPTOR = Descriptor(
    name="pravega-draft-2017",
    title="Pravega 2017 wire-protocol draft",
    spec="pravega-draft-2017",
    package="refwire.pravega.draft2017",
    describer="refwire.pravega.draft2017.describe:describer",
    dissector="refwire.dissector.pravega_draft:PART",
    layout="refwire.pravega.draft2017.describe:LAYOUT",
    scenario="refwire.sim.scenarios.pravega_draft:SCENARIO",
    decoder="refwire.pipeline.dialects.pravega_draft:decode",
    conform="refwire.conform.cases.pravega_draft:CATALOGUE",
    chaos="refwire.chaos.adapters.pravega_draft:ADAPTER",
    machines=(
        ("client", "refwire.pravega.draft2017.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.pravega.draft2017.connection:SERVER_TRANSITIONS"),
    ),
)
