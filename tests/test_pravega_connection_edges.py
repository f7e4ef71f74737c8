"""Pravega machines at their edges: every error the general (non-fast) append
path raises, with its exact text, frame, field and stream offset, the limits at
the line and one past it, the reply bookkeeping (acks, rollbacks, dropped
writers), and the client's Hello check and send refusals."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from support.pravega_machines import E1, E2, SEG, W2, W, block, block_end, ready, where

from refwire.errors import LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.pravega.connection import ClientConnection, ServerConnection, State
from refwire.pravega.events import Append, AppendBytes, ConnectionClosed, HelloReceived, KeepAliveReceived, RequestReceived
from refwire.pravega.frames import (
    AppendBlock,
    AppendSetup,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    DataAppended,
    Hello,
    KeepAlive,
    Padding,
    PartialEvent,
    ReadSegment,
    SegmentIsSealed,
    SetupAppend,
    encode_event,
)
from refwire.sansio import NEED_DATA
from refwire.wire import Limits

HDR = 8  # type + length


def at(s: ServerConnection) -> int:
    """The stream offset of the next byte the server receives."""
    return s._decoder.offset


def error(s: ServerConnection, data: bytes = b"") -> RemoteProtocolError:
    if data:
        s.receive_data(data, now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        while s.next_event() is not NEED_DATA:
            pass
    assert s.state is State.ERROR
    return ei.value


def in_block(s: ServerConnection, data: bytes, writer: uuid.UUID = W) -> int:
    """Feed an AppendBlock alone (so its end takes the general path); return its offset."""
    off = at(s)
    s.receive_data(block(data, writer), now=0.0)
    assert s.next_event() is NEED_DATA and s.state is State.IN_BLOCK
    return off


# -- the general path's append errors -------------------------------------------------------


def test_block_end_before_setup_names_the_writer() -> None:
    s = ready()
    off = at(s)
    e = error(s, block_end(0, E1, 1, 1, writer=W2))
    assert e.reason == f"writer {W2} referenced before SetupAppend"
    assert where(e) == ("pravega", "AppendBlockEnd", "writer_id", off + HDR)


@pytest.mark.parametrize("num", [0, -1])
def test_num_events_must_be_positive_located_after_the_data(num: int) -> None:
    s = ready()
    off = at(s)
    e = error(s, block_end(0, E1, num, 1))
    assert e.reason == f"numEvents must be positive, got {num}"
    assert where(e) == ("pravega", "AppendBlockEnd", "num_events", off + HDR + 24 + len(E1))


def test_last_event_number_backwards_located() -> None:
    s = ready()
    s.receive_data(block_end(0, E1, 1, 5), now=0.0)
    assert isinstance(s.next_event(), Append)
    off = at(s)
    e = error(s, block_end(0, E2, 1, 4))
    assert e.reason == "last event number went backwards: 4 after 5"
    assert where(e) == ("pravega", "AppendBlockEnd", "last_event_number", off + HDR + 28 + len(E2))
    s = ready()
    s.receive_data(block_end(0, E1, 1, 5) + block_end(0, E2, 1, 5), now=0.0)  # equal: allowed
    assert [type(s.next_event()), type(s.next_event())] == [Append, Append]


def test_writer_mismatch_located_at_the_end_writer() -> None:
    s = ready(writers=(W, W2))
    in_block(s, E1)
    off = at(s)
    e = error(s, block_end(len(E1), b"", 1, 1, writer=W2))
    assert e.reason == f"AppendBlockEnd writer {W2} does not match its AppendBlock writer {W}"
    assert where(e) == ("pravega", "AppendBlockEnd", "writer_id", off + HDR)


@pytest.mark.parametrize(("size", "ok"), [(-1, False), (0, True), (len(E1), True), (len(E1) + 1, False)])
def test_size_of_whole_events_at_both_ends(size: int, ok: bool) -> None:
    s = ready()
    in_block(s, E1 if size != 0 else PartialEvent(data=E1).encode())
    off = at(s)
    s.receive_data(block_end(size, b"", 1, 1), now=0.0)
    if ok:
        ev = s.next_event()
        assert isinstance(ev, Append) and ev.data == E1
        assert s.state is State.OPEN and s._block is None
        return
    e = error(s)
    data_len = len(E1)
    assert e.reason == f"sizeOfWholeEvents {size} is outside the block's {data_len} bytes"
    assert where(e) == ("pravega", "AppendBlockEnd", "size_of_whole_events", off + HDR + 16)


def test_block_end_data_ignored_without_remainder_is_counted() -> None:
    s = ready()
    for n in (3, 4):
        in_block(s, E1)
        s.receive_data(block_end(len(E1), b"x" * n, 1, n), now=0.0)
        ev = s.next_event()
        assert isinstance(ev, Append) and ev.data == E1
    assert s.ignored_block_end_bytes == 7


@pytest.mark.parametrize("left", [1, 7])
def test_a_remainder_too_short_for_a_header(left: int) -> None:
    s = ready()
    off = in_block(s, E1 + b"\x00" * left)
    e = error(s, block_end(len(E1), b"", 1, 1))
    assert e.reason == f"{left} bytes after the whole events are not a command header"
    assert where(e) == ("pravega", "AppendBlock", "data", off + HDR + 16 + len(E1))


def test_an_empty_partial_event_remainder_exactly_a_header() -> None:
    s = ready()
    in_block(s, E1 + PartialEvent(data=b"").encode())  # left == 8: a header and nothing else
    s.receive_data(block_end(len(E1), E2, 2, 2), now=0.0)
    ev = s.next_event()
    assert isinstance(ev, Append) and ev.data == E1 + E2


def test_a_remainder_of_another_type() -> None:
    s = ready()
    off = in_block(s, E1 + KeepAlive().encode())
    e = error(s, block_end(len(E1), b"", 1, 1))
    assert e.reason == f"the block's remainder must be a PartialEvent or Padding, found type {KeepAlive.TYPE}"
    assert where(e) == ("pravega", "AppendBlock", "data", off + HDR + 16 + len(E1))


@pytest.mark.parametrize(
    ("kind", "n"), [("PartialEvent", -1), ("PartialEvent", 3), ("PartialEvent", 1 << 24), ("Padding", -1), ("Padding", 3)]
)
def test_a_remainder_length_that_does_not_fit(kind: str, n: int) -> None:
    code = PartialEvent.TYPE if kind == "PartialEvent" else Padding.TYPE
    rest = code.to_bytes(4, "big", signed=True) + n.to_bytes(4, "big", signed=True) + b"ab"
    s = ready()
    off = in_block(s, E1 + rest)
    e = error(s, block_end(len(E1), b"", 1, 1))
    assert e.reason == f"the {kind} length {n} does not match the 2 bytes left in the block"
    assert where(e) == ("pravega", kind, "length", off + HDR + 16 + len(E1) + 4)


def test_a_partial_event_at_the_exact_length_and_bytes_after_it_ignored() -> None:
    s = ready()
    part = E2[:3]
    in_block(s, E1 + PartialEvent(data=part).encode() + b"zz")  # two bytes after the one remainder frame
    s.receive_data(block_end(len(E1), E2[3:], 2, 2), now=0.0)
    ev = s.next_event()
    assert isinstance(ev, Append) and ev.data == E1 + E2


def test_padding_remainder_and_block_end_data_after_it() -> None:
    s = ready()
    in_block(s, E1 + Padding(length=2).encode())
    s.receive_data(block_end(len(E1), b"", 1, 1), now=0.0)
    ev = s.next_event()
    assert isinstance(ev, Append) and ev.data == E1
    off = at(s)
    in_block(s, E1 + Padding(length=0).encode())
    end_off = at(s)
    e = error(s, block_end(len(E1), b"x", 1, 2))
    assert e.reason == "an AppendBlockEnd after Padding must carry no data"
    assert where(e) == ("pravega", "AppendBlockEnd", "data", end_off + HDR + 24)
    assert off < end_off


@pytest.mark.parametrize(("extra", "ok"), [(0, True), (1, False)])
def test_reassembled_data_limit_at_the_line_and_one_past(extra: int, ok: bool) -> None:
    """The data of one AppendBlockEnd may be max_buffered + max_frame_size bytes."""
    limits = Limits(max_frame_size=100, max_buffered=10)  # 110 bytes of events at most
    s = ready(limits)
    whole, rest = b"w" * 34, b"p" * 34  # the AppendBlock's payload: 16 + 34 + 8 + 34 = 92, the most a frame holds
    block_data = whole + PartialEvent(data=rest).encode()
    in_block(s, block_data)
    off = at(s)
    s.receive_data(block_end(len(whole), b"t" * (42 + extra), 1, 1), now=0.0)
    if ok:
        ev = s.next_event()
        assert isinstance(ev, Append) and len(ev.data) == 110
        return
    e = error(s)
    assert isinstance(e, RemoteLimitExceeded) and e.reason == "data 111 exceeds the limit max_buffered=110"
    assert where(e) == ("pravega", "AppendBlockEnd", "data", off)


def test_append_before_append_setup_and_a_repeated_event_number() -> None:
    s = ServerConnection()
    s.receive_data(SetupAppend(request_id=1, writer_id=W, segment=SEG).encode(), now=0.0)
    assert isinstance(s.next_event(), RequestReceived)
    off = at(s)
    e = error(s, block_end(0, E1, 1, 1))  # AppendSetup not sent yet
    assert e.reason == f"append for writer {W} on {SEG!r} before its AppendSetup"
    assert where(e) == ("pravega", None, "writer_id", off + HDR)
    s = ready(last=5)  # the store has up to 5
    off = at(s)
    s.receive_data(SetupAppend(request_id=9, writer_id=W, segment=SEG).encode(), now=0.0)
    assert isinstance(s.next_event(), RequestReceived)  # the session restarts at 0, the writer state stays at 5
    off = at(s)
    e = error(s, block_end(0, E1, 1, 4))
    assert e.reason == "event 4 was already appended (last stored 5)"
    assert where(e) == ("pravega", None, "event_number", off)


@pytest.mark.parametrize("kind", ["ConditionalAppend", "ConditionalBlockEnd"])
def test_a_conditional_append_before_append_setup_and_below_the_stored_number(kind: str) -> None:
    def conditional(number: int) -> bytes:
        if kind == "ConditionalAppend":
            return ConditionalAppend(writer_id=W, event_number=number, expected_offset=0, event=E1, request_id=3).encode()
        return ConditionalBlockEnd(writer_id=W, event_number=number, expected_offset=0, data=E1, request_id=3).encode()

    s = ServerConnection()
    s.receive_data(SetupAppend(request_id=1, writer_id=W, segment=SEG).encode(), now=0.0)
    assert isinstance(s.next_event(), RequestReceived)
    off = at(s)
    e = error(s, conditional(1))  # AppendSetup not sent yet
    assert e.reason == f"append for writer {W} on {SEG!r} before its AppendSetup"
    assert where(e) == ("pravega", None, "writer_id", off + HDR)
    s = ready(last=5)
    s.receive_data(SetupAppend(request_id=9, writer_id=W, segment=SEG).encode(), now=0.0)
    assert isinstance(s.next_event(), RequestReceived)  # the session restarts at 0, the writer state stays at 5
    off = at(s)
    e = error(s, conditional(4))
    assert e.reason == "event 4 was already appended (last stored 5)"
    assert where(e) == ("pravega", None, "event_number", off)


def test_a_partial_event_outside_a_block_is_refused_by_the_decoder() -> None:
    # (so ServerConnection._on_command's own PartialEvent refusal is never reached)
    s = ready()
    off = at(s)
    e = error(s, PartialEvent(data=b"abc").encode())
    assert e.reason == "PartialEvent is not a top-level command: type -2"
    assert where(e)[:2] == ("pravega", "PartialEvent") and where(e)[3] == off


def test_a_block_remainder_is_read_at_its_place_not_at_the_buffer_start() -> None:
    # A top-level Padding (dropped) at the buffer's index 0 and a KeepAlive (an event, so the
    # pump stops) stay in the buffer before the block: 8-byte headers a wrong read of the
    # remainder's header would take for a Padding.  The block's whole events are 40 bytes, so
    # the block's events start 40 bytes after index 0 too.
    s = ready()
    whole = encode_event(b"e" * 32)
    assert len(whole) == 40
    chunk = Padding(length=0).encode() + KeepAlive().encode()
    chunk += block(whole + PartialEvent(data=b"xyz").encode()) + block_end(len(whole), b"", 1, 1)
    s.receive_data(chunk, now=0.0)
    assert isinstance(s.next_event(), KeepAliveReceived)
    ev = s.next_event()
    assert isinstance(ev, Append) and ev.data == whole + b"xyz"


def test_a_negative_size_of_whole_events_closes_even_when_the_bytes_before_look_like_a_remainder() -> None:
    # sizeOfWholeEvents -8 points 8 bytes back, into the writer id, whose second half here
    # reads as a Padding header: the block must still be refused (§5.3), not stored empty
    writer = uuid.UUID(bytes=b"\x01" * 8 + b"\xff\xff\xff\xff\x00\x00\x00\x00")
    s = ready(writers=(writer,))
    off = at(s)
    s.receive_data(block(b"", writer=writer) + block_end(-8, b"", 1, 1, writer=writer), now=0.0)
    e = error(s)
    assert e.frame == "AppendBlockEnd" and e.field == "size_of_whole_events" and e.offset is not None and e.offset > off


def test_an_equal_event_number_is_appended_again() -> None:
    s = ready(last=5)
    s.receive_data(block_end(0, E1, 1, 5), now=0.0)
    ev = s.next_event()
    assert isinstance(ev, Append) and (ev.event_number, ev.previous_stored) == (5, 5)


def test_in_flight_counts_each_append() -> None:
    s = ready()
    for data, number in ((E1, 1), (E2, 2)):
        in_block(s, data)
        s.receive_data(block_end(len(data), b"", 1, number), now=0.0)
        assert isinstance(s.next_event(), Append)
    st = s.writer_state(SEG, W)
    assert st is not None and st.in_flight == 2 and st.last_stored == 2


# -- replies ------------------------------------------------------------------------------------


def conditional(s: ServerConnection, number: int, expected: int) -> Append:
    s.receive_data(
        ConditionalAppend(writer_id=W, event_number=number, expected_offset=expected, event=b"e", request_id=7).encode(), now=0.0
    )
    ev = s.next_event()
    assert isinstance(ev, Append)
    return ev


def test_conditional_failure_rolls_back_only_when_nothing_is_in_flight() -> None:
    s = ready()
    a1 = conditional(s, 1, 0)
    s.append_stored(a1, 10, now=0.0)
    a2, a3 = conditional(s, 2, 10), conditional(s, 3, 99)
    s.append_conditional_failed(a3, now=0.0)
    st = s.writer_state(SEG, W)
    assert st is not None and (st.in_flight, st.last_stored, st.last_acked) == (1, 3, 1)
    s.append_conditional_failed(a2, now=0.0)
    assert (st.in_flight, st.last_stored, st.last_acked) == (0, 1, 1)
    s.data_to_send()
    assert s.data_to_send() == b""


def test_append_failed_drops_the_writer_and_replies() -> None:
    s = ready(writers=(W, W2))
    s.receive_data(block_end(0, E1, 1, 1), now=0.0)
    a = s.next_event()
    assert isinstance(a, Append)
    reply = SegmentIsSealed(request_id=2, segment=SEG)
    s.append_failed(a, reply, now=0.0)
    assert s.writer_state(SEG, W) is None and s.writer_state(SEG, W2) is not None
    assert s.data_to_send() == reply.encode()
    s.append_stored(a, 5, now=0.0)  # the writer is gone: no ack
    assert s.data_to_send() == b""


def test_close_only_from_an_open_state() -> None:
    s = ServerConnection()
    s.close(now=0.0)
    assert s.state is State.CLOSING and s.must_close
    s.receive_data(KeepAlive().encode(), now=0.0)
    assert s.next_event() is NEED_DATA  # nothing more is decoded
    s = ServerConnection()
    s.receive_data(b"", now=0.0)
    assert s.next_event() == ConnectionClosed(clean=True, reason="")
    s.close(now=0.0)
    assert s.state is State.CLOSED and not s.must_close


def test_send_failed_loses_the_replies_behind_a_slot() -> None:
    s = ready()
    slot = s.reserve(now=0.0)
    s.send(KeepAlive(), now=0.0)
    s.send_failed(now=0.0)
    s.send(DataAppended(writer_id=W, event_number=1), now=0.0, slot=slot)
    assert s.data_to_send() == b""
    assert s.next_event() == ConnectionClosed(clean=False, reason="reset")


def test_a_frame_stuck_after_a_close_raises_no_timeout() -> None:
    s = ServerConnection(frame_timeout=1.0)
    s.receive_data(KeepAlive().encode()[:3], now=0.0)
    assert s.next_event() is NEED_DATA and s.next_deadline() == 1.0
    s.close(now=0.5)
    assert s.next_event() is NEED_DATA


# -- the client ---------------------------------------------------------------------------------


def test_client_hello_with_its_versions() -> None:
    c = ClientConnection(version=(9, 6))
    assert c.hello_received is False
    c.initiate(now=0.0)
    assert c.data_to_send() == Hello(high_version=9, low_version=6).encode()


@pytest.mark.parametrize(("high", "low", "ok"), [(9, 6, True), (6, 1, True), (5, 1, False), (20, 9, True), (20, 10, False)])
def test_client_version_overlap_at_both_ends(high: int, low: int, ok: bool) -> None:
    c = ClientConnection(version=(9, 6))
    c.receive_data(KeepAlive().encode() + Hello(high_version=high, low_version=low).encode(), now=0.0)
    assert c.next_event() is not NEED_DATA  # the KeepAlive
    assert c.state is State.OPEN and c.peer_version is None  # one event at a time: the Hello is not decoded yet
    if ok:
        assert c.next_event() == HelloReceived(high, low, True)
        assert c.hello_received and c.peer_version == (high, low)
        return
    with pytest.raises(RemoteProtocolError) as ei:
        c.next_event()
    e = ei.value
    assert e.reason == f"server speaks versions {low}..{high}, we speak 6..9"
    assert where(e) == ("pravega", "Hello", "low_version", 8 + 12)
    assert c.peer_version == (high, low) and not c.hello_received


def test_client_delivers_nothing_after_its_close() -> None:
    c = ClientConnection()
    c.receive_data(KeepAlive().encode() * 2, now=0.0)
    c.receive_data(b"", now=0.0)
    kinds = []
    while (ev := c.next_event()) is not NEED_DATA:
        kinds.append(type(ev).__name__)
    assert kinds == ["KeepAliveReceived", "KeepAliveReceived", "ConnectionClosed"]


def test_client_send_refusals_name_the_command() -> None:
    c = ClientConnection()
    with pytest.raises(LocalProtocolError) as ei:
        c.send(DataAppended(writer_id=W, event_number=1), now=0.0)
    assert (ei.value.reason, ei.value.protocol, ei.value.frame) == (
        "a client does not send DataAppended",
        "pravega",
        "DataAppended",
    )
    c.send(KeepAlive(), now=0.0)  # both directions
    c.send(AppendBytes(b"raw"), now=0.0)
    assert c.data_to_send() == KeepAlive().encode() + b"raw"
    c.connection_lost(now=0.0)
    assert c.next_event() == ConnectionClosed(clean=False, reason="reset")
    for cmd, name in ((AppendBytes(b"x"), "appends"), (KeepAlive(), "KeepAlive")):
        with pytest.raises(LocalProtocolError) as ei:
            c.send(cmd, now=0.0)
        assert (ei.value.reason, ei.value.protocol, ei.value.frame) == (f"cannot send {name} in state closed", "pravega", name)


def test_server_send_refusal_names_the_command() -> None:
    with pytest.raises(LocalProtocolError) as ei:
        ServerConnection().send(AppendBlock(writer_id=W), now=0.0)
    assert (ei.value.reason, ei.value.protocol, ei.value.frame) == (
        "a server does not send AppendBlock",
        "pravega",
        "AppendBlock",
    )
    s = ServerConnection()
    s.send(ConditionalCheckFailed(writer_id=W, event_number=1), now=0.0)
    assert s.data_to_send() == ConditionalCheckFailed(writer_id=W, event_number=1).encode()


def test_append_failed_twice_is_harmless() -> None:
    s = ready()
    s.receive_data(block_end(0, E1, 1, 1), now=0.0)
    a = s.next_event()
    assert isinstance(a, Append)
    reply = SegmentIsSealed(request_id=2, segment=SEG)
    s.append_failed(a, reply, now=0.0)
    s.append_failed(a, reply, now=0.0)
    assert s.data_to_send() == reply.encode() * 2


@pytest.mark.parametrize("call", ["send", "append_stored", "append_conditional_failed", "append_failed", "reserve"])
def test_server_notes_a_partial_frame_at_the_latest_now(call: str) -> None:
    """The frame timer starts when next_event sees the partial frame, at the ``now`` of the latest call."""
    s = ready()
    s.frame_timeout = 2.0
    s.receive_data(block_end(0, E1, 1, 1), now=0.0)
    a = s.next_event()
    assert isinstance(a, Append)
    s.receive_data(KeepAlive().encode()[:3], now=0.5)
    if call == "send":
        s.send(KeepAlive(), now=1.0)
    elif call == "append_stored":
        s.append_stored(a, 5, now=1.0)
    elif call == "append_conditional_failed":
        s.append_conditional_failed(a, now=1.0)
    elif call == "append_failed":
        s.append_failed(a, SegmentIsSealed(request_id=2, segment=SEG), now=1.0)
    else:
        s.reserve(now=1.0)
    assert s.next_event() is NEED_DATA
    assert s.next_deadline() == 3.0


@pytest.mark.parametrize("call", ["initiate", "send"])
def test_client_notes_a_partial_frame_at_the_latest_now(call: str) -> None:
    c = ClientConnection()
    c.frame_timeout = 2.0
    c.receive_data(KeepAlive().encode()[:3], now=0.5)
    if call == "initiate":
        c.initiate(now=1.0)
    else:
        c.send(KeepAlive(), now=1.0)
    assert c.next_event() is NEED_DATA
    assert c.next_deadline() == 3.0


# -- reply order behind reserved slots ------------------------------------------------------------


def test_replies_wait_behind_a_reserved_slot_in_order() -> None:
    s = ready()
    assert not s.has_data_to_send()
    first, second = s.reserve(now=0.0), s.reserve(now=0.0)
    s.send(KeepAlive(), now=0.0)  # queued behind both slots
    assert not s.has_data_to_send()
    ack2 = DataAppended(writer_id=W, event_number=2)
    s.send(ack2, now=0.0, slot=second)
    assert s.data_to_send() == b""
    ack1 = DataAppended(writer_id=W, event_number=1)
    s.send(ack1, now=0.0, slot=first)
    assert s.has_data_to_send()
    assert s.data_to_send() == ack1.encode() + ack2.encode() + KeepAlive().encode()
    s.send(KeepAlive(), now=0.0)  # nothing reserved: straight out
    assert s.data_to_send() == KeepAlive().encode()
    with pytest.raises(RuntimeError, match=r"^reply slot filled twice$"):
        s.send(ack1, now=0.0, slot=first)


def test_append_stored_fills_its_slot_even_without_an_ack() -> None:
    s = ready()
    s.receive_data(block_end(0, E1, 1, 1) + block_end(0, E2, 1, 1), now=0.0)
    a1, a2 = s.next_event(), s.next_event()
    assert isinstance(a1, Append) and isinstance(a2, Append)
    slot1, slot2, slot3 = s.reserve(now=0.0), s.reserve(now=0.0), s.reserve(now=0.0)
    s.send(KeepAlive(), now=0.0)
    s.append_stored(a1, 10, now=0.0, slot=slot1)
    s.append_stored(a2, 20, now=0.0, slot=slot2)  # event 1 again: already acked, no reply, the slot is released
    ack = DataAppended(writer_id=W, event_number=1, previous_event_number=0, request_id=2, current_segment_write_offset=10)
    assert s.data_to_send() == ack.encode()
    s.append_failed(a1, SegmentIsSealed(request_id=3, segment=SEG), now=0.0)
    assert s.data_to_send() == b""  # still behind slot3
    s.append_stored(a1, 30, now=0.0, slot=slot3)  # the writer is gone: no ack, the slot is released
    assert s.data_to_send() == KeepAlive().encode() + SegmentIsSealed(request_id=3, segment=SEG).encode()


# -- the end of input ------------------------------------------------------------------------------


def test_end_events_exactly_and_once_per_end() -> None:
    s = ready()
    in_block(s, E1)
    s.receive_data(b"", now=0.0)
    assert s.next_event() == ConnectionClosed(clean=False, reason="closed inside an append block")
    assert s.next_event() is NEED_DATA
    s.receive_data(b"", now=1.0)  # a repeated EOF is answered again, once
    assert s.next_event() == ConnectionClosed(clean=True, reason="")
    assert s.next_event() is NEED_DATA
    s.connection_lost(now=2.0)  # a reset after the EOF: once more
    assert s.next_event() == ConnectionClosed(clean=False, reason="reset")
    assert s.next_event() is NEED_DATA
    s.connection_lost(now=3.0)
    assert s.next_event() is NEED_DATA


def test_a_reset_closes_once() -> None:
    s = ServerConnection()
    s.connection_lost(now=0.0)
    assert s.next_event() == ConnectionClosed(clean=False, reason="reset")
    assert s.next_event() is NEED_DATA and s.state is State.CLOSED


def test_eof_inside_a_frame_names_it() -> None:
    s = ready()
    off = at(s)
    s.receive_data(Hello().encode()[:10], now=0.0)
    s.receive_data(b"", now=0.0)
    e = error(s)
    assert e.reason == "connection closed inside a frame (10 bytes of it received)"
    assert where(e) == ("pravega", "Hello", "(eof)", off)


def test_block_before_setup_names_the_writer() -> None:
    s = ready()
    off = at(s)
    e = error(s, block(E1, W2))
    assert e.reason == f"writer {W2} referenced before SetupAppend"
    assert where(e) == ("pravega", "AppendBlock", "writer_id", off + HDR)


# -- commands at the top level ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [
        SetupAppend(request_id=5, writer_id=W2, segment=SEG),
        AppendBlock(writer_id=W, data=E2),
        Padding(length=0),
        ConditionalAppend(writer_id=W, event_number=2, expected_offset=0, event=b"e"),
    ],
)
def test_append_path_commands_inside_a_block(cmd: SetupAppend | AppendBlock | Padding | ConditionalAppend) -> None:
    s = ready()
    in_block(s, E1)
    off = at(s)
    e = error(s, cmd.encode())
    assert e.reason == f"unexpected {cmd.NAME} following an append block"
    assert where(e) == ("pravega", cmd.NAME, "type", off)


def test_hello_and_keepalive_are_answered_in_order() -> None:
    s = ServerConnection()
    s.receive_data(Hello(high_version=20, low_version=3).encode() + KeepAlive().encode(), now=0.0)
    assert s.next_event() == HelloReceived(20, 3, True)
    assert s.peer_version == (20, 3) and s.state is State.OPEN
    assert isinstance(s.next_event(), KeepAliveReceived)
    assert s.data_to_send() == Hello().encode() + KeepAlive().encode()
    bad = ServerConnection()
    bad.receive_data(Hello(high_version=4, low_version=1).encode(), now=0.0)
    assert bad.next_event() == HelloReceived(4, 1, False)
    assert bad.state is State.CLOSING and bad.must_close and bad.data_to_send() == Hello().encode()
    assert ("open", "hello-incompatible", "closing") in bad.transitions_seen


@pytest.mark.parametrize("writers", [1, 2])
def test_max_writers_at_the_line_and_one_past(writers: int) -> None:
    s = ServerConnection(max_writers=2)
    ids = [uuid.UUID(int=i + 1) for i in range(writers + 1)]
    for i, w in enumerate(ids[:writers]):
        s.receive_data(SetupAppend(request_id=i, writer_id=w, segment=SEG).encode(), now=0.0)
        assert isinstance(s.next_event(), RequestReceived)
    s.receive_data(SetupAppend(request_id=9, writer_id=ids[0], segment=SEG).encode(), now=0.0)
    assert isinstance(s.next_event(), RequestReceived)  # the same writer again: not one more
    off = at(s)
    s.receive_data(SetupAppend(request_id=9, writer_id=ids[writers], segment=SEG).encode(), now=0.0)
    if writers == 1:
        ev = s.next_event()
        assert ev == RequestReceived(SetupAppend(request_id=9, writer_id=ids[1], segment=SEG))
        return
    e = error(s)
    assert isinstance(e, RemoteLimitExceeded) and "max_writers=2" in e.reason
    assert where(e) == ("pravega", "SetupAppend", "writer_id", off)


def test_max_writers_defaults_to_the_window_limit() -> None:
    assert ServerConnection(Limits(max_window=7)).max_writers == 7
    assert ServerConnection(Limits(max_window=7), max_writers=3).max_writers == 3
    assert ServerConnection().frame_timeout == 30.0


def test_conditional_appends_exactly() -> None:
    s = ready()
    s.receive_data(
        ConditionalAppend(writer_id=W, event_number=3, expected_offset=11, event=b"ev", request_id=4).encode()
        + ConditionalBlockEnd(writer_id=W, event_number=4, expected_offset=22, data=b"raw", request_id=5).encode(),
        now=0.0,
    )
    assert s.next_event() == Append(SEG, W, 3, 1, encode_event(b"ev"), 4, 11, 0)
    assert s.next_event() == Append(SEG, W, 4, 1, b"raw", 5, 22, 3)
    off = at(s)
    e = error(s, ConditionalAppend(writer_id=W, event_number=2, expected_offset=0, event=b"x").encode())
    assert e.reason == "event number went backwards: 2 after 4"
    assert where(e) == ("pravega", "ConditionalAppend", "event_number", off + HDR + 16)
    s = ready()
    off = at(s)
    e = error(s, ConditionalBlockEnd(writer_id=W2, event_number=1, expected_offset=0, data=b"", request_id=1).encode())
    assert e.reason == f"writer {W2} referenced before SetupAppend"
    assert where(e) == ("pravega", "ConditionalBlockEnd", "writer_id", off + HDR)


def test_top_level_padding_partial_event_and_replies() -> None:
    s = ready()
    s.receive_data(Padding(length=3).encode() + KeepAlive().encode(), now=0.0)
    assert isinstance(s.next_event(), KeepAliveReceived)  # the Padding is dropped
    off = at(s)
    e = error(s, PartialEvent(data=b"x").encode())  # refused by the decoder already
    assert e.reason == "PartialEvent is not a top-level command: type -2"
    assert (e.field, e.offset) == ("type", off)
    s = ready()
    off = at(s)
    e = error(s, DataAppended(writer_id=W, event_number=1).encode())
    assert e.reason == "DataAppended is a reply, not a request"
    assert where(e) == ("pravega", "DataAppended", "type", off)


def test_a_request_is_handed_over_as_is() -> None:
    s = ServerConnection()
    read = ReadSegment(segment=SEG, offset=3, suggested_length=10)
    s.receive_data(read.encode(), now=0.0)
    assert s.next_event() == RequestReceived(read)
    assert ("open", "request", "open") in s.transitions_seen


# -- the fast path falls back to the general one: the same outcome either way ---------------------------

_PE = PartialEvent.TYPE.to_bytes(4, "big", signed=True)
_PAD = Padding.TYPE.to_bytes(4, "big", signed=True)


@pytest.mark.parametrize(
    ("data", "size", "tail", "num", "last"),
    [
        (E1, len(E1), b"", 1, 1),  # whole events only
        (E1, len(E1), b"x", 1, 1),  # block-end data ignored (counted)
        (E1 + PartialEvent(data=E2[:3]).encode(), len(E1), E2[3:], 2, 2),
        (E1 + PartialEvent(data=E2[:3]).encode() + b"zz", len(E1), E2[3:], 2, 2),  # bytes after the remainder
        (E1 + Padding(length=2).encode(), len(E1), b"", 1, 1),
        (E1 + Padding(length=2).encode(), len(E1), b"x", 1, 1),  # data after Padding
        (E1 + b"\x00" * 7, len(E1), b"", 1, 1),  # a remainder shorter than a header
        (E1 + b"\x00", len(E1), b"", 1, 1),  # one byte of remainder
        (E1 + Padding(length=0).encode(), len(E1), b"", 1, 1),  # a remainder of exactly a header
        (E1 + KeepAlive().encode(), len(E1), b"", 1, 1),  # a remainder of another type
        (E1 + _PE + (3).to_bytes(4, "big") + b"ab", len(E1), b"", 1, 1),  # a PartialEvent longer than the block
        (E1 + _PE + (-1).to_bytes(4, "big", signed=True), len(E1), b"", 1, 1),
        (E1 + _PAD + (3).to_bytes(4, "big") + b"ab", len(E1), b"", 1, 1),
        (E1, len(E1) + 1, b"", 1, 1),  # sizeOfWholeEvents past the block
        (E1, -1, b"", 1, 1),
        (E1, len(E1), b"", 0, 1),  # numEvents 0
        (E1, len(E1), b"", 1, -5),  # last event number below the session's
        (b"", 0, E1, 1, 1),  # an empty block
    ],
)
def test_block_and_end_together_or_apart(data: bytes, size: int, tail: bytes, num: int, last: int) -> None:
    outcomes = []
    for together in (True, False):
        s = ready(fast=together)  # together: the speed path's, when it takes them; apart: the general path
        end = block_end(size, tail, num, last)
        if together:
            s.receive_data(block(data) + end, now=0.0)
        else:
            in_block(s, data)
            s.receive_data(end, now=0.0)
        try:
            got: object = drain_server(s)
        except RemoteProtocolError as e:
            got = (e.reason, where(e))
        outcomes.append((got, s.ignored_block_end_bytes, s.transitions_seen - {("open", "setup", "open")}))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("writer", [W, W2])
def test_bare_block_end_together_or_apart_from_other_frames(writer: uuid.UUID) -> None:
    """A bare AppendBlockEnd (the Rust client's), for a set-up writer and one not set up."""
    outcomes = []
    for lead in (b"", Padding(length=0).encode()):  # after a Padding the general path decodes it
        s = ready(last=2, fast=not lead)
        s.receive_data(lead + block_end(0, E1 + E2, 2, 4, writer=writer), now=0.0)
        try:
            got: object = [e for e in drain_server(s) if isinstance(e, Append)]
        except RemoteProtocolError as e:
            got = (e.reason, e.field)
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]
    if writer == W:
        assert outcomes[0] == [Append(SEG, W, 4, 2, E1 + E2, 2, None, 2)]


def drain_server(s: ServerConnection) -> list[object]:
    out = []
    while (ev := s.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def test_equal_event_numbers_on_the_general_path() -> None:
    """The general path (after a Padding) allows an AppendBlockEnd whose last event
    number equals the session's and the writer's last stored one."""
    s = ready(last=5)
    pad = Padding(length=0).encode()
    s.receive_data(pad + block_end(0, E1, 1, 5) + pad + block_end(0, E2, 1, 5), now=0.0)
    a1, a2 = s.next_event(), s.next_event()
    assert a1 == Append(SEG, W, 5, 1, E1, 2, None, 5) and a2 == Append(SEG, W, 5, 1, E2, 2, None, 5)


def test_nothing_is_decoded_once_closing() -> None:
    s = ready()
    s.close(now=0.0)
    s.receive_data(block_end(0, E1, 1, 1), now=0.0)
    assert s.next_event() is NEED_DATA and s.state is State.CLOSING


def test_client_refuses_a_request_with_its_location() -> None:
    c = ClientConnection()
    c.receive_data(KeepAlive().encode() + SetupAppend(request_id=1, writer_id=W, segment=SEG).encode(), now=0.0)
    assert isinstance(c.next_event(), KeepAliveReceived)
    with pytest.raises(RemoteProtocolError) as ei:
        c.next_event()
    assert ei.value.reason == "SetupAppend is a request, not a reply"
    assert where(ei.value) == ("pravega", "SetupAppend", "type", 8)


@pytest.mark.parametrize(
    "data",
    [E1, E1 + PartialEvent(data=E2[:3]).encode(), E1 + Padding(length=1).encode()],
    ids=["whole", "partial", "padding"],
)
def test_appended_data_is_bytes_when_the_frames_arrive_in_pieces(data: bytes) -> None:
    """Bytes received in pieces are buffered in a bytearray: the Append still carries bytes."""
    s = ready()
    tail = E2[3:] if PartialEvent.TYPE.to_bytes(4, "big", signed=True) in data else b""
    raw = block(data) + block_end(len(E1), tail, 1, 1)
    for i in range(0, len(raw), 7):
        s.receive_data(raw[i : i + 7], now=0.0)
    (a,) = [e for e in drain_server(s) if isinstance(e, Append)]
    assert type(a.data) is bytes


def test_in_flight_counts_fast_appends_too() -> None:
    s = ready(fast=True)
    s.receive_data(block_end(0, E1, 1, 1) + block(E2) + block_end(len(E2), b"", 1, 2), now=0.0)
    assert [type(s.next_event()), type(s.next_event())] == [Append, Append]
    st = s.writer_state(SEG, W)
    assert st is not None and (st.in_flight, st.last_stored) == (2, 2)
    assert {("open", "block-end", "open"), ("open", "block", "in-block"), ("in-block", "block-end", "open")} <= s.transitions_seen


_FAST_STANDS_FOR = ("_pump", "_on_command", "_session_for", "_on_block_end", "_reassemble", "_begin_append", "_transition")


@pytest.mark.parametrize("overridden", [("_on_block_end",), _FAST_STANDS_FOR], ids=["one", "all"])
def test_a_subclass_that_changes_the_append_path_is_not_bypassed(overridden: tuple[str, ...]) -> None:
    """The fast path stands for the general path's methods: a subclass overriding any
    of them gets the general path, so its overrides run."""
    calls: list[str] = []

    def spy(name: str) -> Any:
        def method(self: ServerConnection, *args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return getattr(ServerConnection, name)(self, *args, **kwargs)

        return method

    Spying = type("Spying", (ServerConnection,), {name: spy(name) for name in overridden})
    s = Spying(fast=True)
    assert s._fast_append is None and ServerConnection(fast=True)._fast_append is not None
    s.receive_data(SetupAppend(request_id=1, writer_id=W, segment=SEG).encode(), now=0.0)
    s.next_event()
    s.send(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=0), now=0.0)
    calls.clear()
    s.receive_data(block_end(0, E1, 1, 1), now=0.0)
    assert isinstance(s.next_event(), Append) and "_on_block_end" in calls
