"""Edge cases of the draft-dialect machines (specs/pravega-draft-2017/README.md §1-§8),
pinned exactly: the events each input gives, and of each error its class, reason,
protocol, frame, field, stream offset and (for reassembled messages, §5 rule 5)
the inner error's location.  Each case is a small scenario; what it must give is
in tests/golden/pravega_draft_connection_edges.json, by case name."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
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


#: What each case must give, by case name: tests/golden/pravega_draft_connection_edges.json.
GOLDEN: dict[str, Any] = json.loads((Path(__file__).parent / "golden" / "pravega_draft_connection_edges.json").read_text())


def _golden_error(loc: Any) -> Any:
    if loc is None:
        return None
    cls, reason, protocol, frame, field, offset, inner = loc
    return {
        "class": cls,
        "reason": reason,
        "protocol": protocol,
        "frame": frame,
        "field": field,
        "offset": offset,
        "inner": _golden_error(inner),
    }


def _as_golden(result: Any) -> dict[str, Any]:
    """A case's :func:`_run` result in the golden file's shape."""
    events, error, state, transitions = result
    return {"events": events, "error": _golden_error(error), "state": state, "transitions": [list(t) for t in transitions]}


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


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name: str) -> None:
    assert _as_golden(CASES[name]()) == GOLDEN[name]


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


@pytest.mark.parametrize("name", sorted(CASES2))
def test_case2(name: str) -> None:
    assert _as_golden(CASES2[name]()) == GOLDEN[name]


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
