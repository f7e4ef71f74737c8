"""The lenient reading of the 2017 draft dialect's traffic (specs/pravega-draft-2017/README.md
§1-§5): Pravega's describer (:mod:`refwire.pravega.describe`) over the draft's own
command table (:data:`~refwire.pravega.draft2017.frames.DRAFT`; its type codes
clash with today's).

Frames are ``i32 type, i32 length`` and the payload (§1); :data:`LAYOUT` gives per
command the header and its leading fixed-width fields (§2, §4).  Inner commands
(Event, §6.3; PartialMessage inside a block, §5) are described where they stand,
and a PartialMessage is described as the part it is: reassembling a message from
its parts is the reader's (:class:`~refwire.pravega.draft2017.partial.Reassembly`).
"""

from __future__ import annotations

from typing import Any, Final

from ..describe import PravegaDescriber, layout_of
from .frames import DRAFT

__all__ = ["LAYOUT", "NOTES", "describer"]

NOTES: Final = (
    "Every frame is i32 type, i32 length (big-endian) and length payload bytes (§1); the table gives, per "
    "command, the header and the leading fixed-width fields up to the first variable-width one (§2, §4). "
    "Not in the table: strings are a u16 length and Java modified UTF-8; KeepAlive, Event, SegmentRead and "
    "PartialMessage data run to the end of the frame; no field is optional and bytes after the last field are "
    "an error on field (trailing) (§10.1 D11); the frames between BeginAppendBlock and EndAppendBlock are Event "
    "and PartialMessage commands, BeginAppendBlock.length counting their wire bytes (§6.3); that field is named length as the header's is, so by name (spans, fields) it is the command's own length (offset 32), by position both are listed; a PartialMessage "
    "carries a u8 part (Begin 0, Middle 1, End 2) and a slice of one serialized message, header included, "
    "which its parts reassemble (§5)."
)

#: The draft's commands as data (§1, §3, §4).
LAYOUT: Final = layout_of(DRAFT, NOTES)


def describer(max_frame_size: int, direction: str = "c2s", session: dict[str, Any] | None = None) -> PravegaDescriber:
    """A fresh lenient describer of one direction of one draft connection."""
    return PravegaDescriber(max_frame_size, DRAFT)
