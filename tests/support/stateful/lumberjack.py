"""A hypothesis RuleBasedStateMachine pairing the Lumberjack ClientConnection
with a ServerConnection (specs/lumberjack/README.md §2-§3).

Our client and our server are joined by two in-memory byte pipes cut into
hypothesis-chosen pieces.  The client sends windows (v1 ``D`` or v2 ``J``
frames, compressed or not, numbered per window or running across windows and
past 2**32 - 1), the server application accepts the batches it is handed (its
acks must be exactly the ``A`` frames the ack mode says), the server's
keepalive ``A 0`` and the client's ack timeout run on a virtual clock, and the
connection ends at any point: EOF from either side, a reset, a failed write,
the client's ack timeout.  After the client's EOF the server's driver reads
no more, the application accepts what it was handed and the acks go out (as
``refwire.lumberjack.server`` finishes a connection); bytes in flight on a
broken transport are lost, batches the application has not accepted when it
breaks are dropped, and the next pair carries the client's ``unacked()`` tail again (its
running numbers go on from the old client's next one): whatever the server
received is what was sent, in order and unaltered, and acks never exceed or
undo what the application accepted.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from lumberjack_strategies import json_objects

from refwire.lumberjack import (
    NEED_DATA,
    V1,
    V2,
    Accept,
    Ack,
    AckReceived,
    AckTimeout,
    Batch,
    ClientConnection,
    ConnectionClosed,
    DataFrame,
    JsonFrame,
    KeepAlive,
    SendWindow,
    ServerConnection,
    State,
)
from refwire.lumberjack.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

from .wire import MachinePair, Pipe

U32_WRAP = 2**32 - 1  # sequence numbers run 1 .. 2**32-1, then 1 again
ACK_TIMEOUT = 30.0
#: bytes moved by one step: torn frames and whole windows
CHUNK = st.one_of(st.integers(1, 16), st.integers(17, 2048))


def next_seq(seq: int) -> int:
    return seq % U32_WRAP + 1  # 2**32-1 -> 1: never 0


def wire_form(event: Mapping[str, Any], version: int) -> object:
    """What the server should hand over for ``event`` (an independent oracle)."""
    if version == V2:
        return event
    return tuple(
        (k.encode(), v.encode() if isinstance(v, str) else json.dumps(v, separators=(",", ":")).encode())
        for k, v in event.items()
    )


def delivered_form(ev: JsonFrame | DataFrame) -> object:
    return json.loads(ev.payload) if isinstance(ev, JsonFrame) else ev.pairs


class LumberjackPair(MachinePair):
    """The client and the server of one connection after another; the model
    keeps what outlives a connection (what was sent, received, accepted and
    acked) and what each connection lost."""

    STATE = State
    TABLES = (CLIENT_TRANSITIONS, SERVER_TRANSITIONS)
    CHUNK = CHUNK
    TELL_CLOSED = True  # a client its ack timeout closed is still told of the failed write, and stays quiet

    client: ClientConnection
    server: ServerConnection
    client_closed: ConnectionClosed | AckTimeout | None
    server_closed: ConnectionClosed | None

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.sent: list[tuple[int, object]] = []  # (seq, form) of every event, in order
        self.received: list[tuple[int, object]] = []  # handed to the server application
        self.accepted = 0
        self.acked = 0
        self.acked_before = 0
        self.lost_acks = 0  # events accepted whose acks an ended connection lost
        self.dropped = 0  # events received but not accepted when a server's transport broke
        self.segments = [0]  # where each connection's events start in self.received
        self.connections = 0
        self.ends = 0  # connections that ended (a new pair followed)
        self.tail: list[Any] = []  # the unacked events the next pair resends

    @initialize(
        version=st.sampled_from([V1, V2]),
        level=st.integers(0, 9),
        sequence=st.sampled_from(["window", "running"]),
        first_seq=st.one_of(st.just(1), st.integers(2**32 - 6, 2**32 - 1)),
        ack_mode=st.sampled_from(["last-seq", "count"]),
        keepalive_version=st.sampled_from(["connection", "v2"]),
        mixed=st.booleans(),
        validate=st.booleans(),
    )
    def connect(
        self,
        version: int,
        level: int,
        sequence: Any,
        first_seq: int,
        ack_mode: Any,
        keepalive_version: Any,
        mixed: bool,
        validate: bool,
    ) -> None:
        self.version = version
        self.level = level
        self.ack_mode = ack_mode
        self.keepalive_version = keepalive_version
        self.mixed = mixed
        self.validate = validate
        self.sequence = sequence
        self.first_seq = first_seq
        self.seq = first_seq
        self.new_connection()

    def new_client(self, first_seq: int) -> ClientConnection:
        return ClientConnection(
            version=self.version,
            compression_level=self.level,
            sequence=self.sequence,
            first_seq=first_seq,
            ack_timeout=ACK_TIMEOUT,
            ack_interpretation="seq" if self.ack_mode == "last-seq" else "count",
        )

    def new_server(self) -> ServerConnection:
        return ServerConnection(
            ack_mode=self.ack_mode,
            keepalive_interval=5.0,
            keepalive_version=self.keepalive_version,
            accept_mixed_versions=self.mixed,
            validate_json=self.validate,
        )

    def new_connection(self) -> None:
        # a new pair; running numbers go on from the old client's next one
        first = self.first_seq if self.connections == 0 else self.client.next_seq
        self.connections += 1
        self.steps = 0
        self.client = self.new_client(first)
        self.server = self.new_server()
        self.c2s, self.s2c = Pipe(), Pipe()
        self.client_closed = None
        self.server_closed = None
        self.server_eof: ConnectionClosed | None = None  # the client's EOF reached the server: its driver finishes
        self.app_queue: deque[Batch] = deque()  # delivered by the server, not accepted yet
        self.batches = 0
        self.window: list[int] | None = None  # seqs of the outstanding window
        self.window_events: list[Any] = []  # and its events, as the application gave them
        self.last_activity = self.now
        self.states = {"client": [self.client.state], "server": [self.server.state]}
        if self.tail:  # the new pair carries the old client's unacked tail again
            tail, self.tail = self.tail, []
            self.send_window(tail, as_event=self.connections % 2 == 0)
        self.collect()

    # -- plumbing -----------------------------------------------------------------
    def pump_server(self) -> None:
        self.collect()
        while (ev := self.server.next_event()) is not NEED_DATA:  # a RemoteProtocolError fails the test
            assert self.server_eof is None, f"server delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, ConnectionClosed):
                assert ev.clean == (ev.reason == "") and ev.reason in ("", "reset", "write failed"), ev
                assert not ev.clean or self.c2s.eof_delivered, "a clean close without the client's EOF"
                assert self.server.state is State.CLOSED and self.server.pending_batches == len(self.app_queue)
                self.server_eof = ev
                continue
            assert isinstance(ev, Batch), f"server produced {ev!r} from our client's bytes"
            assert ev.number == self.batches
            self.batches += 1
            got = [(e.seq, delivered_form(e)) for e in ev.events]
            start = len(self.received)
            assert got == self.sent[start : start + len(got)], "server delivered something other than what was sent next"
            self.received.extend(got)
            self.app_queue.append(ev)
        self.server_done()
        self.collect()

    def server_done(self) -> None:
        """The server's driver closes the socket (what it owes still leaves, then
        EOF): after a clean end once the application accepted every batch it held
        (their acks go out first), at once when the transport broke (the batches
        not accepted are dropped)."""
        ev = self.server_eof
        if ev is None or self.server_closed is not None or (self.app_queue and ev.clean and not self.server.lost):
            return
        assert self.server.pending_batches == len(self.app_queue)
        self.dropped += sum(len(b) for b in self.app_queue)
        self.app_queue.clear()
        self.server_closed = ev
        self.s2c.closing = True

    def pump_client(self) -> None:
        self.collect()
        while (ev := self.client.next_event()) is not NEED_DATA:  # a RemoteProtocolError fails the test
            assert self.client_closed is None, f"client delivered {ev!r} after its connection ended"
            if isinstance(ev, KeepAlive):
                self.last_activity = self.now
                continue
            if isinstance(ev, ConnectionClosed):
                if ev.reason == "":  # EOF: clean when the window was acked
                    assert ev.clean == (self.window is None) and self.s2c.eof_delivered, ev
                else:
                    assert not ev.clean and ev.reason in ("reset", "write failed"), ev
                assert self.client.state is State.CLOSED
                self.client_closed = ev
                self.c2s.closing = True  # the driver closes the socket
                continue
            assert isinstance(ev, AckReceived), f"client produced {ev!r} from our server's bytes"
            assert self.window is not None
            # our server acks whole batches, each once: a complete ack moving forward
            assert ev.complete and ev.newly == ev.total == len(self.window) > 0, ev
            self.acked += ev.newly
            self.window = None
            self.last_activity = self.now
        self.collect()

    # -- rules: the client application --------------------------------------------
    @precondition(lambda self: self.client.state is State.IDLE and not self.c2s.closing)
    @rule(events=st.lists(json_objects, min_size=1, max_size=5), as_event=st.booleans())
    def client_sends_window(self, events: list[dict[str, Any]], as_event: bool) -> None:
        self.send_window(events, as_event)

    def send_window(self, events: list[Any], as_event: bool) -> None:
        self.timer_last = False
        if as_event:
            self.client.send(SendWindow(events), now=self.now)
        else:
            self.client.send_window(events, now=self.now)
        self.collect()
        if self.sequence == "window":
            seqs = list(range(1, len(events) + 1))
        else:
            seqs = []
            for _ in events:
                seqs.append(self.seq)
                self.seq = next_seq(self.seq)
            assert self.client.next_seq == self.seq
        self.sent.extend((s, wire_form(e, self.version)) for s, e in zip(seqs, events, strict=True))
        self.window = seqs
        self.window_events = list(events)
        self.last_activity = self.now
        assert self.client.state is State.AWAITING_ACK and self.client.unacked() == events

    # -- rules: the server application ---------------------------------------------
    @precondition(lambda self: self.app_queue)
    @rule(as_event=st.booleans())
    def server_accepts(self, as_event: bool = False) -> None:
        self.timer_last = False
        batch = self.app_queue.popleft()
        if as_event:
            self.server.send(Accept(batch), now=self.now)
        else:
            self.server.accept(batch, now=self.now)
        ack = self.server.data_to_send()
        value = batch.last_seq if self.ack_mode == "last-seq" else len(batch)
        assert ack == Ack(value, self.version).encode()
        self.accepted += len(batch)
        if not self.s2c.closing:  # else the write side was shut: the ack never leaves
            self.s2c.buf += ack
        self.server_done()
        self.collect()

    # -- rules: time --------------------------------------------------------------
    @precondition(lambda self: self.server_closed is None and self.server.next_deadline() is not None and not self.timer_last)
    @rule()
    def server_keepalive_timer(self) -> None:
        self.timer_last = True
        deadline = self.server.next_deadline()
        assert deadline is not None
        self.now = max(self.now, deadline)
        self.server.handle_timer(now=self.now)
        version = V2 if self.keepalive_version == "v2" else self.version
        out = self.server.data_to_send()
        assert out == Ack(0, version).encode()
        if not self.s2c.closing:
            self.s2c.buf += out
        self.collect()

    @precondition(lambda self: (self.client.state is State.AWAITING_ACK or self.client_closed is not None) and not self.timer_last)
    @rule(advance=st.sampled_from([*range(9), *range(9), 31]))  # now and then a stall past ack_timeout
    def client_ack_timer(self, advance: int) -> None:
        self.timer_last = True
        self.now += advance
        if self.client_closed is not None:  # a CLOSED client has no deadline; firing it anyway changes nothing
            self.client.handle_timer(now=self.now)
            assert self.client.next_deadline() is None and self.client.state is State.CLOSED
            assert self.client.next_event() is NEED_DATA
            return
        due = self.now >= self.last_activity + ACK_TIMEOUT
        assert self.client.next_deadline() == (self.last_activity + ACK_TIMEOUT if self.window is not None else None)
        self.client.handle_timer(now=self.now)
        ev = self.client.next_event()
        if due:
            # a legitimate timeout: nothing reached the client for ack_timeout seconds
            assert isinstance(ev, AckTimeout) and ev.waited >= ACK_TIMEOUT, ev
            assert self.client.state is State.CLOSED
            self.client_closed = ev
            # the driver gives up: it closes the socket (the window in flight still
            # reaches the server, then EOF) and reads nothing more
            self.c2s.closing = True
            self.s2c.cut()
        else:
            assert ev is NEED_DATA, ev
        self.collect()

    # -- the end of the connection -------------------------------------------------
    def check_cut(self, was_open: Mapping[str, bool], who: str, how: str) -> None:
        for role, m, closed in (("client", self.client, self.client_closed), ("server", self.server, self.server_closed)):
            assert m.state is State.CLOSED and closed is not None
            if not was_open[role]:
                continue
            if closed is self.server_eof and closed.clean:  # it broke while the server's driver finished after the client's EOF
                assert self.server.lost and not self.app_queue
            else:
                failed = role == who and how == "send_failed"
                assert closed == ConnectionClosed(clean=False, reason="write failed" if failed else "reset"), (role, closed)
        assert self.client.next_deadline() is None

    def ended(self) -> None:
        """Before a new pair: the client kept the window's unacked events (all of
        them: our server acks whole windows) for the resend; what the server had
        is what the next connection's events follow."""
        assert self.client.unacked() == (self.window_events if self.window is not None else []), (
            "the client did not keep the unacked tail for the resend"
        )
        assert len(self.client.unacked()) == (len(self.window) - self.client.acked if self.window is not None else 0)
        self.tail = self.client.unacked()
        self.lost_acks = self.accepted - self.acked
        self.sent = list(self.received)
        self.segments.append(len(self.received))
        self.ends += 1

    def may_end(self) -> bool:
        # at once while a window is outstanding (its tail is what the next pair resends), else after some traffic
        return self.client.state is not State.IDLE or super().may_end()

    # -- invariants --------------------------------------------------------------
    @invariant()
    def acks_never_exceed_what_the_application_accepted(self) -> None:
        assert self.acked <= self.accepted
        assert self.client.acked <= self.accepted

    @invariant()
    def acks_never_go_backwards(self) -> None:
        assert self.acked >= self.acked_before
        self.acked_before = self.acked

    @invariant()
    def a_closed_machine_stays_quiet(self) -> None:
        if self.client_closed is not None:
            assert self.client.state is State.CLOSED and self.client.next_event() is NEED_DATA
            assert self.client.data_to_send() == b"" and self.client.next_deadline() is None
        if self.server_eof is not None:
            assert self.server.state is State.CLOSED and self.server.next_event() is NEED_DATA
        if self.server_closed is not None:
            assert self.server.data_to_send() == b""

    @invariant()
    def quiet_wire_means_idle_client(self) -> None:
        if self.client_closed is None and self.server_closed is None and not self.busy:
            self.check_quiet()

    @property
    def busy(self) -> bool:
        return self.c2s.busy or self.s2c.busy or bool(self.app_queue)

    def check_quiet(self) -> None:
        """Nothing in flight on an open connection: every window acked, every event delivered once."""
        assert self.client.state is State.IDLE
        assert self.server.state is State.AWAIT_WINDOW and self.server.pending_batches == 0
        assert self.received == self.sent
        assert self.acked + self.lost_acks == self.accepted and self.accepted + self.dropped == len(self.sent)
        if not self.ends:
            assert self.acked == self.accepted == len(self.sent)

    def teardown(self) -> None:
        if not hasattr(self, "client"):
            return
        # the wire drains and the application accepts what it was handed; a
        # connection that ended is followed by a new pair carrying the tail
        for _ in range(1000):
            if self.c2s.busy:
                self.move_c2s(1 << 20)
            elif self.app_queue:
                self.server_accepts()
            elif self.s2c.busy:
                self.move_s2c(1 << 20)
            elif self.client_closed is None and self.server_closed is None:
                break
            elif self.client_closed is not None and self.server_closed is not None and self.connections < 100:
                self.reconnect()
            else:
                raise AssertionError("stuck")
        # every event delivered exactly once per connection, in order; after an
        # ended connection, what the server had is followed by the resent tail
        self.check_quiet()
        assert self.received == self.sent
        assert self.accepted + self.dropped == len(self.sent)
        assert self.acked + self.lost_acks + self.dropped == len(self.sent)
        if not self.ends:
            assert self.accepted == self.acked == len(self.sent)
        # seqs consecutive mod 2**32, skipping 0: across each connection's stream
        # for running numbering, within each window for per-window numbering
        seqs = [s for s, _ in self.received]
        assert 0 not in seqs
        if self.sequence == "running":
            for start, end in pairwise([*self.segments, len(seqs)]):
                assert all(b == next_seq(a) for a, b in pairwise(seqs[start:end]))


#: the model tests/test_stateful.py runs, and the settings it runs under
PAIR = LumberjackPair
SETTINGS = settings(max_examples=400, stateful_step_count=40, deadline=None)
