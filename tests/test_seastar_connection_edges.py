"""Seastar RPC machines at their edges: exact events, error texts and locations,
time limits at the line and one past it, and the clock each call passes."""

from __future__ import annotations

from typing import Any

import pytest
from support.seastar_machines import events, pair

from refwire.errors import LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.seastar_rpc import (
    NEED_DATA,
    UNMEASURED,
    Accept,
    Call,
    CallFailed,
    CallReceived,
    ClientConnection,
    ConnectionClosed,
    Features,
    Negotiated,
    NegotiationRequested,
    OversizedCall,
    Reply,
    Response,
    ServerConnection,
    State,
    StrayReply,
    StreamEnd,
    StreamMessage,
    UserError,
)
from refwire.seastar_rpc.frames import PROTOCOL
from refwire.wire import Limits


def test_a_cancelled_call_leaves_no_timer_on_any_clock() -> None:
    """``now`` may have any origin: a call cancelled with its deadline at -1.0 still
    disarms its timer (a default of -1.0 once matched it: a stale deadline, then a KeyError)."""
    client, _ = pair()
    mid = client.call(1, b"", now=-2.0, timeout=1.0)
    client.cancel(mid)
    assert client.next_deadline() is None
    client.handle_timer(now=0.0)
    assert events(client) == []


# -- construction ------------------------------------------------------------------


def test_client_offer_from_its_arguments() -> None:
    assert ClientConnection().offer == Features(timeout=True, handler_duration=True)
    c = ClientConnection(compressors=("LZ4", "LZ4_FRAGMENTED"), isolation=b"cookie", extra_features=((77, b"x"),))
    assert c.offer == Features(
        compress="LZ4,LZ4_FRAGMENTED", timeout=True, isolation=b"cookie", handler_duration=True, unknown=((77, b"x"),)
    )
    assert ClientConnection(isolation=b"").offer.isolation is None  # an empty cookie is not sent
    assert (c.reply, c.connection_id, c.compressor, c.write_failed, c.stream_done) == (None, None, None, False, False)
    assert (c.local_eos, c.remote_eos) == (False, False)
    limits = Limits(max_frame_size=100)
    assert ClientConnection(limits=limits).limits is limits


def test_server_defaults() -> None:
    s = ServerConnection()
    assert (s.offer, s.reply, s.admit_len, s.frame_timeout, s.write_failed) == (None, None, None, None, False)
    assert s.multi_algo is True and s.next_deadline() is None


# -- negotiation ------------------------------------------------------------------------


def test_negotiation_events_exactly() -> None:
    client = ClientConnection(compressors=("LZ4",), isolation=b"c")
    server = ServerConnection()
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert events(server) == [NegotiationRequested(client.offer, client.offer.to_negotiation())]
    server.accept(connection_id=5, now=0.0)
    reply = Features(compress="LZ4", timeout=True, connection_id=5, isolation=b"c", handler_duration=True)
    assert server.reply == reply
    client.receive_data(server.data_to_send(), now=0.0)
    assert events(client) == [Negotiated(reply, "LZ4", 5)]
    assert (client.connection_id, client.reply, client.compressor, server.compressor) == (5, reply, "LZ4", "LZ4")


@pytest.mark.parametrize(("multi_algo", "chosen"), [(True, "LZ4"), (False, None)])
def test_server_compressor_choice(multi_algo: bool, chosen: str | None) -> None:
    """A multi-algorithm server takes the first offered name it knows; a one-factory
    server only an offer of exactly one name."""
    server = ServerConnection(multi_algo=multi_algo)
    server.receive_data(Features(compress="LZ4,LZ4_FRAGMENTED").encode(), now=0.0)
    events(server)
    server.accept(now=0.0)
    assert server.reply is not None and server.reply.compress == chosen


def test_client_takes_its_name_out_of_a_listed_reply() -> None:
    client = ClientConnection(compressors=("LZ4",))
    client.initiate(now=0.0)
    client.receive_data(Features(compress="ZZZ,LZ4").encode(), now=0.0)
    (neg,) = events(client)
    assert isinstance(neg, Negotiated) and neg.compressor == "LZ4"


def test_client_refusing_a_compressor_names_the_feature() -> None:
    client = ClientConnection(compressors=("LZ4",))
    client.initiate(now=0.0)
    client.receive_data(Features(compress="LZ4_FRAGMENTED").encode(), now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        events(client)
    e = ei.value
    assert (e.protocol, e.frame, e.field, e.offset) == (PROTOCOL, "negotiation", "COMPRESS", 12)


def test_accept_twice_is_refused_with_its_state() -> None:
    _, server = pair()
    with pytest.raises(LocalProtocolError) as ei:
        server.accept(now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("accept() in state ready", PROTOCOL, "negotiation")


def test_reject_default_reason() -> None:
    server = ServerConnection()
    server.receive_data(Features().encode(), now=0.0)
    events(server)
    server.reject(now=0.0)
    assert events(server) == [ConnectionClosed(False, "rejected")]


def test_server_deciding_holds_the_eof_until_it_decides() -> None:
    server = ServerConnection()
    server.receive_data(Features().encode(), now=0.0)
    server.receive_data(b"", now=0.0)
    assert events(server) == [NegotiationRequested(Features(), Features().to_negotiation())]
    assert events(server) == [] and server.state is State.DECIDING
    server.accept(now=0.0)
    assert events(server) == [ConnectionClosed(True, "eof")]
    assert ("ready", "eof", "closed") in server.transitions_seen
    assert server.next_event() is NEED_DATA


def test_clean_eof_on_the_client() -> None:
    client, _ = pair()
    client.call(1, b"", now=0.0)
    client.receive_data(b"", now=1.0)
    assert events(client) == [ConnectionClosed(True, "eof", (1,))]
    assert client.state is State.CLOSED and client.next_event() is NEED_DATA


# -- calls ------------------------------------------------------------------------------


def test_call_refusals() -> None:
    client, _ = pair()
    with pytest.raises(ValueError, match=r"^timeout must not be negative$"):
        client.call(1, now=0.0, timeout=-0.001)
    client.call(1, now=0.0, timeout=0.0)  # zero is allowed: due at once
    client.connection_lost(now=0.0)
    with pytest.raises(LocalProtocolError) as ei:
        client.call(1, now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("cannot call in state closed", PROTOCOL, "request")
    stream = ClientConnection(stream_parent=1)  # still negotiating: a stream connection has no calls
    with pytest.raises(LocalProtocolError, match="cannot call in state negotiating"):
        stream.call(1, now=0.0)
    with pytest.raises(TypeError, match=r"^ClientConnection.send\(\) does not take Accept$"):
        client.send(Accept(), now=0.0)


@pytest.mark.parametrize(("timeout", "ms"), [(1.0, 1000), (0.0015, 1), (0.0005, 1), (0.0025, 2)])
def test_propagated_timeout_in_whole_ms_at_least_one(timeout: float, ms: int) -> None:
    client, server = pair()
    client.call(3, now=0.0, timeout=timeout)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    assert call == CallReceived(3, 1, b"", ms, ms / 1000.0, 0.0)


def test_queued_call_due_exactly_at_the_reply_is_not_sent() -> None:
    client, server = pair_deferred()
    client.call(1, b"a", now=0.0, timeout=0.5)
    client.call(1, b"b", now=0.0, timeout=1.0)
    client.receive_data(server.data_to_send(), now=0.5)
    events(client)
    server.receive_data(client.data_to_send(), now=0.5)
    assert events(server) == [CallReceived(1, 2, b"b", 500, 1.0, 0.5)]


def test_queued_calls_take_the_time_of_the_call_that_decodes_the_reply() -> None:
    client, server = pair_deferred()
    client.call(1, b"a", now=0.0, timeout=1.0)
    client.receive_data(server.data_to_send(), now=0.5)
    client.handle_timer(now=0.6)
    events(client)
    server.receive_data(client.data_to_send(), now=0.6)
    (call,) = events(server)
    assert call.timeout_ms == 400


def pair_deferred() -> tuple[ClientConnection, ServerConnection]:
    """A client whose offer the server accepted, the reply not yet delivered."""
    client, server = ClientConnection(), ServerConnection()
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    events(server)
    server.accept(now=0.0)
    return client, server


def test_no_timeout_and_no_timeout_feature() -> None:
    client, server = pair()
    client.call(4, now=0.0)
    server.receive_data(client.data_to_send(), now=2.0)
    assert events(server) == [CallReceived(4, 1, b"", 0, None, 2.0)]  # 0 = none: no deadline
    client, server = pair(timeout=False)
    client.call(4, now=0.0, timeout=1.0)
    server.receive_data(client.data_to_send(), now=2.0)
    assert events(server) == [CallReceived(4, 1, b"", None, None, 2.0)]


def test_cancelled_call_reply_is_stray_but_known() -> None:
    client, server = pair()
    mid = client.call(1, now=0.0, timeout=1.0)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    client.cancel(mid)
    client.cancel(99)  # unknown: nothing
    assert client.pending == () and client.next_deadline() is None
    server.respond(call, b"r", now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    assert events(client) == [StrayReply(mid, True, None)]


def test_a_timer_due_exactly_at_one_second() -> None:
    client, server = pair()
    client.call(1, now=0.0, timeout=1.0)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    server.respond(call, b"", now=0.0)
    client.receive_data(server.data_to_send(), now=0.5)
    events(client)
    assert client.next_deadline() is None


# -- replies ------------------------------------------------------------------------------


def test_stray_replies_their_errors_and_known_flag() -> None:
    client, _ = pair(handler_duration=False)
    client.call(1, now=0.0)  # id 1; the next would be 2
    user = UserError(b"boom").encode()
    raw = b"".join(
        Response(mid, payload, None).encode(with_duration=False)
        for mid, payload in ((0, user), (-2, user), (-7, b"\x01"), (2, b""))
    )
    client.receive_data(raw, now=0.0)
    assert events(client) == [
        StrayReply(0, False, None),  # a non-negative id carries no exception
        StrayReply(-2, False, UserError(b"boom")),
        StrayReply(-7, False, None),  # a malformed exception of a stray reply is dropped
        StrayReply(2, False, None),  # not issued yet
    ]


def test_malformed_exception_of_a_pending_call_is_located() -> None:
    client, _ = pair(handler_duration=False)
    client.call(1, now=0.0)
    bad = b"\x01\x00\x00\x00\x09\x00\x00\x00"  # USER, claims 9 bytes, has none
    frame = Response(-1, bad, None).encode(with_duration=False)
    client.receive_data(frame, now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        events(client)
    start = client._decoder.offset - len(bad)  # where the exception body begins in the stream
    assert ei.value.field == "len" and ei.value.offset == start + 4


@pytest.mark.parametrize(
    ("given", "sent"), [(0, 0), (1, 1), (UNMEASURED - 1, UNMEASURED - 1), (UNMEASURED, UNMEASURED), (-1, UNMEASURED)]
)
def test_handler_duration_range(given: int, sent: int) -> None:
    client, server = pair()
    client.call(1, now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    server.respond_error(call, UserError(b"x"), now=0.0, handler_duration=given)
    client.receive_data(server.data_to_send(), now=0.0)
    assert events(client) == [CallFailed(1, UserError(b"x"), sent)]


def test_reply_wanted_up_to_and_at_the_deadline() -> None:
    client, server = pair()
    client.call(1, now=0.0, timeout=0.5)
    server.receive_data(client.data_to_send(), now=1.0)
    (call,) = events(server)
    assert call.deadline == 1.5
    assert server.reply_wanted(call, now=1.5) and not server.reply_wanted(call, now=1.5000001)


def test_cannot_reply_on_a_stream_connection() -> None:
    _, server = pair(stream_parent=0x10000)
    call = CallReceived(1, 1, b"", 0, None, 0.0)
    with pytest.raises(LocalProtocolError) as ei:
        server.respond(call, b"", now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("cannot reply in state streaming", PROTOCOL, "response")
    with pytest.raises(TypeError, match=r"^ServerConnection.send\(\) does not take Call$"):
        server.send(Call(1), now=0.0)


def test_oversized_calls_at_the_line_and_one_past() -> None:
    client, server = pair_admitting(4)
    client.call(7, b"1234", now=0.0, timeout=2.0)
    client.call(7, b"12345", now=0.0, timeout=2.0)
    server.receive_data(client.data_to_send(), now=1.0)
    fits, over = events(server)
    assert fits == CallReceived(7, 1, b"1234", 2000, 3.0, 1.0)
    assert over == OversizedCall(7, 2, 5, 2000, 3.0, 1.0)
    assert ("ready", "oversized", "ready") in server.transitions_seen
    server.respond_oversized(over, estimate=100, max_memory=50, now=1.0)
    client.receive_data(server.data_to_send(), now=1.0)
    assert events(client) == [CallFailed(2, UserError(b"request size 100 large than memory limit 50"), UNMEASURED)]


def pair_admitting(admit_len: int, **client_kw: Any) -> tuple[ClientConnection, ServerConnection]:
    client, server = ClientConnection(**client_kw), ServerConnection(admit_len=admit_len)
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    events(server)
    server.accept(now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    events(client)
    return client, server


def test_admit_len_does_not_apply_to_streams() -> None:
    client, server = pair_admitting(1, stream_parent=0x10000)
    client.send_stream(b"12345", now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert events(server) == [StreamMessage(b"12345")]


# -- streams and no-ops --------------------------------------------------------------------


def test_uncompressed_stream_both_ways() -> None:
    client, server = pair(stream_parent=0x10000)
    server.send_stream(b"down", now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    assert events(client) == [StreamMessage(b"down")]
    client.send_stream(b"up", now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert events(server) == [StreamMessage(b"up")]


def test_stream_send_refusals() -> None:
    client, _ = pair()
    with pytest.raises(LocalProtocolError) as ei:
        client.send_stream(b"x", now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("not a stream connection (state ready)", PROTOCOL, "stream")
    client, _ = pair(stream_parent=0x10000)
    client.send_stream_end(now=0.0)
    with pytest.raises(LocalProtocolError) as ei:
        client.send_stream_end(now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("this side already sent end-of-stream", PROTOCOL, "stream")


@pytest.mark.parametrize(
    ("second", "reason"), [(StreamMessage(b"x"), "stream message after end-of-stream"), (StreamEnd(), "a second end-of-stream")]
)
def test_after_end_of_stream_errors_are_located(second: StreamMessage | StreamEnd, reason: str) -> None:
    _, server = pair(stream_parent=0x10000)
    start = server._decoder.offset
    raw = StreamEnd().encode() + second.encode()
    server.receive_data(raw, now=0.0)
    assert server.next_event() == StreamEnd()
    with pytest.raises(RemoteProtocolError) as ei:
        server.next_event()
    e = ei.value
    # the offset is the stream position just after the offending frame
    assert (e.reason, e.protocol, e.frame, e.offset) == (reason, PROTOCOL, "stream", start + len(raw))


def test_noop_frames_both_ways_and_only_compressed() -> None:
    client, server = pair(compressors=("LZ4",))
    server.send_noop(now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    client.send_noop(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert events(client) == [] and events(server) == []
    assert ("ready", "noop", "ready") in client.transitions_seen
    assert ("ready", "noop", "ready") in server.transitions_seen
    plain, _ = pair()
    with pytest.raises(LocalProtocolError) as ei:
        plain.send_noop(now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.frame) == ("no-op frames exist only on compressed connections", PROTOCOL, "compressed")


# -- the server's clock ----------------------------------------------------------------------


def test_server_frame_timeout() -> None:
    server = ServerConnection(frame_timeout=2.0)
    client = ClientConnection()
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    events(server)
    server.accept(now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    events(client)
    client.call(1, b"abc", now=0.0)
    raw = client.data_to_send()
    server.receive_data(raw[:5], now=1.0)
    assert events(server) == []
    assert server.next_deadline() == 3.0
    server.handle_timer(now=2.9)
    assert events(server) == []
    server.handle_timer(now=3.0)
    with pytest.raises(RemoteProtocolError) as ei:
        events(server)
    assert ei.value.field == "(timeout)"


@pytest.mark.parametrize("call", ["handle_timer", "accept", "send_stream", "send_stream_end", "send_noop"])
def test_server_notes_a_partial_frame_at_the_latest_now(call: str) -> None:
    """The frame timer starts when next_event sees the partial frame, at the
    ``now`` of the latest call."""
    stream = call.startswith("send_stream") or call == "send_noop"
    client = ClientConnection(stream_parent=1 if stream else None, compressors=("LZ4",))
    server = ServerConnection(frame_timeout=2.0)
    client.initiate(now=0.0)
    offer = client.data_to_send()
    if call == "accept":
        server.receive_data(offer + b"\x00\x00", now=0.0)  # bytes pipelined after the offer
        events(server)
        server.accept(now=1.0)
    else:
        server.receive_data(offer, now=0.0)
        events(server)
        server.accept(now=0.0)
        server.receive_data(b"\x00\x00", now=0.5)
        if call == "handle_timer":
            server.handle_timer(now=1.0)
        else:
            getattr(server, call)(*([b"x"] if call == "send_stream" else []), now=1.0)
    assert events(server) == []
    assert server.next_deadline() == 3.0


def test_each_side_decodes_with_its_limits() -> None:
    """max_frame_size bounds a frame's data: at the limit it passes, one past it is refused."""
    client = ClientConnection(limits=Limits(max_frame_size=4))
    server = ServerConnection(limits=Limits(max_frame_size=4))
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    events(server)
    server.accept(now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    events(client)
    client.call(1, b"1234", now=0.0)
    client.call(1, b"12345", now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert server.next_event() == CallReceived(1, 1, b"1234", 0, None, 0.0)
    with pytest.raises(RemoteLimitExceeded):
        server.next_event()
    call = CallReceived(1, 1, b"", 0, None, 0.0)
    server = ServerConnection()
    server.receive_data(client.offer.encode(), now=0.0)
    events(server)
    server.accept(now=0.0)
    server.data_to_send()
    server.respond(call, b"1234", now=0.0)
    server.respond(call, b"12345", now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    assert client.next_event() == Reply(1, b"1234", UNMEASURED)
    with pytest.raises(RemoteLimitExceeded):
        client.next_event()


@pytest.mark.parametrize("side", ["client", "server"])
def test_eof_inside_a_stream_frame_names_it(side: str) -> None:
    client, server = pair(stream_parent=0x10000)
    m: ClientConnection | ServerConnection = client if side == "client" else server
    m.receive_data(StreamMessage(b"abc").encode()[:5], now=0.0)
    assert events(m) == []
    m.receive_data(b"", now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        events(m)
    assert (ei.value.frame, ei.value.field) == ("stream", "(eof)")


def test_send_failed_marks_the_write_failed() -> None:
    client, server = pair()
    client.send_failed(now=0.0)
    server.send_failed(now=0.0)
    assert client.write_failed is True and server.write_failed is True


def test_the_server_idle_timeout_is_a_deadline_and_fails_the_connection_past_it() -> None:
    from refwire.seastar_rpc import Features, ServerConnection

    server = ServerConnection()
    server.idle_timeout = 5.0
    server.receive_data(Features().encode(), now=1.0)  # the last byte received at 1.0
    server.next_event()
    assert server.next_deadline() == 6.0
    server.handle_timer(now=5.9)
    server.handle_timer(now=6.0)
    with pytest.raises(RemoteLimitExceeded) as exc:
        server.next_event()
    assert exc.value.field == "(idle)"
