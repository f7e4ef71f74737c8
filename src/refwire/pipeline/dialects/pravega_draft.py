"""Pravega 2017 draft captures (specs/pravega-draft-2017/README.md §2-§5): the decoder (no capture rules yet).

One row per wire command (as the draft's describer,
:mod:`refwire.pravega.draft2017.describe`, reads them), ``type`` = the command name, as
:mod:`refwire.pipeline.dialects.pravega` does for today's dialect (and with its
field encoding, :func:`~refwire.pipeline.dialects.pravega.command_fields`).
Events inside an append block are rows of their own (the block's frames are
commands too, §4).  A message sent in PartialMessage parts (§5) is a row per
part, and, at its End part, one more row for the reassembled message whose
``parent_offset`` is the Begin part's offset (its ``offset`` counts inside the
message).  Key fields: ``name`` = the segment; ``seq`` = the connection offset
a command carries (``connection_offset`` of a block, ``ack_level`` of
DataAppended, ``connection_offset_ack_level`` of AppendSetup).

The decoder is lenient where the connection machines are strict: it does not
enforce which command may come when, only that each frame decodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ...describe import UNDECODED
from ...errors import LocalProtocolError, ProtocolError
from ..decoders import FrameRow, Peer, dumps, error_row
from .pravega import StrictTail, command_fields, described

__all__ = ["decode"]

#: The field a command's connection offset is in (``seq`` of its row).
_OFFSET_FIELDS = ("connection_offset", "ack_level", "connection_offset_ack_level")


def _row(frame_no: int, offset: int, cmd: Any, size: int, parent: int | None) -> FrameRow:
    seq = next((getattr(cmd, f) for f in _OFFSET_FIELDS if isinstance(getattr(cmd, f, None), int)), None)
    segment = getattr(cmd, "segment", None)
    return FrameRow(
        frame_no,
        offset,
        type(cmd).NAME,
        size,
        parent,
        seq=seq,
        name=segment if isinstance(segment, str) else None,
        fields_json=dumps(command_fields(cmd)),
    )


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from refwire.pravega.draft2017.describe import describer
    from refwire.pravega.draft2017.frames import DRAFT, PROTOCOL, Part, PartialMessage
    from refwire.pravega.draft2017.partial import Reassembly
    from refwire.pravega.frames import CLIENT_LIMITS, DEFAULT_LIMITS, HEADER

    limits = DEFAULT_LIMITS if direction == "c2s" else CLIENT_LIMITS
    tail = StrictTail(limits, allow_inner=True, dialect=DRAFT)
    parts = Reassembly(limits.max_frame_size)
    frame_no = 0

    def known(code: int) -> None:
        if code not in DRAFT.commands:
            raise LocalProtocolError(f"unknown type code {code}", protocol=PROTOCOL, frame=None, field="type", offset=0)

    for d in described(chunks, describer(limits.max_frame_size, direction)):
        if d.type == UNDECODED:
            exc = tail.feed(d)
            if exc is not None:
                yield error_row(frame_no, exc, tail.offset, None)
                return
            continue
        start = d.offset
        try:
            if d.error is not None:
                raise d.error
            cmd = d.frame
            yield _row(frame_no, start, cmd, len(d.data), None)
            frame_no += 1
            if not isinstance(cmd, PartialMessage):
                continue
            data_at = start + HEADER + 1
            if cmd.part not in (Part.BEGIN, Part.MIDDLE, Part.END):
                raise LocalProtocolError(
                    f"part must be 0 (Begin), 1 (Middle) or 2 (End), got {cmd.part}",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=start + HEADER,
                )
            if cmd.part == Part.BEGIN:
                parts.begin(start, in_block=False)
            elif not parts.active:
                raise LocalProtocolError(
                    f"a {Part(cmd.part).name.title()} part without a Begin part",
                    protocol=PROTOCOL,
                    frame="PartialMessage",
                    field="part",
                    offset=start + HEADER,
                )
            parts.add(cmd.data, data_at, known)
            if cmd.part == Part.END:
                begun = parts.started_at
                message = parts.finish(data_at)
                # the message is whole, of a known type and within the limit (Reassembly checked them)
                for whole in describer(limits.max_frame_size, direction).feed(message):
                    if whole.error is not None:
                        raise whole.error
                    yield _row(frame_no, 0, whole.frame, len(message), begun)
                    frame_no += 1
        except ProtocolError as exc:
            yield error_row(frame_no, exc, start, None)
            return
    end = tail.end()
    if end is not None:
        yield error_row(frame_no, end, tail.offset, None)
