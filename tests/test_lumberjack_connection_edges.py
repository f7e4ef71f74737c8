"""Lumberjack machines at their edges: every error the machines raise (text,
frame, field, stream offset), limits at the line and one past it, acks and
their order, the exact close events, and each timer with the time each call
passes."""

from __future__ import annotations

import zlib
from typing import Any

import attrs
import pytest
from support.lumberjack_machines import C, J

from refwire.errors import LimitExceeded, LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.lumberjack import (
    NEED_DATA,
    Accept,
    AckReceived,
    AckTimeout,
    Batch,
    BatchTimeout,
    ClientConnection,
    ConnectionClosed,
    EmptyWindow,
    IdleAtShutdown,
    IdleTimeout,
    KeepAlive,
    SendWindow,
    ServerConnection,
    State,
)
from refwire.lumberjack.frames import (
    DEFAULT_LIMITS,
    MAX_U32,
    V1,
    V2,
    Ack,
    DataFrame,
    JsonFrame,
    Window,
    encode_ack,
    encode_events,
)
from refwire.wire import Limits

W2 = Window(2).encode()  # 6 bytes
W0 = Window(0).encode()


def drain(m: ServerConnection | ClientConnection) -> list[Any]:
    out = []
    while (ev := m.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def refused(m: ServerConnection | ClientConnection, data: bytes = b"") -> RemoteProtocolError:
    if data:
        m.receive_data(data, now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        drain(m)
    assert m.state is State.ERROR and ei.value.protocol == "lumberjack"
    return ei.value


def where(e: RemoteProtocolError) -> tuple[str | None, str | None, int | None]:
    return (e.frame, e.field, e.offset)


def batch_of(s: ServerConnection, n: int = 1) -> Batch:
    s.receive_data(Window(n).encode() + b"".join(J(i + 1) for i in range(n)), now=0.0)
    (b,) = drain(s)
    assert isinstance(b, Batch)
    return b


# -- the server's errors ------------------------------------------------------------------------------


def test_data_outside_a_window_is_located() -> None:
    s = ServerConnection()
    batch_of(s)
    off = len(W2) + len(J(1))  # after W 1 and its J
    e = refused(s, J(2))
    assert e.reason == "data frame outside a window (no W announced it)"
    assert where(e) == ("J", "type", off + 1)


def test_a_window_inside_a_window_is_located() -> None:
    s = ServerConnection()
    s.receive_data(W2 + J(1), now=0.0)
    assert drain(s) == []
    e = refused(s, Window(3).encode())
    assert e.reason == "W while the previous window still expects 1 events"
    assert where(e) == ("W", "type", len(W2) + len(J(1)) + 1)


@pytest.mark.parametrize(("count", "ok"), [(3, True), (4, False)])
def test_max_window_at_the_line_and_one_past(count: int, ok: bool) -> None:
    s = ServerConnection(limits=Limits(max_window=3))
    s.receive_data(Window(count).encode(), now=0.0)
    if ok:
        assert drain(s) == [] and s.state is State.IN_BATCH
        return
    e = refused(s)
    assert isinstance(e, RemoteLimitExceeded)
    assert e.reason == "count 4 exceeds the limit max_window=3"
    assert where(e) == ("W", "count", 2)


def test_a_c_spanning_two_windows_counts_whole_against_max_batch_bytes() -> None:
    """A C frame's events are inflated and held together, so two windows inside
    one C count as one against max_batch_bytes, where sent plain they are two
    batches each within it (specs/lumberjack/README.md, the limits table)."""
    payload_len = len(J(1)) - 10
    two = Window(1).encode() + J(1) + Window(1).encode() + J(2)
    plain = ServerConnection(limits=Limits(max_batch_bytes=payload_len))
    plain.receive_data(two, now=0.0)
    assert [len(b.events) for b in drain(plain) if isinstance(b, Batch)] == [1, 1]
    for limit, ok in ((2 * payload_len, True), (2 * payload_len - 1, False)):
        s = ServerConnection(limits=Limits(max_batch_bytes=limit))
        s.receive_data(C(two), now=0.0)
        if ok:
            assert [len(b.events) for b in drain(s) if isinstance(b, Batch)] == [1, 1]
            continue
        e = refused(s)
        assert isinstance(e, RemoteLimitExceeded)
        assert e.reason == (
            f"the C frame's events, with the batch's before it, exceed the limit max_batch_bytes={limit}"
            " (a C frame's events are held together, even when they span windows)"
        )
        assert where(e) == ("C", "payload", 0)


def test_batch_bytes_at_the_line_and_one_past() -> None:
    payload_len = len(J(1)) - 10
    for extra, ok in ((0, True), (-1, False)):
        s = ServerConnection(limits=Limits(max_batch_bytes=2 * payload_len + extra))
        s.receive_data(W2 + J(1) + J(2), now=0.0)
        if ok:
            (b,) = drain(s)
            assert isinstance(b, Batch) and len(b.events) == 2
            continue
        e = refused(s)
        assert isinstance(e, RemoteLimitExceeded)
        assert e.reason == f"the batch's events exceed the limit max_batch_bytes={2 * payload_len - 1}"
        assert where(e) == ("J", "payload", len(W2) + len(J(1)) + 10)


def test_an_ack_from_the_client_is_refused() -> None:
    s = ServerConnection()
    batch_of(s)
    off = len(W2) + len(J(1))
    e = refused(s, Ack(1).encode())
    assert e.reason == "the client sent an A frame (acks flow from server to client)"
    assert where(e) == ("A", "type", off + 1)


def test_version_changes_are_refused_unless_mixed() -> None:
    s = ServerConnection()
    batch_of(s)
    off = len(W2) + len(J(1))
    e = refused(s, Window(1, V1).encode())
    assert e.reason == "version byte '1' on a version '2' connection"
    assert where(e) == ("W", "version", off)
    mixed = ServerConnection(accept_mixed_versions=True)
    batch_of(mixed)
    mixed.receive_data(Window(1, V1).encode() + DataFrame(1, ((b"k", b"v"),)).encode(), now=0.0)
    (b,) = drain(mixed)
    assert isinstance(b, Batch) and b.version == V1
    e = refused(mixed, Window(1, V1).encode() + J(1))
    assert e.reason == "J frame in a version '1' batch"
    assert e.frame == "J" and e.field == "type"


def test_errors_inside_a_compressed_frame_name_the_c() -> None:
    s = ServerConnection()
    batch_of(s)
    off = len(W2) + len(J(1))
    e = refused(s, C(J(2)))
    assert e.reason == "data frame outside a window (no W announced it)"
    assert where(e) == ("C>J", "type", off)


@pytest.mark.parametrize(("depth", "ok"), [(2, True), (3, False)])
def test_nesting_at_the_line_and_one_past(depth: int, ok: bool) -> None:
    inner = W2 + J(1) + J(2)
    for _ in range(depth):
        inner = C(inner)
    s = ServerConnection(limits=Limits(max_nesting_depth=2))
    s.receive_data(inner, now=0.0)
    if ok:
        (b,) = drain(s)
        assert isinstance(b, Batch)
        assert ("await-window", "C", "await-window") in s.transitions_seen
        return
    e = refused(s)
    assert isinstance(e, RemoteLimitExceeded)
    assert e.reason == "C frames nested deeper than the limit max_nesting_depth=2"
    assert where(e) == ("C", "payload", 0)


# -- the server's events and acks ---------------------------------------------------------------------


def test_batches_empty_windows_and_acks_in_window_order() -> None:
    s = ServerConnection()
    s.receive_data(W2 + J(1) + J(2) + Window(0).encode() + Window(1).encode() + J(7), now=0.0)
    b0, empty, b1 = drain(s)
    assert isinstance(b0, Batch) and (b0.version, b0.number, len(b0.events)) == (V2, 0, 2)
    assert empty == EmptyWindow(V2)
    assert isinstance(b1, Batch) and b1.number == 1
    assert s.data_to_send() == b""  # the A 0 waits behind b0's ack
    assert s.pending_batches == 2
    with pytest.raises(LocalProtocolError) as ei:
        s.accept(b1, now=1.0)
    assert (ei.value.reason, ei.value.frame) == ("batches must be accepted in the order they were delivered", "A")
    s.send(Accept(b0), now=1.0)
    assert s.data_to_send() == encode_ack(2) + encode_ack(0)
    s.accept(b1, now=1.0)
    assert s.data_to_send() == encode_ack(7) and s.pending_batches == 0
    with pytest.raises(TypeError, match=r"^a Lumberjack server sends Accept events, not Batch$"):
        s.send(b1, now=1.0)


def test_count_ack_mode_and_silent_empty_windows() -> None:
    s = ServerConnection(ack_mode="count", answer_empty_window=False)
    s.receive_data(Window(0).encode() + W2 + J(5) + J(6), now=0.0)
    empty, b = drain(s)
    assert empty == EmptyWindow(V2) and isinstance(b, Batch)
    s.accept(b, now=0.0)
    assert s.data_to_send() == encode_ack(2)
    with pytest.raises(ValueError, match="ack_mode"):
        ServerConnection(ack_mode="seq")  # type: ignore[arg-type]


def test_server_end_events_exactly() -> None:
    s = ServerConnection()
    s.receive_data(W2 + J(1), now=0.0)
    s.receive_data(b"", now=0.0)
    e = refused(s)
    assert e.reason == "connection closed inside a batch (1 of 2 events received)"
    assert where(e) == ("W", "(eof)", len(W2) + len(J(1)))
    s = ServerConnection()
    s.receive_data(J(1)[:4], now=0.0)
    s.receive_data(b"", now=0.0)
    e = refused(s)
    assert e.reason == "connection closed inside a frame (4 bytes of it received)"
    assert (e.field, e.offset) == ("(eof)", 0)
    s = ServerConnection()
    s.receive_data(b"", now=0.0)
    assert drain(s) == [ConnectionClosed(clean=True)]
    s = ServerConnection()
    s.connection_lost(now=0.0)
    assert drain(s) == [ConnectionClosed(clean=False, reason="reset")] and s.lost
    s = ServerConnection()
    s.send_failed(now=0.0)
    assert drain(s) == [ConnectionClosed(clean=False, reason="write failed")]


# -- the server's timers --------------------------------------------------------------------------------


def test_keepalives_while_a_batch_waits() -> None:
    s = ServerConnection(keepalive_interval=5.0, now=0.0, idle_timeout=100.0)
    s.receive_data(Window(1, V2).encode() + J(1), now=1.0)
    (b,) = drain(s)
    assert s.next_deadline() == 6.0
    s.handle_timer(now=5.9)
    assert s.data_to_send() == b""
    s.handle_timer(now=6.0)
    assert s.data_to_send() == encode_ack(0, V2)
    assert s.next_deadline() == 11.0  # from the last output
    s.accept(b, now=7.0)
    assert s.next_deadline() == 107.0  # nothing pending: the idle timeout, from the ack
    v1 = ServerConnection(keepalive_version="v2", accept_mixed_versions=True)
    v1.receive_data(Window(1, V1).encode() + DataFrame(1, ()).encode(), now=0.0)
    drain(v1)
    v1.handle_timer(now=5.0)
    assert v1.data_to_send() == encode_ack(0, V2)
    own = ServerConnection(accept_mixed_versions=True)
    own.receive_data(Window(1, V1).encode() + DataFrame(1, ()).encode(), now=0.0)
    drain(own)
    own.handle_timer(now=5.0)
    assert own.data_to_send() == encode_ack(0, V1)


@pytest.mark.parametrize("how", ["reset", "send_failed", "eof"])
def test_keepalives_stop_when_the_transport_is_gone_and_go_on_after_eof(how: str) -> None:
    """A reset or a failed write ends the connection: no deadline, and a timer
    writes nothing, though a batch is still held (it was never acked).  After
    the client's EOF the write side is still open: the held batch is still
    acked later, and keepalives go on until it is."""
    s = ServerConnection(keepalive_interval=5.0, now=0.0, idle_timeout=100.0)
    s.receive_data(Window(1, V2).encode() + J(1), now=1.0)
    (b,) = drain(s)
    if how == "reset":
        s.connection_lost(now=2.0)
    elif how == "send_failed":
        s.send_failed(now=2.0)
    else:
        s.receive_data(b"", now=2.0)
    drain(s)
    if how == "eof":
        assert s.next_deadline() == 6.0
        s.handle_timer(now=6.0)
        assert s.data_to_send() == encode_ack(0, V2)
        s.accept(b, now=7.0)
        assert s.data_to_send() == encode_ack(1, V2)
        return
    assert s.next_deadline() is None
    s.handle_timer(now=60.0)
    assert s.data_to_send() == b""


def test_idle_and_batch_timeouts_exactly() -> None:
    with pytest.raises(ValueError, match="pass now="):
        ServerConnection(idle_timeout=1.0)
    with pytest.raises(ValueError, match="pass now="):
        ServerConnection(batch_timeout=1.0)
    s = ServerConnection(now=10.0, idle_timeout=3.0, batch_timeout=2.0)
    assert s.next_deadline() == 13.0
    s.receive_data(W2, now=11.0)
    drain(s)
    assert s.next_deadline() == 13.0  # mid-batch: the batch timeout from the last byte
    s.handle_timer(now=12.9)
    assert drain(s) == []
    s.handle_timer(now=13.5)
    assert drain(s) == [BatchTimeout(2.5)]
    assert s.next_deadline() is None  # fired once
    s = ServerConnection(now=10.0, idle_timeout=3.0)
    s.handle_timer(now=14.0)
    assert drain(s) == [IdleTimeout(4.0)]


def test_close_when_idle_waits_for_pending_batches() -> None:
    s = ServerConnection(now=0.0, idle_timeout=100.0)
    b = batch_of(s)
    s.close_when_idle(now=1.0)
    s.close_when_idle(now=2.0)  # the first call counts
    assert s.next_deadline() == 5.0  # the keepalive; no receive timer while a batch is pending
    s.accept(b, now=3.0)
    assert s.next_deadline() == 1.0
    s.handle_timer(now=3.0)
    assert drain(s) == [IdleAtShutdown()]


@pytest.mark.parametrize(("depth", "pending", "armed"), [(2, 2, True), (2, 3, False), (0, 1, True), (0, 2, False)])
def test_receive_timers_pause_past_the_pipeline_depth(depth: int, pending: int, armed: bool) -> None:
    s = ServerConnection(now=0.0, batch_timeout=2.0, keepalive_interval=None, pipeline_depth=depth)
    for i in range(pending):
        s.receive_data(Window(1).encode() + J(i + 1), now=0.0)
        drain(s)
    s.receive_data(W2, now=1.0)
    drain(s)
    assert s.next_deadline() == (3.0 if armed else None)


# -- the client -----------------------------------------------------------------------------------------


def sent(c: ClientConnection, n: int = 3, now: float = 0.0) -> bytes:
    c.send_window([{"n": i} for i in range(n)], now=now)
    return c.data_to_send()


def test_client_constructor_ranges() -> None:
    for bad in (
        {"version": 0x33},
        {"compression_level": -1},
        {"compression_level": 10},
        {"first_seq": 0},
        {"first_seq": MAX_U32 + 1},
    ):
        with pytest.raises(ValueError):
            ClientConnection(**bad)
    for good in ({"compression_level": 0}, {"compression_level": 9}, {"first_seq": 1}, {"first_seq": MAX_U32}, {"version": V1}):
        ClientConnection(**good)


def test_client_send_refusals() -> None:
    c = ClientConnection(limits=Limits(max_window=3))
    with pytest.raises(LocalProtocolError) as ei:
        c.send_window([], now=0.0)
    assert (ei.value.reason, ei.value.frame) == ("a window needs at least one event", "W")
    with pytest.raises(LimitExceeded) as li:
        c.send_window([1, 2, 3, 4], now=0.0)
    assert (li.value.reason, li.value.frame, li.value.field) == (
        "window of 4 events exceeds the limit max_window=3",
        "W",
        "count",
    )
    sent(c, 3)
    with pytest.raises(LocalProtocolError) as ei:
        c.send_window([1], now=0.0)
    assert (ei.value.reason, ei.value.frame) == ("cannot send a window in state awaiting-ack", "W")
    with pytest.raises(TypeError, match=r"^a Lumberjack client sends SendWindow events, not list$"):
        c.send([1], now=0.0)


def test_running_sequence_wraps_past_the_top() -> None:
    c = ClientConnection(sequence="running", first_seq=MAX_U32, compression_level=0)
    sent(c, 2)
    assert c.next_seq == 2
    c.receive_data(Ack(MAX_U32).encode(), now=1.0)
    assert drain(c) == [AckReceived(MAX_U32, 1, 1, False)]
    c.receive_data(Ack(1).encode(), now=1.0)
    assert drain(c) == [AckReceived(1, 1, 2, True)]
    assert c.state is State.IDLE and c.acked == 2 and c.unacked() == []


def test_client_ack_errors_are_located() -> None:
    c = ClientConnection(compression_level=0)
    sent(c, 3)
    c.receive_data(Ack(2).encode(), now=1.0)
    assert drain(c) == [AckReceived(2, 2, 2, False)]
    assert c.unacked() == [{"n": 2}]
    e = refused(c, Ack(1).encode())
    assert e.reason == "ack 1 goes backwards (1 < 2 events already acked)"
    assert where(e) == ("A", "seq", 6 + 2)
    c = ClientConnection(compression_level=0)
    sent(c, 3)
    e = refused(c, Ack(0, V2).encode() + Ack(4).encode())
    assert e.reason == "ack 4 names no event of the outstanding window (1..3)"
    assert where(e) == ("A", "seq", 6 + 2)
    c = ClientConnection(compression_level=0)
    sent(c, 3)
    e = refused(c, Ack(1, V1).encode())
    assert e.reason == "ack with version byte '1' on a version '2' connection"
    assert where(e) == ("A", "version", 0)
    c = ClientConnection(compression_level=0)
    e = refused(c, Ack(1).encode())
    assert e.reason == "ack 1 with no window outstanding"
    assert where(e) == ("A", "seq", 2)


def test_client_keepalives_and_count_acks() -> None:
    c = ClientConnection(compression_level=0, ack_interpretation="count")
    assert c.acked == 0 and c.unacked() == []
    c.receive_data(Ack(0).encode(), now=0.0)
    assert drain(c) == [KeepAlive(V2)]
    sent(c, 3)
    c.receive_data(Ack(0).encode() + Ack(3).encode(), now=1.0)
    assert drain(c) == [KeepAlive(V2), AckReceived(3, 3, 3, True)]
    c = ClientConnection(compression_level=0, ack_interpretation="count")
    sent(c, 3)
    e = refused(c, Ack(4).encode())
    assert e.reason == "ack 4 names no event of the outstanding window (1..3)"


def test_client_ack_timeout_from_the_last_ack() -> None:
    c = ClientConnection(compression_level=0, ack_timeout=10.0)
    assert c.next_deadline() is None
    sent(c, 2, now=1.0)
    assert c.next_deadline() == 11.0
    c.receive_data(Ack(0).encode(), now=4.0)
    drain(c)
    assert c.next_deadline() == 14.0
    c.handle_timer(now=13.9)
    assert drain(c) == []
    c.handle_timer(now=14.5)
    assert drain(c) == [AckTimeout(10.5)]
    assert c.state is State.CLOSED and c.unacked() == [{"n": 0}, {"n": 1}]
    assert ClientConnection(ack_timeout=None).next_deadline() is None


def test_client_end_events_exactly() -> None:
    c = ClientConnection(compression_level=0)
    sent(c, 2)
    c.receive_data(Ack(2).encode(), now=0.0)
    c.receive_data(b"", now=0.0)
    assert drain(c)[-1] == ConnectionClosed(clean=True)
    c = ClientConnection(compression_level=0)
    sent(c, 2)
    c.receive_data(Ack(1).encode(), now=0.0)
    c.receive_data(b"", now=0.0)
    assert drain(c)[-1] == ConnectionClosed(clean=False)
    c = ClientConnection(compression_level=0)
    c.receive_data(b"", now=0.0)
    assert drain(c) == [ConnectionClosed(clean=True)]
    c = ClientConnection(compression_level=0)
    sent(c, 2)
    c.receive_data(Ack(2).encode()[:4], now=0.0)
    c.receive_data(b"", now=0.0)
    e = refused(c)
    assert e.reason == "connection closed inside an A frame (4 bytes of it)"
    assert where(e) == ("A", "(eof)", 0)
    c = ClientConnection(compression_level=0)
    c.send_failed(now=0.0)
    assert drain(c) == [ConnectionClosed(clean=False, reason="write failed")]
    c = ClientConnection(compression_level=0)
    c.connection_lost(now=0.0)
    assert drain(c) == [ConnectionClosed(clean=False, reason="reset")]


def test_server_frame_timeout_and_the_clock_of_each_call() -> None:
    s = ServerConnection(frame_timeout=2.0, keepalive_interval=None)
    s.receive_data(W2[:3], now=1.0)
    assert drain(s) == [] and s.next_deadline() == 3.0
    s.handle_timer(now=2.9)
    assert drain(s) == []
    s.handle_timer(now=3.0)
    e = refused(s)
    assert (e.field, e.offset) == ("(timeout)", 0)
    s = ServerConnection(frame_timeout=2.0, keepalive_interval=5.0)
    s.receive_data(Window(1).encode() + J(1) + W2[:3], now=1.0)
    s.close_when_idle(now=2.0)  # the batch and the partial frame are noticed at this call's time
    (b,) = drain(s)
    assert isinstance(b, Batch)
    assert s.next_deadline() == 4.0  # the frame timer from 2.0 (the keepalive is due at 7.0)
    s.handle_timer(now=5.0)
    with pytest.raises(RemoteProtocolError):
        drain(s)


def test_batch_timeout_covers_a_single_byte_of_a_frame() -> None:
    s = ServerConnection(now=0.0, batch_timeout=2.0, idle_timeout=10.0)
    s.receive_data(W2[:1], now=1.0)
    assert drain(s) == [] and s.mid_batch
    assert s.next_deadline() == 3.0


def test_an_ack_after_the_window_completed_is_refused() -> None:
    c = ClientConnection(compression_level=0)
    sent(c, 2)
    c.receive_data(Ack(2).encode(), now=0.0)
    assert drain(c) == [AckReceived(2, 2, 2, True)]
    e = refused(c, Ack(2).encode())
    assert e.reason == "ack 2 with no window outstanding"
    assert where(e) == ("A", "seq", 6 + 2)


def test_client_ack_activity_is_the_latest_now() -> None:
    c = ClientConnection(compression_level=0, ack_timeout=10.0)
    sent(c, 2)
    c.receive_data(Ack(1).encode(), now=4.0)
    c.handle_timer(now=5.0)  # not due; the ack is decoded after it
    assert drain(c) == [AckReceived(1, 1, 1, False)]
    assert c.next_deadline() == 15.0


def test_running_acks_repeat_and_unknown() -> None:
    c = ClientConnection(sequence="running", first_seq=10, compression_level=0)
    sent(c, 3)  # seqs 10, 11, 12
    c.receive_data(Ack(11).encode() + Ack(11).encode(), now=0.0)
    assert drain(c) == [AckReceived(11, 2, 2, False), AckReceived(11, 0, 2, False)]  # a repeated ack moves nothing
    e = refused(c, Ack(9).encode())
    assert e.reason == "ack 9 names no event of the outstanding window (10..12)"
    assert where(e) == ("A", "seq", 12 + 2)


def test_client_send_refusals_name_lumberjack() -> None:
    c = ClientConnection(limits=Limits(max_window=1))
    with pytest.raises(LocalProtocolError) as ei:
        c.send_window([], now=0.0)
    assert ei.value.protocol == "lumberjack"
    with pytest.raises(LimitExceeded) as li:
        c.send_window([1, 2], now=0.0)
    assert li.value.protocol == "lumberjack"
    c.send_window([{"a": 1}], now=0.0)
    with pytest.raises(LocalProtocolError) as ei:
        c.send_window([{"a": 1}], now=0.0)
    assert ei.value.protocol == "lumberjack"


def test_client_defaults_and_window_numbering() -> None:
    c = ClientConnection()
    assert (c.version, c.compression_level, c.sequence, c.ack_timeout, c.ack_interpretation) == (V2, 3, "window", 30.0, "seq")
    for _ in range(2):  # every window numbers its events from 1
        c.send_window([{"n": 1}, {"n": 2}], now=0.0)
        c.data_to_send()
        c.receive_data(Ack(2).encode(), now=0.0)
        assert drain(c) == [AckReceived(2, 2, 2, True)]


def test_client_window_bytes_use_the_encoded_events_and_the_compression_level() -> None:
    from refwire.lumberjack.frames import encode_event, encode_window

    pre = [encode_event({"b": 2}, V2)]
    for compress in (0, 3):
        for via_event in (False, True):
            c = ClientConnection(compression_level=compress)
            if via_event:
                c.send(SendWindow([{"a": 1}], pre), now=0.0)
            else:
                c.send_window([{"a": 1}], now=0.0, encoded=pre)
            assert c.data_to_send() == encode_window(V2, [1], pre, compression_level=compress)


def test_client_ack_decoded_after_a_send_takes_the_send_time() -> None:
    c = ClientConnection(compression_level=0, ack_timeout=30.0)
    c.receive_data(Ack(0).encode(), now=2.0)  # a keepalive, decoded only after the send below
    c.send_window([{"n": 1}], now=3.0)
    assert drain(c) == [KeepAlive(V2)]
    assert c.next_deadline() == 33.0


def test_client_frame_errors_after_consumed_acks_keep_stream_offsets() -> None:
    c = ClientConnection(compression_level=0)
    sent(c, 3)
    c.receive_data(Ack(1).encode(), now=0.0)
    assert drain(c) == [AckReceived(1, 1, 1, False)]
    e = refused(c, b"2W\x00\x00\x00\x01")
    assert e.reason == "unexpected frame type 0x57 from the server (only A is allowed)"
    assert (e.field, e.offset) == ("type", 6 + 1)  # its type byte, after the 6 bytes of the consumed ack


def test_client_constructor_messages() -> None:
    with pytest.raises(ValueError, match=r"^version must be V1 \(0x31\) or V2 \(0x32\)$"):
        ClientConnection(version=0x33)
    with pytest.raises(ValueError, match=r"^compression_level must be 0\.\.9$"):
        ClientConnection(compression_level=10)
    with pytest.raises(ValueError, match=r"^first_seq must be 1\.\.2\*\*32-1 \(0 is reserved for keepalives\)$"):
        ClientConnection(first_seq=0)


def test_batch_bytes_count_from_zero_for_every_batch() -> None:
    payload_len = len(J(1)) - 10
    s = ServerConnection(limits=Limits(max_batch_bytes=payload_len))
    for seq in (1, 2):
        s.receive_data(Window(1).encode() + J(seq), now=0.0)
        (b,) = drain(s)
        s.accept(b, now=0.0)


def test_a_version_1_frame_inside_a_compressed_frame_is_refused_when_strict() -> None:
    from refwire.lumberjack.frames import JsonFrame

    j1 = bytearray(JsonFrame(1, b'{"a":1}').encode())
    j1[0] = V1  # a '1J' frame: only a non-strict (mixed versions) connection accepts it
    s = ServerConnection()
    e = refused(s, C(Window(1).encode() + bytes(j1)))
    assert e.frame is not None and e.frame.startswith("C")
    mixed = ServerConnection(accept_mixed_versions=True)
    mixed.receive_data(C(Window(1).encode() + bytes(j1)), now=0.0)
    (b,) = drain(mixed)
    assert isinstance(b, Batch)


def test_accept_refusal_names_lumberjack() -> None:
    s = ServerConnection()
    b = batch_of(s)
    s.accept(b, now=0.0)
    with pytest.raises(LocalProtocolError) as ei:
        s.accept(b, now=0.0)
    assert ei.value.protocol == "lumberjack"


def test_a_data_frame_of_the_other_version_in_a_batch() -> None:
    from refwire.lumberjack.frames import DataFrame

    for data, reason, name in (
        (Window(1).encode() + DataFrame(1, ((b"k", b"v"),)).encode(), "version byte '1' on a version '2' connection", "D"),
        (Window(1, V1).encode() + J(1), "version byte '2' on a version '1' connection", "J"),
    ):
        e = refused(ServerConnection(), data)
        assert e.reason == reason
        assert where(e) == (name, "version", 6)


def test_a_mixed_version_error_inside_a_compressed_frame_names_the_c() -> None:
    s = ServerConnection(accept_mixed_versions=True)
    batch_of(s)
    off = len(W2) + len(J(1))
    e = refused(s, C(Window(1, V1).encode() + J(2)))
    assert e.reason == "J frame in a version '1' batch"
    assert where(e) == ("C>J", "type", off)


def test_errors_of_frames_inside_a_c_name_the_c_and_its_offset() -> None:
    payload_len = len(J(1)) - 10
    off = len(W2) + len(J(1))
    cases = [
        (ServerConnection(limits=Limits(max_batch_bytes=payload_len)), C(W2 + J(1) + J(2)), "C", "payload"),  # the inflate budget
        (ServerConnection(), C(Window(1, V1).encode()), "C>W", "version"),
        (ServerConnection(), C(W2 + J(1) + Window(1).encode()), "C>W", "type"),
        (ServerConnection(limits=Limits(max_window=1)), C(W2), "C>W", "count"),
    ]
    for s, frame, name, field in cases:
        batch_of(s)
        e = refused(s, frame)
        assert where(e) == (name, field, off)


def test_batch_bytes_of_d_frames() -> None:
    from refwire.lumberjack.frames import DataFrame

    d1, d2 = DataFrame(1, ((b"k", b"v"),)), DataFrame(2, ((b"k", b"w"),))
    from refwire.lumberjack.frames import held_bytes

    s = ServerConnection(limits=Limits(max_batch_bytes=held_bytes(d1) + held_bytes(d2) - 1))
    e = refused(s, Window(2, V1).encode() + d1.encode() + d2.encode())
    assert isinstance(e, RemoteLimitExceeded)
    assert where(e) == ("D", "payload", 6 + len(d1.encode()) + 6)


def test_server_defaults() -> None:
    s = ServerConnection()
    assert (s.keepalive_version, s.pipeline_depth, s.ack_mode, s.keepalive_interval) == ("connection", 2, "last-seq", 5.0)
    assert (s.idle_timeout, s.batch_timeout, s.frame_timeout, s.version) == (None, None, None, None)
    d = ServerConnection(now=0.0, batch_timeout=2.0, keepalive_interval=None)  # the default depth: 2
    for i in range(3):
        d.receive_data(Window(1).encode() + J(i + 1), now=0.0)
        drain(d)
    d.receive_data(W2, now=1.0)
    drain(d)
    assert d.next_deadline() is None  # 3 batches wait: the driver is not reading


def test_a_compressed_frame_of_the_other_version_and_an_ack_inside_one() -> None:
    from refwire.lumberjack.frames import Compressed

    off = len(W2) + len(J(1))
    s = ServerConnection()
    batch_of(s)
    e = refused(s, Compressed(b"x", V1).encode())
    assert e.reason == "version byte '1' on a version '2' connection"
    assert where(e) == ("C", "version", off)
    s = ServerConnection()
    batch_of(s)
    e = refused(s, C(Ack(1).encode()))
    assert e.reason == "the client sent an A frame (acks flow from server to client)"
    assert where(e) == ("C>A", "type", off)


# --------------------------------------------------------------------------- J runs and encoded windows (2026-11-26)

D1 = DataFrame(1, ((b"k", b"v"),)).encode()  # a '1D' frame of 20 bytes


def test_running_numbers_start_at_1_by_default() -> None:
    c = ClientConnection(sequence="running", compression_level=0)
    c.send_window([{"a": 1}], now=0.0)
    assert c.data_to_send() == Window(1).encode() + JsonFrame(1, b'{"a":1}').encode()
    assert c.next_seq == 2


@pytest.mark.parametrize(
    ("version", "events", "reason"),
    [
        (V2, [{"a": 1}], "the encoded window holds 1 version '2' events, not 2 version '2' ones"),
        (V1, [{"a": 1}, {"b": 2}], "the encoded window holds 2 version '1' events, not 2 version '2' ones"),
    ],
)
def test_an_encoded_window_that_is_not_the_windows_is_refused(version: int, events: list[Any], reason: str) -> None:
    c = ClientConnection()
    with pytest.raises(LocalProtocolError) as ei:
        c.send_window([{"a": 1}, {"b": 2}], now=0.0, encoded=encode_events(version, events))
    e = ei.value
    assert (e.reason, e.protocol, e.frame, e.field, e.offset) == (reason, "lumberjack", "W", None, None)
    assert c.state is State.IDLE and c.data_to_send() == b"" and c.next_seq == 1


def test_prepared_payloads_must_be_one_per_event() -> None:
    c = ClientConnection(sequence="running")
    with pytest.raises(ValueError, match="zip"):
        c.send_window([{"a": 1}, {"b": 2}], now=0.0, encoded=[b'{"a":1}'])
    assert c.state is State.IDLE and c.data_to_send() == b"" and c.next_seq == 1


def test_unacked_encoded_before_any_window_is_empty_of_the_connections_version() -> None:
    ew = ClientConnection(version=V1).unacked_encoded()
    assert (ew.version, ew.body, ew.starts, ew.seqs, len(ew)) == (V1, bytearray(), [], [], 0)
    assert type(ew.body) is bytearray


def test_the_server_needs_now_for_its_receive_timeouts() -> None:
    with pytest.raises(ValueError) as ei:
        ServerConnection(idle_timeout=1.0)
    assert str(ei.value) == "idle_timeout and batch_timeout count from the connection's start: pass now="


def test_the_servers_decoder_applies_the_servers_limits() -> None:
    s = ServerConnection(limits=attrs.evolve(DEFAULT_LIMITS, max_frame_size=20))
    s.receive_data(Window(2).encode() + JsonFrame(1, b'{"a":"12"}').encode(), now=0.0)  # 20 bytes: at the limit
    assert drain(s) == []
    e = refused(s, JsonFrame(2, b'{"a":"123"}').encode())  # 21 bytes
    assert isinstance(e, RemoteLimitExceeded)
    assert e.reason == "J frame of 21 bytes exceeds the limit max_frame_size=20"
    assert where(e) == ("J", "len", 6 + 20 + 6)


def test_a_version_1_json_frame_inside_a_compressed_frame_is_the_decoders_error_when_strict() -> None:
    j1 = bytearray(JsonFrame(1, b'{"a":1}').encode())
    j1[0] = V1
    s = ServerConnection()
    e = refused(s, W0 + C(Window(1).encode() + bytes(j1)))
    assert e.reason == "J frame with version byte '1' (J exists only in v2) (at offset 6 of the inflated payload)"
    assert where(e) == ("C>J", "version", 6)


def test_the_server_takes_a_windows_json_frames_as_one_run() -> None:
    # one column for the three frames, at the top level and inside a C (the speed path's;
    # the plain path keeps one JsonFrame each)
    for stream in (Window(3).encode() + J(1) + J(2) + J(3), C(Window(3).encode() + J(1) + J(2) + J(3))):
        s = ServerConnection(fast=True)
        s.receive_data(stream, now=0.0)
        (b,) = drain(s)
        assert isinstance(b, Batch) and b.seqs == [1, 2, 3]
        assert [cols[1] for cols in b._columns] == [[1, 2, 3]]


def test_an_empty_window_is_answered_in_its_own_version() -> None:
    s = ServerConnection()
    s.receive_data(Window(0, V1).encode(), now=0.0)
    assert drain(s) == [EmptyWindow(V1)]
    assert s.data_to_send() == Ack(0, V1).encode()
    # behind a pending batch, the held A 0 keeps the version too
    s = ServerConnection()
    s.receive_data(Window(1, V1).encode() + D1 + Window(0, V1).encode(), now=0.0)
    b, empty = drain(s)
    assert isinstance(b, Batch) and empty == EmptyWindow(V1) and s.data_to_send() == b""
    s.accept(b, now=0.0)
    assert s.data_to_send() == Ack(1, V1).encode() + Ack(0, V1).encode()


def test_a_compressed_frame_of_the_other_version_inside_one_names_the_outer_c() -> None:
    from refwire.lumberjack.frames import Compressed

    s = ServerConnection()
    e = refused(s, W0 + C(W0 + Compressed(b"x", V1).encode()))
    assert e.reason == "version byte '1' on a version '2' connection"
    assert where(e) == ("C>C", "version", 6)


def test_a_d_frame_in_a_version_2_batch_is_located_when_mixed_versions_are_accepted() -> None:
    s = ServerConnection(accept_mixed_versions=True)
    e = refused(s, Window(1).encode() + D1)
    assert e.reason == "D frame in a version '2' batch"
    assert where(e) == ("D", "type", 7)
    s = ServerConnection(accept_mixed_versions=True)
    e = refused(s, W0 + C(Window(1).encode() + D1))
    assert e.reason == "D frame in a version '2' batch"
    assert where(e) == ("C>D", "type", 6)


def test_a_d_frame_of_the_other_version_inside_a_compressed_frame_names_the_c() -> None:
    s = ServerConnection()
    e = refused(s, W0 + C(Window(1).encode() + D1))
    assert e.reason == "version byte '1' on a version '2' connection"
    assert where(e) == ("C>D", "version", 6)


def test_a_json_run_of_the_other_version_inside_a_compressed_frame_names_the_c() -> None:
    from refwire.lumberjack.frames import Compressed

    s = ServerConnection()
    inner = Window(1, V1).encode() + JsonFrame(1, b"{}").encode()
    e = refused(s, Window(0, V1).encode() + Compressed(zlib.compress(inner), V1).encode())
    assert e.reason == "version byte '2' on a version '1' connection"
    assert where(e) == ("C>J", "version", 6)


@pytest.mark.parametrize("count", [2, 3])
def test_a_batch_over_max_batch_bytes_at_its_second_frame_records_the_in_batch_step(count: int) -> None:
    s = ServerConnection(limits=attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=10))
    e = refused(s, Window(count).encode() + JsonFrame(1, b'{"a":1}').encode() + JsonFrame(2, b'{"b":2}').encode())
    assert isinstance(e, RemoteLimitExceeded)
    assert where(e) == ("J", "payload", 6 + 17 + 10)
    assert ("in-batch", "data", "in-batch") in s.transitions_seen


def test_a_run_that_completes_a_batch_begun_in_an_earlier_chunk() -> None:
    s = ServerConnection()
    s.receive_data(Window(3).encode() + J(1), now=0.0)
    assert drain(s) == []
    s.receive_data(J(2) + J(3) + J(4), now=0.0)  # one run: two events for the batch, then one too many
    b = s.next_event()
    assert isinstance(b, Batch) and b.seqs == [1, 2, 3]
    e = refused(s)
    assert e.reason == "data frame outside a window (no W announced it)"
    assert where(e) == ("J", "type", 6 + 3 * len(J(1)) + 1)
