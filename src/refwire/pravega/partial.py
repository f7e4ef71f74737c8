"""Completing an append block (specs/pravega/README.md §5.3, rule 5.4): the
AppendBlock a Java writer sends, and the AppendBlockEnd that closes it.

Java's ``AppendDecoder`` holds an AppendBlock until its AppendBlockEnd.  The
block holds whole Event frames, then at most one more frame: a PartialEvent
(the first bytes of an event the AppendBlockEnd's data completes) or a Padding
(a block closed early).  These are the rules for that pair, in the order Java
checks them; :class:`~refwire.pravega.connection.ServerConnection` applies them
(``_on_block_end``, ``_reassemble``), and every violation closes the connection
with no reply (an error naming the field and its stream offset).
"""

from __future__ import annotations

from ..errors import LocalProtocolError
from .frames import PROTOCOL, AppendBlock, AppendBlockEnd, Padding, PartialEvent

__all__ = ["check_block_end", "reassemble"]


def check_block_end(block: AppendBlock, end: AppendBlockEnd, end_offset: int) -> int:
    """``end``'s ``sizeOfWholeEvents``, once ``end`` (at stream offset ``end_offset``)
    may close ``block``: the writer ids must be equal, and ``0 ≤ sizeOfWholeEvents ≤
    block length`` (§5.3 rule 5.4)."""
    fo = end_offset + 8  # payload start: writer_id(16) size(4) len(4) data num(4) last(8) rid(8)
    if block.writer_id != end.writer_id:
        raise LocalProtocolError(
            f"AppendBlockEnd writer {end.writer_id} does not match its AppendBlock writer {block.writer_id}",
            protocol=PROTOCOL,
            frame="AppendBlockEnd",
            field="writer_id",
            offset=fo,
        )
    size = end.size_of_whole_events
    if not 0 <= size <= len(block.data):
        raise LocalProtocolError(
            f"sizeOfWholeEvents {size} is outside the block's {len(block.data)} bytes",
            protocol=PROTOCOL,
            frame="AppendBlockEnd",
            field="size_of_whole_events",
            offset=fo + 16,
        )
    return size


def reassemble(block: AppendBlock, block_offset: int, size: int, end: AppendBlockEnd, end_offset: int) -> tuple[bytes, int]:
    """The append data of ``block`` (at stream offset ``block_offset``) closed by
    ``end`` (at ``end_offset``), whose ``sizeOfWholeEvents`` is ``size``, and the
    number of ``end``'s data bytes ignored (§5.3 rule 5.4):

    * no remainder after the whole events: the block's bytes; ``end.data`` is
      silently ignored (the quirk of §10.3, counted in the second value);
    * otherwise the remainder is decoded as **one** frame, which must be a
      PartialEvent or a Padding whose length fits in it (bytes after it are
      ignored): ``block[0:size] + partial.data + end.data``, or after a Padding,
      whose AppendBlockEnd must carry no data, ``block[0:size]``.
    """
    if size == len(block.data):
        # Quirk copied from AppendDecoder: end.data is ignored when the block has no remainder.
        return block.data, len(end.data)
    data = block.data
    left = len(data) - size  # the remainder after the whole events
    base = block_offset + 8 + 16 + size
    if left < 8:
        raise LocalProtocolError(
            f"{left} bytes after the whole events are not a command header",
            protocol=PROTOCOL,
            frame="AppendBlock",
            field="data",
            offset=base,
        )
    code = int.from_bytes(data[size : size + 4], "big", signed=True)
    n = int.from_bytes(data[size + 4 : size + 8], "big", signed=True)
    if code not in (PartialEvent.TYPE, Padding.TYPE):
        raise LocalProtocolError(
            f"the block's remainder must be a PartialEvent or Padding, found type {code}",
            protocol=PROTOCOL,
            frame="AppendBlock",
            field="data",
            offset=base,
        )
    if not 0 <= n <= left - 8:
        raise LocalProtocolError(
            f"the {'PartialEvent' if code == PartialEvent.TYPE else 'Padding'} length {n} does not match the "
            f"{left - 8} bytes left in the block",
            protocol=PROTOCOL,
            frame="PartialEvent" if code == PartialEvent.TYPE else "Padding",
            field="length",
            offset=base + 4,
        )
    if code == Padding.TYPE:
        if end.data:
            raise LocalProtocolError(
                "an AppendBlockEnd after Padding must carry no data",
                protocol=PROTOCOL,
                frame="AppendBlockEnd",
                field="data",
                offset=end_offset + 8 + 24,  # its data: after the header, writer_id, size and data's length
            )
        return data[:size], 0
    # AppendDecoder decodes one frame from the remainder and ignores bytes after it (§5.3).
    with memoryview(data) as view:  # one copy of the event bytes, not three
        return b"".join((view[:size], view[size + 8 : size + 8 + n], end.data)), 0
