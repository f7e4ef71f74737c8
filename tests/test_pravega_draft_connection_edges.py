"""Edge cases of the draft-dialect machines (specs/pravega-draft-2017/README.md §1-§8),
pinned exactly: the events each input gives, and of each error its class, reason,
protocol, frame, field, stream offset and (for reassembled messages, §5 rule 5)
the inner error's location.  Each case is a small scenario; ``EXPECTED`` holds
what it must give."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from refwire.errors import LocalProtocolError, ProtocolError
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, ClientConnection, ServerConnection, split_message
from refwire.pravega.draft2017.events import BlockAppend, Blocks
from refwire.pravega.draft2017.frames import (
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    Event,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from refwire.pravega.frames import encode_command, encode_event
from refwire.sansio import NEED_DATA

A = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
B = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")
KA = KeepAlive().encode()
E1 = encode_event(b"hello")  # 13 bytes


def _loc(e: ProtocolError | None) -> Any:
    if e is None:
        return None
    return (type(e).__name__, e.reason, e.protocol, e.frame, e.field, e.offset, _loc(e.inner))


def _run(conn: ServerConnection | ClientConnection, data: bytes, *, eof: bool = False, lost: bool = False) -> Any:
    """Feed ``data`` (then an EOF or a reset), drain: (event reprs, error location, state, transitions)."""
    evs: list[str] = []
    err = None
    conn.receive_data(data, now=1.0)
    if eof:
        conn.receive_data(b"", now=2.0)
    if lost:
        conn.connection_lost(now=2.0)
    try:
        for _ in range(50):
            ev = conn.next_event()
            if ev is NEED_DATA:
                break
            evs.append(repr(ev))
    except ProtocolError as e:
        err = _loc(e)
    return evs, err, conn.state.value, sorted(conn.transitions_seen)


def _server(window: int = 2000, frame: int | None = None, **kw: Any) -> ServerConnection:
    limits = attrs.evolve(DEFAULT_LIMITS, max_window=window)
    if frame is not None:
        limits = attrs.evolve(limits, max_frame_size=frame)
    return ServerConnection(limits, **kw)


def _opened(s: ServerConnection, cid: uuid.UUID = A, level: int = 0) -> ServerConnection:
    s.receive_data(SetupAppend(connection_id=cid, segment="seg").encode(), now=0.5)
    assert s.next_event() is not NEED_DATA
    s.send(AppendSetup(connection_id=cid, segment="seg", connection_offset_ack_level=level), now=0.5)
    s.data_to_send()
    return s


def _parts(msg: bytes, cuts: list[int]) -> bytes:
    return b"".join(split_message(msg, cuts))


def _begin(length: int, offset: int = 0, cid: uuid.UUID = A) -> bytes:
    return BeginAppendBlock(connection_id=cid, connection_offset=offset, length=length).encode()


def _end(block_length: int, offset: int | None = None, cid: uuid.UUID = A) -> bytes:
    return EndAppendBlock(
        connection_id=cid, connection_offset=block_length if offset is None else offset, block_length=block_length
    ).encode()


def _hdr(code: int, n: int) -> bytes:
    return code.to_bytes(4, "big", signed=True) + n.to_bytes(4, "big", signed=True)


SEGREAD = SegmentRead(segment="seg", offset=0, at_tail=False, end_of_segment=False, data=b"z" * 5)

CASES: dict[str, Callable[[], Any]] = {
    # -- §5 rule 4: the reassembled message's type, server side
    "s-inner-unknown": lambda: _run(_server(), _parts(_hdr(99, 0), [2])),
    "s-inner-partial": lambda: _run(_server(), _parts(PartialMessage(part=Part.BEGIN, data=b"ab").encode(), [2])),
    "s-inner-reply": lambda: _run(_server(), KA + _parts(DataAppended(connection_id=A, ack_level=0).encode(), [2])),
    "s-inner-event-outside": lambda: _run(_server(), _parts(E1, [2])),
    "s-inner-read-in-block": lambda: _run(
        _opened(_server()), _begin(60) + _parts(ReadSegment(segment="s", offset=0, suggested_length=1).encode(), [3])
    ),
    "s-inner-setup-in-block": lambda: _run(
        _opened(_server()), _begin(90) + _parts(SetupAppend(connection_id=B, segment="s").encode(), [3])
    ),
    "s-inner-keepalive-in-block": lambda: _run(_opened(_server()), _begin(26) + _parts(KA, [3]) + _end(0)),
    "s-inner-event-in-block": lambda: _run(_opened(_server()), _begin(31) + _parts(E1, [3]) + _end(13)),
    # -- the same, client side
    "c-inner-unknown": lambda: _run(ClientConnection(), _parts(_hdr(99, 0), [2])),
    "c-inner-partial": lambda: _run(ClientConnection(), _parts(PartialMessage(part=Part.BEGIN, data=b"ab").encode(), [2])),
    "c-inner-request": lambda: _run(
        ClientConnection(), _parts(ReadSegment(segment="s", offset=0, suggested_length=1).encode(), [2])
    ),
    "c-inner-event": lambda: _run(ClientConnection(), KA + _parts(E1, [2])),
    "c-reply-reassembled": lambda: _run(ClientConnection(), KA + _parts(SEGREAD.encode(), [3, 9])),
    "c-keepalive-reassembled": lambda: _run(ClientConnection(), _parts(KA, [3])),
    "c-reply-whole": lambda: _run(ClientConnection(), KA + SEGREAD.encode() + KA),
    "c-reply-trailing": lambda: _run(ClientConnection(), _parts(KA + b"\x00", [3])),
    # -- §5 rule 2: parts
    "s-middle-without-begin": lambda: _run(_server(), KA + PartialMessage(part=Part.MIDDLE, data=b"ab").encode()),
    "s-end-without-begin": lambda: _run(_server(), KA + PartialMessage(part=Part.END, data=b"ab").encode()),
    "s-bad-part": lambda: _run(_server(), KA + PartialMessage(part=7, data=b"ab").encode()),
    "s-begin-twice": lambda: _run(_server(), KA + PartialMessage(part=Part.BEGIN, data=b"ab").encode() * 2),
    "c-middle-without-begin": lambda: _run(ClientConnection(), KA + PartialMessage(part=Part.MIDDLE, data=b"ab").encode()),
    "s-request-while-partial": lambda: _run(
        _server(),
        KA
        + PartialMessage(part=Part.BEGIN, data=b"ab").encode()
        + ReadSegment(segment="s", offset=0, suggested_length=1).encode(),
    ),
    "s-request-in-block": lambda: _run(
        _opened(_server()), _begin(60) + ReadSegment(segment="s", offset=0, suggested_length=1).encode()
    ),
    "c-reply-while-partial": lambda: _run(
        ClientConnection(), KA + PartialMessage(part=Part.BEGIN, data=b"ab").encode() + SEGREAD.encode()
    ),
    # -- EOF and reset (§1, §5, §6)
    "s-eof-in-type": lambda: _run(_server(), KA + b"\x00\x00\x00\x06", eof=True),
    "s-eof-after-header": lambda: _run(_server(), KA + _hdr(6, 10), eof=True),
    "s-eof-in-payload": lambda: _run(_server(), KA + _hdr(6, 10) + b"abc", eof=True),
    "s-eof-in-3-bytes": lambda: _run(_server(), KA + b"\x00\x00\x00", eof=True),
    "s-eof-in-partial": lambda: _run(_server(), KA + KA + PartialMessage(part=Part.BEGIN, data=b"ab").encode(), eof=True),
    "c-eof-in-partial": lambda: _run(ClientConnection(), KA + PartialMessage(part=Part.BEGIN, data=b"ab").encode(), eof=True),
    "s-eof-in-block": lambda: _run(_opened(_server()), _begin(13), eof=True),
    "s-reset-in-block": lambda: _run(_opened(_server()), _begin(13), lost=True),
    "s-reset-in-partial": lambda: _run(_server(), KA + PartialMessage(part=Part.BEGIN, data=b"ab").encode(), lost=True),
    "s-eof": lambda: _run(_server(), KA, eof=True),
    "c-eof": lambda: _run(ClientConnection(), KA, eof=True),
    "c-reset": lambda: _run(ClientConnection(), KA, lost=True),
    # -- §1, §3: header checks
    "s-unknown-at-4-bytes": lambda: _run(_server(), KA + b"\x00\x00\x00\x63"),
    "s-negative-code": lambda: _run(_server(), KA + b"\xff\xff\xff\xfe"[:3] + b"\xfb"),
    "s-reply-type": lambda: _run(_server(), KA + b"\x00\x00\x00\x05"),
    "c-request-type": lambda: _run(ClientConnection(), KA + b"\x00\x00\x00\x06"),
    "s-negative-length": lambda: _run(_server(), KA + _hdr(6, -3)),
    "s-length-at-limit": lambda: _run(
        _server(frame=8 + 21), KA + ReadSegment(segment="abcdefg", offset=0, suggested_length=1).encode()
    ),
    "s-length-past-limit": lambda: _run(
        _server(frame=8 + 21), KA + ReadSegment(segment="abcdefgh", offset=0, suggested_length=1).encode()
    ),
    # -- §6.2: SetupAppend and max_window
    "s-window-at-limit": lambda: _run(_opened(_server(window=2)), KA + SetupAppend(connection_id=B, segment="s").encode()),
    "s-window-past-limit": lambda: _run(
        _opened(_opened(_server(window=2)), B),
        KA + SetupAppend(connection_id=uuid.UUID(int=5), segment="s").encode(),
    ),
    "s-window-again-when-full": lambda: _run(
        _opened(_opened(_server(window=2)), B), KA + SetupAppend(connection_id=A, segment="s").encode() + _begin(0)
    ),
    "s-setup-reassembled": lambda: _run(_server(), KA + _parts(SetupAppend(connection_id=A, segment="s").encode(), [5])),
    "s-request-reassembled": lambda: _run(
        _server(), KA + _parts(ReadSegment(segment="s", offset=0, suggested_length=1).encode(), [5])
    ),
    "s-request-whole": lambda: _run(_server(), KA + ReadSegment(segment="s", offset=0, suggested_length=1).encode()),
    "s-window-reassembled-past": lambda: _run(
        _opened(_server(window=1)), KA + _parts(SetupAppend(connection_id=B, segment="s").encode(), [5])
    ),
    # -- §6.3: blocks
    "s-begin-unknown-id": lambda: _run(_server(), KA + _begin(0)),
    "s-begin-bad-offset": lambda: _run(_opened(_server(), level=7), KA + _begin(0, offset=6)),
    "s-begin-negative": lambda: _run(_opened(_server()), KA + _begin(-1)),
    "s-begin-reassembled": lambda: _run(_opened(_server()), KA + _parts(_begin(13), [4]) + E1 + _end(13)),
    "s-begin-reassembled-overrun": lambda: _run(_opened(_server()), KA + _parts(_begin(12), [4]) + E1),
    "s-begin-reassembled-short": lambda: _run(_opened(_server()), KA + _parts(_begin(14), [4]) + E1 + _end(13)),
    "s-begin-reassembled-bad-offset": lambda: _run(_opened(_server()), KA + _parts(_begin(14, offset=3), [4])),
    "s-block-overrun": lambda: _run(_opened(_server()), KA + _begin(12) + E1),
    "s-block-exact": lambda: _run(_opened(_server()), KA + _begin(21) + KA + E1 + _end(13)),
    "s-block-overrun-second": lambda: _run(_opened(_server()), KA + _begin(20) + KA + E1),
    "s-block-short": lambda: _run(_opened(_server()), KA + _begin(14) + E1 + _end(13)),
    "s-end-wrong-id": lambda: _run(_opened(_server()), KA + _begin(0) + _end(0, cid=B)),
    "s-end-negative": lambda: _run(_opened(_server()), KA + _begin(0) + _end(-1, offset=0)),
    "s-end-bad-offset": lambda: _run(_opened(_server()), KA + _begin(13) + E1 + _end(13, offset=12)),
    "s-end-bad-length": lambda: _run(_opened(_server()), KA + _begin(13) + E1 + _end(12)),
    "s-trailer": lambda: _run(
        _opened(_server()),
        KA
        + _begin(15)
        + PartialMessage(part=Part.BEGIN, data=E1[:6]).encode()
        + _end(13)
        + KA
        + PartialMessage(part=Part.END, data=E1[6:]).encode()
        + KA,
    ),
    "s-trailer-keepalive": lambda: _run(
        _opened(_server()),
        KA
        + _begin(11)
        + PartialMessage(part=Part.BEGIN, data=KA[:2]).encode()
        + _end(0)
        + PartialMessage(part=Part.END, data=KA[2:]).encode(),
    ),
    "s-trailer-bad-length": lambda: _run(
        _opened(_server()),
        KA
        + _begin(15)
        + PartialMessage(part=Part.BEGIN, data=E1[:6]).encode()
        + _end(12)
        + PartialMessage(part=Part.END, data=E1[6:]).encode(),
    ),
    "s-event-outside": lambda: _run(_server(), KA + E1),
}


EXPECTED: dict[str, Any] = {
    "c-eof": (
        ["KeepAliveReceived(data=b'')", "ConnectionClosed(clean=True, reason='')"],
        None,
        "closed",
        [("open", "eof", "closed"), ("open", "keepalive", "open")],
    ),
    "c-eof-in-partial": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a partial message",
            "pravega-draft-2017",
            "PartialMessage",
            "(eof)",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "c-inner-event": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: Event is not sent to a client",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            28,
            ("LocalProtocolError", "Event is not sent to a client", "pravega-draft-2017", "Event", "type", 0, None),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "c-inner-partial": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: a partial message may not carry a partial message",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            (
                "LocalProtocolError",
                "a partial message may not carry a partial message",
                "pravega-draft-2017",
                "PartialMessage",
                "type",
                0,
                None,
            ),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "c-inner-request": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: ReadSegment is not sent to a client",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            ("LocalProtocolError", "ReadSegment is not sent to a client", "pravega-draft-2017", "ReadSegment", "type", 0, None),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "c-inner-unknown": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: unknown type code 99",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            ("LocalProtocolError", "unknown type code 99", "pravega-draft-2017", None, "type", 0, None),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "c-keepalive-reassembled": (
        ["KeepAliveReceived(data=b'')"],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "c-middle-without-begin": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "Middle part without a Begin", "pravega-draft-2017", "PartialMessage", "part", 16, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "c-reply-reassembled": (
        [
            "KeepAliveReceived(data=b'')",
            "ReplyReceived(command=SegmentRead(segment='seg', offset=0, at_tail=False, end_of_segment=False, data=b'zzzzz'))",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "reply", "open")],
    ),
    "c-reply-trailing": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: the parts carry 1 bytes more than the message",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            21,
            (
                "LocalProtocolError",
                "the parts carry 1 bytes more than the message",
                "pravega-draft-2017",
                "KeepAlive",
                "(trailing)",
                8,
                None,
            ),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "c-reply-while-partial": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "SegmentRead is not allowed in state open while a partial message is incomplete",
            "pravega-draft-2017",
            "SegmentRead",
            "type",
            19,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "c-reply-whole": (
        [
            "KeepAliveReceived(data=b'')",
            "ReplyReceived(command=SegmentRead(segment='seg', offset=0, at_tail=False, end_of_segment=False, data=b'zzzzz'))",
            "KeepAliveReceived(data=b'')",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "reply", "open")],
    ),
    "c-request-type": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "ReadSegment is not sent in this direction",
            "pravega-draft-2017",
            "ReadSegment",
            "type",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "c-reset": (
        ["KeepAliveReceived(data=b'')", "ConnectionClosed(clean=False, reason='reset')"],
        None,
        "closed",
        [("open", "keepalive", "open"), ("open", "reset", "closed")],
    ),
    "s-bad-part": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "part must be 0 (Begin), 1 (Middle) or 2 (End), got 7",
            "pravega-draft-2017",
            "PartialMessage",
            "part",
            16,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-begin-bad-offset": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "ConnectionOffset 6 is not the running offset 7",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "connection_offset",
            61,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-begin-negative": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "negative block length -1", "pravega-draft-2017", "BeginAppendBlock", "length", 69, None),
        "error",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-begin-reassembled": (
        [
            "KeepAliveReceived(data=b'')",
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x05hello', level=13, previous_level=0)",
        ],
        None,
        "open",
        [
            ("in-block", "end", "open"),
            ("in-block", "event", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "partial", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-begin-reassembled-bad-offset": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: ConnectionOffset 3 is not the running offset 0",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            59,
            (
                "LocalProtocolError",
                "ConnectionOffset 3 is not the running offset 0",
                "pravega-draft-2017",
                "BeginAppendBlock",
                "connection_offset",
                24,
                None,
            ),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "setup", "open")],
    ),
    "s-begin-reassembled-overrun": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: a frame of 13 bytes at offset 91 would end past the block's 12 wire bytes (0 used)",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            59,
            (
                "LocalProtocolError",
                "a frame of 13 bytes at offset 91 would end past the block's 12 wire bytes (0 used)",
                "pravega-draft-2017",
                "BeginAppendBlock",
                "length",
                32,
                None,
            ),
        ),
        "error",
        [("open", "begin", "in-block"), ("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "setup", "open")],
    ),
    "s-begin-reassembled-short": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: 13 wire bytes between Begin and End, Begin said 14",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            59,
            (
                "LocalProtocolError",
                "13 wire bytes between Begin and End, Begin said 14",
                "pravega-draft-2017",
                "BeginAppendBlock",
                "length",
                32,
                None,
            ),
        ),
        "error",
        [
            ("in-block", "event", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "partial", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-begin-twice": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "a partial message begins while the one begun at offset 8 is incomplete",
            "pravega-draft-2017",
            "PartialMessage",
            "part",
            27,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-begin-unknown-id": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "ConnectionId 00112233-4455-6677-8899-aabbccddeeff used before its AppendSetup",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "connection_id",
            16,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-block-exact": (
        [
            "KeepAliveReceived(data=b'')",
            "KeepAliveReceived(data=b'')",
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x05hello', level=13, previous_level=0)",
        ],
        None,
        "open",
        [
            ("in-block", "end", "open"),
            ("in-block", "event", "in-block"),
            ("in-block", "keepalive", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-block-overrun": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "a frame of 13 bytes at offset 73 would end past the block's 12 wire bytes (0 used)",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "length",
            69,
            None,
        ),
        "error",
        [("open", "begin", "in-block"), ("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-block-overrun-second": (
        ["KeepAliveReceived(data=b'')", "KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "a frame of 13 bytes at offset 81 would end past the block's 20 wire bytes (8 used)",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "length",
            69,
            None,
        ),
        "error",
        [
            ("in-block", "keepalive", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-block-short": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "13 wire bytes between Begin and End, Begin said 14",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "length",
            69,
            None,
        ),
        "error",
        [
            ("in-block", "event", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-end-bad-length": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "the block holds 13 bytes of Events, its End says 12",
            "pravega-draft-2017",
            "EndAppendBlock",
            "block_length",
            118,
            None,
        ),
        "error",
        [
            ("in-block", "event", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-end-bad-offset": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "ConnectionOffset 12 is not Begin's 0 + block length 13",
            "pravega-draft-2017",
            "EndAppendBlock",
            "connection_offset",
            110,
            None,
        ),
        "error",
        [
            ("in-block", "event", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
        ],
    ),
    "s-end-negative": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "negative block length -1", "pravega-draft-2017", "EndAppendBlock", "block_length", 105, None),
        "error",
        [("open", "begin", "in-block"), ("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-end-without-begin": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "End part without a Begin", "pravega-draft-2017", "PartialMessage", "part", 16, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-end-wrong-id": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "EndAppendBlock ConnectionId ffeeddcc-bbaa-9988-7766-554433221100 is not its Begin's 00112233-4455-6677-8899-aabbccddeeff",
            "pravega-draft-2017",
            "EndAppendBlock",
            "connection_id",
            81,
            None,
        ),
        "error",
        [("open", "begin", "in-block"), ("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-eof": (
        ["KeepAliveReceived(data=b'')", "ConnectionClosed(clean=True, reason='')"],
        None,
        "closed",
        [("open", "eof", "closed"), ("open", "keepalive", "open")],
    ),
    "s-eof-after-header": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a frame (8 bytes of it received)",
            "pravega-draft-2017",
            "ReadSegment",
            "(eof)",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-eof-in-3-bytes": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a frame (3 bytes of it received)",
            "pravega-draft-2017",
            None,
            "(eof)",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-eof-in-block": (
        [],
        (
            "RemoteProtocolError",
            "connection closed inside an append block",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "(eof)",
            None,
            None,
        ),
        "error",
        [("open", "begin", "in-block"), ("open", "setup", "open")],
    ),
    "s-eof-in-partial": (
        ["KeepAliveReceived(data=b'')", "KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a partial message",
            "pravega-draft-2017",
            "PartialMessage",
            "(eof)",
            16,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-eof-in-payload": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a frame (11 bytes of it received)",
            "pravega-draft-2017",
            "ReadSegment",
            "(eof)",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-eof-in-type": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "connection closed inside a frame (4 bytes of it received)",
            "pravega-draft-2017",
            None,
            "(eof)",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-event-outside": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "Event is not allowed in state open", "pravega-draft-2017", "Event", "type", 8, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-inner-event-in-block": (
        [
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x05hello', level=13, previous_level=0)"
        ],
        None,
        "open",
        [
            ("in-block", "end", "open"),
            ("in-block", "partial", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "setup", "open"),
        ],
    ),
    "s-inner-event-outside": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: Event outside an append block",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            ("LocalProtocolError", "Event outside an append block", "pravega-draft-2017", "Event", "type", 0, None),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "s-inner-keepalive-in-block": (
        [
            "KeepAliveReceived(data=b'')",
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'', level=0, previous_level=0)",
        ],
        None,
        "open",
        [
            ("in-block", "end", "open"),
            ("in-block", "partial", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "setup", "open"),
        ],
    ),
    "s-inner-partial": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: a partial message may not carry a partial message",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            (
                "LocalProtocolError",
                "a partial message may not carry a partial message",
                "pravega-draft-2017",
                "PartialMessage",
                "type",
                0,
                None,
            ),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "s-inner-read-in-block": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: a partial message begun in a block must be an Event or KeepAlive, not ReadSegment",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            86,
            (
                "LocalProtocolError",
                "a partial message begun in a block must be an Event or KeepAlive, not ReadSegment",
                "pravega-draft-2017",
                "ReadSegment",
                "type",
                0,
                None,
            ),
        ),
        "error",
        [("in-block", "partial", "in-block"), ("open", "begin", "in-block"), ("open", "setup", "open")],
    ),
    "s-inner-reply": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: DataAppended is not sent to a server",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            28,
            ("LocalProtocolError", "DataAppended is not sent to a server", "pravega-draft-2017", "DataAppended", "type", 0, None),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-inner-setup-in-block": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: a partial message begun in a block must be an Event or KeepAlive, not SetupAppend",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            86,
            (
                "LocalProtocolError",
                "a partial message begun in a block must be an Event or KeepAlive, not SetupAppend",
                "pravega-draft-2017",
                "SetupAppend",
                "type",
                0,
                None,
            ),
        ),
        "error",
        [("in-block", "partial", "in-block"), ("open", "begin", "in-block"), ("open", "setup", "open")],
    ),
    "s-inner-unknown": (
        [],
        (
            "RemoteProtocolError",
            "reassembled message: unknown type code 99",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            20,
            ("LocalProtocolError", "unknown type code 99", "pravega-draft-2017", None, "type", 0, None),
        ),
        "error",
        [("open", "partial", "open")],
    ),
    "s-length-at-limit": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=ReadSegment(segment='abcdefg', offset=0, suggested_length=1), offset=8)",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "request", "open")],
    ),
    "s-length-past-limit": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteLimitExceeded",
            "length 30 exceeds the limit max_frame_size=29",
            "pravega-draft-2017",
            "ReadSegment",
            "length",
            12,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-middle-without-begin": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "Middle part without a Begin", "pravega-draft-2017", "PartialMessage", "part", 16, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-negative-code": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "unknown type code -5", "pravega-draft-2017", None, "type", 8, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-negative-length": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "negative frame length -3", "pravega-draft-2017", "ReadSegment", "length", 12, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-reply-type": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "DataAppended is not sent in this direction",
            "pravega-draft-2017",
            "DataAppended",
            "type",
            8,
            None,
        ),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-request-in-block": (
        [],
        (
            "RemoteProtocolError",
            "ReadSegment is not allowed in state in-block",
            "pravega-draft-2017",
            "ReadSegment",
            "type",
            65,
            None,
        ),
        "error",
        [("open", "begin", "in-block"), ("open", "setup", "open")],
    ),
    "s-request-reassembled": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=ReadSegment(segment='s', offset=0, suggested_length=1), offset=None)",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "request", "open")],
    ),
    "s-request-while-partial": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "ReadSegment is not allowed in state open while a partial message is incomplete",
            "pravega-draft-2017",
            "ReadSegment",
            "type",
            19,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-request-whole": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=ReadSegment(segment='s', offset=0, suggested_length=1), offset=8)",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "request", "open")],
    ),
    "s-reset-in-block": (
        ["ConnectionClosed(clean=False, reason='reset')"],
        None,
        "closed",
        [("in-block", "reset", "closed"), ("open", "begin", "in-block"), ("open", "setup", "open")],
    ),
    "s-reset-in-partial": (
        ["KeepAliveReceived(data=b'')", "ConnectionClosed(clean=False, reason='reset')"],
        None,
        "closed",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "reset", "closed")],
    ),
    "s-setup-reassembled": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=SetupAppend(connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), segment='s'), offset=None)",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "setup", "open")],
    ),
    "s-trailer": (
        [
            "KeepAliveReceived(data=b'')",
            "KeepAliveReceived(data=b'')",
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x05hello', level=13, previous_level=0)",
            "KeepAliveReceived(data=b'')",
        ],
        None,
        "open",
        [
            ("in-block", "end-trailer", "trailer"),
            ("in-block", "partial", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
            ("trailer", "keepalive", "trailer"),
            ("trailer", "partial", "trailer"),
            ("trailer", "trailer-done", "open"),
        ],
    ),
    "s-trailer-bad-length": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "the block holds 13 bytes of Events, its End says 12",
            "pravega-draft-2017",
            "EndAppendBlock",
            "block_length",
            120,
            None,
        ),
        "error",
        [
            ("in-block", "end-trailer", "trailer"),
            ("in-block", "partial", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
            ("trailer", "partial", "trailer"),
        ],
    ),
    "s-trailer-keepalive": (
        [
            "KeepAliveReceived(data=b'')",
            "KeepAliveReceived(data=b'')",
            "BlockAppend(segment='seg', connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), data=b'', level=0, previous_level=0)",
        ],
        None,
        "open",
        [
            ("in-block", "end-trailer", "trailer"),
            ("in-block", "partial", "in-block"),
            ("open", "begin", "in-block"),
            ("open", "keepalive", "open"),
            ("open", "setup", "open"),
            ("trailer", "partial", "trailer"),
            ("trailer", "trailer-done", "open"),
        ],
    ),
    "s-unknown-at-4-bytes": (
        ["KeepAliveReceived(data=b'')"],
        ("RemoteProtocolError", "unknown type code 99", "pravega-draft-2017", None, "type", 8, None),
        "error",
        [("open", "keepalive", "open")],
    ),
    "s-window-again-when-full": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=SetupAppend(connection_id=UUID('00112233-4455-6677-8899-aabbccddeeff'), segment='s'), offset=66)",
        ],
        (
            "RemoteProtocolError",
            "ConnectionId 00112233-4455-6677-8899-aabbccddeeff used before its AppendSetup",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "connection_id",
            101,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-window-at-limit": (
        [
            "KeepAliveReceived(data=b'')",
            "RequestReceived(command=SetupAppend(connection_id=UUID('ffeeddcc-bbaa-9988-7766-554433221100'), segment='s'), offset=37)",
        ],
        None,
        "open",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-window-past-limit": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteLimitExceeded",
            "connection_id 3 exceeds the limit max_window=2",
            "pravega-draft-2017",
            "SetupAppend",
            "connection_id",
            74,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-window-reassembled-past": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteLimitExceeded",
            "reassembled message: connection_id 2 exceeds the limit max_window=1",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            60,
            (
                "LimitExceeded",
                "connection_id 2 exceeds the limit max_window=1",
                "pravega-draft-2017",
                "SetupAppend",
                "connection_id",
                8,
                None,
            ),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open"), ("open", "setup", "open")],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name: str) -> None:
    assert CASES[name]() == EXPECTED[name]


# --------------------------------------------------------------------------- closing twice


def test_end_of_input_again_after_an_eof_close_then_a_reset() -> None:
    s = _server()
    assert _run(s, b"", eof=True)[0] == ["ConnectionClosed(clean=True, reason='')"]
    s.receive_data(b"", now=3.0)
    assert repr(s.next_event()) == "ConnectionClosed(clean=True, reason='')"
    assert s.next_event() is NEED_DATA
    s.connection_lost(now=4.0)
    assert repr(s.next_event()) == "ConnectionClosed(clean=False, reason='reset')"
    s.connection_lost(now=5.0)
    s.receive_data(b"", now=5.0)
    assert s.next_event() is NEED_DATA


# --------------------------------------------------------------------------- send


def _err(fn: Callable[[], Any]) -> Any:
    with pytest.raises(LocalProtocolError) as info:
        fn()
    return _loc(info.value)


def test_client_send_appends_in_order_and_refuses_replies() -> None:
    c = ClientConnection()
    read = ReadSegment(segment="s", offset=0, suggested_length=1)
    c.send(Blocks(b"AB"), now=1.0)
    c.send(Blocks(b"CD"), now=1.0)
    c.send(read, now=1.0)
    c.send(KeepAlive(), now=1.0)
    c.send(Event(data=b"x"), now=1.0)
    c.send(read, now=1.0)
    assert c.data_to_send() == b"ABCD" + read.encode() + KA + Event(data=b"x").encode() + read.encode()
    assert _err(lambda: c.send(SEGREAD, now=1.0)) == (
        "LocalProtocolError",
        "a client does not send SegmentRead",
        "pravega-draft-2017",
        "SegmentRead",
        None,
        None,
        None,
    )


def test_server_send_refuses_requests_and_sends_both_directions() -> None:
    s = _server()
    s.send(KeepAlive(), now=1.0)
    s.send(PartialMessage(part=Part.BEGIN, data=b"a"), now=1.0)
    assert s.data_to_send() == KA + PartialMessage(part=Part.BEGIN, data=b"a").encode()
    assert _err(lambda: s.send(ReadSegment(segment="s", offset=0, suggested_length=1), now=1.0)) == (
        "LocalProtocolError",
        "a server does not send ReadSegment",
        "pravega-draft-2017",
        "ReadSegment",
        None,
        None,
        None,
    )


def test_server_reply_part_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"^reply_part_size must be positive$"):
        ServerConnection(reply_part_size=0)
    assert ServerConnection(reply_part_size=1, frame_timeout=2.5).frame_timeout == 2.5


def test_reply_longer_than_the_frame_limit_is_cut_to_fit() -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, max_frame_size=40)
    big = SegmentRead(segment="s", offset=0, at_tail=False, end_of_segment=False, data=b"q" * 100)
    s = ServerConnection(limits, reply_part_size=1000)
    s.send(big, now=1.0)
    out = s.data_to_send()
    frame = big.encode()
    assert out == b"".join(split_message(frame, list(range(31, len(frame), 31))))
    assert max(len(p) for p in split_message(frame, list(range(31, len(frame), 31)))) == 40
    # exactly at the limit: one whole frame
    exact = SegmentRead(segment="s", offset=0, at_tail=False, end_of_segment=False, data=b"q" * (40 - 21))
    assert len(exact.encode()) == 40
    s.send(exact, now=1.0)
    assert s.data_to_send() == exact.encode()
    # a small reply_part_size wins
    s2 = ServerConnection(limits, reply_part_size=10)
    s2.send(big, now=1.0)
    assert s2.data_to_send() == b"".join(split_message(frame, list(range(10, len(frame), 10))))


def test_durability_positions_and_limits() -> None:
    s = _server()
    s.send(KeepAlive(), now=1.0, after=1)
    assert s.data_to_send() == b""
    assert s.held_until() == 1
    for pos in (2, 3, 4):
        s.send(KeepAlive(data=bytes([pos])), now=1.0, after=pos)
    s.durable(4, now=2.0, limit=2)
    assert s.data_to_send() == KA + KeepAlive(data=b"\x02").encode()
    s.durable(0, now=2.0, limit=1)  # the durable level never goes back
    assert s.data_to_send() == KeepAlive(data=b"\x03").encode()
    append = BlockAppend("seg", A, b"", 13, 0)
    s.block_stored(append, now=2.0, after=9)
    assert s.held_until() == 4
    s.durable(4, now=2.0)
    assert s.data_to_send() == KeepAlive(data=b"\x04").encode()
    assert s.held_until() == 9
    s.durable(9, now=2.0)
    assert s.data_to_send() == DataAppended(connection_id=A, ack_level=13).encode()


# --------------------------------------------------------------------------- client timers (§8)


def test_client_timers_need_now() -> None:
    with pytest.raises(TypeError, match=r"^ClientConnection timers need now= \(the time they count from\)$"):
        ClientConnection(keepalive_interval=1.0)
    with pytest.raises(TypeError):
        ClientConnection(silence_timeout=1.0)


def test_keepalive_only() -> None:
    c = ClientConnection(keepalive_interval=10.0, now=100.0)
    assert c.next_deadline() == 110.0
    c.handle_timer(now=109.0)
    assert c.data_to_send() == b""
    c.receive_data(KA, now=105.0)
    c.handle_timer(now=110.0)
    assert c.data_to_send() == KA
    assert c.next_deadline() == 120.0
    c.handle_timer(now=1000.0)  # no silence timeout: never closed
    assert c.data_to_send() == KA
    assert c.next_deadline() == 1010.0
    assert repr(c.next_event()) == "KeepAliveReceived(data=b'')"


def test_silence_only() -> None:
    c = ClientConnection(silence_timeout=30.0, now=100.0)
    assert c.next_deadline() == 130.0
    c.receive_data(KA, now=120.0)
    c.handle_timer(now=130.0)
    assert c.data_to_send() == b""
    assert c.next_deadline() == 150.0
    c.handle_timer(now=149.0)
    assert c.next_deadline() == 150.0
    c.handle_timer(now=150.0)
    assert c.data_to_send() == b""
    assert c.next_deadline() is None
    assert repr(c.next_event()) == "ConnectionClosed(clean=False, reason='silence')"
    c.receive_data(KA, now=151.0)  # not read any more
    assert c.next_event() is NEED_DATA
    c.handle_timer(now=500.0)
    assert c.data_to_send() == b""


def test_silence_after_connection_lost_is_not_reported() -> None:
    c = ClientConnection(keepalive_interval=5.0, silence_timeout=30.0, now=0.0)
    c.connection_lost(now=3.0)
    assert c.next_deadline() is None
    c.handle_timer(now=100.0)
    assert c.data_to_send() == b""
    assert repr(c.next_event()) == "ConnectionClosed(clean=False, reason='reset')"
    assert c.next_event() is NEED_DATA


def test_connection_lost_after_the_silence_close_gives_nothing() -> None:
    c = ClientConnection(silence_timeout=30.0, now=0.0)
    c.handle_timer(now=30.0)
    assert repr(c.next_event()) == "ConnectionClosed(clean=False, reason='silence')"
    c.connection_lost(now=31.0)
    c.receive_data(b"", now=31.0)
    assert c.next_event() is NEED_DATA


def test_begin_inside_a_block_is_refused_on_its_type() -> None:
    s = _opened(_server())
    assert _run(s, _begin(100) + _begin(0, cid=B))[1] == (
        "RemoteProtocolError",
        "BeginAppendBlock is not allowed in state in-block",
        "pravega-draft-2017",
        "BeginAppendBlock",
        "type",
        65,
        None,
    )


def test_server_frame_timer_counts_from_the_latest_call() -> None:
    """The frame timeout counts from the time of the latest call that passed ``now``
    when decoding stops inside a frame (the send/durable calls pass it too)."""
    s = _server(frame_timeout=5.0)
    s.receive_data(KA[:3], now=10.0)
    assert s.next_event() is NEED_DATA
    assert s.next_deadline() == 15.0
    s.receive_data(KA[3:] + KA[:3], now=11.0)
    s.send(KeepAlive(), now=12.0)
    assert repr(s.next_event()) == "KeepAliveReceived(data=b'')"
    assert s.next_event() is NEED_DATA
    assert s.next_deadline() == 17.0
    s.receive_data(KA[3:] + KA[:3], now=13.0)
    s.durable(0, now=14.0)
    assert repr(s.next_event()) == "KeepAliveReceived(data=b'')"
    assert s.next_event() is NEED_DATA
    assert s.next_deadline() == 19.0
    s.receive_data(KA[3:] + KA[:3], now=15.0)
    s.block_stored(BlockAppend("seg", A, b"", 0, 0), now=16.0)
    assert repr(s.next_event()) == "KeepAliveReceived(data=b'')"
    assert s.next_event() is NEED_DATA
    assert s.next_deadline() == 21.0


def _block_server(max_block: int) -> ServerConnection:
    return ServerConnection(attrs.evolve(DEFAULT_LIMITS, max_buffered=max_block))


CASES2: dict[str, Callable[[], Any]] = {
    "c-end-early": lambda: _run(
        ClientConnection(),
        KA + PartialMessage(part=Part.BEGIN, data=KA[:5]).encode() + PartialMessage(part=Part.END, data=b"").encode(),
    ),
    "c-inner-decode": lambda: _run(ClientConnection(), KA + _parts(_hdr(5, 4) + b"\0" * 4, [5])),
    "s-inner-decode": lambda: _run(ServerConnection(), KA + _parts(_hdr(6, 4) + b"\0" * 4, [5])),
    "s-begin-at-max": lambda: _run(_opened(_block_server(20)), KA + _begin(20)),
    "s-begin-past-max": lambda: _run(_opened(_block_server(20)), KA + _begin(21)),
}
EXPECTED2: dict[str, Any] = {
    "c-end-early": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: End part after 5 bytes of the message",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            31,
            ("LocalProtocolError", "End part after 5 bytes of the message", "pravega-draft-2017", "KeepAlive", "(eof)", 0, None),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "c-inner-decode": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: truncated: connection_id needs 16 bytes, 4 left",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            31,
            (
                "LocalProtocolError",
                "truncated: connection_id needs 16 bytes, 4 left",
                "pravega-draft-2017",
                "DataAppended",
                "connection_id",
                8,
                None,
            ),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-inner-decode": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteProtocolError",
            "reassembled message: truncated: offset needs 8 bytes, 2 left",
            "pravega-draft-2017",
            "PartialMessage",
            "data",
            31,
            (
                "LocalProtocolError",
                "truncated: offset needs 8 bytes, 2 left",
                "pravega-draft-2017",
                "ReadSegment",
                "offset",
                10,
                None,
            ),
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "partial", "open")],
    ),
    "s-begin-at-max": (
        ["KeepAliveReceived(data=b'')"],
        None,
        "in-block",
        [("open", "begin", "in-block"), ("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
    "s-begin-past-max": (
        ["KeepAliveReceived(data=b'')"],
        (
            "RemoteLimitExceeded",
            "length 21 exceeds the limit max_block_size=20",
            "pravega-draft-2017",
            "BeginAppendBlock",
            "length",
            69,
            None,
        ),
        "error",
        [("open", "keepalive", "open"), ("open", "setup", "open")],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES2))
def test_case2(name: str) -> None:
    assert CASES2[name]() == EXPECTED2[name]


def test_input_postpones_the_next_keepalive() -> None:
    c = ClientConnection(keepalive_interval=10.0, silence_timeout=5.0, now=0.0)
    assert c.next_deadline() == 5.0
    c.receive_data(KA, now=4.0)
    c.handle_timer(now=5.0)
    assert c.next_deadline() == 9.0
    c.receive_data(KA, now=8.0)
    c.handle_timer(now=9.0)
    assert c.next_deadline() == 13.0  # the KeepAlive moved to 18, past the silence check
    assert c.data_to_send() == b""


def test_an_early_timer_call_does_not_move_the_deadline() -> None:
    c = ClientConnection(silence_timeout=30.0, now=100.0)
    c.receive_data(KA, now=120.0)
    c.handle_timer(now=125.0)
    assert c.next_deadline() == 130.0


def test_no_timer_work_after_a_protocol_error() -> None:
    c = ClientConnection(keepalive_interval=10.0, silence_timeout=100.0, now=0.0)
    c.receive_data(_hdr(99, 0), now=1.0)
    with pytest.raises(ProtocolError):
        c.next_event()
    assert c.next_deadline() is None
    c.handle_timer(now=10.0)
    c.handle_timer(now=200.0)
    assert c.data_to_send() == b""
    with pytest.raises(ProtocolError):
        c.next_event()


def test_reply_past_the_wirecommand_size_goes_out_in_parts() -> None:
    """A reply larger than 0xFFFFFF bytes (allowed by a larger ``max_decompressed_size``)
    is encoded against that limit, then split (§5 "Sending")."""
    from refwire.pravega.draft2017.connection import REPLY_PART_SIZE, split_reply
    from refwire.pravega.frames import MAX_WIRECOMMAND_SIZE

    limits = attrs.evolve(DEFAULT_LIMITS, max_decompressed_size=MAX_WIRECOMMAND_SIZE + 100)
    big = SegmentRead(segment="s", offset=0, at_tail=False, end_of_segment=False, data=bytes(MAX_WIRECOMMAND_SIZE - 10))
    s = ServerConnection(limits)
    s.send(big, now=1.0)
    frame = encode_command(big, max_frame_size=MAX_WIRECOMMAND_SIZE + 100)
    assert len(frame) > MAX_WIRECOMMAND_SIZE
    assert s.data_to_send() == split_reply(frame, REPLY_PART_SIZE)
