"""The bare-``struct`` floors the decoder benchmarks measure refwire against:
the same fields pulled out of the same bytes with ``struct`` alone -- no limits,
no errors, no objects -- payloads copied out as the decoders do.  One copy each,
imported by every benchmark that times a decoder (and by the mypyc side-by-side,
which needs them free of any refwire import: the TANK floor takes its varint
reader as an argument)."""

from __future__ import annotations

import struct
from collections.abc import Callable

_LJ = struct.Struct(">2xII")  # Lumberjack J: version, type, seq, length
_PV_HDR = struct.Struct(">ii")  # Pravega: type, length
_PV_BLOCKEND = struct.Struct(">16sii")  # AppendBlockEnd: writerId, sizeOfWholeEvents, dataLength
_PV_TAIL = struct.Struct(">iqq")  # numEvents, lastEventNumber, requestId
_Q = struct.Struct("<Q")
_SS_RSP = struct.Struct("<qII")  # Seastar response with handler duration: msg_id, len, duration


def lumberjack_frames(buf: bytes) -> int:
    """Lumberjack ``J`` frames (specs/lumberjack/README.md §2): their count."""
    unpack = _LJ.unpack_from
    end = len(buf)
    pos = 0
    count = 0
    while pos < end:
        _seq, ln = unpack(buf, pos)
        pos += 10
        _payload = buf[pos : pos + ln]
        pos += ln
        count += 1
    return count


def pravega_appends(data: bytes) -> int:
    """Pravega AppendBlock / AppendBlockEnd commands (specs/pravega/README.md §5): the events they carry."""
    pos, events = 0, 0
    end = len(data)
    while pos < end:
        t, ln = _PV_HDR.unpack_from(data, pos)
        body = pos + 8
        if t == 4:
            _wid, _size, dlen = _PV_BLOCKEND.unpack_from(data, body)
            _blob = data[body + 24 : body + 24 + dlen]
            n_ev, _last, _rid = _PV_TAIL.unpack_from(data, body + 24 + dlen)
            events += n_ev
        elif t == 3:
            _wid2 = data[body : body + 16]
            _blob = data[body + 16 : body + ln]
        pos = body + ln
    return events


def tank_chunk(chunk: bytes, decode_uvarint: Callable[[bytes, int, int], tuple[int, int]]) -> int:
    """A TANK consume chunk's entries and messages (specs/tank/README.md §4, §5): the message count."""
    p, end, count = 0, len(chunk), 0
    while p < end:
        blen, p = decode_uvarint(chunk, p, end)
        bend = p + blen
        flags = chunk[p]
        p += 1
        n = (flags >> 2) & 15
        if n == 0:
            n, p = decode_uvarint(chunk, p, bend)
        for _ in range(n):
            mf = chunk[p]
            p += 1
            if not mf & 2:
                _Q.unpack_from(chunk, p)
                p += 8
            if mf & 1:
                p += 1 + chunk[p]
            clen, p = decode_uvarint(chunk, p, bend)
            chunk[p : p + clen]
            p += clen
            count += 1
    return count


def seastar_responses(wire: bytes) -> int:
    """Seastar RPC responses with a handler duration (specs/seastar-rpc/README.md §3): their count."""
    pos, n, end = 0, 0, len(wire)
    unpack = _SS_RSP.unpack_from
    while pos < end:
        _mid, ln, _dur = unpack(wire, pos)
        _payload = wire[pos + 16 : pos + 16 + ln]
        pos += 16 + ln
        n += 1
    return n
