"""Pravega capture decoder (specs/pravega/README.md §1, §4) on :class:`refwire.pravega.frames.CommandDecoder`.

One row per wire command, ``type`` = the command name (``Hello``,
``SetupAppend``, ``DataAppended`` ...).  Key fields: ``seq`` = the request id
(when the command has one; ``-1``, Java's "absent", is kept as is), ``name`` =
the segment, ``count`` = ``num_events`` of an AppendBlockEnd.  ``fields_json``
holds every field of the command, byte fields as ``{"len": n}`` and writer ids
as UUID strings, so the rules can read ``writer_id``, ``event_number``,
``previous_event_number``, ``last_event_number`` and ``offset``.

The client direction is decoded with the server's limits
(:data:`~refwire.pravega.frames.DEFAULT_LIMITS`), the server direction with the
client's (:data:`~refwire.pravega.frames.CLIENT_LIMITS`, §1.1).  Append blocks
are one row each: the events inside them are the application's bytes (the
server stores them unparsed, §5.3), so they are not rows of their own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from ..errors import ProtocolError
from .decoders import FrameRow, Peer, dumps, error_row, json_value

__all__ = ["decode", "command_fields"]


def command_fields(cmd: Any) -> dict[str, Any]:
    """Every field of a command as JSON-able values."""
    return {a.name: json_value(getattr(cmd, a.name)) for a in attrs.fields(type(cmd))}


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from refwire.pravega.frames import CLIENT_LIMITS, DEFAULT_LIMITS, CommandDecoder

    dec = CommandDecoder(DEFAULT_LIMITS if direction == "c2s" else CLIENT_LIMITS)
    frame_no = 0
    for chunk in chunks:
        dec.feed(chunk)
        while True:
            start = dec.offset
            try:
                cmd = dec.next_command()
            except ProtocolError as exc:
                yield error_row(frame_no, exc, start, None)
                return
            if cmd is None:
                break
            fields = command_fields(cmd)
            rid = getattr(cmd, "request_id", None)
            segment = getattr(cmd, "segment", None) or getattr(cmd, "segment_name", None)
            count = getattr(cmd, "num_events", None)
            yield FrameRow(
                frame_no,
                start,
                type(cmd).NAME,
                dec.offset - start,
                None,
                seq=rid if isinstance(rid, int) else None,
                count=count if isinstance(count, int) else None,
                name=segment if isinstance(segment, str) else None,
                fields_json=dumps(fields),
            )
            frame_no += 1
    if dec.buffered:
        name = dec.pending_frame_name()
        end = ProtocolError(
            f"{dec.buffered} bytes of an incomplete {name or 'frame'} at the end of the stream",
            protocol="pravega",
            frame=name,
            field="(end)",
            offset=dec.offset,
        )
        yield error_row(frame_no, end, dec.offset, None)
