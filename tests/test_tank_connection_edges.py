"""TANK machines at their edges: the exact close events and reasons, timers
(idle, keepalive, frame) with the time each call passes, the limits handed to
the codec at the line and one past it, and the exact location (field, frame,
stream offset) of every error the client raises about a broker's answer."""

from __future__ import annotations

import pytest
from support.tank_machines import FRAMES, consume

from refwire.errors import LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.tank import (
    NEED_DATA,
    BrokerConnection,
    ClientConnection,
    Connected,
    ConnectionClosed,
    CreateTopicRequest,
    IdleTimeout,
    Message,
    StatusRequest,
    StatusResponse,
    encode_bundle,
)
from refwire.tank.bundles import ChunkResult
from refwire.tank.connection import PING_FRAME, State
from refwire.tank.events import ConsumeResult, PartitionData
from refwire.tank.frames import ConsumePartition, ConsumeRequest, ConsumeTopic
from refwire.tank.responses import ConsumePartitionResult, ConsumeResponse, ConsumeTopicResult, decode_response
from refwire.wire import Limits

STATUS = FRAMES["status"]  # StatusRequest(1), 9 bytes
STATUS_RESPONSE = FRAMES["status-response"]  # answers request 1


def drain(m: ClientConnection | BrokerConnection) -> list[object]:
    out: list[object] = []
    while (ev := m.next_event()) is not NEED_DATA:
        out.append(ev)
    return out


def remote_error(m: ClientConnection | BrokerConnection) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as ei:
        drain(m)
    return ei.value


# -- the broker -------------------------------------------------------------------


def test_broker_defaults_idle_16s_from_construction_and_greets() -> None:
    b = BrokerConnection(now=10.0)
    assert b.next_deadline() == 26.0
    assert b.long_polls == 0 and b.frame_timeout is None
    assert b.data_to_send() == PING_FRAME == b"\x03\x00\x00\x00\x00"
    assert b.data_to_send() == b""


def test_broker_idle_deadline_follows_the_latest_of_receive_and_send() -> None:
    b = BrokerConnection(now=0.0, idle_timeout=4.0)
    b.receive_data(STATUS, now=1.0)
    assert drain(b) == [StatusRequest(1)]
    assert b.next_deadline() == 5.0
    b.send(StatusResponse(1, 0, 0), now=3.0)  # a slow answer resets the idle clock
    assert b.next_deadline() == 7.0
    b.handle_timer(now=6.9)
    assert drain(b) == []
    b.handle_timer(now=7.5)
    assert drain(b) == [IdleTimeout(4.5)] and b.state is State.CLOSED
    assert b.next_deadline() is None


def test_broker_queues_frames_in_order_and_joins_them_once() -> None:
    b = BrokerConnection(now=0.0)
    r1, r2 = StatusResponse(1, 2, 3), StatusResponse(2, 4, 5)
    b.send(r1, now=0.0)
    b.send(r2, now=0.0)
    assert b.data_to_send() == PING_FRAME + r1.encode() + r2.encode()
    b.send(r1, now=0.0)
    assert b.data_to_send() == r1.encode()
    b.send(r2, now=0.0)
    b.send(r1, now=0.0)
    assert b.data_to_send() == r2.encode() + r1.encode()
    assert b.data_to_send() == b""


def test_broker_frame_timeout_runs_from_the_call_that_saw_the_partial_frame() -> None:
    b = BrokerConnection(now=0.0, frame_timeout=3.0)
    b.receive_data(PING_FRAME + STATUS[:3], now=5.0)
    assert drain(b) == []
    assert b.next_deadline() == 8.0  # the frame timer, before the idle one (21.0)
    b.handle_timer(now=7.9)
    assert drain(b) == []
    b.handle_timer(now=8.0)
    err = remote_error(b)
    assert isinstance(err, RemoteLimitExceeded)
    assert (err.protocol, err.field, err.offset) == ("tank", "(timeout)", 5)
    assert "3 bytes of it received" in err.reason and b.state is State.ERROR
    assert b.next_deadline() is None


@pytest.mark.parametrize("call", ["send", "handle_timer"])
def test_broker_frame_timer_starts_at_the_latest_now(call: str) -> None:
    """The partial frame is noticed by next_event: its clock is the latest call's ``now``."""
    b = BrokerConnection(now=0.0, frame_timeout=3.0)
    b.receive_data(STATUS[:3], now=5.0)
    if call == "send":
        b.send(StatusResponse(1, 0, 0), now=6.0)
    else:
        b.handle_timer(now=6.0)
    assert drain(b) == []
    assert b.next_deadline() == 9.0


def test_broker_no_frame_timer_between_frames() -> None:
    b = BrokerConnection(now=0.0, frame_timeout=3.0, idle_timeout=None)
    b.receive_data(STATUS, now=1.0)
    assert drain(b) == [StatusRequest(1)]
    assert b.next_deadline() is None


def test_broker_frame_size_limit_at_the_line_and_one_past() -> None:
    limits = Limits(max_frame_size=len(STATUS))
    b = BrokerConnection(now=0.0, limits=limits)
    b.receive_data(STATUS, now=0.0)
    assert drain(b) == [StatusRequest(1)]
    b = BrokerConnection(now=0.0, limits=Limits(max_frame_size=len(STATUS) - 1))
    b.receive_data(PING_FRAME + STATUS, now=0.0)
    err = remote_error(b)
    assert isinstance(err, RemoteLimitExceeded) and (err.field, err.offset) == ("payloadLen", 6)


def test_broker_decodes_with_its_limits_and_stream_offsets() -> None:
    limits = Limits(max_string_size=1)  # config may hold 256 bytes
    b = BrokerConnection(now=0.0, limits=limits)
    ok = CreateTopicRequest(1, "t", 1, b"c" * 256)
    b.receive_data(ok.encode(), now=0.0)
    assert drain(b) == [ok]
    b = BrokerConnection(now=0.0, limits=limits)
    b.receive_data(PING_FRAME + CreateTopicRequest(1, "t", 1, b"c" * 257).encode(), now=0.0)
    err = remote_error(b)
    assert isinstance(err, RemoteLimitExceeded) and err.field == "config"
    # payload offsets are stream offsets: a trailing byte after the one Status field
    b = BrokerConnection(now=0.0)
    b.receive_data(PING_FRAME + b"\x0a\x05\x00\x00\x00\x01\x00\x00\x00\xff", now=0.0)
    err = remote_error(b)
    assert err.offset == 5 + 5 + 4 and err.protocol == "tank"


def test_broker_consume_peer_is_named() -> None:
    b = BrokerConnection(now=0.0)
    b.receive_data(b"\x09\x00\x00\x00\x00", now=0.0)
    err = remote_error(b)
    assert err.reason == "ConsumePeer is broker-to-broker (cluster mode); not supported 0x09"
    assert (err.field, err.offset) == ("msgId", 0)


def test_broker_close_events_exactly() -> None:
    b = BrokerConnection(now=0.0)
    b.receive_data(STATUS, now=0.0)
    b.receive_data(b"", now=1.0)
    assert drain(b) == [StatusRequest(1), ConnectionClosed(True, "")]
    assert b.next_event() is NEED_DATA and b.state is State.CLOSED
    b = BrokerConnection(now=0.0)
    b.receive_data(STATUS[:4], now=0.0)
    b.receive_data(b"", now=1.0)
    assert drain(b) == [ConnectionClosed(False, "EOF inside a frame")]
    b = BrokerConnection(now=0.0)
    b.connection_lost(now=1.0)
    assert drain(b) == [ConnectionClosed(False, "connection reset")]
    b = BrokerConnection(now=0.0)
    b.send_failed(now=1.0)
    assert drain(b) == [ConnectionClosed(False, "send failed")]
    assert b.next_event() is NEED_DATA


def test_broker_delivers_requests_received_before_the_end() -> None:
    """Requests buffered when the connection ends are still delivered, then the
    close (the broker moved to CLOSED at once; the frames before it count)."""
    b = BrokerConnection(now=0.0)
    b.receive_data(PING_FRAME + STATUS, now=0.0)
    b.connection_lost(now=1.0)
    assert drain(b) == [StatusRequest(1), ConnectionClosed(False, "connection reset")]
    assert ("open", "reset", "closed") in b.transitions_seen


def test_broker_after_idle_close_ignores_input_and_the_end() -> None:
    b = BrokerConnection(now=0.0, idle_timeout=1.0)
    b.handle_timer(now=1.0)
    assert drain(b) == [IdleTimeout(1.0)]
    b.receive_data(STATUS, now=2.0)  # ignored once closed
    b.connection_lost(now=3.0)
    b.receive_data(b"", now=3.0)
    assert drain(b) == [] and b.state is State.CLOSED


# -- the client -------------------------------------------------------------------


def test_client_keepalive_from_construction_then_each_ping() -> None:
    c = ClientConnection(now=10.0)
    assert c.next_deadline() == 15.0
    c.handle_timer(now=15.0)
    assert c.data_to_send() == PING_FRAME and c.pings_sent == 1
    assert c.next_deadline() == 20.0
    c.handle_timer(now=21.0)
    assert c.pings_sent == 2 and c.next_deadline() == 26.0
    assert ClientConnection(now=0.0, ping_interval=None).next_deadline() is None


def test_client_request_ids_wrap_past_zero() -> None:
    c = ClientConnection(now=0.0, first_request_id=0xFFFFFFFF)
    assert [c.new_request_id() for _ in range(3)] == [0xFFFFFFFF, 1, 2]


def test_client_send_refusals_name_themselves() -> None:
    c = ClientConnection(now=0.0)
    c.send(StatusRequest(7), now=0.0)
    with pytest.raises(LocalProtocolError) as ei:
        c.send(StatusRequest(7), now=0.0)
    e = ei.value
    assert (e.reason, e.protocol, e.field) == ("request id 7 is already outstanding", "tank", "requestId")
    c.connection_lost(now=1.0)
    with pytest.raises(LocalProtocolError) as ei:
        c.send(StatusRequest(8), now=1.0)
    assert (ei.value.reason, ei.value.protocol) == ("cannot send in state closed", "tank")


def test_client_eof_right_after_whole_frames_is_clean() -> None:
    """An answer and the EOF in one read: the EOF is at a frame boundary (clean),
    though the answer was still undecoded when the EOF arrived."""
    c = ClientConnection(now=0.0)
    c.send(StatusRequest(1), now=0.0)
    c.receive_data(PING_FRAME + STATUS_RESPONSE, now=0.0)
    c.receive_data(b"", now=0.0)
    evs = drain(c)
    assert [type(e) for e in evs] == [Connected, StatusResponse, ConnectionClosed]
    assert evs[-1] == ConnectionClosed(True, "")


@pytest.mark.parametrize(
    ("end", "what"),
    [
        ("eof", "connection closed"),
        ("eof-inside", "EOF inside a frame"),
        ("reset", "connection reset"),
        ("send_failed", "send failed"),
    ],
)
def test_client_close_names_unanswered_with_the_cause(end: str, what: str) -> None:
    c = ClientConnection(now=0.0)
    c.send(StatusRequest(3), now=0.0)
    c.send(StatusRequest(4), now=0.0)
    if end == "eof":
        c.receive_data(b"", now=1.0)
    elif end == "eof-inside":
        c.receive_data(b"\x03", now=1.0)
        c.receive_data(b"", now=1.0)
    elif end == "reset":
        c.connection_lost(now=1.0)
    else:
        c.send_failed(now=1.0)
    reason = f"{what}: 2 request(s) in flight have no answer (outcome unknown)"
    assert drain(c) == [ConnectionClosed(end == "eof", reason, (3, 4))]


def test_client_answer_errors_locate_the_request_id() -> None:
    c = ClientConnection(now=0.0)
    c.receive_data(PING_FRAME + STATUS_RESPONSE, now=0.0)
    assert c.next_event() == Connected()
    e = remote_error(c)
    assert (e.reason, e.protocol, e.frame, e.field, e.offset) == (
        "response to unknown request id 1",
        "tank",
        "0x0a",
        "requestId",
        10,
    )
    c = ClientConnection(now=0.0)
    c.send(consume(1, "events", 0, 0), now=0.0)
    c.receive_data(PING_FRAME + STATUS_RESPONSE, now=0.0)
    assert c.next_event() == Connected()
    e = remote_error(c)
    assert (e.reason, e.protocol, e.frame, e.field, e.offset) == (
        "StatusResponse answers a ConsumeRequest",
        "tank",
        "0x0a",
        "requestId",
        10,
    )


# -- the client's consume results ----------------------------------------------------

M1 = Message(b"one", 1)
M2 = Message(b"two", 2)


def chunk(*bundles: bytes) -> bytes:
    """A consume chunk: each bundle behind its varint length (all short here)."""
    return b"".join(bytes([len(b)]) + b for b in bundles)


def answer(c: ClientConnection, resp: ConsumeResponse, *, after: bytes = PING_FRAME) -> object:
    c.receive_data(after + resp.encode(), now=0.0)
    assert c.next_event() == Connected()
    return c.next_event()


def test_client_consume_result_every_field() -> None:
    c = ClientConnection(now=0.0)
    req = ConsumeRequest(
        5,
        (
            ConsumeTopic("nope", (ConsumePartition(0, 0, 100),)),
            ConsumeTopic("ev", (ConsumePartition(0, 1, 100), ConsumePartition(2, 9, 100), ConsumePartition(3, 0, 100))),
        ),
    )
    c.send(req, now=0.0)
    resp = ConsumeResponse(
        5,
        (
            ConsumeTopicResult("nope", (), True, 1),  # an unknown topic first: the next topic still counts
            ConsumeTopicResult(
                "ev",
                (
                    ConsumePartitionResult(0, 0, 1, 2, chunk(encode_bundle([M1, M2], compress=False))),
                    ConsumePartitionResult(2, 0x01, 0, 7, b"", 5),  # boundary: firstAvailSeqNum, no chunk walked
                    ConsumePartitionResult(3, 0xFE, None, 8, chunk(encode_bundle([Message(b"s", 3, seq=4)], sparse=True))),
                ),
                False,
                3,
            ),
        ),
    )
    res = answer(c, resp)
    assert isinstance(res, ConsumeResult)
    assert (res.request_id, res.unknown_topics) == (5, ("nope",))
    assert res.response == decode_response(0x02, resp.encode()[5:])
    first, boundary, sparse = res.partitions
    assert first == PartitionData(
        "ev", 0, 0, 2, 1, ChunkResult((Message(b"one", 1, None, 1), Message(b"two", 2, None, 2)), 3), None
    )
    assert boundary == PartitionData("ev", 2, 0x01, 7, 9, None, 5)
    assert sparse.chunk is not None and sparse.messages == (Message(b"s", 3, None, 4),)
    assert (sparse.topic, sparse.partition, sparse.error, sparse.hwmark, sparse.requested_seq) == ("ev", 3, 0xFE, 8, 0)


def test_client_consume_partition_not_requested() -> None:
    c = ClientConnection(now=0.0)
    c.send(consume(1, "events", 0, 0), now=0.0)
    resp = ConsumeResponse(1, (ConsumeTopicResult("events", (ConsumePartitionResult(3, 0, 0, 0),)),))
    c.receive_data(PING_FRAME + resp.encode(), now=0.0)
    assert c.next_event() == Connected()
    e = remote_error(c)
    assert (e.reason, e.protocol, e.frame, e.field, e.offset) == (
        "response names events/3, which was not requested",
        "tank",
        "Consume",
        "partitionId",
        5,  # the frame's offset
    )


def test_client_chunk_errors_are_located_in_the_stream() -> None:
    """A malformed bundle in the second partition's chunk: the offset is that
    byte's stream offset (the chunks are the frame's tail, in order)."""
    c = ClientConnection(now=0.0)
    req = ConsumeRequest(1, (ConsumeTopic("events", (ConsumePartition(0, 1, 100), ConsumePartition(1, 1, 100))),))
    c.send(req, now=0.0)
    good = chunk(encode_bundle([M1], compress=False))
    resp = ConsumeResponse(
        1,
        (ConsumeTopicResult("events", (ConsumePartitionResult(0, 0, 1, 1, good), ConsumePartitionResult(1, 0, 1, 1, b"\x00"))),),
    )
    frame = resp.encode()
    c.receive_data(PING_FRAME + frame, now=0.0)
    assert c.next_event() == Connected()
    e = remote_error(c)
    assert e.field == "bundleLen" and e.offset == 5 + len(frame) - 1  # the empty bundle's length byte: the last byte


def test_client_chunk_walk_uses_its_limits() -> None:
    """A compressed bundle inflating to 330 bytes: max_decompressed_size at 330
    passes, at 329 the Snappy length is refused."""
    bundle = encode_bundle([Message(b"a" * 100, i) for i in range(1, 4)], compress=True)
    resp = ConsumeResponse(1, (ConsumeTopicResult("events", (ConsumePartitionResult(0, 0, 1, 3, chunk(bundle)),)),))
    for limit in (330, 329):
        c = ClientConnection(now=0.0, limits=Limits(max_decompressed_size=limit))
        c.send(consume(1, "events", 0, 1), now=0.0)
        c.receive_data(resp.encode(), now=0.0)
        if limit == 330:
            (res,) = drain(c)
            assert isinstance(res, ConsumeResult) and len(res.partitions[0].messages) == 3
        else:
            err = remote_error(c)
            assert isinstance(err, RemoteLimitExceeded) and err.field == "snappyLength"


def test_replica_id_and_response_offsets_are_exact() -> None:
    b = BrokerConnection(now=0.0)
    b.receive_data(b"\x04\x02\x00\x00\x00\x01\x00", now=0.0)
    err = remote_error(b)
    assert err.reason == "obsolete ReplicaID (the real broker closes the connection) 0x04"
    c = ClientConnection(now=0.0)
    c.send(StatusRequest(1), now=0.0)
    c.receive_data(PING_FRAME + b"\x0a\x02\x00\x00\x00\x01\x00", now=0.0)  # a requestId cut short
    assert c.next_event() == Connected()
    err = remote_error(c)
    assert (err.field, err.offset) == ("requestId", 10)
