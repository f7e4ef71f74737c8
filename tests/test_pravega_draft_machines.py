"""Draft-dialect Sans-IO machines (specs/pravega-draft-2017/README.md §5-§6):
every (state, input) pair of ``SERVER_TRANSITIONS``; properties (hypothesis):
split invariance of a valid stream, partial messages cut anywhere, garbage
giving only ProtocolError; and the :class:`DraftWriterSession` with random
planners and dropped connections storing every byte exactly once."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pravega_draft_harness import DraftHarness, level

from refwire.errors import ProtocolError, RemoteProtocolError
from refwire.pravega.client import parse_events
from refwire.pravega.draft2017.connection import (
    SERVER_TRANSITIONS,
    WHILE_PARTIAL,
    ClientConnection,
    ServerConnection,
    State,
    split_message,
    split_reply,
)
from refwire.pravega.draft2017.events import ConnectionClosed, KeepAliveReceived, ReplyReceived, RequestReceived
from refwire.pravega.draft2017.frames import (
    DRAFT,
    AppendSetup,
    BeginAppendBlock,
    DataAppended,
    EndAppendBlock,
    KeepAlive,
    Part,
    PartialMessage,
    ReadSegment,
    SegmentRead,
    SetupAppend,
)
from refwire.pravega.draft2017.writer import DraftWriterSession
from refwire.pravega.frames import CommandDecoder, encode_event
from refwire.pravega.store import SegmentStore
from refwire.sansio import NEED_DATA

SEG = "seg"
A = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
B = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")
E1 = encode_event(b"hello")  # 13 bytes
KA = KeepAlive().encode()


def _store() -> SegmentStore:
    s = SegmentStore()
    s.create(SEG)
    return s


# --------------------------------------------------------------------------- (state, input) table

INPUTS = sorted({inp for _s, inp in SERVER_TRANSITIONS})


def _input_bytes(inp: str, state: State) -> bytes:
    return {
        "setup": SetupAppend(connection_id=B, segment=SEG).encode(),
        "begin": BeginAppendBlock(connection_id=A, connection_offset=0, length=0).encode(),
        "request": ReadSegment(segment=SEG, offset=0, suggested_length=10).encode(),
        "keepalive": KA,
        "partial": (
            PartialMessage(part=Part.MIDDLE, data=E1[6:8]).encode()
            if state is State.TRAILER
            else b"".join(split_message(E1 if state is State.IN_BLOCK else KA, [6]))
        ),
        "event": E1,
        "end": EndAppendBlock(connection_id=A, connection_offset=0, block_length=0).encode(),
        "end-trailer": EndAppendBlock(connection_id=A, connection_offset=13, block_length=13).encode(),
        "trailer-done": PartialMessage(part=Part.END, data=E1[6:]).encode(),
    }[inp]


def _machine_in(state: State, inp: str) -> DraftHarness:
    """A harness in ``state``; in a block, Begin's W fits the input exactly."""
    h = DraftHarness(_store())
    if state is State.CLOSED:
        h.conn.receive_data(b"", now=0.0)
        assert isinstance(h.conn.next_event(), ConnectionClosed)
    elif state is State.ERROR:
        h.conn.receive_data(b"\x00\x00\x00\x09\x00\x00\x00\x00", now=0.0)
        with pytest.raises(RemoteProtocolError):
            h.conn.next_event()
    else:
        assert h.feed(SetupAppend(connection_id=A, segment=SEG).encode())
        if state is State.IN_BLOCK:
            sizes = {"event": 13, "keepalive": 8, "end": 0, "partial": len(_input_bytes("partial", state)), "end-trailer": 15}
            h.feed(BeginAppendBlock(connection_id=A, connection_offset=0, length=sizes.get(inp, 100)).encode())
            if inp == "end-trailer":
                h.feed(PartialMessage(part=Part.BEGIN, data=E1[:6]).encode())
        elif state is State.TRAILER:
            h.feed(
                BeginAppendBlock(connection_id=A, connection_offset=0, length=15).encode()
                + PartialMessage(part=Part.BEGIN, data=E1[:6]).encode()
                + EndAppendBlock(connection_id=A, connection_offset=13, block_length=13).encode()
            )
    assert (h.conn.state is state and not h.closed) or state in (State.CLOSED, State.ERROR)
    return h


@pytest.mark.parametrize("state", list(State), ids=[s.value for s in State])
@pytest.mark.parametrize("inp", INPUTS)
def test_every_state_input_pair(state: State, inp: str) -> None:
    h = _machine_in(state, inp)
    conn = h.conn
    target = SERVER_TRANSITIONS.get((state, inp))
    if state is State.CLOSED:
        assert target is None
        if inp in ("eof", "reset"):
            conn.receive_data(b"", now=0.0) if inp == "eof" else conn.connection_lost(now=0.0)
            assert isinstance(conn.next_event(), ConnectionClosed)
        else:
            with pytest.raises(RuntimeError):
                conn.receive_data(_input_bytes(inp, state), now=0.0)
        return
    if state is State.ERROR:
        assert target is None
        if inp not in ("eof", "reset"):
            conn.receive_data(_input_bytes(inp, state), now=0.0)
        with pytest.raises(RemoteProtocolError):
            conn.next_event()
        return
    if inp == "eof":
        conn.receive_data(b"", now=0.0)
    elif inp == "reset":
        conn.connection_lost(now=0.0)
    else:
        conn.receive_data(_input_bytes(inp, state), now=0.0)
    events: list[Any] = []
    try:
        while (ev := conn.next_event()) is not NEED_DATA:
            events.append(ev)
            if isinstance(ev, ConnectionClosed):
                break
    except RemoteProtocolError as exc:
        assert target is None, f"({state.value}, {inp}) is in the table but raised {exc}"
        assert exc.field in ("type", "part", "(eof)"), exc
        assert conn.state is State.ERROR
        return
    assert target is not None, f"({state.value}, {inp}) is not in the table but was accepted: {events}"
    assert conn.state is target
    assert (state.value, inp, target.value) in conn.transitions_seen


def test_while_partial_lists_only_inputs_of_the_table() -> None:
    for state, inputs in WHILE_PARTIAL.items():
        assert all((state, i) in SERVER_TRANSITIONS for i in inputs)


@pytest.mark.parametrize(
    "frame",
    [
        SetupAppend(connection_id=B, segment=SEG).encode(),
        ReadSegment(segment=SEG, offset=0, suggested_length=8).encode(),
        BeginAppendBlock(connection_id=A, connection_offset=0, length=0).encode(),
    ],
    ids=["setup", "read", "begin"],
)
def test_only_parts_and_keepalive_while_a_partial_message_is_incomplete(frame: bytes) -> None:
    h = DraftHarness(_store())
    h.feed(SetupAppend(connection_id=A, segment=SEG).encode())
    begin = PartialMessage(part=Part.BEGIN, data=KA[:3]).encode()
    assert h.feed(begin + KA) == KA  # a whole KeepAlive between parts is echoed at once
    h.feed(frame)
    assert h.error is not None and (h.error.field, h.error.offset) == ("type", 29 + len(begin) + 8)


# --------------------------------------------------------------------------- properties


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


class RandomPlanner:
    def __init__(self, data: st.DataObject) -> None:
        self.d = data

    def block_events(self) -> int:
        return self.d.draw(st.integers(1, 4))

    def cuts(self, frame_len: int) -> list[int]:
        return self.d.draw(st.lists(st.integers(0, frame_len), max_size=3))

    def straddle(self) -> bool:
        return self.d.draw(st.booleans())

    def padding(self) -> bytes | None:
        return self.d.draw(st.none() | st.binary(max_size=5))


def _valid_stream(data: st.DataObject) -> bytes:
    session = DraftWriterSession(SEG, A, planner=RandomPlanner(data))
    for p in data.draw(st.lists(st.binary(max_size=30), min_size=1, max_size=8)):
        session.add(p)
    setup = session.setup().encode()
    session.on_append_setup(AppendSetup(segment=SEG, connection_id=A, connection_offset_ack_level=0))
    extra = ReadSegment(segment=SEG, offset=0, suggested_length=100).encode() + KeepAlive(data=b"ka").encode()
    return setup + session.take() + extra


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_split_of_a_valid_stream_gives_the_same_events(data: st.DataObject) -> None:
    stream = _valid_stream(data)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))

    def run(chunks: list[bytes]) -> tuple[list[Any], bytes, bytes]:
        h = DraftHarness(_store())
        out = b"".join(h.feed(c) for c in chunks) + h.eof()
        assert h.error is None and not h.refused
        return h.events, out, bytes(h.store.segments[SEG].data)

    whole = run([stream])
    assert whole == run(_chunks(stream, cuts))
    assert whole == run([stream[i : i + 1] for i in range(len(stream))])
    assert isinstance(whole[0][-1], ConnectionClosed)


_MESSAGES = st.one_of(
    st.builds(SetupAppend, connection_id=st.uuids(), segment=st.text(max_size=20)),
    st.builds(
        ReadSegment, segment=st.text(max_size=20), offset=st.integers(0, 2**62), suggested_length=st.integers(-(2**31), 2**31 - 1)
    ),
    st.builds(KeepAlive, data=st.binary(max_size=60)),
)


@settings(max_examples=100, deadline=None)
@given(_MESSAGES, st.lists(st.integers(0, 200), max_size=6))
def test_any_cut_of_a_request_reassembles(msg: Any, cuts: list[int]) -> None:
    frame = msg.encode()
    whole, parted = ServerConnection(), ServerConnection()
    whole.receive_data(frame, now=0.0)
    parted.receive_data(b"".join(split_message(frame, [c % (len(frame) + 1) for c in cuts])), now=0.0)
    a, b = whole.next_event(), parted.next_event()
    assert a is not NEED_DATA and type(a) is type(b)
    if isinstance(a, RequestReceived):
        assert isinstance(b, RequestReceived) and a.command == b.command == msg and b.offset is None
    else:
        assert a == b == KeepAliveReceived(msg.data)
        assert whole.data_to_send() == parted.data_to_send() == frame
    assert parted.next_event() is NEED_DATA


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 64))
def test_server_replies_split_by_reply_part_size_reassemble_in_the_client(data: bytes, part_size: int) -> None:
    reply = SegmentRead(segment=SEG, offset=7, at_tail=True, end_of_segment=False, data=data)
    server = ServerConnection(reply_part_size=part_size)
    server.send(reply, now=0.0)
    raw = server.data_to_send()
    assert raw == split_reply(reply.encode(), part_size)
    if len(reply.encode()) > part_size:
        dec = CommandDecoder(allow_inner=True, dialect=DRAFT)
        dec.feed(raw)
        parts = list(dec.commands())
        assert all(isinstance(p, PartialMessage) for p in parts) and dec.buffered == 0
        assert [p.part for p in parts] == [Part.BEGIN] + [Part.MIDDLE] * (len(parts) - 2) + [Part.END]  # type: ignore[attr-defined]
        sizes = [len(p.data) for p in parts]  # type: ignore[attr-defined]
        assert all(n == part_size for n in sizes[:-1]) and 0 < sizes[-1] <= part_size
    else:
        assert raw == reply.encode()
    c = ClientConnection()
    c.receive_data(raw, now=0.0)
    assert c.next_event() == ReplyReceived(reply)
    assert c.next_event() is NEED_DATA


def _consume(conn: ServerConnection | ClientConnection) -> None:
    for _ in range(10_000):
        try:
            ev = conn.next_event()
        except ProtocolError:
            return
        if ev is NEED_DATA or isinstance(ev, ConnectionClosed):
            return
        if isinstance(conn, ServerConnection) and isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend):
            conn.send(
                AppendSetup(segment=ev.command.segment, connection_id=ev.command.connection_id, connection_offset_ack_level=0),
                now=0.0,
            )
    raise AssertionError("the machine never stops")


_HEADS = st.sampled_from(
    [
        b"",
        SetupAppend(connection_id=A, segment=SEG).encode(),
        BeginAppendBlock(connection_id=A, connection_offset=0, length=40).encode(),
    ]
)


@settings(max_examples=200, deadline=None)
@given(_HEADS, st.binary(max_size=120), st.booleans(), st.booleans())
def test_garbage_raises_only_protocol_errors(head: bytes, junk: bytes, client: bool, eof: bool) -> None:
    conn: ServerConnection | ClientConnection = ClientConnection() if client else ServerConnection()
    conn.receive_data(head + junk, now=0.0)
    _consume(conn)
    if eof and conn.state is not State.ERROR:
        conn.receive_data(b"", now=0.0)
        _consume(conn)


@settings(max_examples=100, deadline=None)
@given(st.integers(-2, 100), st.binary(max_size=40), st.lists(st.integers(0, 60), max_size=4))
def test_garbage_inside_partial_messages_raises_only_protocol_errors(code: int, body: bytes, cuts: list[int]) -> None:
    msg = code.to_bytes(4, "big", signed=True) + len(body).to_bytes(4, "big") + body
    for conn in (ServerConnection(), ClientConnection()):
        conn.receive_data(b"".join(split_message(msg, cuts)), now=0.0)
        _consume(conn)


# --------------------------------------------------------------------------- writer session (§6.6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_writer_stores_every_byte_exactly_once_across_drops(data: st.DataObject) -> None:
    payloads = data.draw(st.lists(st.binary(max_size=40), min_size=1, max_size=20))
    drops = data.draw(st.lists(st.integers(0, 10_000), max_size=5))
    store = _store()
    session = DraftWriterSession(SEG, A, planner=RandomPlanner(data))
    for p in payloads:
        session.add(p)
    connections = 0
    while session.pending:
        connections += 1
        assert connections < 100, "no progress"
        h = DraftHarness(store)
        out = h.feed(session.setup().encode())
        c = ClientConnection()
        c.receive_data(out, now=0.0)
        ev = c.next_event()
        assert isinstance(ev, ReplyReceived) and isinstance(ev.command, AppendSetup)
        assert ev.command.connection_offset_ack_level == level(store, SEG, A)
        session.on_append_setup(ev.command)
        sent = session.take()
        if drops:
            cut = drops.pop(0) % (len(sent) + 1)
            h.feed(sent[:cut])
            h.conn.connection_lost(now=0.0)
            h.feed(b"")
            assert h.error is None and not h.refused
            session.connection_lost()
            continue
        replies = h.feed(sent)
        assert h.error is None and not h.refused, h.error
        if replies:  # b"" would be EOF to the client
            c.receive_data(replies, now=0.0)
        while (ev := c.next_event()) is not NEED_DATA:
            assert not isinstance(ev, ConnectionClosed), ev
            if isinstance(ev, ReplyReceived) and isinstance(ev.command, DataAppended):
                session.on_data_appended(ev.command)
    stored = bytes(store.segments[SEG].data)
    events, used = parse_events(stored)
    assert used == len(stored) and [p for _o, p in events] == payloads
    assert level(store, SEG, A) == len(stored) == session.acked


# --------------------------------------------------------------------------- the machine contract (refwire.sansio)


def test_client_timers_are_absolute_deadlines() -> None:
    """§8: a KeepAlive every 10 s from the start; replies do not move the ping;
    the silence timeout counts from the latest input; early timer calls are harmless."""
    c = ClientConnection(keepalive_interval=10.0, silence_timeout=180.0, now=100.0)
    assert c.next_deadline() == 110.0
    c.handle_timer(now=105.0)  # early: nothing
    assert c.data_to_send() == b"" and c.next_deadline() == 110.0
    c.receive_data(KA, now=108.0)
    assert c.next_event() == KeepAliveReceived(b"")
    c.handle_timer(now=110.0)
    assert c.data_to_send() == KA and c.next_deadline() == 120.0
    c.handle_timer(now=110.0)  # repeated: nothing more, the deadline does not creep
    assert c.data_to_send() == b"" and c.next_deadline() == 120.0
    now = 120.0
    while now < 288.0:
        c.handle_timer(now=now)
        assert c.data_to_send() == KA
        deadline = c.next_deadline()
        assert deadline is not None
        now = deadline
    assert now == 288.0  # 108 + 180: the silence check, before the ping at 290
    c.handle_timer(now=now)
    assert c.data_to_send() == b""
    assert c.next_event() == ConnectionClosed(clean=False, reason="silence")
    assert c.next_event() is NEED_DATA and c.state is State.CLOSED and c.next_deadline() is None
    c.receive_data(KA, now=300.0)  # given up: late bytes are not read
    assert c.next_event() is NEED_DATA


def test_client_without_timers_has_no_deadline() -> None:
    c = ClientConnection()
    assert c.next_deadline() is None
    with pytest.raises(TypeError):
        ClientConnection(keepalive_interval=10.0)  # a timer needs the time it counts from


def test_closing_event_once_then_need_data() -> None:
    for conn in (ServerConnection(), ClientConnection()):
        conn.receive_data(b"", now=1.0)
        assert conn.next_event() == ConnectionClosed()
        assert conn.next_event() is NEED_DATA
        conn.receive_data(b"", now=2.0)  # each further end of input is answered once
        assert conn.next_event() == ConnectionClosed()
        assert conn.next_event() is NEED_DATA


def test_server_replies_wait_for_durability_in_request_order() -> None:
    """§6.5: a reply leaves once what it reports is durable, and after the replies before it."""
    h = DraftHarness(_store())
    conn = h.conn
    conn.receive_data(SetupAppend(connection_id=A, segment=SEG).encode(), now=0.0)
    assert isinstance(conn.next_event(), RequestReceived)
    setup = AppendSetup(segment=SEG, connection_id=A, connection_offset_ack_level=0)
    conn.send(setup, now=0.0, after=5)
    conn.receive_data(KA, now=0.0)
    assert conn.next_event() == KeepAliveReceived(b"")
    read = SegmentRead(segment=SEG, offset=0, at_tail=True, end_of_segment=False, data=b"")
    conn.send(read, now=0.0)
    assert conn.data_to_send() == b"" and conn.held_until() == 5
    conn.durable(4, now=1.0)
    assert conn.data_to_send() == b""
    conn.durable(5, now=2.0, limit=1)
    assert conn.data_to_send() == setup.encode() and conn.held_until() == 0
    conn.durable(5, now=2.0)
    assert conn.data_to_send() == KA + read.encode() and conn.held_until() is None
    conn.send(read, now=3.0)  # nothing held: at once
    assert conn.data_to_send() == read.encode()


def test_server_send_failed_loses_unwritten_replies() -> None:
    conn = ServerConnection()
    conn.send(SegmentRead(segment=SEG, offset=0, at_tail=True, end_of_segment=False, data=b""), now=0.0, after=9)
    conn.send_failed(now=1.0)
    assert conn.held_until() is None and conn.data_to_send() == b""
    assert conn.next_event() == ConnectionClosed(clean=False, reason="reset")
    assert conn.state is State.CLOSED
