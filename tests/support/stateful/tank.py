"""A hypothesis RuleBasedStateMachine pairing the TANK ClientConnection with a
BrokerConnection and the broker core behind it (specs/tank/README.md §3-§6).

The machines are joined by two in-memory byte pipes cut into hypothesis-chosen
pieces.  Rules produce bundles (to known partitions, an unknown partition, an
unknown topic), consume at any sequence number (immediate, and long polls
woken by a later produce or timed out by the core), discover partitions, let a
virtual clock run (the client's keepalive Pings, the broker's idle close, the
long polls' deadlines), and end the connection at any point (EOF from either
side, a reset, a failed write).  The storage outlives the connection: a new
pair reads what the old ones stored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import refwire.tank
from refwire.tank import (
    NEED_DATA,
    U64_MAX,
    BrokerConfig,
    BrokerConnection,
    ClientConnection,
    Connected,
    ConnectionClosed,
    ConsumePartition,
    ConsumeRequest,
    ConsumeResult,
    ConsumeTopic,
    DiscoverPartitionsRequest,
    DiscoverPartitionsResponse,
    IdleTimeout,
    MemoryStorage,
    Message,
    ProducePartition,
    ProduceRequest,
    ProduceResponse,
    ProduceTopic,
    State,
    encode_bundle,
)
from refwire.tank.connection import BROKER_TRANSITIONS, CLIENT_TRANSITIONS

from .wire import MachinePair, Pipe

#: the service behind the broker machine (``BrokerCore`` until the layout landing names it ``BrokerService``)
BROKER_SERVICE: Any = vars(refwire.tank).get("BrokerService") or vars(refwire.tank)["BrokerCore"]

TOPIC, PARTITIONS = "events", 2
ERR_UNKNOWN_PARTITION, ERR_UNKNOWN = 0x01, 0xFF  # produce errors (specs/tank/README.md §3)
PING_INTERVAL, IDLE_TIMEOUT = 5.0, 16.0
APP_CLOSED = ConnectionClosed(True, "the broker application closed the socket")

messages_st = st.lists(
    st.builds(
        Message,
        content=st.binary(max_size=60),
        ts=st.sampled_from([0, 1_700_000_000_000]),
        key=st.none() | st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=6,
)


class TankPair(MachinePair):
    ROLES = ("client", "broker")
    PUMP_ORDER = ("broker", "client")
    STATE = State
    TABLES = (CLIENT_TRANSITIONS, BROKER_TRANSITIONS)

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.storage = MemoryStorage()
        self.storage.create_topic(TOPIC, PARTITIONS)
        self.core = BROKER_SERVICE(self.storage, BrokerConfig(idle_timeout=IDLE_TIMEOUT))
        #: the model of the storage: (topic, partition) -> message contents by seq - 1
        self.log: dict[tuple[str, int], list[Message]] = {(TOPIC, p): [] for p in range(PARTITIONS)}
        self.cid = 0
        self.long_polls_answered = 0
        self.consumed = 0

    @initialize(compress=st.none() | st.booleans())
    def connect(self, compress: bool | None) -> None:
        self.compress = compress
        self.new_connection()

    def new_connection(self) -> None:
        self.cid += 1
        self.steps = 0
        self.client = ClientConnection(now=self.now, ping_interval=PING_INTERVAL)
        self.broker = BrokerConnection(now=self.now, idle_timeout=IDLE_TIMEOUT)
        self.c2s, self.s2c = Pipe(), Pipe()
        self.client_closed: ConnectionClosed | None = None
        self.broker_closed: ConnectionClosed | IdleTimeout | None = None
        self.connected = False
        #: requests the client sent and has no answer to: request id -> (request, what the answer must be)
        self.pending: dict[int, tuple[object, object]] = {}
        self.sent_ids: list[int] = []
        self.sent: dict[int, object] = {}  # request id -> request (ids restart with each connection)
        self.produced_bundles: dict[int, dict[tuple[str, int], list[Message]]] = {}
        self.answered: set[int] = set()
        self.delivered_ids: list[int] = []  # requests the broker handed to the core, in order
        self.handled: dict[int, object] = {}  # request id -> the expectation fixed when the core handled it
        self.states = {"client": [self.client.state], "broker": [self.broker.state]}
        self.collect()

    # -- plumbing -----------------------------------------------------------------
    def dispatch(self, outbox: Sequence[tuple[int, object]]) -> None:
        """What the broker driver does with the core's answers (responses to old connections are dropped)."""
        for cid, resp in outbox:
            if cid == self.cid and self.broker_closed is None:
                self.broker.send(resp, now=self.now)  # type: ignore[arg-type]
        self.broker.long_polls = self.core.waits_of(self.cid)

    def broker_gone(self) -> None:
        """The broker driver closes the socket: what it owes still leaves, then EOF; it reads nothing more."""
        self.core.drop_connection(self.cid)
        self.s2c.closing = True
        self.c2s.cut()

    def pump_broker(self) -> None:
        self.collect()
        while (ev := self.broker.next_event()) is not NEED_DATA:
            assert self.broker_closed is None, f"broker delivered {ev!r} after its connection ended"
            if isinstance(ev, ConnectionClosed | IdleTimeout):
                if isinstance(ev, IdleTimeout):
                    assert ev.idle_for >= IDLE_TIMEOUT and self.core.waits_of(self.cid) == 0
                self.collect()
                self.broker_closed = ev
                self.broker_gone()
                continue
            rid = ev.request_id  # type: ignore[union-attr]  # the broker machine swallows Pings
            assert rid in self.sent_ids and rid not in self.delivered_ids, f"request {rid} delivered twice or never sent"
            assert not self.delivered_ids or self.sent_ids.index(rid) > self.sent_ids.index(self.delivered_ids[-1])
            self.delivered_ids.append(rid)
            assert ev == self.sent[rid], "the broker decoded something other than what was sent"
            self.handled[rid] = self.expect_at_handle(ev)
            self.dispatch(self.core.handle(self.cid, ev, now=self.now))
        self.collect()

    def expect_at_handle(self, req: object) -> object:
        """The model's side of handling ``req``: store a produce, and fix what the answer must say."""
        if isinstance(req, ProduceRequest):
            errors = []
            for t in req.topics:
                for p in t.partitions:
                    key = (t.name, p.partition)
                    if t.name != TOPIC:
                        errors.append((t.name, p.partition, ERR_UNKNOWN))
                    elif key not in self.log:
                        errors.append((t.name, p.partition, ERR_UNKNOWN_PARTITION))
                    else:
                        errors.append((t.name, p.partition, 0))
                        self.log[key].extend(self.produced_bundles[req.request_id][(t.name, p.partition)])
            return errors
        if isinstance(req, ConsumeRequest):
            return {(t.name, p.partition): len(self.log.get((t.name, p.partition), [])) for t in req.topics for p in t.partitions}
        if isinstance(req, DiscoverPartitionsRequest):
            return [len(self.log[TOPIC, p]) for p in range(PARTITIONS)]
        raise AssertionError(req)

    def pump_client(self) -> None:
        self.collect()
        while (ev := self.client.next_event()) is not NEED_DATA:
            assert self.client_closed is None, f"client delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, Connected):
                assert not self.connected, "a second greeting"
                self.connected = True
                continue
            if isinstance(ev, ConnectionClosed):
                assert set(ev.unanswered) == set(self.pending), "unanswered is not what was in flight"
                self.pending.clear()
                self.client_closed = ev
                self.c2s.closing = True
                continue
            rid = ev.request_id  # type: ignore[union-attr]
            assert rid in self.pending and rid not in self.answered, f"an answer to {rid}, not in flight"
            assert rid in self.handled, "an answer to a request the broker never handled"
            self.answered.add(rid)
            req, _ = self.pending.pop(rid)
            self.check_answer(req, ev, self.handled[rid])
        self.collect()

    def check_answer(self, req: object, ev: object, expected: object) -> None:
        if isinstance(req, ProduceRequest):
            assert isinstance(ev, ProduceResponse)
            assert [(r.topic, r.partition, r.error) for r in ev.results] == expected, (
                "produce response does not match the request"
            )
        elif isinstance(req, ConsumeRequest):
            assert isinstance(ev, ConsumeResult) and isinstance(expected, dict)
            asked = {(t.name, p.partition): p for t in req.topics for p in t.partitions}
            assert [(p.topic, p.partition) for p in ev.partitions] == list(asked)
            for part in ev.partitions:
                key = (part.topic, part.partition)
                if key not in self.log:
                    assert part.error == ERR_UNKNOWN and not part.messages
                    continue
                hw_then = expected[key]
                log = self.log[key]
                assert hw_then <= part.hwmark <= len(log), "hwmark outside what was stored"
                got = part.chunk.messages if part.chunk else ()
                seqs = [m.seq for m in got]
                start = asked[key].seq
                if seqs:
                    first, last = seqs[0], seqs[-1]
                    assert first is not None and last is not None
                    # consumed messages are the produced ones at those sequence numbers, in order, each once
                    assert seqs == list(range(first, first + len(seqs)))
                    assert [(m.content, m.key, m.ts) for m in got] == [(m.content, m.key, m.ts) for m in log[first - 1 : last]]
                    assert last <= part.hwmark
                    self.consumed += len(seqs)
                    if start == U64_MAX:  # the end: only what was stored after the request was handled
                        assert first > hw_then
                    else:
                        assert first >= max(start, 1)
                if part.error == 0x01:  # boundary: asked past the end
                    assert start > hw_then + 1
                if req.max_wait_ms == 0 and part.error == 0 and 1 <= start <= hw_then and asked[key].fetch_size >= 1 << 16:
                    assert seqs and seqs[0] == start, "an immediate consume inside the log returned nothing"
        else:
            assert isinstance(ev, DiscoverPartitionsResponse)
            assert [p.hwmark for p in ev.partitions] == expected

    # -- rules: the client application --------------------------------------------
    def request(self, req: object) -> None:
        rid = req.request_id  # type: ignore[attr-defined]
        self.client.send(req, now=self.now)  # type: ignore[arg-type]
        self.pending[rid] = (req, None)
        self.sent[rid] = req
        self.sent_ids.append(rid)
        assert self.client.pending == len(self.pending)
        self.collect()

    @precondition(lambda self: self.client_closed is None and not self.c2s.closing)
    @rule(
        parts=st.lists(
            st.tuples(st.sampled_from([0, 1, 0, 1, 7]), messages_st), min_size=1, max_size=2, unique_by=lambda t: t[0]
        ),
        unknown_topic=st.integers(0, 9),
    )
    def produce(self, parts: list[tuple[int, list[Message]]], unknown_topic: int) -> None:
        self.timer_last = False
        rid = self.client.new_request_id()
        topics = [
            ProduceTopic(TOPIC, tuple(ProducePartition(p, encode_bundle(msgs, compress=self.compress)) for p, msgs in parts))
        ]
        self.produced_bundles[rid] = {}
        self.produced_bundles[rid].update({(TOPIC, p): msgs for p, msgs in parts})
        if unknown_topic == 0:
            topics.append(ProduceTopic("nope", (ProducePartition(0, encode_bundle([Message(b"x")])),)))
        self.request(ProduceRequest(rid, tuple(topics)))

    @precondition(lambda self: self.client_closed is None and not self.c2s.closing)
    @rule(
        partition=st.sampled_from([0, 1, 7]),
        where=st.sampled_from(["first", "seq", "tail", "past", "end"]),
        back=st.integers(0, 8),
        fetch=st.sampled_from([12, 40, 200, 1 << 20]),
        wait_ms=st.sampled_from([0, 0, 100, 700]),
    )
    def consume(self, partition: int, where: str, back: int, fetch: int, wait_ms: int) -> None:
        self.timer_last = False
        hw = len(self.log.get((TOPIC, partition), []))
        seq = {"first": 0, "seq": max(1, hw - back), "tail": hw + 1, "past": hw + 3, "end": U64_MAX}[where]
        rid = self.client.new_request_id()
        req = ConsumeRequest(
            rid, (ConsumeTopic(TOPIC, (ConsumePartition(partition, seq, fetch),)),), max_wait_ms=wait_ms, min_bytes=1
        )
        self.request(req)

    @precondition(lambda self: self.client_closed is None and not self.c2s.closing)
    @rule()
    def discover(self) -> None:
        self.timer_last = False
        self.request(DiscoverPartitionsRequest(self.client.new_request_id(), TOPIC))

    # -- rules: time --------------------------------------------------------------
    @precondition(lambda self: not self.timer_last)
    @rule(advance=st.sampled_from([0.05, 0.2, 0.8, 3.0, 6.0, 20.0]))
    def time_passes(self, advance: float) -> None:
        self.timer_last = True
        self.now += advance
        before = self.client.pings_sent
        due = self.client.next_deadline()
        self.client.handle_timer(now=self.now)
        if due is not None and due <= self.now:
            assert self.client.pings_sent == before + 1, "a due keepalive Ping was not sent"
        for m in (self.client, self.broker):
            after = m.next_deadline()
            assert after is None or after > self.now or m is self.broker, "handle_timer left a due timer armed"
        core_due = self.core.next_deadline()
        out = self.core.handle_timer(now=self.now)
        if core_due is not None and core_due <= self.now:
            self.long_polls_answered += len(out)
        assert self.core.next_deadline() is None or self.core.next_deadline() > self.now
        self.dispatch(out)
        if self.broker_closed is None:  # a closed connection's driver runs no timer
            self.broker.handle_timer(now=self.now)
        self.pump_broker()
        self.pump_client()

    # -- the end of the connection -------------------------------------------------
    def app_shuts_write(self, who: str) -> None:
        if who == "broker" and self.broker_closed is None:
            self.broker_closed = APP_CLOSED
            self.broker_gone()

    def check_cut(self, was_open: Mapping[str, bool], who: str, how: str) -> None:
        assert self.client.state is State.CLOSED
        assert self.broker.state is State.CLOSED or self.broker_closed == APP_CLOSED

    # -- invariants ---------------------------------------------------------------
    @invariant()
    def in_flight_is_the_model_s(self) -> None:
        assert self.client.pending == len(self.pending)
        assert self.answered.isdisjoint(self.pending)

    @invariant()
    def the_storage_is_the_model_s(self) -> None:
        for (topic, p), msgs in self.log.items():
            lg = self.storage.topics[topic][p]
            assert lg.last_assigned == len(msgs), "the broker stored something other than what was produced"

    @invariant()
    def a_closed_machine_stays_quiet(self) -> None:
        if self.client_closed is not None:
            assert self.client.state is State.CLOSED and self.client.next_event() is NEED_DATA
            assert self.client.data_to_send() == b""
        if self.broker_closed is not None and self.broker.state is State.CLOSED:
            assert self.broker.next_event() is NEED_DATA

    def teardown(self) -> None:
        if not hasattr(self, "client"):
            return
        for _ in range(1000):
            if self.c2s.busy:
                self.move_c2s(1 << 20)
            elif self.s2c.busy:
                self.move_s2c(1 << 20)
            elif self.core.waits_of(self.cid) and self.broker_closed is None:
                deadline = self.core.next_deadline()
                assert deadline is not None
                self.now = max(self.now, deadline)
                self.dispatch(self.core.handle_timer(now=self.now))
                self.pump_broker()
            elif self.client_closed is None or self.broker_closed is None:
                if self.client_closed is None and self.connected and self.broker_closed is None:
                    # drained, long polls answered: every request was answered exactly once
                    assert not self.pending, self.pending
                if not self.c2s.closing:
                    self.c2s.closing = True
                elif self.broker_closed is None:
                    self.connection_ends("broker", "eof")
                else:
                    raise AssertionError("stuck")
            else:
                break
        assert self.client_closed is not None and self.broker_closed is not None
        assert not self.pending
        # the storage holds what was produced, whatever the connections did: a
        # fresh connection reads every partition back from seq 1 (check_answer
        # compares each message with the model at its sequence number)
        for (topic, p), msgs in self.log.items():
            assert self.storage.topics[topic][p].last_assigned == len(msgs)
        self.new_connection()
        self.move_s2c(1 << 20)
        for (topic, p), msgs in self.log.items():
            seq = 1
            while seq <= len(msgs):
                before = self.consumed
                req = ConsumeRequest(self.client.new_request_id(), (ConsumeTopic(topic, (ConsumePartition(p, seq, 1 << 20),)),))
                self.request(req)
                self.move_c2s(1 << 20)
                self.move_s2c(1 << 20)
                assert not self.pending and self.consumed > before
                seq += self.consumed - before


#: the model tests/test_stateful.py runs, and the settings it runs under
PAIR = TankPair
SETTINGS = settings(max_examples=120, stateful_step_count=40, deadline=None)
