"""Lumberjack v1/v2 in refwire's protocol registry (see :mod:`refwire.protocols`).

Every piece is named lazily: importing this module imports none of them.
"""

from __future__ import annotations

from refwire.protocols import Descriptor

DESCRIPTOR = Descriptor(
    name="lumberjack",
    title="Lumberjack v1/v2 (Beats, Logstash)",
    spec="lumberjack",
    package="refwire.lumberjack",
    describer="refwire.lumberjack.describe:describer",
    layout="refwire.lumberjack.describe:LAYOUT",
    dissector="refwire.dissector.lumberjack:PART",
    cli="refwire.lumberjack.cli:register",
    scenario="refwire.sim.scenarios.lumberjack:SCENARIO",
    decoder="refwire.pipeline.dialects.lumberjack:decode",
    rules="refwire.pipeline.dialects.lumberjack:RULES",
    conform="refwire.conform.cases.lumberjack:CATALOGUE",
    chaos="refwire.chaos.adapters.lumberjack:ADAPTER",
    reference_server="refwire.lumberjack.server:serve_reference",
    fixture="lumberjack_server",
    machines=(
        ("client", "refwire.lumberjack.connection:CLIENT_TRANSITIONS"),
        ("server", "refwire.lumberjack.connection:SERVER_TRANSITIONS"),
    ),
)
