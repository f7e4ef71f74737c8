"""Pravega Sans-IO machines (specs/pravega/README.md §5):
every (state, input) pair of ``SERVER_TRANSITIONS``, the append rules of the
Java ``AppendDecoder``/``AppendProcessor`` (setup required, event numbers not
going backwards, numEvents > 0, writer mismatch, commands after an AppendBlock,
PartialEvent/Padding reassembly and its quirks, chained DataAppended, the ``==``
re-append), the client machine's Hello check, and the :class:`WriterSession`:
random events, block sizes and dropped connections still store every event
exactly once and in order."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pravega_strategies import split
from support.pravega_machines import E1, E2, SEG, W2, Harness, W, block, block_end

from refwire.errors import LocalProtocolError, RemoteProtocolError
from refwire.pravega.client import parse_events
from refwire.pravega.connection import SERVER_TRANSITIONS, ClientConnection, ServerConnection, State
from refwire.pravega.events import ConnectionClosed, HelloReceived, RequestReceived
from refwire.pravega.frames import (
    NULL_VALUE,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    CommandDecoder,
    ConditionalAppend,
    ConditionalBlockEnd,
    ConditionalCheckFailed,
    DataAppended,
    Hello,
    KeepAlive,
    Padding,
    PartialEvent,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from refwire.pravega.store import SegmentStore
from refwire.pravega.writer import WriterSession
from refwire.sansio import NEED_DATA

# --------------------------------------------------------------------------- (state, input) table

INPUTS = sorted({inp for _s, inp in SERVER_TRANSITIONS})


def _input_bytes(inp: str, state: State) -> bytes | None:
    """The bytes for ``inp`` (None = eof/reset, applied by the caller)."""
    in_block = state is State.IN_BLOCK
    return {
        "hello": Hello().encode(),
        "hello-incompatible": Hello(high_version=4, low_version=1).encode(),
        "keepalive": KeepAlive().encode(),
        "setup": SetupAppend(request_id=9, writer_id=W2, segment=SEG).encode(),
        "block": block(E1),
        "block-end": block_end(13 if in_block else 0, b"" if in_block else E1, 1, 1),
        "conditional": ConditionalAppend(writer_id=W, event_number=1, expected_offset=0, event=b"hello", request_id=3).encode(),
        "padding": Padding(length=4).encode(),
        "request": ReadSegment(segment=SEG, offset=0, suggested_length=100, request_id=4).encode(),
    }.get(inp)


def _machine_in(state: State) -> Harness:
    h = Harness()
    if state in (State.OPEN, State.IN_BLOCK):
        h.setup()
        if state is State.IN_BLOCK:
            assert h.feed(block(E1)) == []
    elif state is State.CLOSING:
        h.conn.receive_data(Hello(high_version=4, low_version=1).encode(), now=0.0)
        assert isinstance(h.conn.next_event(), HelloReceived)
    elif state is State.CLOSED:
        h.conn.receive_data(b"", now=0.0)
        assert isinstance(h.conn.next_event(), ConnectionClosed)
    elif state is State.ERROR:
        h.conn.receive_data(b"\x00\x00\x00\x06\x00\x00\x00\x00", now=0.0)
        with pytest.raises(RemoteProtocolError):
            h.conn.next_event()
    assert h.conn.state is state
    return h


@pytest.mark.parametrize("state", list(State), ids=[s.value for s in State])
@pytest.mark.parametrize("inp", INPUTS)
def test_every_state_input_pair(state: State, inp: str) -> None:
    h = _machine_in(state)
    conn = h.conn
    target = SERVER_TRANSITIONS.get((state, inp))
    if state is State.CLOSED:
        assert target is None
        if inp in ("eof", "reset"):
            conn.receive_data(b"", now=0.0) if inp == "eof" else conn.connection_lost(now=0.0)
            assert isinstance(conn.next_event(), ConnectionClosed)
        else:
            data = _input_bytes(inp, state)
            assert data is not None
            with pytest.raises(RuntimeError):
                conn.receive_data(data, now=0.0)
        assert conn.state is State.CLOSED
        return
    if state is State.ERROR:
        assert target is None
        data = _input_bytes(inp, state)
        if data is not None:
            conn.receive_data(data, now=0.0)
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
        assert conn.state is State.ERROR
        return
    if state is State.CLOSING:
        assert target is None
        data = _input_bytes(inp, state)
        if data is not None:
            conn.receive_data(data, now=0.0)
        assert conn.next_event() is NEED_DATA  # nothing more is read; the driver closes
        assert conn.must_close
        return
    # OPEN / IN_BLOCK
    if inp == "eof":
        conn.receive_data(b"", now=0.0)
    elif inp == "reset":
        conn.connection_lost(now=0.0)
    else:
        data = _input_bytes(inp, state)
        assert data is not None
        conn.receive_data(data, now=0.0)
    events: list[Any] = []
    try:
        while (ev := conn.next_event()) is not NEED_DATA:
            events.append(ev)
            if isinstance(ev, ConnectionClosed):
                break
    except RemoteProtocolError as exc:
        assert target is None, f"({state.value}, {inp}) is in the table but raised {exc}"
        assert exc.field == "type" and exc.offset is not None
        assert conn.state is State.ERROR
        return
    assert target is not None, f"({state.value}, {inp}) is not in the table but was accepted: {events}"
    assert conn.state is target
    assert (state.value, inp, target.value) in conn.transitions_seen


def test_the_table_lists_every_input_in_open() -> None:
    assert {inp for s, inp in SERVER_TRANSITIONS if s is State.OPEN} == set(INPUTS)


# --------------------------------------------------------------------------- append rules (§5.3-§5.4)


def test_append_without_setup_closes() -> None:
    h = Harness()
    assert h.feed(block_end(13, E1, 1, 1)) == []
    assert h.closed and h.error is not None and h.error.field == "writer_id"
    assert h.data == b""


def test_append_before_append_setup_was_sent_closes() -> None:
    """The decoder saw SetupAppend but the service never answered it: no writer state (§5.4)."""
    h = Harness()
    h.conn.receive_data(SetupAppend(request_id=1, writer_id=W, segment=SEG).encode() + block_end(13, E1, 1, 1), now=0.0)
    assert isinstance(h.conn.next_event(), RequestReceived)
    with pytest.raises(RemoteProtocolError) as ei:
        h.conn.next_event()
    assert ei.value.field == "writer_id"


def test_rust_style_appends_chain_their_acks() -> None:
    h = Harness()
    assert h.setup().last_event_number == NULL_VALUE
    (a1,) = h.feed(block_end(999, E1, 1, 1, rid=2))  # sizeOfWholeEvents is ignored without a block
    (a2,) = h.feed(block_end(26, E1 + E2, 2, 3, rid=3))
    assert a1 == DataAppended(
        writer_id=W, event_number=1, previous_event_number=NULL_VALUE, request_id=2, current_segment_write_offset=13
    )
    assert a2 == DataAppended(writer_id=W, event_number=3, previous_event_number=1, request_id=3, current_segment_write_offset=39)
    assert h.data == E1 + E1 + E2
    assert h.store.writer_attribute(SEG, W) == 3


@pytest.mark.parametrize("num", [0, -1, -(2**31)])
def test_num_events_must_be_positive(num: int) -> None:
    h = Harness()
    h.setup()
    assert h.feed(block_end(13, E1, num, 1)) == []
    assert h.error is not None and h.error.field == "num_events"


def test_last_event_number_going_backwards_closes_but_equal_is_allowed() -> None:
    h = Harness()
    h.setup()
    (ack,) = h.feed(block_end(13, E1, 1, 5))
    assert isinstance(ack, DataAppended) and ack.event_number == 5
    assert h.feed(block_end(13, E2, 1, 5)) == []  # == : stored again, no DataAppended (§5.5)
    assert not h.closed and h.data == E1 + E2
    assert h.feed(block_end(13, E2, 1, 4)) == []
    assert h.closed and h.error is not None and h.error.field == "last_event_number"
    assert h.data == E1 + E2


def test_event_number_below_stored_after_a_new_setup_closes() -> None:
    store = SegmentStore()
    store.create(SEG)
    store.append(SEG, E1, writer_id=W, event_number=5, event_count=1)
    h = Harness(store)
    assert h.setup().last_event_number == 5
    assert h.feed(block_end(13, E2, 1, 3)) == []  # the decoder's counter restarted at 0; the writer state catches it
    assert h.closed and h.error is not None and h.error.field == "event_number"
    assert h.data == E1


def test_setup_again_on_the_same_connection_returns_the_stored_number() -> None:
    h = Harness()
    h.setup()
    h.feed(block_end(13, E1, 1, 1))
    assert h.setup(rid=3).last_event_number == 1
    (ack,) = h.feed(block_end(13, E2, 1, 2, rid=4))
    assert isinstance(ack, DataAppended) and (ack.previous_event_number, ack.event_number) == (1, 2)


def test_writer_mismatch_between_block_and_block_end_closes() -> None:
    h = Harness()
    h.setup(W)
    h.setup(W2, rid=2)
    assert h.feed(block(E1, W) + block_end(13, b"", 1, 1, writer=W2)) == []
    assert h.error is not None and h.error.field == "writer_id"
    assert h.data == b""


@pytest.mark.parametrize(
    "after",
    [
        block(E2),
        SetupAppend(request_id=5, writer_id=W2, segment=SEG).encode(),
        Padding(length=3).encode(),
        ConditionalAppend(writer_id=W, event_number=2, expected_offset=0, event=b"x", request_id=5).encode(),
        ConditionalBlockEnd(writer_id=W, event_number=2, expected_offset=0, data=b"x", request_id=5).encode(),
    ],
    ids=["AppendBlock", "SetupAppend", "Padding", "ConditionalAppend", "ConditionalBlockEnd"],
)
def test_append_path_command_after_an_append_block_closes(after: bytes) -> None:
    h = Harness()
    h.setup()
    assert h.feed(block(E1) + after) == []
    assert h.closed and h.error is not None and h.error.field == "type"
    assert h.data == b""


def test_keepalive_and_reads_slip_through_an_open_block() -> None:
    h = Harness()
    h.setup()
    replies = h.feed(
        block(E1) + KeepAlive().encode() + ReadSegment(segment=SEG, offset=0, suggested_length=10, request_id=7).encode()
    )
    assert replies == [KeepAlive()]  # the read parks at the tail (empty segment); the driver handles that
    (ack,) = h.feed(block_end(13, b"", 1, 1))
    assert isinstance(ack, DataAppended) and h.data == E1


@pytest.mark.parametrize("size", [-1, 14, 1000])
def test_size_of_whole_events_outside_the_block_closes(size: int) -> None:
    h = Harness()
    h.setup()
    assert h.feed(block(E1) + block_end(size, b"", 1, 1)) == []
    assert h.error is not None and h.error.field == "size_of_whole_events"


@pytest.mark.parametrize("cut", range(0, 14))
def test_partial_event_reassembly_at_every_split_point(cut: int) -> None:
    """Java's split: the head of E2 in a PartialEvent, its tail in the block end (§5.1)."""
    h = Harness()
    h.setup()
    body = E1 + PartialEvent(data=E2[:cut]).encode()
    (ack,) = h.feed(block(body) + block_end(13, E2[cut:], 2, 2))
    assert isinstance(ack, DataAppended) and ack.event_number == 2
    assert h.data == E1 + E2
    assert parse_events(h.data)[0] == [(0, b"hello"), (13, b"world")]


def test_padding_closes_a_block_and_block_end_data_after_padding_closes() -> None:
    h = Harness()
    h.setup()
    (ack,) = h.feed(block(E1 + Padding(length=19).encode()) + block_end(13, b"", 1, 1))
    assert isinstance(ack, DataAppended) and h.data == E1
    assert h.feed(block(E2 + Padding(length=3).encode()) + block_end(13, b"xyz", 1, 2)) == []
    assert h.error is not None and h.error.field == "data"
    assert h.data == E1


def test_quirk_block_end_data_is_ignored_when_the_block_has_no_remainder() -> None:
    h = Harness()
    h.setup()
    (ack,) = h.feed(block(E1) + block_end(13, E2, 2, 2))
    assert isinstance(ack, DataAppended) and ack.event_number == 2
    assert h.data == E1  # E2 silently dropped, as AppendDecoder does (§5.3)


def test_quirk_bytes_after_the_one_remainder_frame_are_ignored() -> None:
    h = Harness()
    h.setup()
    body = E1 + PartialEvent(data=E2[:4]).encode() + b"JUNK"
    (ack,) = h.feed(block(body) + block_end(13, E2[4:], 2, 2))
    assert isinstance(ack, DataAppended) and h.data == E1 + E2


@pytest.mark.parametrize(
    "rest",
    [b"\x00\x00\x00", KeepAlive().encode(), E2, b"\xff\xff\xff\xfe\x00\x00\x00\x09abc"],
    ids=["short", "keepalive", "event", "partial-length-past-block"],
)
def test_block_remainder_must_be_one_partial_event_or_padding(rest: bytes) -> None:
    h = Harness()
    h.setup()
    assert h.feed(block(E1 + rest) + block_end(13, b"", 1, 1)) == []
    assert h.closed and h.error is not None
    assert h.data == b""


def test_top_level_padding_is_dropped_and_top_level_partial_event_closes() -> None:
    h = Harness()
    assert h.feed(Padding(length=4).encode() + KeepAlive().encode()) == [KeepAlive()]
    assert h.feed(PartialEvent(data=b"abc").encode()) == []
    assert h.closed and h.error is not None and h.error.field == "type"


def test_conditional_appends_check_the_offset_and_roll_back() -> None:
    h = Harness()
    h.setup()
    (a1,) = h.feed(ConditionalAppend(writer_id=W, event_number=1, expected_offset=0, event=b"hello", request_id=4).encode())
    assert isinstance(a1, DataAppended) and a1.current_segment_write_offset == 13
    (f,) = h.feed(ConditionalAppend(writer_id=W, event_number=2, expected_offset=0, event=b"world", request_id=5).encode())
    assert f == ConditionalCheckFailed(writer_id=W, event_number=2, request_id=5)
    (a2,) = h.feed(ConditionalAppend(writer_id=W, event_number=2, expected_offset=13, event=b"world", request_id=6).encode())
    assert isinstance(a2, DataAppended) and (a2.previous_event_number, a2.event_number) == (1, 2)
    assert h.data == E1 + E2


def test_empty_block_end_still_advances_the_event_number() -> None:
    h = Harness()
    h.setup()
    (ack,) = h.feed(block_end(0, b"", 3, 3))
    assert isinstance(ack, DataAppended) and ack.event_number == 3 and h.data == b""
    assert h.store.writer_attribute(SEG, W) == 3


# --------------------------------------------------------------------------- Hello / client machine (§7)


@pytest.mark.parametrize(
    ("high", "low", "ok"), [(17, 5, True), (15, 5, True), (5, 5, True), (17, 17, True), (4, 1, False), (20, 18, False)]
)
def test_server_answers_every_hello_and_closes_when_incompatible(high: int, low: int, ok: bool) -> None:
    h = Harness()
    assert h.feed(Hello(high_version=high, low_version=low).encode()) == [Hello(high_version=17, low_version=5)]
    assert h.closed is not ok
    assert h.conn.peer_version == (high, low)


@pytest.mark.parametrize(("high", "low", "ok"), [(17, 5, True), (15, 5, True), (4, 1, False), (30, 18, False)])
def test_client_checks_the_server_hello(high: int, low: int, ok: bool) -> None:
    c = ClientConnection()
    c.initiate(now=0.0)
    assert c.data_to_send() == Hello().encode()
    c.receive_data(Hello(high_version=high, low_version=low).encode(), now=0.0)
    if ok:
        assert isinstance(c.next_event(), HelloReceived) and c.hello_received
    else:
        with pytest.raises(RemoteProtocolError):
            c.next_event()


def test_client_refuses_requests_from_the_server_and_server_refuses_replies() -> None:
    c = ClientConnection()
    c.receive_data(SetupAppend(request_id=1, writer_id=W, segment=SEG).encode(), now=0.0)
    with pytest.raises(RemoteProtocolError):
        c.next_event()
    h = Harness()
    assert h.feed(SegmentRead(segment=SEG, offset=0, at_tail=True, end_of_segment=False, data=b"", request_id=1).encode()) == []
    assert h.error is not None
    with pytest.raises(LocalProtocolError):
        ServerConnection().send(SetupAppend(request_id=1, writer_id=W, segment=SEG), now=0.0)
    with pytest.raises(LocalProtocolError):
        ClientConnection().send(DataAppended(writer_id=W, event_number=1), now=0.0)


def test_eof_inside_a_frame_is_an_error_and_a_clean_eof_is_not() -> None:
    h = Harness()
    h.conn.receive_data(KeepAlive().encode()[:5], now=0.0)
    h.conn.receive_data(b"", now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        h.conn.next_event()
    assert ei.value.field == "(eof)"
    h2 = Harness()
    h2.conn.receive_data(b"", now=0.0)
    ev = h2.conn.next_event()
    assert isinstance(ev, ConnectionClosed) and ev.clean


# --------------------------------------------------------------------------- WriterSession (§5.1, §5.2, §5.5)


def _run_writer(
    payloads: list[bytes],
    style: str,
    block_sizes: list[int],
    drops: list[int],
    batch_events: int,
    batch_bytes: int,
) -> tuple[bytes, int]:
    store = SegmentStore()
    store.create(SEG)
    session = WriterSession(SEG, W, style=style, max_batch_events=batch_events, max_batch_bytes=batch_bytes)  # type: ignore[arg-type]
    session.java_block_sizes = block_sizes or None
    for p in payloads:
        session.add(p)
    connections = 0
    rid = 0
    drops = list(drops)
    while session.pending:
        connections += 1
        assert connections < 100, "the writer makes no progress"
        h = Harness(store)
        rid += 1
        (setup,) = h.feed(session.setup(rid).encode())
        assert isinstance(setup, AppendSetup)
        session.on_append_setup(setup)
        data = session.take()
        if drops:  # this connection breaks after ``cut`` bytes; its replies are lost
            cut = drops.pop(0) % (len(data) + 1)
            h.feed(data[:cut])
            h.conn.connection_lost(now=0.0)
            h.feed(b"")
            assert h.closed
            session.connection_lost()
            continue
        for reply in h.feed(data):
            assert isinstance(reply, DataAppended), reply
            session.on_data_appended(reply)
        assert not h.closed
    return bytes(store.segments[SEG].data), connections


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=25),
    style=st.sampled_from(["rust", "java"]),
    block_sizes=st.lists(st.integers(1, 120), max_size=4),
    drops=st.lists(st.integers(0, 10_000), max_size=5),
    batch_events=st.integers(1, 6),
    batch_bytes=st.integers(1, 200),
)
def test_writer_stores_every_event_exactly_once_in_order_across_reconnects(
    payloads: list[bytes], style: str, block_sizes: list[int], drops: list[int], batch_events: int, batch_bytes: int
) -> None:
    stored, _ = _run_writer(payloads, style, block_sizes, drops, batch_events, batch_bytes)
    events, used = parse_events(stored)
    assert used == len(stored)
    assert [p for _o, p in events] == payloads


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=12), st.lists(st.integers(1, 80), min_size=1, max_size=3))
def test_java_style_bytes_are_blocks_the_server_decodes(payloads: list[bytes], sizes: list[int]) -> None:
    """Every AppendBlock is followed by its AppendBlockEnd; sizeOfWholeEvents and the
    trailing PartialEvent/Padding follow §5.1."""
    session = WriterSession(SEG, W, style="java", max_batch_events=100, max_batch_bytes=10_000)
    session.java_block_sizes = sizes
    for p in payloads:
        session.add(p)
    session.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=NULL_VALUE))
    dec = CommandDecoder()
    for chunk in split(session.take(), [7, 50, 51]):
        dec.feed(chunk)
    cmds = list(dec.commands())
    assert len(cmds) % 2 == 0
    last = 0
    for blk, end in zip(cmds[::2], cmds[1::2], strict=True):
        assert isinstance(blk, AppendBlock) and isinstance(end, AppendBlockEnd)
        assert 0 <= end.size_of_whole_events <= len(blk.data)
        assert end.num_events >= 1 and end.last_event_number == last + end.num_events
        last = end.last_event_number
    assert last == len(payloads)


def _session_with_pending(n: int) -> WriterSession:
    s = WriterSession(SEG, W)
    for i in range(n):
        s.add(b"e%d" % i)
    s.setup(1)
    s.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=NULL_VALUE))
    return s


def test_on_data_appended_accepts_a_good_chain() -> None:
    s = _session_with_pending(3)
    assert s.on_data_appended(DataAppended(writer_id=W, event_number=2, previous_event_number=NULL_VALUE)) == [1, 2]
    assert s.on_data_appended(DataAppended(writer_id=W, event_number=3, previous_event_number=2)) == [3]
    assert not s.pending


@pytest.mark.parametrize(
    ("num", "prev"),
    [(2, 2), (1, 2), (5, NULL_VALUE), (4, 1), (2, 1)],
    ids=["prev-equals-num", "prev-above-num", "ack-beyond-written", "ack-beyond-written-2", "missed-ack"],
)
def test_on_data_appended_rejects_bad_chains(num: int, prev: int) -> None:
    s = _session_with_pending(3)
    with pytest.raises(LocalProtocolError):
        s.on_data_appended(DataAppended(writer_id=W, event_number=num, previous_event_number=prev))
    assert [e.number for e in s.pending] == [1, 2, 3]


def test_append_setup_drops_what_the_server_has_and_refuses_the_impossible() -> None:
    s = _session_with_pending(4)
    s.setup(2)
    s.on_append_setup(AppendSetup(request_id=2, segment=SEG, writer_id=W, last_event_number=2))
    assert [e.number for e in s.pending] == [3, 4]
    s.setup(3)
    with pytest.raises(LocalProtocolError):
        s.on_append_setup(AppendSetup(request_id=3, segment=SEG, writer_id=W, last_event_number=9))
    with pytest.raises(LocalProtocolError):
        s.on_append_setup(AppendSetup(request_id=3, segment=SEG, writer_id=W2, last_event_number=NULL_VALUE))


def test_take_is_empty_until_ready_and_sends_each_event_once_per_connection() -> None:
    s = WriterSession(SEG, W)
    s.add(b"a")
    assert s.take() == b""
    s.setup(1)
    s.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=NULL_VALUE))
    first = s.take()
    assert first and s.take() == b""
    s.add(b"b")
    second = s.take()
    dec = CommandDecoder()
    dec.feed(second)
    (cmd,) = list(dec.commands())
    assert isinstance(cmd, AppendBlockEnd) and cmd.last_event_number == 2 and cmd.num_events == 1
