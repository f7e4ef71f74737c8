"""TANK Sans-IO machines: the broker service's semantics (specs/tank/README.md §6),
reproducing the captured responses byte for byte where our broker follows the
real one, and the client/broker connections (every table transition)."""

from __future__ import annotations

import attrs
import pytest
from support.tank_machines import FRAMES, consume
from tank_vectors import unhex

from refwire.errors import LocalProtocolError, RemoteProtocolError
from refwire.tank import (
    NEED_DATA,
    BrokerConnection,
    BrokerService,
    ClientConnection,
    Connected,
    ConnectionClosed,
    ConsumeResult,
    CreateTopicRequest,
    DiscoverPartitionsRequest,
    IdleTimeout,
    MemoryStorage,
    Message,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
    StatusRequest,
    StatusResponse,
    encode_bundle,
)
from refwire.tank.connection import BROKER_TRANSITIONS, CLIENT_TRANSITIONS, State
from refwire.tank.service import normalize_max_wait

B91 = unhex("04 00 1d52efffa1010000 05 68656c6c6f")
B92 = unhex("0c 00 2252efffa1010000 05616c706861 02 0462657461 02 0567616d6d61")
B93 = unhex("08 01 2c52efffa1010000 026b31 027631 01 2d52efffa1010000 026b32 027632")


def produce(rid: int, topic: str, pid: int, bundle: bytes, base: int | None = None) -> ProduceRequest:
    return ProduceRequest(rid, (ProduceTopic(topic, (ProducePartition(pid, bundle, base),)),), base is not None)


@pytest.fixture
def service() -> BrokerService:
    c = BrokerService(MemoryStorage())
    assert c.handle(1, CreateTopicRequest(1, "events", 1), now=0)[0][1].encode() == FRAMES["create-topic-response"]
    for i, b in enumerate((B91, B92, B93)):
        out = c.handle(1, produce(1, "events", 0, b), now=0)
        assert out[-1][1].encode() == FRAMES["produce-1-message-response"], i
    return c


def test_service_reproduces_captures(service: BrokerService) -> None:
    ((_, r),) = service.handle(1, consume(1, "events", 0, 0), now=0)
    assert r.encode() == FRAMES["consume-response-3-bundles"]
    ((_, r),) = service.handle(1, consume(2, "events", 0, 7), now=0)
    assert r.encode() == FRAMES["consume-at-eof-response"]
    ((_, r),) = service.handle(1, CreateTopicRequest(1, "events", 1), now=0)
    assert r.encode() == FRAMES["create-topic-response-exists"]
    ((_, r),) = service.handle(1, CreateTopicRequest(0x28, "_bad", 1), now=0)
    assert r.encode() == FRAMES["create-topic-response-invalid-name"]
    ((_, r),) = service.handle(1, DiscoverPartitionsRequest(1, "events"), now=0)
    assert r.encode()[: 5 + 4 + 7 + 2] == FRAMES["discover-partitions-response"][:18]
    ((_, r),) = service.handle(1, consume(12, "nope", 0, 0), now=0)
    assert r.topics[0].unknown


def test_service_whole_bundles_past_fetch_size_and_boundary(service: BrokerService) -> None:
    ((_, r),) = service.handle(1, consume(15, "events", 0, 1, fetch=20), now=0)
    p = r.topics[0].partitions[0]
    assert (p.base_seq, len(p.chunk)) == (1, 47)
    ((_, r),) = service.handle(1, consume(11, "events", 0, 100), now=0)
    p = r.topics[0].partitions[0]
    assert (p.error, p.hwmark, p.first_avail) == (1, 6, 1)
    ((_, r),) = service.handle(1, consume(3, "events", 0, 3), now=0)
    assert r.topics[0].partitions[0].base_seq == 2  # the bundle containing 3 starts at 2 (§9, capture 11)


def test_service_sparse_and_seqnum_rules(service: BrokerService) -> None:
    service.handle(1, CreateTopicRequest(2, "sparse", 2), now=0)
    sb = unhex("50 0a00000000000000 05 00 5f8befffa1010000 03733130 02 01 03733132 02 01 03733134 02 03733136")
    ((_, r),) = service.handle(1, produce(1, "sparse", 0, sb, 10), now=0)
    assert r.encode() == FRAMES["produce-with-seqnum-response"]
    ((_, r),) = service.handle(1, consume(1, "sparse", 0, 0), now=0)
    assert r.encode() == FRAMES["consume-response-sparse-0xfe"]
    ((_, r),) = service.handle(1, produce(0x1F, "sparse", 0, sb, 10), now=0)  # base <= hwmark
    assert r.encode() == FRAMES["produce-response-invalid-seqnums"]
    # Our choice (§7, quirk 7.8-2): a non-sparse 0x05 bundle may not open a gap.
    ((_, r),) = service.handle(1, produce(2, "sparse", 0, encode_bundle([Message(b"a")]), 100), now=0)
    assert r.results[0].error == 0x0A
    ((_, r),) = service.handle(1, produce(2, "sparse", 0, encode_bundle([Message(b"a")]), 17), now=0)
    assert r.results[0].error == 0
    # Our choice (§7, quirk 7.8-1): the EOF hwmark is the last assigned number (17), never less.
    ((_, r),) = service.handle(1, consume(2, "sparse", 0, 18), now=0)
    assert r.topics[0].partitions[0].hwmark == 17


def test_service_long_poll_wake_order_and_timeout(service: BrokerService) -> None:
    assert service.handle(7, consume(0x13, "events", 0, 7, wait=3000), now=0.0) == []
    assert service.next_deadline() == 3.072  # 3000 ms aligned up to 128 ms
    late = encode_bundle([Message(b"late", 0x18000000000)], compress=False)
    out = service.handle(1, produce(0x35, "events", 0, late), now=0.4)
    assert [c for c, _ in out] == [7, 1]  # the woken poll first (§9, capture 14)
    assert out[0][1].encode()[-16:] == FRAMES["consume-response-long-poll-woken"][-16:]
    assert service.handle(7, consume(0x12, "events", 0, 8, wait=500), now=1.0) == []
    assert service.handle_timer(now=1.5) == []
    ((_, r),) = service.handle_timer(now=1.536)
    p = r.topics[0].partitions[0]
    assert (p.error, p.base_seq, p.hwmark, p.chunk) == (0, 0, 7, b"")


def test_service_min_bytes_sums_entries(service: BrokerService) -> None:
    service.handle(7, consume(1, "events", 0, 7, wait=5000, min_bytes=100), now=0)
    b = encode_bundle([Message(b"x" * 30, 1)], compress=False)
    assert len(b) == 41
    assert [c for c, _ in service.handle(1, produce(2, "events", 0, b), now=0.3)] == [1]
    assert [c for c, _ in service.handle(1, produce(3, "events", 0, b), now=0.6)] == [1]
    out = service.handle(1, produce(4, "events", 0, b), now=0.9)
    assert [c for c, _ in out] == [7, 1]
    p = out[0][1].topics[0].partitions[0]
    assert (p.base_seq, p.hwmark, len(p.chunk)) == (7, 9, 126)


def test_service_refuses_bad_bundles_without_storing(service: BrokerService) -> None:
    bad = ProduceRequest(9, (ProduceTopic("events", (ProducePartition(0, B91), ProducePartition(0, b"\x00\x00"))),))
    with pytest.raises(LocalProtocolError) as ei:
        service.handle(1, bad, now=0)
    assert ei.value.field == "count"
    assert service.storage.topics["events"][0].last_assigned == 6


def test_normalize_max_wait() -> None:
    assert [normalize_max_wait(v) for v in (0, 1, 320, 500, 10**9)] == [0, 320, 320, 512, 3_600_000]


# --------------------------------------------------------------------------- connections


def test_client_connection_flow() -> None:
    c = ClientConnection(ping_interval=5.0, now=0.0)
    c.receive_data(b"\x03\x00\x00\x00", now=0.0)
    assert c.next_event() is NEED_DATA
    c.receive_data(b"\x00", now=0.0)
    assert isinstance(c.next_event(), Connected)
    req = ProduceRequest(
        c.new_request_id(),
        (
            ProduceTopic("nope", (ProducePartition(0, B91), ProducePartition(1, B91))),
            ProduceTopic("events", (ProducePartition(9, B91), ProducePartition(0, B91))),
        ),
    )
    c.send(req, now=0.0)
    assert c.data_to_send()[0] == 1
    cons = consume(c.new_request_id(), "events", 0, 0)
    c.send(cons, now=0.0)
    # The consume answer may come first; produce errors decode against the request's layout.
    body = FRAMES["consume-response-3-bundles"]
    c.receive_data(body[:9] + (2).to_bytes(4, "little") + body[13:], now=0.0)
    c.receive_data(FRAMES["produce-response-mixed-errors"][:5] + (1).to_bytes(4, "little") + b"\xff\x01\x00", now=0.0)
    evs = [c.next_event(), c.next_event()]
    assert isinstance(evs[0], ConsumeResult) and isinstance(evs[1], ProduceResponse)
    res = next(e for e in evs if isinstance(e, ProduceResponse))
    assert [r.error for r in res.results] == [0xFF, 0xFF, 0x01, 0x00]
    cr = next(e for e in evs if isinstance(e, ConsumeResult))
    assert [m.seq for m in cr.partitions[0].messages] == [1, 2, 3, 4, 5, 6]  # type: ignore[attr-defined]
    assert c.next_deadline() == 5.0
    c.data_to_send()
    c.handle_timer(now=4.9)
    assert c.data_to_send() == b"" and c.pings_sent == 0
    c.handle_timer(now=5.0)
    assert c.data_to_send() == b"\x03\x00\x00\x00\x00" and c.pings_sent == 1
    c.receive_data(b"", now=5.5)
    assert isinstance(c.next_event(), ConnectionClosed)
    assert c.state is State.CLOSED


def test_client_rejects_unknown_request_id_and_wrong_kind() -> None:
    c = ClientConnection(now=0.0)
    c.receive_data(FRAMES["status-response"], now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        c.next_event()
    assert ei.value.field == "requestId" and c.state is State.ERROR
    c = ClientConnection(now=0.0)
    c.send(consume(1, "events", 0, 0), now=0.0)
    c.receive_data(FRAMES["status-response"], now=0.0)
    with pytest.raises(RemoteProtocolError):
        c.next_event()


def test_broker_connection_flow_and_idle() -> None:
    b = BrokerConnection(idle_timeout=16.0, now=0.0)
    assert b.data_to_send() == b"\x03\x00\x00\x00\x00"
    b.receive_data(b"\x03\x00\x00\x00\x00" + FRAMES["status"], now=1.0)
    assert b.next_event() == StatusRequest(1)
    assert b.next_event() is NEED_DATA
    assert b.next_deadline() == 17.0
    b.long_polls = 1
    assert b.next_deadline() is None
    b.long_polls = 0
    b.handle_timer(now=16.9)  # early: harmless
    assert b.next_event() is NEED_DATA
    b.handle_timer(now=17.0)  # queues the event; returns nothing
    assert b.next_event() == IdleTimeout(16.0)
    assert b.state is State.CLOSED
    b = BrokerConnection(now=0.0)
    b.receive_data(b"\x04\x02\x00\x00\x00\x01\x00", now=0.0)
    with pytest.raises(RemoteProtocolError) as ei:
        b.next_event()
    assert "ReplicaID" in ei.value.reason


def test_now_is_required_everywhere() -> None:
    with pytest.raises(TypeError):
        ClientConnection()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        BrokerConnection()  # type: ignore[call-arg]
    c, b = ClientConnection(now=0.0), BrokerConnection(now=0.0)
    with pytest.raises(TypeError):
        c.receive_data(b"")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.send(StatusRequest(1))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.handle_timer()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        c.send_failed()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        b.receive_data(b"", 1.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        b.send(StatusResponse(1, 0, 0, 0, 0, 0))  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        b.handle_timer()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        b.connection_lost()  # type: ignore[call-arg]


def test_client_send_failed_fails_requests_in_flight() -> None:
    c = ClientConnection(now=0.0)
    c.receive_data(b"\x03\x00\x00\x00\x00", now=0.0)
    c.send(StatusRequest(c.new_request_id()), now=0.0)
    c.send(consume(c.new_request_id(), "events", 0, 0, wait=5000), now=0.0)
    c.data_to_send()
    c.send(StatusRequest(c.new_request_id()), now=0.1)  # queued, never written
    c.receive_data(FRAMES["status-response"], now=0.2)  # answers request 1
    c.send_failed(now=0.3)
    assert c.data_to_send() == b"" and c.state is State.CLOSED and c.next_deadline() is None
    assert isinstance(c.next_event(), Connected)
    assert isinstance(c.next_event(), StatusResponse)  # received before the failure: still delivered
    closed = c.next_event()
    assert isinstance(closed, ConnectionClosed) and not closed.clean
    assert closed.unanswered == (2, 3) and "send failed" in closed.reason and "outcome unknown" in closed.reason
    assert c.next_event() is NEED_DATA and c.pending == 0
    with pytest.raises(LocalProtocolError):
        c.send(StatusRequest(c.new_request_id()), now=0.4)
    assert ("connecting", "reset", "closed") in c.transitions_seen  # the close counts at once, before the frames buffered


def test_client_eof_names_unanswered_requests() -> None:
    c = ClientConnection(now=0.0)
    c.send(StatusRequest(7), now=0.0)
    c.receive_data(b"", now=1.0)
    closed = c.next_event()
    assert isinstance(closed, ConnectionClosed) and closed.clean and closed.unanswered == (7,)


def test_broker_send_failed_loses_unwritten_responses_only(service: BrokerService) -> None:
    b = BrokerConnection(now=0.0)
    b.receive_data(FRAMES["status"], now=0.0)
    req = b.next_event()
    assert isinstance(req, StatusRequest)
    for _, resp in service.handle(1, req, now=0.0):
        b.send(resp, now=0.0)
    b.send_failed(now=0.1)
    assert b.data_to_send() == b"" and b.state is State.CLOSED and b.next_deadline() is None
    closed = b.next_event()
    assert isinstance(closed, ConnectionClosed) and not closed.clean
    b.send(StatusResponse(2, 0, 0, 0, 0, 0), now=0.2)  # a long poll answered later: lost
    assert b.data_to_send() == b""
    assert service.storage.topics["events"][0].last_assigned == 6  # stored data stays stored


@pytest.mark.parametrize("table", [CLIENT_TRANSITIONS, BROKER_TRANSITIONS])
def test_transition_tables_cover_every_pair(table: dict[tuple[State, str], State]) -> None:
    inputs = {i for _, i in table}
    for state in State:
        for inp in inputs:
            nxt = table.get((state, inp))
            if state in (State.CLOSED, State.ERROR):
                assert nxt is None  # terminal
            elif inp in ("eof", "reset", "idle"):
                assert nxt in (State.CLOSED, None)


def test_long_polls_per_connection_are_bounded(service: BrokerService) -> None:
    """max_long_polls parked per connection: the next one answers the oldest at
    once (as its timeout would), at the line and one past it; other
    connections are not affected."""
    limited = BrokerService(service.storage, attrs.evolve(service.config, max_long_polls=3))
    for rid in range(3):
        assert limited.handle(7, consume(rid, "events", 0, 7, wait=60_000), now=0.0) == []
    assert limited.waits_of(7) == 3
    assert limited.handle(8, consume(50, "events", 0, 7, wait=60_000), now=0.0) == []  # another connection
    ((conn, r),) = limited.handle(7, consume(99, "events", 0, 7, wait=60_000), now=0.0)
    assert conn == 7 and r.request_id == 0  # the oldest, answered empty with the hwmark
    p = r.topics[0].partitions[0]
    assert (p.error, p.chunk, p.hwmark) == (0, b"", 6)
    assert limited.waits_of(7) == 3 and limited.waits_of(8) == 1
