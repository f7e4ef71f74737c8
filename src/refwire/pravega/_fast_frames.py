"""The speed paths of the Pravega codec, beside its plain path (specs/pravega/README.md §1, §4.2, §4.3, §5.1).

The plain path is :mod:`.frames_codec` (one layout interpreter for every
command, :class:`~.frames_codec.CommandDecoder` taking a frame at a time) and
:mod:`.frames` (the command table).  This module does the same work faster for
the commands of the append and read paths, and registers itself into the hooks
the plain modules declare (``refwire.pravega`` imports it, so that happens
before any decoder is built):

* hand-written decoders of AppendBlockEnd, AppendBlock, DataAppended and
  SegmentRead (``frames_codec._FAST``, by type code): one struct call per group
  of fixed fields, the frozen slots filled directly;
* :class:`FastCommandDecoder`, the subclass ``CommandDecoder(...)`` builds on the
  speed path: its ``commands`` has those decoders inline, and its ``block_ends``
  decodes the complete regular AppendBlockEnds at the head of the buffer at
  once, in columns (a :class:`~.frames_codec.BlockEndRun`), the server's hot path for
  the Rust client's bare AppendBlockEnds.

A decoder built with ``fast=False`` (or under ``REFWIRE_REFERENCE=1``) calls
none of them.  Anything irregular (a short payload, a negative or lying
length, a non-ASCII string) makes a decoder here return None, and the plain
path decodes it or reports the error with its field and offset:
``tests/test_pravega_differential.py`` checks that both paths give the same
commands, bytes and errors.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, Final

import attrs

from .frames import AppendBlock, AppendBlockEnd, DataAppended, SegmentRead
from .frames_codec import (
    _FAST,
    _HDR,
    _SPEED,
    BLOCK_END_CODE,
    CURRENT,
    HEADER,
    MAX_RUN,
    MAX_RUN_BYTES,
    BlockEndRun,
    Command,
    CommandDecoder,
    _unpack_header,
    uuid_of,
)

__all__ = ["FastCommandDecoder", "parse_append_block_end"]

_IQ = struct.Struct(">iq")
_IQQ = struct.Struct(">iqq")
_UUID_II = struct.Struct(">16sii")  # AppendBlockEnd's writer_id, size_of_whole_events, data length
_Q = struct.Struct(">q")
_H = struct.Struct(">H")
_UUID_QQQQ = struct.Struct(">16sqqqq")  # DataAppended's fields

# --------------------------------------------------------------------------- the decoders by type code

# Trusted construction: a fast decoder has read every field itself, so it fills
# the frozen slots directly (their descriptors' __set__) instead of calling the
# keyword __init__, which costs twice as much and checks nothing more (the
# command classes have no validators).
_new = object.__new__


def _setters(cls: type[Any], *names: str) -> tuple[Any, ...]:
    slots = cls.__dict__
    assert set(names) == {a.name for a in attrs.fields(cls)}, cls
    return tuple(slots[name].__set__ for name in names)


_uuid = uuid_of


def _ascii_utf(data: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[str, int] | None:
    if pos + 2 > end:
        return None
    (n,) = _H.unpack_from(data, pos)
    stop = pos + 2 + n
    if stop > end:
        return None
    raw = bytes(data[pos + 2 : stop])
    if not raw.isascii() or b"\x00" in raw:
        return None
    return raw.decode("ascii"), stop


_ABE_SET: Final = _setters(
    AppendBlockEnd, "writer_id", "size_of_whole_events", "data", "num_events", "last_event_number", "request_id"
)


def parse_append_block_end(
    data: bytes | bytearray | memoryview, start: int, end: int
) -> tuple[bytes, int, bytes, int, int, int] | None:
    """The fields of a regular AppendBlockEnd payload ``data[start:end]``: ``(writer
    id's 16 bytes, size_of_whole_events, data, num_events, last_event_number,
    request_id)``; None for anything irregular (then decode it with the generic path)."""
    if end - start < 24:
        return None
    raw, size, dlen = _UUID_II.unpack_from(data, start)
    p = start + 24 + dlen
    if dlen < 0 or p + 12 > end:
        return None
    if end - p >= 20:
        num, last, rid = _IQQ.unpack_from(data, p)
    else:
        num, last = _IQ.unpack_from(data, p)
        rid = -1
    blob = data[start + 24 : p]
    return raw, size, blob if type(blob) is bytes else bytes(blob), num, last, rid


def _fast_append_block_end(data: bytes | bytearray | memoryview, start: int, end: int) -> AppendBlockEnd | None:
    # parse_append_block_end, inline (this is the hottest decoder of all)
    if end - start < 24:
        return None
    raw, size, dlen = _UUID_II.unpack_from(data, start)
    p = start + 24 + dlen
    if dlen < 0 or p + 12 > end:
        return None
    if end - p >= 20:
        num, last, rid = _IQQ.unpack_from(data, p)
    else:
        num, last = _IQ.unpack_from(data, p)
        rid = -1
    blob = data[start + 24 : p]
    if type(blob) is not bytes:
        blob = bytes(blob)
    cmd = _new(AppendBlockEnd)
    set_wid, set_size, set_data, set_num, set_last, set_rid = _ABE_SET
    set_wid(cmd, _uuid(raw))
    set_size(cmd, size)
    set_data(cmd, blob)
    set_num(cmd, num)
    set_last(cmd, last)
    set_rid(cmd, rid)
    return cmd


_AB_SET: Final = _setters(AppendBlock, "writer_id", "data")


def _fast_append_block(data: bytes | bytearray | memoryview, start: int, end: int) -> AppendBlock | None:
    if end - start < 16:
        return None
    cmd = _new(AppendBlock)
    set_wid, set_data = _AB_SET
    set_wid(cmd, _uuid(bytes(data[start : start + 16])))
    set_data(cmd, bytes(data[start + 16 : end]))
    return cmd


_DA_SET: Final = _setters(
    DataAppended, "writer_id", "event_number", "previous_event_number", "request_id", "current_segment_write_offset"
)


def _fast_data_appended(data: bytes | bytearray | memoryview, start: int, end: int) -> DataAppended | None:
    if end - start < 48:
        return None
    raw, ev, prev, rid, offset = _UUID_QQQQ.unpack_from(data, start)
    cmd = _new(DataAppended)
    set_wid, set_ev, set_prev, set_rid, set_offset = _DA_SET
    set_wid(cmd, _uuid(raw))
    set_ev(cmd, ev)
    set_prev(cmd, prev)
    set_rid(cmd, rid)
    set_offset(cmd, offset)
    return cmd


def _fast_segment_read(data: bytes | bytearray | memoryview, start: int, end: int) -> SegmentRead | None:
    got = _ascii_utf(data, start, end)
    if got is None:
        return None
    segment, p = got
    if p + 14 > end:
        return None
    (offset,) = _Q.unpack_from(data, p)
    tail, eos = data[p + 8], data[p + 9]
    (dlen,) = struct.unpack_from(">i", data, p + 10)
    q = p + 14 + dlen
    if dlen < 0 or q > end:
        return None
    rid = _Q.unpack_from(data, q)[0] if end - q >= 8 else -1
    return SegmentRead(
        segment=segment, offset=offset, at_tail=tail != 0, end_of_segment=eos != 0, data=bytes(data[p + 14 : q]), request_id=rid
    )


# --------------------------------------------------------------------------- the stream decoder


class FastCommandDecoder(CommandDecoder):
    """:class:`~.frames_codec.CommandDecoder` on the speed path, what
    ``CommandDecoder(...)`` builds unless the speed path is off: the same commands
    and errors at the same offsets, with the hand-written decoders inline in
    :meth:`commands` and runs of AppendBlockEnds in :meth:`block_ends`."""

    __slots__ = ()

    def commands(self) -> Iterator[Command]:
        """Every complete command, as :meth:`next_command` gives them one by one:
        the frames with a hand-written decoder decoded inline, when they are
        complete and regular; anything else goes through :meth:`next_command`."""
        buf = self._buf
        unpack = _HDR.unpack_from
        fast_get = self._fast.get
        max_payload = self._max_payload
        while True:
            data = buf.data
            pos = buf.pos
            if len(data) - pos >= HEADER:
                code, n = unpack(data, pos)
                end = pos + HEADER + n
                fast = fast_get(code)
                if fast is not None and 0 <= n <= max_payload and end <= len(data):
                    cmd = fast(data, pos + HEADER, end)
                    if cmd is not None:
                        buf.advance_to(end)
                        self.offset += HEADER + n
                        yield cmd
                        continue
            cmd = self.next_command()
            if cmd is None:
                return
            yield cmd

    def block_ends(self, max_frames: int = MAX_RUN) -> BlockEndRun | None:
        """:meth:`CommandDecoder.block_ends`: up to ``max_frames`` (at least 2)
        complete regular AppendBlockEnds at the head of the buffer and
        :data:`MAX_RUN_BYTES` of their data, in columns, without consuming them;
        None when fewer than two frames make one, or in another dialect than the
        current one.  A frame joins the run exactly when ``next_command`` would decode it
        with :func:`_fast_append_block_end`, to the same fields."""
        if max_frames < 2:
            raise ValueError(f"a run holds at least 2 frames: max_frames={max_frames}")
        buf = self._buf
        data = buf.data
        pos = buf.pos
        end = len(data)
        # The common misses first, before anything is allocated: another command
        # next, or an AppendBlockEnd without another behind it.
        if end - pos < 2 * HEADER:
            return None
        code, n = _unpack_header(data, pos)
        second = pos + HEADER + n
        if (
            code != BLOCK_END_CODE
            or n < 0
            or end - second < HEADER
            or _unpack_header(data, second)[0] != BLOCK_END_CODE
            or self.dialect is not CURRENT
        ):
            return None
        max_payload = self._max_payload
        writer_ids: list[bytes] = []
        sizes: list[int] = []
        blobs: list[bytes] = []
        nums: list[int] = []
        lasts: list[int] = []
        rids: list[int] = []
        frame_sizes: list[int] = []
        unpack_header = _HDR.unpack_from
        unpack_body = _UUID_II.unpack_from
        held = 0  # data bytes in the run
        while end - pos >= HEADER and len(frame_sizes) < max_frames:
            code, n = unpack_header(data, pos)
            start = pos + HEADER
            stop = start + n
            # (as the fast decoder: at least 24 + 12 bytes, a data length inside the frame)
            if code != BLOCK_END_CODE or not 36 <= n <= max_payload or stop > end:
                break
            raw, size, dlen = unpack_body(data, start)
            p = start + 24 + dlen
            held += dlen
            if dlen < 0 or p + 12 > stop or held > MAX_RUN_BYTES:
                break
            if stop - p >= 20:
                num, last, rid = _IQQ.unpack_from(data, p)
            else:
                num, last = _IQ.unpack_from(data, p)
                rid = -1
            blob = data[start + 24 : p]
            writer_ids.append(raw)
            sizes.append(size)
            blobs.append(blob if type(blob) is bytes else bytes(blob))
            nums.append(num)
            lasts.append(last)
            rids.append(rid)
            frame_sizes.append(HEADER + n)
            pos = stop
        if len(frame_sizes) < 2:
            return None
        return BlockEndRun(writer_ids, sizes, blobs, nums, lasts, rids, frame_sizes)


# --------------------------------------------------------------------------- registration

_FAST.update(
    {
        AppendBlockEnd.TYPE: _fast_append_block_end,
        AppendBlock.TYPE: _fast_append_block,
        DataAppended.TYPE: _fast_data_appended,
        SegmentRead.TYPE: _fast_segment_read,
    }
)
_SPEED[:] = [FastCommandDecoder]
