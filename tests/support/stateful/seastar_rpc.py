"""A hypothesis RuleBasedStateMachine pairing the Seastar RPC ClientConnection
with a ServerConnection (specs/seastar-rpc/README.md §1-§3, §5, §7).

The two machines are joined by two in-memory byte pipes; every step moves a
hypothesis-chosen number of bytes, so frames (compressed or not) arrive torn
at every possible place and the model checks that they decode the same.
Rules negotiate (RPC or stream connections, with or without compression),
make calls (with and without timeouts, one-way, to an unknown verb), answer
them (replies, exceptions, nothing), stream messages both ways, advance a
virtual clock and fire the timers, and end the connection at any point (EOF
from either side, a reset, a failed write, a rejected offer).  Then a fresh
pair starts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from refwire.seastar_rpc import (
    COMPRESSOR_NAMES,
    NEED_DATA,
    NEGOTIATION_TIMED_OUT,
    CallFailed,
    CallReceived,
    CallTimedOut,
    ClientConnection,
    ConnectionClosed,
    Negotiated,
    NegotiationRequested,
    Reply,
    ServerConnection,
    State,
    StrayReply,
    StreamEnd,
    StreamMessage,
    UnknownVerb,
    UserError,
)
from refwire.seastar_rpc.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

from .wire import MachinePair, Pipe

# The server application's verbs: what it does with each is the oracle of the reply.
ECHO, FAIL, NOTIFY, UNKNOWN = 1, 2, 3, 99
NEGOTIATION_TIMEOUT = 20.0
PARENT_ID = 0x1000


def reply_payload(payload: bytes) -> bytes:
    return b"echo:" + payload


class SeastarPair(MachinePair):
    STATE = State
    TABLES = (CLIENT_TRANSITIONS, SERVER_TRANSITIONS)
    END_AFTER_STEPS = 8  # not always at once: let calls flow first
    PUMP_ORDER = ("client", "server")
    TELL_CLOSED = True  # the machines take a reset after their ConnectionClosed
    WROTE_AFTER = "after its ConnectionClosed"

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.connections = 0
        self.late_answers = 0

    # -- set-up -------------------------------------------------------------------
    @initialize(
        compressors=st.sampled_from([(), ("LZ4",), ("LZ4_FRAGMENTED", "LZ4"), ("ZSTD", "LZ4_FRAGMENTED")]),
        timeout=st.booleans(),
        duration=st.booleans(),
        stream=st.booleans(),
        negotiation_timeout=st.booleans(),
    )
    def connect(
        self, compressors: tuple[str, ...], timeout: bool, duration: bool, stream: bool, negotiation_timeout: bool
    ) -> None:
        self.options = (compressors, timeout, duration, stream, negotiation_timeout)
        self.new_connection()

    def new_connection(self) -> None:
        compressors, timeout, duration, stream, negotiation_timeout = self.options
        # a client offering ZSTD first also offers LZ4_FRAGMENTED; the machine refuses unknown names it offers itself
        offered = tuple(c for c in compressors if c in COMPRESSOR_NAMES)
        self.offered = offered
        self.stream = stream
        self.client = ClientConnection(
            compressors=offered,
            timeout=timeout,
            handler_duration=duration,
            stream_parent=PARENT_ID if stream else None,
            negotiation_timeout=NEGOTIATION_TIMEOUT if negotiation_timeout else None,
        )
        self.server = ServerConnection(negotiation_deadline=self.now + NEGOTIATION_TIMEOUT if negotiation_timeout else None)
        self.connections += 1
        self.steps = 0
        self.c2s, self.s2c = Pipe(), Pipe()
        self.client_closed: ConnectionClosed | None = None
        self.server_closed: ConnectionClosed | None = None
        self.negotiated = False
        self.offer_seen = False
        # the model of the calls, by msg id: (verb, payload, one_way, deadline)
        self.calls: dict[int, tuple[int, bytes, bool, float | None]] = {}
        self.calls_made_at: dict[int, float] = {}
        self.completed: dict[int, str] = {}  # msg id -> how it completed (once)
        self.received_ids: list[int] = []  # ids the server delivered, in order
        self.inbox: deque[CallReceived] = deque()  # calls the server application has not answered yet
        self.answered: set[int] = set()
        # stream messages: sent by one side, delivered to the other
        self.stream_sent: dict[str, list[bytes]] = {"client": [], "server": []}
        self.stream_got: dict[str, list[bytes]] = {"client": [], "server": []}
        self.eos_sent = {"client": False, "server": False}
        self.eos_got = {"client": False, "server": False}
        self.states = {"client": [self.client.state], "server": [self.server.state]}
        self.client.initiate(now=self.now)
        self.collect()

    # -- plumbing -----------------------------------------------------------------
    def pump_server(self) -> None:
        self.collect()  # what the last action owed leaves before the events it leads to
        while (ev := self.server.next_event()) is not NEED_DATA:
            assert self.server_closed is None, f"server delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, NegotiationRequested):
                assert not self.offer_seen, "a second offer"
                self.offer_seen = True
                assert ev.features.timeout == (self.options[1] and not self.stream)
                assert ev.features.stream_parent == (PARENT_ID if self.stream else None)
            elif isinstance(ev, CallReceived):
                assert ev.msg_id in self.calls, f"server delivered id {ev.msg_id}, never called"
                assert ev.msg_id not in self.received_ids, f"call {ev.msg_id} delivered twice"
                assert not self.received_ids or ev.msg_id > self.received_ids[-1], "calls out of order"
                verb, payload, _one_way, deadline = self.calls[ev.msg_id]
                assert (ev.verb, ev.payload) == (verb, payload)
                assert self.server.reply is not None
                # the time left is propagated when TIMEOUT was negotiated (whole ms, at least 1)
                assert (ev.deadline is not None) == (deadline is not None and self.server.reply.timeout)
                if ev.timeout_ms:
                    assert deadline is not None and ev.timeout_ms <= (deadline - self.calls_made_at[ev.msg_id]) * 1000 + 1e-6
                self.received_ids.append(ev.msg_id)
                if verb != NOTIFY:
                    self.inbox.append(ev)
            elif isinstance(ev, StreamMessage):
                self.stream_got["server"].append(ev.payload)
                assert self.stream_got["server"] == self.stream_sent["client"][: len(self.stream_got["server"])]
            elif isinstance(ev, StreamEnd):
                assert self.eos_sent["client"] and not self.eos_got["server"]
                assert self.stream_got["server"] == self.stream_sent["client"], "end-of-stream before every message"
                self.eos_got["server"] = True
            elif isinstance(ev, ConnectionClosed):
                self.server_closed = ev
                self.s2c.closing = True  # the driver closes the socket
            else:
                raise AssertionError(f"server produced {ev!r}")
        self.collect()

    def complete(self, msg_id: int, how: str) -> None:
        assert msg_id in self.calls, f"{how} for id {msg_id}, never called"
        assert not self.calls[msg_id][2], f"one-way call {msg_id} completed ({how})"
        assert msg_id not in self.completed, f"call {msg_id} completed twice: {self.completed[msg_id]}, then {how}"
        self.completed[msg_id] = how

    def pump_client(self) -> None:
        self.collect()  # what the last action owed leaves before the events it leads to
        while (ev := self.client.next_event()) is not NEED_DATA:
            assert self.client_closed is None, f"client delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, Negotiated):
                assert not self.negotiated
                self.negotiated = True
                expected = next((c for c in self.offered if c in COMPRESSOR_NAMES), None)
                assert ev.compressor == expected
                assert ev.connection_id == (PARENT_ID + 1 if self.stream else None)
            elif isinstance(ev, Reply):
                verb, payload, _, _ = self.calls[ev.msg_id]
                assert ev.msg_id in self.answered and verb == ECHO and ev.payload == reply_payload(payload)
                self.complete(ev.msg_id, "reply")
            elif isinstance(ev, CallFailed):
                verb, payload, _, _ = self.calls[ev.msg_id]
                assert ev.msg_id in self.answered
                assert ev.error == (UserError(payload) if verb == FAIL else UnknownVerb(verb)), ev
                self.complete(ev.msg_id, "failed")
            elif isinstance(ev, CallTimedOut):
                deadline = self.calls[ev.msg_id][3]
                assert deadline is not None and self.now >= deadline, "timed out before its deadline"
                self.complete(ev.msg_id, "timed out")
            elif isinstance(ev, StrayReply):
                mid = abs(ev.msg_id)
                assert ev.known and mid in self.answered
                # only a one-way call's UNKNOWN_VERB or a reply after the timeout
                assert self.calls[mid][2] or self.completed.get(mid) == "timed out", ev
                if self.calls[mid][2]:
                    assert ev.msg_id == -mid and ev.error == UnknownVerb(UNKNOWN)
            elif isinstance(ev, StreamMessage):
                self.stream_got["client"].append(ev.payload)
                assert self.stream_got["client"] == self.stream_sent["server"][: len(self.stream_got["client"])]
            elif isinstance(ev, StreamEnd):
                assert self.eos_sent["server"] and not self.eos_got["client"]
                assert self.stream_got["client"] == self.stream_sent["server"]
                self.eos_got["client"] = True
            elif isinstance(ev, ConnectionClosed):
                for mid in ev.pending:
                    self.complete(mid, "connection closed")
                self.client_closed = ev
                self.c2s.closing = True
            else:
                raise AssertionError(f"client produced {ev!r}")
        self.collect()

    # -- rules: the client application --------------------------------------------
    @precondition(lambda self: not self.stream and not self.c2s.closing and self.client.state in (State.NEGOTIATING, State.READY))
    @rule(
        verb=st.sampled_from([ECHO, ECHO, FAIL, NOTIFY, UNKNOWN]),
        payload=st.binary(max_size=300) | st.just(b"abc" * 400),
        timeout=st.none() | st.sampled_from([0.5, 1.0, 2.0, 10.0]),
        one_way=st.booleans(),
    )
    def client_calls(self, verb: int, payload: bytes, timeout: float | None, one_way: bool) -> None:
        self.timer_last = False
        one_way = verb == NOTIFY or (verb == UNKNOWN and one_way)  # one-wayness is the verb's
        expected = self.client.next_msg_id
        assert expected == len(self.calls) + 1, "msg ids start at 1 and grow by one per call"
        msg_id = self.client.call(verb, payload, now=self.now, timeout=timeout, one_way=one_way)
        assert msg_id == expected
        self.calls[msg_id] = (verb, payload, one_way, None if timeout is None else self.now + timeout)
        self.calls_made_at[msg_id] = self.now
        self.collect()

    # -- rules: the server application ---------------------------------------------
    @precondition(lambda self: self.server.state is State.DECIDING)
    @rule(reject=st.integers(0, 9))
    def server_decides(self, reject: int) -> None:
        self.timer_last = False
        if reject == 0 or self.s2c.closing:  # an application that shut its write side refuses
            self.server.reject("no", now=self.now)
        else:
            self.server.accept(connection_id=PARENT_ID + 1 if self.stream else None, now=self.now)
        self.pump_server()

    @precondition(lambda self: self.inbox and not self.s2c.closing)
    @rule(i=st.integers(0, 5), delay=st.sampled_from([0.0, 0.0, 0.3, 0.7, 1.2, 3.0]))
    def server_answers(self, i: int, delay: float) -> None:
        self.timer_last = False
        call = self.inbox[i % len(self.inbox)]
        del self.inbox[i % len(self.inbox)]
        self.now += delay
        before = len(self.s2c.buf)
        wanted = self.server.reply_wanted(call, now=self.now)
        if call.verb == ECHO:
            self.server.respond(call, reply_payload(call.payload), now=self.now)
        elif call.verb == FAIL:
            self.server.respond_error(call, UserError(call.payload), now=self.now)
        else:
            self.server.respond_unknown_verb(call, now=self.now)
        self.collect()
        sent = len(self.s2c.buf) > before
        assert sent == (wanted and self.server_closed is None and not self.s2c.closing)
        # the propagated deadline, from the wire's timeout_ms (0: none), not the machine's arithmetic
        if call.timeout_ms and self.now > call.received_at + call.timeout_ms / 1000:
            self.late_answers += 1
            assert not sent, "a reply after the propagated deadline"
        if sent:
            self.answered.add(call.msg_id)

    # -- rules: streams -----------------------------------------------------------
    @precondition(lambda self: self.stream and State.STREAMING in (self.client.state, self.server.state))
    @rule(client_side=st.booleans(), payload=st.binary(max_size=200), end=st.integers(0, 7))
    def stream_send(self, client_side: bool, payload: bytes, end: int) -> None:
        self.timer_last = False
        role = "client" if client_side else "server"
        m = self.client if client_side else self.server
        pipe = self.c2s if client_side else self.s2c
        if m.state is not State.STREAMING or self.eos_sent[role] or pipe.closing:
            return
        if end == 0:
            m.send_stream_end(now=self.now)
            self.eos_sent[role] = True
        else:
            m.send_stream(payload, now=self.now)
            self.stream_sent[role].append(payload)
        self.collect()

    # -- rules: time --------------------------------------------------------------
    @precondition(lambda self: not self.timer_last)  # a run of timer steps is one longer step
    @rule(advance=st.sampled_from([0.1, 0.3, 0.6, 1.5, 2.5, 11.0, 25.0]))
    def time_passes(self, advance: float) -> None:
        self.timer_last = True
        self.now += advance
        for m in (self.client, self.server):
            m.handle_timer(now=self.now)
            after = m.next_deadline()
            assert after is None or after > self.now, "handle_timer left a due timer armed"
        self.pump_client()
        self.pump_server()
        if self.client_closed is not None and self.client_closed.reason == NEGOTIATION_TIMED_OUT:
            assert not self.negotiated

    # -- the end of the connection -------------------------------------------------
    def check_cut(self, was_open: Mapping[str, bool], who: str, how: str) -> None:
        for role, m, closed in (("client", self.client, self.client_closed), ("server", self.server, self.server_closed)):
            assert m.state is State.CLOSED and closed is not None
            if was_open[role]:
                assert not closed.clean
        assert self.client_closed is not None and not self.client.pending

    def ended(self) -> None:
        self.check_ended()

    # -- invariants ---------------------------------------------------------------
    @invariant()
    def pending_calls_are_the_model_s(self) -> None:
        expected = {mid for mid, (_, _, one_way, _) in self.calls.items() if not one_way and mid not in self.completed}
        if self.client_closed is None:
            assert set(self.client.pending) == expected
        else:
            assert self.client.pending == () and not expected, "a call left without an answer at close"

    @invariant()
    def replies_only_for_delivered_calls(self) -> None:
        assert self.answered <= set(self.received_ids)
        for mid, how in self.completed.items():
            if how in ("reply", "failed"):
                assert mid in self.answered

    @invariant()
    def a_closed_machine_stays_quiet(self) -> None:
        for m, closed in ((self.client, self.client_closed), (self.server, self.server_closed)):
            if closed is not None:
                assert m.state is State.CLOSED
                assert m.next_event() is NEED_DATA
                assert m.data_to_send() == b""

    def check_ended(self) -> None:
        """After the connection: every two-way call completed exactly once."""
        assert self.client_closed is not None and self.server_closed is not None
        two_way = {mid for mid, (_, _, one_way, _) in self.calls.items() if not one_way}
        assert set(self.completed) == two_way
        assert set(self.received_ids) <= set(self.calls)

    def teardown(self) -> None:
        if not hasattr(self, "client"):
            return
        # the server application answers what it has, the wire drains, both sides close
        for _ in range(1000):
            if self.server.state is State.DECIDING:
                self.server_decides(1)
            elif self.inbox:
                self.server_answers(0, 0.0)
            elif self.c2s.busy:
                self.move_c2s(4096)
            elif self.s2c.busy:
                self.move_s2c(4096)
            elif self.open:
                if self.client_closed is None and not self.c2s.closing:
                    if self.negotiated and not self.stream:
                        # drained: every call the server got was answered, every answer arrived,
                        # and the server got every call made, but those whose deadline passed
                        # (the client withdraws a call that expires while queued, unsent)
                        assert set(self.client.pending).isdisjoint(self.answered)
                        missing = {
                            mid
                            for mid, (_, _, _, deadline) in self.calls.items()
                            if mid not in self.received_ids and (deadline is None or self.now < deadline)
                        }
                        assert not missing, f"calls the server never delivered: {sorted(missing)}"
                    self.c2s.closing = True
                elif self.server_closed is None and not self.s2c.closing:
                    self.s2c.closing = True
                else:
                    raise AssertionError("stuck")
            else:
                break
        self.check_ended()
        if self.stream and self.eos_got["server"] and self.eos_got["client"]:
            assert self.stream_got["server"] == self.stream_sent["client"]
            assert self.stream_got["client"] == self.stream_sent["server"]


#: the model tests/test_stateful.py runs, and the settings it runs under
PAIR = SeastarPair
SETTINGS = settings(max_examples=200, stateful_step_count=40, deadline=None)
