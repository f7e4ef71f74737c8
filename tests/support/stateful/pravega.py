"""A hypothesis RuleBasedStateMachine pairing the Pravega ClientConnection (with
WriterSessions on top) and a ServerConnection (specs/pravega/README.md §5, §7).

The test is the segment store's application: it answers SetupAppend with
AppendSetup (the writer's last stored event number; NoSuchSegment for a writer
to a segment it does not have), stores every reassembled
Append (checking the machine's ``previous_stored`` against its own writer
attribute) and acks it at once or later through a reply slot.  The two machines
are joined by byte pipes cut into hypothesis-chosen pieces; writers in both
client dialects (bare AppendBlockEnd, and Java's AppendBlock + PartialEvent
blocks of random sizes) append events, KeepAlives go round, the clock runs, and
the connection ends at any point (EOF from either side, a reset, a failed
write).  Every new connection sets the writers up again and resends what the
store lacks: each event must be stored exactly once and in order, and acks
never run ahead of what was stored.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

from refwire.pravega import (
    NEED_DATA,
    NULL_VALUE,
    Append,
    AppendBytes,
    ClientConnection,
    Command,
    ServerConnection,
    WriterSession,
    encode_event,
)
from refwire.pravega.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS, State
from refwire.pravega.events import ConnectionClosed, HelloReceived, KeepAliveReceived, ReplyReceived, ReplySlot, RequestReceived

from .wire import MachinePair, Pipe


def _commands() -> dict[str, Any]:
    """Today's wire commands by name (the package root exports the codec, not every class)."""
    out: dict[str, Any] = {}
    todo = list(Command.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls, "PROTOCOL", None) == ClientConnection.PROTOCOL and hasattr(cls, "NAME"):
            out[cls.NAME] = cls
    return out


CMD = _commands()
SEGMENTS = ("scope/stream/0.#epoch.0", "scope/stream/1.#epoch.0")
MISSING = "scope/stream/9.#epoch.0"  # a segment the store does not have: SetupAppend gets NoSuchSegment
# two writers share a segment; the last one writes to the missing segment
WRITERS = [(uuid.UUID(int=i + 1), SEGMENTS[i % 2]) for i in range(3)] + [(uuid.UUID(int=99), MISSING)]
REFUSED = WRITERS[-1][0]


class PravegaPair(MachinePair):
    STATE = State
    TABLES = (CLIENT_TRANSITIONS, SERVER_TRANSITIONS)

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        #: the store: segment -> the Event frames stored, in order, and who wrote each
        self.stored: dict[str, list[tuple[uuid.UUID, int, bytes]]] = {s: [] for s in SEGMENTS}
        self.attribute: dict[uuid.UUID, int] = {}  # writer -> last stored event number (the store's writer attribute)
        self.payloads: dict[uuid.UUID, list[bytes]] = {w: [] for w, _ in WRITERS}  # event n is payloads[n - 1]
        self.acked: dict[uuid.UUID, list[int]] = {w: [] for w, _ in WRITERS}  # event numbers acked to the application
        self.connections = 0
        self.refused = 0

    @initialize(style=st.sampled_from(["rust", "java"]), block_sizes=st.lists(st.integers(20, 300), min_size=1, max_size=3))
    def connect(self, style: Any, block_sizes: list[int]) -> None:
        self.sessions = {w: WriterSession(seg, w, style=style, max_batch_events=4) for w, seg in WRITERS}
        if style == "java":
            for s in self.sessions.values():
                s.java_block_sizes = block_sizes
        self.new_connection()

    def new_connection(self) -> None:
        self.connections += 1
        self.steps = 0
        self.client = ClientConnection()
        self.server = ServerConnection(frame_timeout=None)  # the frame timeout has tests of its own (test_pravega_server_limits)
        self.c2s, self.s2c = Pipe(), Pipe()
        self.client_closed: ConnectionClosed | None = None
        self.server_closed: ConnectionClosed | None = None
        self.hello = {"client": False, "server": False}
        self.refused = 0  # NoSuchSegment replies on this connection
        self.keepalives_sent = 0
        self.keepalives_echoed = 0
        self.slots: deque[tuple[ReplySlot, Append]] = deque()  # acks the store has not released yet
        self.setups: dict[int, uuid.UUID] = {}  # request id -> writer
        self.states = {"client": [self.client.state], "server": [self.server.state]}
        for s in self.sessions.values():
            s.connection_lost()
        self.client.initiate(now=self.now)
        for i, (w, _) in enumerate(WRITERS):
            rid = self.connections * 100 + i
            self.setups[rid] = w
            self.client.send(self.sessions[w].setup(rid), now=self.now)
        self.collect()

    # -- plumbing -----------------------------------------------------------------
    def send_appends(self) -> None:
        if self.client.state is not State.OPEN or self.c2s.closing:
            return
        for s in self.sessions.values():
            data = s.take()
            if data:
                self.client.send(AppendBytes(data), now=self.now)
        self.collect()

    def pump_server(self) -> None:
        self.collect()
        while (ev := self.server.next_event()) is not NEED_DATA:
            assert self.server_closed is None, f"server delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, HelloReceived):
                assert ev.compatible and not self.hello["server"]
                self.hello["server"] = True
            elif isinstance(ev, KeepAliveReceived):
                pass  # the machine echoes it
            elif isinstance(ev, RequestReceived):
                cmd: Any = ev.command
                assert type(cmd).__name__ == "SetupAppend" and self.setups[cmd.request_id] == cmd.writer_id
                if cmd.segment == MISSING:
                    self.server.send(CMD["NoSuchSegment"](request_id=cmd.request_id, segment=cmd.segment), now=self.now)
                    continue
                last = self.attribute.get(cmd.writer_id, NULL_VALUE)
                reply = CMD["AppendSetup"](
                    request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=last
                )
                self.server.send(reply, now=self.now)
            elif isinstance(ev, Append):
                self.store(ev)
            elif isinstance(ev, ConnectionClosed):
                self.server_closed = ev
                self.s2c.closing = True
            else:
                raise AssertionError(f"server produced {ev!r}")
        self.collect()

    def store(self, ev: Append) -> None:
        """The store's side of an Append: exactly the events after the writer's attribute, in order."""
        w = ev.writer_id
        before = self.attribute.get(w, 0)
        assert ev.previous_stored in (before, NULL_VALUE if before == 0 else before), (
            "previous_stored is not the store's attribute"
        )
        assert ev.event_number - ev.event_count == before, (
            f"events {ev.event_number - ev.event_count + 1}..{ev.event_number} after {before}: a gap or a repeat"
        )
        expected = b"".join(encode_event(p) for p in self.payloads[w][before : ev.event_number])
        assert ev.data == expected, "the reassembled append is not the events sent"
        for n in range(before + 1, ev.event_number + 1):
            self.stored[ev.segment].append((w, n, encode_event(self.payloads[w][n - 1])))
        self.attribute[w] = ev.event_number
        slot = self.server.reserve(now=self.now)
        self.slots.append((slot, ev))

    def pump_client(self) -> None:
        self.collect()
        while (ev := self.client.next_event()) is not NEED_DATA:
            assert self.client_closed is None, f"client delivered {ev!r} after its ConnectionClosed"
            if isinstance(ev, HelloReceived):
                assert not self.hello["client"]
                self.hello["client"] = True
            elif isinstance(ev, KeepAliveReceived):
                self.keepalives_echoed += 1
                assert self.keepalives_echoed <= self.keepalives_sent
            elif isinstance(ev, ReplyReceived):
                cmd: Any = ev.command
                name = type(cmd).__name__
                if name == "AppendSetup":
                    w = self.setups[cmd.request_id]
                    assert cmd.writer_id == w and cmd.last_event_number == self.attribute.get(w, NULL_VALUE)
                    # what the store already holds counts as acked (the acks were lost with a connection)
                    self.acked[w].extend(e.number for e in self.sessions[w].pending if e.number <= cmd.last_event_number)
                    self.sessions[w].on_append_setup(cmd)
                    self.send_appends()
                elif name == "DataAppended":
                    w = cmd.writer_id
                    assert cmd.event_number <= self.attribute[w], "an ack for an event the store does not hold"
                    done = self.sessions[w].on_data_appended(cmd)
                    acked = self.acked[w]
                    assert done and done[0] == (acked[-1] + 1 if acked else done[0]), "acks skipped an event"
                    assert done == list(range(done[0], done[-1] + 1))
                    acked.extend(done)
                elif name == "NoSuchSegment":
                    w = self.setups[cmd.request_id]
                    assert dict(WRITERS)[w] == MISSING == cmd.segment
                    assert not self.sessions[w].ready, "a refused writer is not set up"
                    self.refused += 1
                else:
                    raise AssertionError(f"unexpected reply {cmd!r}")
            elif isinstance(ev, ConnectionClosed):
                self.client_closed = ev
                self.c2s.closing = True
            else:
                raise AssertionError(f"client produced {ev!r}")
        self.collect()

    # -- rules: the applications --------------------------------------------------
    @rule(writer=st.integers(0, len(WRITERS) - 1), payloads=st.lists(st.binary(max_size=90), min_size=1, max_size=5))
    def write_events(self, writer: int, payloads: list[bytes]) -> None:
        self.timer_last = False
        w = WRITERS[writer][0]
        for p in payloads:
            n = self.sessions[w].add(p)
            self.payloads[w].append(p)
            assert n == len(self.payloads[w]), "event numbers start at 1 and grow by one"
        self.send_appends()

    @precondition(lambda self: self.slots and self.server_closed is None)
    @rule(k=st.integers(1, 4), out_of_order=st.booleans())
    def store_acks(self, k: int, out_of_order: bool) -> None:
        """The store makes appends durable and fills their reply slots (in any order: the machine keeps the order)."""
        self.timer_last = False
        picked = [self.slots.popleft() for _ in range(min(k, len(self.slots)))]
        for slot, ev in reversed(picked) if out_of_order else picked:
            self.server.append_stored(ev, sum(len(d) for _, _, d in self.stored[ev.segment]), now=self.now, slot=slot)
        self.pump_server()

    @precondition(lambda self: self.client.state is State.OPEN and not self.c2s.closing)
    @rule()
    def keepalive(self) -> None:
        self.timer_last = False
        self.client.send(CMD["KeepAlive"](), now=self.now)
        self.keepalives_sent += 1
        self.collect()

    @precondition(lambda self: not self.timer_last)
    @rule(advance=st.sampled_from([0.5, 5.0, 30.0]))
    def time_passes(self, advance: float) -> None:
        """Neither machine has a timer (the drivers keep the connection alive): firing one changes nothing."""
        self.timer_last = True
        self.now += advance
        for m in (self.client, self.server):
            assert m.next_deadline() is None
            m.handle_timer(now=self.now)
            assert m.next_event() is NEED_DATA or m.state is not State.OPEN
        self.collect()

    def check_cut(self, was_open: Mapping[str, bool], who: str, how: str) -> None:
        assert self.client_closed is not None and self.server_closed is not None
        assert self.client.state is State.CLOSED and self.server.state is State.CLOSED
        assert not self.client_closed.clean or not self.server_closed.clean

    # -- invariants ---------------------------------------------------------------
    @invariant()
    def stored_exactly_once_in_order(self) -> None:
        for seg, entries in self.stored.items():
            for w, _ in WRITERS:
                mine = [n for ww, n, _ in entries if ww == w]
                assert mine == list(range(1, len(mine) + 1)), f"{w} on {seg}: {mine}"

    @invariant()
    def acks_never_exceed_what_was_stored(self) -> None:
        for w, _ in WRITERS:
            acked = self.acked[w]
            assert acked == list(range(1, len(acked) + 1)), "acks out of order or repeated"
            assert len(acked) <= self.attribute.get(w, 0) <= len(self.payloads[w])
            s = self.sessions[w]
            assert s.unacked == len(self.payloads[w]) - len(acked)
            assert [e.number for e in s.pending] == list(range(len(self.payloads[w]) - s.unacked + 1, len(self.payloads[w]) + 1))

    @invariant()
    def keepalives_echoed_once(self) -> None:
        assert self.keepalives_echoed <= self.keepalives_sent

    def teardown(self) -> None:
        if not hasattr(self, "client"):
            return
        for _ in range(1000):
            if self.c2s.busy:
                self.move_c2s(1 << 20)
            elif self.slots and self.server_closed is None:
                self.store_acks(len(self.slots), False)
            elif self.s2c.busy:
                self.move_s2c(1 << 20)
            elif self.client_closed is not None and self.server_closed is not None:
                if any(s.unacked for w, s in self.sessions.items() if w != REFUSED) and self.connections < 50:
                    self.new_connection()  # the writers resend what the store lacks
                else:
                    break
            elif self.client_closed is None and self.server_closed is None and self.hello["client"]:
                # drained: every event was stored once and acked
                for w, _ in WRITERS:
                    if w != REFUSED:
                        assert self.acked[w] == list(range(1, len(self.payloads[w]) + 1)), (w, self.acked[w])
                        assert self.sessions[w].unacked == 0
                assert self.refused == 1, "the SetupAppend to the missing segment was refused, once"
                self.connection_ends("client", "eof")
            elif not self.c2s.closing:
                self.c2s.closing = True
            elif not self.s2c.closing:
                self.s2c.closing = True
            else:
                raise AssertionError("stuck")
        for w, seg in WRITERS:
            if seg == MISSING:
                assert w not in self.attribute and not self.acked[w], "a writer to a missing segment got something stored"
                continue
            assert self.attribute.get(w, 0) == len(self.payloads[w]), "an event was never stored"
            assert self.acked[w] == list(range(1, len(self.payloads[w]) + 1))


#: the model tests/test_stateful.py runs, and the settings it runs under
PAIR = PravegaPair
SETTINGS = settings(max_examples=120, stateful_step_count=40, deadline=None)
