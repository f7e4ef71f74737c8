"""The 2017 Pravega draft's part of its Wireshark dissector (specs/pravega-draft-2017/README.md).

The draft frames commands as Pravega does (``i32 type, i32 length``, §1) with its own type codes
(§3: they clash with today's), strict layouts (bytes after the last field are an error, §10.1
D11) and no Hello, so nothing on the wire marks it: its dissector registers on no port and has no
heuristic.  Pravega's dissector (:mod:`refwire.dissector.pravega`, port 12345 and the Hello
heuristic) hands it every connection that does not open with a Hello, when both are generated
into one file (``refwire dissector pravega pravega-draft-2017 -o all.lua``); alone, it is chosen
with *Decode As* (``tcp.port``).  The payload reader is Pravega's, over the draft's command table;
a PartialMessage (§5) shows its part (Begin / Middle / End) and its slice, not joined with the
others.  The frames of an append block (§6.3) are top-level frames here, read where they stand.
"""

from __future__ import annotations

from typing import Final

from ..pravega.draft2017.connection import DEFAULT_LIMITS
from ..pravega.draft2017.frames import DRAFT
from .generate import Part
from .pravega import fields_lua, part_lua

__all__ = ["PART"]

SPEC: Final = "specs/pravega-draft-2017/README.md"

_LUA: Final = r"""
local SPEC = "specs/pravega-draft-2017/README.md"
local SEC = {type = "§1, §3", length = "§1", limit = "§1, §11", truncated = "§2, §4", utf = "§2",
  count = "§4", event = "§4", trailing = "§2, §10.1 D11"}
local PORTS = {}
local NORMALIZE = {}
local PART_NAMES = {[0] = "Begin", [1] = "Middle", [2] = "End"}
${commands}
${walker}
-- No port, no heuristic (nothing marks the draft on the wire): Pravega's dissector hands over the
-- connections without a Hello; alone, Decode As.
DissectorTable.get("tcp.port"):add_for_decode_as(P)
refwire_pravega = refwire_pravega or {}
refwire_pravega.draft = function(tvb, pinfo, tree) return P.dissector(tvb, pinfo, tree) end
"""

PART: Final = Part(
    name="pravega_draft",
    title="Pravega 2017 wire-protocol draft (refwire)",
    short="PravegaDraft",
    type_codes={code: cls.NAME for code, cls in DRAFT.commands.items()},
    length_rule=(8, "length"),
    limits={"max_frame_size": DEFAULT_LIMITS.max_frame_size, "max_request_size": DEFAULT_LIMITS.max_frame_size},
    spec=SPEC,
    unknown_type_text="unknown type %s",
    unknown_type_section="§1, §3",
    limit_section="§1, §11",
    start_ctx=True,
    header_by_segment=True,
    fields_lua=fields_lua(DRAFT, "pravega_draft"),
    lua=part_lua(DRAFT, _LUA),
)
