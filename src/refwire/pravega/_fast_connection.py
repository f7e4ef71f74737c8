"""The speed path of the Pravega segment-store machine, beside its plain path (specs/pravega/README.md §5.3, §5.4).

The plain path is :class:`~.connection.ServerConnection`'s general one: every
frame decoded to its command (:meth:`~.frames_codec.CommandDecoder.next_command`)
and taken through ``_on_command``, ``_on_block_end``, ``_reassemble`` and
``_begin_append``, as the spec's sections read.  :func:`fast_append` does the
same work for the two shapes writers send, straight from the buffer to the
:class:`~.events.Append`: a bare AppendBlockEnd (the Rust client: no AppendBlock
before it), and an AppendBlock whose AppendBlockEnd is already buffered behind
it (the Java client: the block ends in whole events, or in a PartialEvent that
the AppendBlockEnd completes).  No command objects, the event bytes copied
once, the writer's records found by the id's 16 bytes; bare AppendBlockEnds are
decoded a run at a time (:meth:`~.frames_codec.CommandDecoder.block_ends`),
each frame consumed when its Append is returned.

Anything that would not pass every check of the general path returns None
before changing anything, and the general path decodes, checks and reports it
exactly as it always does.  This module registers :func:`fast_append` into
``connection._FAST_APPEND`` (``refwire.pravega`` imports it); a machine built
with ``fast=False`` (or under ``REFWIRE_REFERENCE=1``) never calls it.
``tests/test_pravega_differential.py`` and ``tests/test_pravega_fast_block_end_runs.py``
check that both paths give the same events, bytes and errors.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Final

import attrs

from ._fast_frames import parse_append_block_end
from .connection import _FAST_APPEND, SERVER_TRANSITIONS, ServerConnection, State, WriterState, _Session
from .events import Append
from .frames import AppendBlock, AppendBlockEnd, Padding, PartialEvent

__all__ = ["fast_append"]

_BLOCK: Final = AppendBlock.TYPE
_BLOCK_END: Final = AppendBlockEnd.TYPE
_PARTIAL: Final = PartialEvent.TYPE
_PADDING: Final = Padding.TYPE
_II: Final = struct.Struct(">ii")


def _seen(state: State, inp: str) -> tuple[str, str, str]:
    return (state.value, inp, SERVER_TRANSITIONS[(state, inp)].value)


#: the transitions the hot path of appends goes through
_OPEN_BLOCK_END: Final = _seen(State.OPEN, "block-end")
_OPEN_BLOCK: Final = _seen(State.OPEN, "block")
_IN_BLOCK_BLOCK_END: Final = _seen(State.IN_BLOCK, "block-end")
assert _OPEN_BLOCK_END[2] == _IN_BLOCK_BLOCK_END[2] == State.OPEN.value and _OPEN_BLOCK[2] == State.IN_BLOCK.value
_new: Final = object.__new__
#: the slots of Append, filled directly on the trusted path (every field is set)
_APPEND_SET: Final = tuple(
    Append.__dict__[name].__set__
    for name in (
        "segment",
        "writer_id",
        "event_number",
        "event_count",
        "data",
        "request_id",
        "expected_offset",
        "previous_stored",
    )
)
assert {a.name for a in attrs.fields(Append)} == {
    "segment",
    "writer_id",
    "event_number",
    "event_count",
    "data",
    "request_id",
    "expected_offset",
    "previous_stored",
}


def fast_append(conn: ServerConnection) -> Append | None:
    """The next :class:`Append` straight from the buffer, when the frames at its
    head pass every check of the general path; None before changing anything
    otherwise.  :meth:`ServerConnection.next_event` calls it in state OPEN, no
    block held, no event queued and no error."""
    dec = conn._decoder
    rows = conn._run_rows
    payload: bytes
    if rows is not None and conn._run_offset == dec.offset and (row := next(rows, None)) is not None:
        # the next bare AppendBlockEnd of a run decoded ahead (a stale run -- anything
        # consumed since -- or a delivered one is dropped below)
        raw, payload, num, last, rid, frame_size = row
        writer = conn._fast_writers.get(raw)
        if writer is None:
            writer = _find_writer(conn, raw)
            if writer is None:
                conn._run_rows = None  # the frame is still buffered: the general path reports it
                return None
        writer_id, session, state = writer
        previous = state.last_stored
        if num <= 0 or last < session.last_event_number or last < previous:
            conn._run_rows = None
            return None
        dec.consume(frame_size)
        conn._run_offset += frame_size
        block_start = -1
    else:
        if rows is not None:
            conn._run_rows = None
        frame = dec.peek_frame()
        if frame is None:
            return None
        code, data, start, end = frame
        block_start = block_end = -1  # the AppendBlock's payload in ``data``, if any
        if code == _BLOCK:
            if end - start < 16:
                return None
            block_start, block_end = start, end
            frame = dec.peek_frame(skip=end - start + 8)
            if frame is None:
                return None
            code, data, start, end = frame
        elif code == _BLOCK_END and end < len(data) and _next_run(conn) is not None:
            # bare AppendBlockEnds (the Rust client) with more behind them: decoded a
            # run at a time, delivered from the top (a lone one is parsed below)
            return fast_append(conn)
        if code != _BLOCK_END:
            return None
        got = parse_append_block_end(data, start, end)
        if got is None:
            return None
        raw, size, blob, num, last, rid = got
        writer = conn._fast_writers.get(raw)
        if writer is None:
            writer = _find_writer(conn, raw)
            if writer is None:
                return None
        writer_id, session, state = writer
        previous = state.last_stored
        if num <= 0 or last < session.last_event_number or last < previous:
            return None
        if block_start < 0:
            payload = blob  # a bare AppendBlockEnd: sizeOfWholeEvents is ignored
        else:
            events = block_start + 16
            left = block_end - events - size  # the block's bytes after its whole events
            if data[block_start:events] != raw or size < 0 or left < 0:
                return None
            if left == 0:
                if blob:
                    return None  # AppendDecoder's quirk (the bytes are ignored and counted): the general path
                payload = data[events:block_end] if type(data) is bytes else bytes(data[events:block_end])
            else:
                if left < 8:
                    return None
                rcode, n = _II.unpack_from(data, events + size)
                if not 0 <= n <= left - 8:
                    return None  # a broken remainder: the general path reports it
                if rcode == _PARTIAL:
                    with memoryview(data) as view:
                        p = events + size + 8
                        payload = b"".join((view[events : events + size], view[p : p + n], blob))
                elif rcode == _PADDING and not blob:
                    stop = events + size
                    payload = data[events:stop] if type(data) is bytes else bytes(data[events:stop])
                else:
                    return None
        limits = conn.limits
        if len(payload) > limits.max_buffered + limits.max_frame_size:
            return None
        dec.consume_frame(end)
    # Every check passed: the same changes as the general path, in one go.
    seen = conn.transitions_seen
    if block_start < 0:
        seen.add(_OPEN_BLOCK_END)
    else:
        seen.add(_OPEN_BLOCK)
        seen.add(_IN_BLOCK_BLOCK_END)
    session.last_event_number = last
    state.last_stored = last
    state.in_flight += 1
    append = _new(Append)
    set_segment, set_wid, set_number, set_count, set_data, set_rid, set_expected, set_previous = _APPEND_SET
    set_segment(append, session.segment)
    set_wid(append, writer_id)
    set_number(append, last)
    set_count(append, num)
    set_data(append, payload)
    set_rid(append, rid)
    set_expected(append, None)
    set_previous(append, previous)
    return append


def _next_run(conn: ServerConnection) -> Iterator[tuple[bytes, bytes, int, int, int, int]] | None:
    """The rows (writer id bytes, data, num_events, last_event_number,
    request_id, frame size) of the bare AppendBlockEnds at the head of the
    buffer (:meth:`CommandDecoder.block_ends`), or None."""
    dec = conn._decoder
    run = dec.block_ends()
    if run is None:
        conn._run_rows = None
        return None
    conn._run_offset = dec.offset
    conn._run_rows = rows = zip(
        run.writer_ids, run.data, run.num_events, run.last_event_numbers, run.request_ids, run.frame_sizes, strict=True
    )
    return rows


def _find_writer(conn: ServerConnection, raw: bytes) -> tuple[uuid.UUID, _Session, WriterState] | None:
    """The session and writer state of the writer id ``raw`` (16 bytes), kept
    in ``_fast_writers`` until a SetupAppend, an AppendSetup or a failed
    append changes them; None if either is missing."""
    writer_id = uuid.UUID(bytes=raw)
    session = conn._sessions.get(writer_id)
    if session is None:
        return None
    state = conn._writers.get((session.segment, writer_id))
    if state is None:
        return None
    conn._fast_writers[raw] = found = (writer_id, session, state)
    return found


_FAST_APPEND[:] = [fast_append]
