"""Seastar RPC Sans-IO machines (specs/seastar-rpc/README.md §1-§3, §5, §7)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from support.seastar_machines import events, pair

from refwire.errors import LocalProtocolError, RemoteProtocolError
from refwire.seastar_rpc import (
    NEGOTIATION_TIMED_OUT,
    UNMEASURED,
    Accept,
    Call,
    CallFailed,
    CallReceived,
    CallTimedOut,
    ClientConnection,
    ConnectionClosed,
    Features,
    Negotiated,
    NegotiationRequested,
    NoOp,
    Reply,
    Request,
    Respond,
    RespondError,
    Response,
    ServerConnection,
    State,
    StrayReply,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
)
from refwire.seastar_rpc.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

u32 = struct.Struct("<I").pack


def test_calls_before_negotiation_are_queued_and_sent_with_time_left_then() -> None:
    client = ClientConnection()
    server = ServerConnection()
    client.initiate(now=0.0)
    offer = client.data_to_send()
    a = client.call(1, b"x", now=0.0, timeout=1.0)
    b = client.call(2, b"y", now=0.0, timeout=0.2)  # expires while queued: never sent
    c = client.call(3, b"z", now=0.0)
    assert (a, b, c) == (1, 2, 3)
    assert client.data_to_send() == b""  # never pipelined before the reply (§2.2)
    server.receive_data(offer, now=0.0)
    events(server)
    server.accept(connection_id=7 << 16, now=0.5)
    client.receive_data(server.data_to_send(), now=0.5)
    assert isinstance(events(client)[0], Negotiated)
    server.receive_data(client.data_to_send(), now=0.5)
    got = events(server)
    assert [(e.verb, e.msg_id, e.timeout_ms) for e in got if isinstance(e, CallReceived)] == [(1, 1, 500), (3, 3, 0)]
    client.handle_timer(now=0.5)
    assert events(client) == [CallTimedOut(2)]


def test_msg_ids_grow_by_one_including_one_way_calls() -> None:
    client, _ = pair()
    assert client.call(1, now=0.0, one_way=True) == 1
    assert client.call(1, now=0.0) == 2
    assert client.pending == (2,)


def test_replies_any_order_exceptions_and_stray_replies() -> None:
    client, server = pair(handler_duration=True)
    ids = [client.call(9, bytes([i]), now=0.0, timeout=5.0) for i in range(3)]
    server.receive_data(client.data_to_send(), now=0.0)
    calls = [e for e in events(server) if isinstance(e, CallReceived)]
    server.respond(calls[2], b"c", now=0.1, handler_duration=17)
    server.respond_error(calls[0], UserError(b"boom"), now=0.1)
    server.respond_unknown_verb(calls[1], now=0.1)
    out = server.data_to_send() + Response(99, b"?", 0).encode(with_duration=True)  # an id this client never issued
    client.receive_data(out, now=0.1)
    assert events(client) == [
        Reply(ids[2], b"c", 17),
        CallFailed(ids[0], UserError(b"boom"), UNMEASURED),
        CallFailed(ids[1], UnknownVerb(9), UNMEASURED),
        StrayReply(99, False, None),
    ]


def test_timeout_then_late_reply_is_stray_and_known() -> None:
    client, server = pair()
    mid = client.call(5, b"", now=0.0, timeout=0.1)
    assert client.next_deadline() == pytest.approx(0.1)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    client.handle_timer(now=0.1)
    assert events(client) == [CallTimedOut(mid)]
    server.respond(call, b"late", now=0.09)
    client.receive_data(server.data_to_send(), now=0.2)
    assert events(client) == [StrayReply(mid, True, None)]


def test_server_drops_a_reply_past_the_propagated_deadline() -> None:
    client, server = pair()
    client.call(5, b"", now=0.0, timeout=0.1)
    server.receive_data(client.data_to_send(), now=10.0)
    (call,) = events(server)
    assert call.deadline == pytest.approx(10.1)
    assert not server.reply_wanted(call, now=10.2)
    server.respond(call, b"x", now=10.2)
    assert server.data_to_send() == b""
    server.respond_error(call, UserError(b"x"), now=10.2)
    assert server.data_to_send() == b""
    assert server.reply_wanted(call, now=10.05)
    server.respond(call, b"x", now=10.05)
    assert server.data_to_send() != b""


def test_server_answers_whatever_id_it_gets() -> None:
    _, server = pair(handler_duration=False)
    raw = b"".join(Request(1, mid, b"", 0).encode(with_timeout=True) for mid in (0, -9, 5, 5))
    server.receive_data(raw, now=0.0)
    calls = events(server)
    for c in calls:
        server.respond(c, b"", now=0.0)
    replies = server.data_to_send()
    assert [struct.unpack_from("<q", replies, 12 * i)[0] for i in range(4)] == [0, -9, 5, 5]


def test_handler_duration_saturates() -> None:
    client, server = pair()
    client.call(1, b"", now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    (call,) = events(server)
    server.respond(call, b"", now=0.0, handler_duration=2**40)
    out = server.data_to_send()
    assert struct.unpack_from("<I", out, 12)[0] == UNMEASURED


def test_client_refuses_a_compressor_it_did_not_offer() -> None:
    client = ClientConnection(compressors=("LZ4",))
    client.initiate(now=0.0)
    client.receive_data(Features(compress="LZ4_FRAGMENTED").encode(), now=0.0)
    with pytest.raises(RemoteProtocolError, match="responded with compression LZ4_FRAGMENTED - unsupported"):
        events(client)
    assert client.state is State.ERROR


def test_client_ignores_unknown_reply_features_and_takes_duration_from_reply() -> None:
    client = ClientConnection(handler_duration=False)
    client.initiate(now=0.0)
    client.receive_data(Features(handler_duration=True, unknown=((77, b"x"),)).encode(), now=0.0)
    (neg,) = events(client)
    assert isinstance(neg, Negotiated) and neg.connection_id is None
    client.data_to_send()  # the offer
    client.call(1, b"", now=0.0)
    assert len(client.data_to_send()) == 20  # TIMEOUT not echoed: 20-byte header


def test_server_reject_sends_nothing() -> None:
    server = ServerConnection()
    server.receive_data(Features(isolation=b"bad").encode(), now=0.0)
    events(server)
    server.reject("unknown cookie", now=0.0)
    assert events(server) == [ConnectionClosed(False, "unknown cookie")]
    assert server.state is State.CLOSED
    assert server.data_to_send() == b""


def test_unknown_compressor_offer_means_no_compression() -> None:
    server = ServerConnection()
    server.receive_data(Features(compress="ZSTD").encode(), now=0.0)
    events(server)
    server.accept(now=0.0)
    assert Features.from_negotiation(_neg(server.data_to_send())).compress is None


def _neg(raw: bytes) -> Any:
    from refwire.seastar_rpc import FrameDecoder

    d = FrameDecoder("response")
    d.feed(raw)
    return d.next_frame()


def test_stream_connection_both_directions_and_eos() -> None:
    client, server = pair(compressors=("LZ4",), stream_parent=0x10000)
    assert client.state is State.STREAMING and server.state is State.STREAMING
    assert client.offer.timeout is False  # never on stream connections (§2.6)
    client.send_stream(b"a", now=0.0)
    client.send_stream_end(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    assert events(server) == [StreamMessage(b"a"), StreamEnd()]
    with pytest.raises(LocalProtocolError):
        client.send_stream(b"after eos", now=0.0)
    server.send(StreamMessage(b"b"), now=0.0)  # = send_stream(b"b", now=...)
    server.send(StreamEnd(), now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    assert events(client) == [StreamMessage(b"b"), StreamEnd()]
    assert client.stream_done and server.stream_done
    client.receive_data(server._wrap(StreamMessage(b"more").encode()), now=0.0)
    with pytest.raises(RemoteProtocolError, match="after end-of-stream"):
        events(client)


def test_eof_inside_the_negotiation_reply_is_an_error_and_fails_pending_calls() -> None:
    client = ClientConnection()
    client.initiate(now=0.0)
    client.call(1, b"", now=0.0)
    client.receive_data(b"SSTARRPC\x10\x00", now=0.0)
    client.receive_data(b"", now=0.0)
    with pytest.raises(RemoteProtocolError, match="unexpected eof during negotiation frame"):
        events(client)


def test_reset_reports_pending_calls() -> None:
    client, _ = pair()
    client.call(1, b"", now=0.0)
    client.call(1, b"", now=0.0, one_way=True)
    client.connection_lost(now=0.0)
    assert events(client) == [ConnectionClosed(False, "reset", (1,))]


@pytest.mark.parametrize("role", ["server", "client"])
def test_every_unlisted_state_input_pair_is_refused(role: str) -> None:
    table = SERVER_TRANSITIONS if role == "server" else CLIENT_TRANSITIONS
    inputs = {i for _, i in table}
    m: Any = ServerConnection() if role == "server" else ClientConnection()
    for state in State:
        for inp in inputs:
            m.state = state
            if (state, inp) in table:
                m._transition(inp)
                assert m.state is table[(state, inp)]
            else:
                with pytest.raises(LocalProtocolError):
                    m._transition(inp)


# --------------------------------------------------------------------------- the contract


def test_send_takes_events_and_the_verbs_are_thin_helpers() -> None:
    """``send(event, now=...)`` is the one way out; the verb helpers queue the same bytes."""
    a, sa = pair(compressors=("LZ4",))
    b, sb = pair(compressors=("LZ4",))
    assert a.call(2, b"x", now=0.0, timeout=1.0) == 1
    assert b.next_msg_id == 1
    b.send(Call(2, b"x", 1.0), now=0.0)
    assert b.pending == (1,) and b.next_msg_id == 2
    wire = a.data_to_send()
    assert wire == b.data_to_send() != b""
    sa.receive_data(wire, now=0.0)
    (call,) = events(sa)
    assert isinstance(call, CallReceived)
    sa.respond(call, b"y", now=0.0, handler_duration=5)
    sb.send(Respond(call, b"y", 5), now=0.0)
    assert sa.data_to_send() == sb.data_to_send() != b""
    sa.respond_error(call, UserError(b"no"), now=0.0)
    sb.send(RespondError(call, UserError(b"no")), now=0.0)
    assert sa.data_to_send() == sb.data_to_send() != b""
    sa.send_noop(now=0.0)
    sb.send(NoOp(), now=0.0)
    assert sa.data_to_send() == sb.data_to_send() == b"\x00\x00\x00\x00"
    with pytest.raises(TypeError):
        sa.send(Call(1), now=0.0)
    with pytest.raises(TypeError):
        a.send(Accept(), now=0.0)


def test_every_clock_is_required() -> None:
    client, server = pair()
    with pytest.raises(TypeError):
        client.receive_data(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        client.handle_timer(0.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        client.call(1, b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        server.connection_lost()  # type: ignore[call-arg]


def test_client_send_failed_fails_the_calls_in_flight() -> None:
    client, _ = pair()
    client.call(1, b"", now=0.0, timeout=5.0)
    client.call(1, b"", now=0.0, one_way=True)
    client.call(1, b"", now=0.0)
    client.send_failed(now=1.0)
    assert client.data_to_send() == b""  # the unwritten calls are dropped with the connection
    assert events(client) == [ConnectionClosed(False, "write failed", (1, 3))]
    assert client.state is State.CLOSED and client.next_deadline() is None
    assert ("ready", "reset", "closed") in client.transitions_seen


def test_server_send_failed_loses_the_unwritten_replies() -> None:
    client, server = pair()
    client.call(1, b"", now=0.0)
    client.call(1, b"", now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    first, second = events(server)
    server.respond(first, b"a", now=0.0)
    server.send_failed(now=0.0)
    assert server.data_to_send() == b""
    assert events(server) == [ConnectionClosed(False, "write failed")]
    assert not server.reply_wanted(second, now=0.0)
    server.respond(second, b"b", now=0.0)
    assert server.data_to_send() == b"" and server.state is State.CLOSED


def test_client_gives_up_on_a_missing_negotiation_reply() -> None:
    client = ClientConnection(negotiation_timeout=2.0)
    assert client.next_deadline() is None  # armed when the offer is sent
    client.initiate(now=1.0)
    a = client.call(1, b"", now=1.0, timeout=0.5)
    b = client.call(1, b"", now=1.0)
    assert client.next_deadline() == pytest.approx(1.5)
    client.handle_timer(now=1.5)
    assert events(client) == [CallTimedOut(a)]
    assert client.next_deadline() == pytest.approx(3.0)
    client.handle_timer(now=2.9)  # early: harmless
    assert events(client) == [] and client.state.value == "negotiating"
    client.handle_timer(now=3.0)
    assert events(client) == [ConnectionClosed(False, NEGOTIATION_TIMED_OUT, (b,))]
    assert client.state is State.CLOSED and client.next_deadline() is None
    assert ("negotiating", "timeout", "closed") in client.transitions_seen


def test_negotiated_in_time_disarms_the_negotiation_timer() -> None:
    client, server = pair(negotiation_timeout=2.0)
    assert client.next_deadline() is None
    client.handle_timer(now=100.0)
    assert events(client) == [] and client.state is State.READY
    assert server.next_deadline() is None


def test_server_gives_up_on_a_missing_offer() -> None:
    server = ServerConnection(negotiation_deadline=30.0)
    assert server.next_deadline() == 30.0
    server.receive_data(b"SSTARRPC", now=10.0)  # part of an offer does not count
    assert events(server) == []
    server.handle_timer(now=30.0)
    assert events(server) == [ConnectionClosed(False, NEGOTIATION_TIMED_OUT)]
    assert server.state is State.CLOSED and server.next_deadline() is None and server.data_to_send() == b""
    late = ServerConnection(negotiation_deadline=30.0)
    late.receive_data(Features().encode(), now=29.0)
    assert isinstance(events(late)[0], NegotiationRequested)
    assert late.next_deadline() is None
    late.handle_timer(now=31.0)
    assert late.state is State.DECIDING


def test_the_package_exports_the_core_only() -> None:
    """``import refwire.seastar_rpc`` loads no trio, simulator or pipeline: the drivers are
    imported from its ``client`` / ``server`` modules explicitly."""
    import subprocess
    import sys

    code = (
        "import sys, refwire.seastar_rpc as p; "
        "bad = [m for m in sys.modules if m == 'trio' or m.startswith(('refwire.sim', 'refwire.pipeline'))]; "
        "assert not bad, bad; "
        "assert all(hasattr(p, name) for name in p.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
