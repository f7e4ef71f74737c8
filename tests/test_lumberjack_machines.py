"""State-machine tests of the Lumberjack Sans-IO machines (connection.py).

1. All pairs, h2 style: every (state, input) of each
   role, driven with real bytes and real method calls, checked against the
   transition tables and against the per-pair grids below; plus a check that the
   test itself exercised every entry (and every target state) of each table.
2. The tables rendered as Graphviz DOT and parsed back: the table is the single
   source of the picture.
3. The machine contract: verbs, closing events, ``now``, failed writes, timers.

The stateful test pairing a ClientConnection with a ServerConnection over an
in-memory wire cut into arbitrary chunks (§3.4) is
``support.stateful.lumberjack``, run by ``tests/test_stateful.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_args

import pytest
from support.lumberjack_machines import C, J

from refwire.errors import LocalProtocolError, RemoteProtocolError
from refwire.lumberjack import (
    NEED_DATA,
    V1,
    V2,
    Accept,
    Ack,
    AckReceived,
    AckTimeout,
    Batch,
    BatchTimeout,
    ClientConnection,
    ConnectionClosed,
    IdleAtShutdown,
    IdleTimeout,
    SendWindow,
    ServerConnection,
    State,
    Window,
)
from refwire.lumberjack.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS, ClientInput, ServerInput

Conn = ServerConnection | ClientConnection
Table = Mapping[tuple[State, str], frozenset[State]]

TABLES: dict[str, Table] = {"server": SERVER_TRANSITIONS, "client": CLIENT_TRANSITIONS}
INPUTS: dict[str, tuple[str, ...]] = {"server": get_args(ServerInput), "client": get_args(ClientInput)}
ROLE_STATES = {
    "server": {State.AWAIT_WINDOW, State.IN_BATCH, State.CLOSED, State.ERROR},
    "client": {State.IDLE, State.AWAITING_ACK, State.CLOSED, State.ERROR},
}
TERMINAL = {State.CLOSED, State.ERROR}


def expand(table: Table) -> set[tuple[str, str, str]]:
    """Every (state, input, target) a table allows, as transitions_seen spells them."""
    return {(s.value, inp, t.value) for (s, inp), targets in table.items() for t in targets}


def pump(conn: Conn) -> tuple[list[object], RemoteProtocolError | None]:
    """next_event() until NEED_DATA, an end-of-connection event or an error."""
    events: list[object] = []
    for _ in range(20):
        try:
            ev = conn.next_event()
        except RemoteProtocolError as exc:
            return events, exc
        if ev is NEED_DATA:
            break
        events.append(ev)
        if isinstance(ev, (ConnectionClosed, AckTimeout)):
            break
    return events, None


# =========================================================================== 1. all pairs
#
# Outcome legend, one per (setup, input) cell:
#   ok       the pair is in the table: no error, the new state is one the table
#            allows, and transitions_seen records the transition.
#   error    received input the table forbids: next_event() raises
#            RemoteProtocolError, the machine is in ERROR and stays there.
#   sticky   the machine already was in ERROR: next_event() raises again.
#   local    an illegal local call: it raises LocalProtocolError and changes
#            nothing (no transition, no bytes, same state).
#   runtime  bytes fed after EOF or reset: receive_data raises RuntimeError.
#   ignored  no error and no transition: an end-of-stream signal repeated in a
#            terminal state, bytes after an ack timeout (the client is CLOSED and
#            answers ConnectionClosed), or a spurious timer (next_deadline() is
#            None there, so an I/O loop never fires it).
#
# Rows are setups: a state reached with real bytes, several ways where the
# outcome or the target state depends on how.  Columns are the input names of
# the role's Literal type.

SERVER_GRID = """
                W        W0       data     C        A        eof      reset
await-window    ok       ok       error    ok       error    ok       ok
in-batch-2      error    error    ok       ok       error    error    ok
in-batch-1      error    error    ok       ok       error    error    ok
closed-eof      runtime  runtime  runtime  runtime  runtime  ignored  ignored
closed-reset    runtime  runtime  runtime  runtime  runtime  ignored  ignored
error           sticky   sticky   sticky   sticky   sticky   sticky   sticky
"""

CLIENT_GRID = """
                      send   ack-partial ack-last keepalive ack-bad  eof      reset    timeout
idle                  ok     error       error    ok        error    ok       ok       ignored
idle-after-window     ok     error       error    ok        error    ok       ok       ignored
awaiting-ack          local  ok          ok       ok        error    ok       ok       ok
awaiting-ack-2-acked  local  ok          ok       ok        error    ok       ok       ok
closed-eof            local  runtime     runtime  runtime   runtime  ignored  ignored  ignored
closed-reset          local  runtime     runtime  runtime   runtime  ignored  ignored  ignored
closed-timeout        local  ignored     ignored  ignored   ignored  ignored  ignored  ignored
error                 local  sticky      sticky   sticky    sticky   sticky   sticky   sticky
"""


def parse_grid(text: str) -> dict[tuple[str, str], str]:
    header, *rows = (line.split() for line in text.strip().splitlines())
    return {(row[0], inp): cell for row in rows for inp, cell in zip(header, row[1:], strict=True)}


GRIDS = {"server": parse_grid(SERVER_GRID), "client": parse_grid(CLIENT_GRID)}

# Known misbehaviour: (role, setup, input) -> reason.  Each becomes a strict xfail.
KNOWN_BUGS: dict[tuple[str, str, str], str] = {}


@dataclass(frozen=True)
class Setup:
    state: State
    build: Callable[[], Any]
    next_seq: int = 1  # server: the seq the next J of the open batch carries
    acked: int = 0  # client: events of the outstanding 4-event window acked


def server_after(*chunks: bytes, reset: bool = False) -> ServerConnection:
    conn = ServerConnection(keepalive_interval=5.0)
    for chunk in chunks:
        conn.receive_data(chunk, now=0.0)
        pump(conn)
    if reset:
        conn.connection_lost(now=0.0)
        pump(conn)
    return conn


SERVER_SETUPS = {
    "await-window": Setup(State.AWAIT_WINDOW, lambda: server_after()),
    "in-batch-2": Setup(State.IN_BATCH, lambda: server_after(Window(2).encode())),
    "in-batch-1": Setup(State.IN_BATCH, lambda: server_after(Window(2).encode(), J(1)), next_seq=2),
    "closed-eof": Setup(State.CLOSED, lambda: server_after(b"")),
    "closed-reset": Setup(State.CLOSED, lambda: server_after(reset=True)),
    "error": Setup(State.ERROR, lambda: server_after(b"\x00\x00")),
}

N = 4  # events in the window the client setups send


def client_after(*steps: Callable[[ClientConnection], object]) -> ClientConnection:
    conn = ClientConnection(version=V2, compression_level=0, ack_timeout=30.0)
    for step in steps:
        step(conn)
        pump(conn)
    return conn


def _send(c: ClientConnection) -> bytes:
    c.send_window([{"n": i} for i in range(N)], now=0.0)
    return c.data_to_send()


def _ack(seq: int, version: int = V2) -> Callable[[ClientConnection], None]:
    return lambda c: c.receive_data(Ack(seq, version).encode(), now=1.0)


CLIENT_SETUPS = {
    "idle": Setup(State.IDLE, lambda: client_after()),
    "idle-after-window": Setup(State.IDLE, lambda: client_after(_send, _ack(N))),
    "awaiting-ack": Setup(State.AWAITING_ACK, lambda: client_after(_send)),
    "awaiting-ack-2-acked": Setup(State.AWAITING_ACK, lambda: client_after(_send, _ack(2)), acked=2),
    "closed-eof": Setup(State.CLOSED, lambda: client_after(lambda c: c.receive_data(b"", now=0.0))),
    "closed-reset": Setup(State.CLOSED, lambda: client_after(lambda c: c.connection_lost(now=0.0))),
    "closed-timeout": Setup(State.CLOSED, lambda: client_after(_send, lambda c: c.handle_timer(now=30.0))),
    "error": Setup(State.ERROR, lambda: client_after(lambda c: c.receive_data(b"\x00", now=0.0))),
}

SETUPS = {"server": SERVER_SETUPS, "client": CLIENT_SETUPS}

Action = Callable[[Any, Setup], object]


@dataclass(frozen=True)
class Realization:
    """One concrete way to apply an input (bytes or a call)."""

    label: str
    act: Action
    applies: Callable[[Setup], bool] = lambda setup: True


def recv(make: Callable[[Setup], bytes]) -> Action:
    return lambda conn, setup: conn.receive_data(make(setup), now=2.0)


SERVER_INPUTS: dict[str, list[Realization]] = {
    "W": [Realization("W 2", recv(lambda s: Window(2).encode()))],
    "W0": [Realization("W 0", recv(lambda s: Window(0).encode()))],
    "data": [Realization("J next-seq", recv(lambda s: J(s.next_seq)))],
    "C": [
        # the frame that is legal next, compressed: W 1 between batches, the next J inside one
        Realization("C[next frame]", recv(lambda s: C(J(s.next_seq) if s.state is State.IN_BATCH else Window(1).encode()))),
        Realization("C[]", recv(lambda s: C())),
    ],
    "A": [Realization("A 1", recv(lambda s: Ack(1).encode()))],
    "eof": [Realization("receive_data(b'')", lambda conn, s: conn.receive_data(b"", now=0.0))],
    "reset": [Realization("connection_lost()", lambda conn, s: conn.connection_lost(now=0.0))],
}

CLIENT_INPUTS: dict[str, list[Realization]] = {
    "send": [Realization("send_window([e])", lambda conn, s: conn.send_window([{"e": 1}], now=2.0))],
    "ack-partial": [Realization("A acked+1", recv(lambda s: Ack(s.acked + 1).encode()))],
    "ack-last": [Realization(f"A {N}", recv(lambda s: Ack(N).encode()))],
    "keepalive": [Realization("A 0", recv(lambda s: Ack(0).encode()))],
    "ack-bad": [
        Realization(f"A {N + 1} (no such event)", recv(lambda s: Ack(N + 1).encode())),
        Realization("A acked+1 with version '1'", recv(lambda s: Ack(s.acked + 1, V1).encode())),
        Realization("A acked-1 (backwards)", recv(lambda s: Ack(s.acked - 1).encode()), applies=lambda s: s.acked >= 2),
    ],
    "eof": [Realization("receive_data(b'')", lambda conn, s: conn.receive_data(b"", now=0.0))],
    "reset": [Realization("connection_lost()", lambda conn, s: conn.connection_lost(now=0.0))],
    "timeout": [
        Realization(
            "handle_timer(next_deadline())",
            lambda conn, s: conn.handle_timer(now=d if (d := conn.next_deadline()) is not None else 1000.0),
        )
    ],
}

REALIZATIONS = {"server": SERVER_INPUTS, "client": CLIENT_INPUTS}


@dataclass
class Observation:
    role: str
    setup: str
    inp: str
    label: str
    before: State
    after: State
    call_exc: BaseException | None
    pump_exc: RemoteProtocolError | None
    events: list[object]
    seen: set[tuple[str, str, str]] = field(default_factory=set)
    conn: Any = None

    @property
    def outcome(self) -> str:
        if isinstance(self.call_exc, RuntimeError):
            return "runtime"
        if self.call_exc is not None:
            return "local"
        if self.pump_exc is not None:
            return "sticky" if self.before is State.ERROR else "error"
        if (self.before, self.inp) in TABLES[self.role]:
            return "ok"
        if self.after is self.before and not self.seen:
            return "ignored"
        return f"unexpected {self.before.value} -> {self.after.value}, seen {self.seen}"


def run_case(role: str, setup_name: str, inp: str, real: Realization) -> Observation:
    setup = SETUPS[role][setup_name]
    conn = setup.build()
    assert conn.state is setup.state, f"setup {setup_name} reached {conn.state}"
    conn.transitions_seen.clear()
    call_exc: BaseException | None = None
    try:
        real.act(conn, setup)
    except (LocalProtocolError, RuntimeError) as exc:  # anything else is a bug and propagates
        call_exc = exc
    events, pump_exc = pump(conn)
    return Observation(
        role, setup_name, inp, real.label, setup.state, conn.state, call_exc, pump_exc, events, set(conn.transitions_seen), conn
    )


CASES = [
    (role, setup_name, inp, real)
    for role in ("server", "client")
    for setup_name in SETUPS[role]
    for inp in INPUTS[role]
    for real in REALIZATIONS[role][inp]
    if real.applies(SETUPS[role][setup_name])
]


def _param(role: str, setup_name: str, inp: str, real: Realization) -> Any:
    reason = KNOWN_BUGS.get((role, setup_name, inp))
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(role, setup_name, inp, real, id=f"{role}:{setup_name}:{inp}:{real.label}", marks=marks)


@pytest.mark.parametrize(("role", "setup_name", "inp", "real"), [_param(*c) for c in CASES])
def test_state_input_pair(role: str, setup_name: str, inp: str, real: Realization) -> None:
    obs = run_case(role, setup_name, inp, real)
    expected = GRIDS[role][(setup_name, inp)]
    detail = f"call raised {obs.call_exc!r}, next_event raised {obs.pump_exc!r}, events {obs.events}"
    assert obs.outcome == expected, f"{role} {setup_name} + {inp} ({real.label}): {obs.outcome}, grid says {expected}; {detail}"
    conn = obs.conn
    if expected == "ok":
        assert obs.after in TABLES[role][(obs.before, inp)], detail
        if inp in ("eof", "reset", "timeout"):
            assert isinstance(obs.events[-1], (ConnectionClosed, AckTimeout)), obs.events
    elif expected == "error":
        assert obs.after is State.ERROR
        with pytest.raises(RemoteProtocolError):  # the error is sticky
            conn.next_event()
    elif expected == "sticky":
        assert obs.after is State.ERROR
    else:  # local / runtime / ignored: nothing happened
        assert obs.after is obs.before and not obs.seen, detail
        if expected == "ignored" and obs.before not in TERMINAL:
            assert inp == "timeout" and conn.next_deadline() is None  # only a spurious timer may be ignored
        if expected == "local" and obs.before is State.AWAITING_ACK:
            # the refused send left the outstanding window intact and usable
            assert len(conn.unacked()) == N - SETUPS[role][setup_name].acked
            conn.receive_data(Ack(N).encode(), now=0.0)
            assert isinstance(conn.next_event(), AckReceived) and conn.state is State.IDLE
    if (obs.after in TERMINAL and expected != "local") or obs.before in TERMINAL:
        # a terminal machine stays unusable: ERROR re-raises; CLOSED said so once
        # (ConnectionClosed or AckTimeout) and then has nothing more, so a driver
        # delivering events until NEED_DATA stops
        if conn.state is State.ERROR:
            with pytest.raises(RemoteProtocolError):
                conn.next_event()
        else:
            assert conn.next_event() is NEED_DATA
            if obs.before is State.CLOSED:
                assert obs.events == [], obs.events
    if expected == "ok":  # last, so a KNOWN_BUGS xfail hides nothing above
        assert (obs.before.value, inp, obs.after.value) in obs.seen, f"transitions_seen = {obs.seen}"


@pytest.mark.parametrize("role", ["server", "client"])
def test_grid_agrees_with_table(role: str) -> None:
    """The readable grid above and the source table say the same thing."""
    grid, setups, table = GRIDS[role], SETUPS[role], TABLES[role]
    assert {s.state for s in setups.values()} == ROLE_STATES[role]
    assert set(grid) == {(name, inp) for name in setups for inp in INPUTS[role]}
    assert set(REALIZATIONS[role]) == set(INPUTS[role])
    assert {s for s, _ in table} | {t for ts in table.values() for t in ts} <= ROLE_STATES[role]
    assert {inp for _, inp in table} <= set(INPUTS[role])
    for (name, inp), cell in grid.items():
        assert (cell == "ok") == ((setups[name].state, inp) in table), (name, inp, cell)


@pytest.mark.parametrize("role", ["server", "client"])
def test_all_pairs_exercise_every_table_entry(role: str) -> None:
    """Coverage of the table itself: every (state, input) key and every target
    state it allows was reached by some case above."""
    observed = set()
    for r, setup_name, inp, real in CASES:
        if r == role:
            obs = run_case(r, setup_name, inp, real)
            if obs.outcome == "ok":
                observed.add((obs.before.value, inp, obs.after.value))
    assert observed == expand(TABLES[role])


@pytest.mark.parametrize(
    "role",
    [
        "server",
        "client",
    ],
)
def test_transitions_seen_reports_every_table_entry(role: str) -> None:
    """The machines' own coverage record agrees with the states observed."""
    seen: set[tuple[str, str, str]] = set()
    for r, setup_name, inp, real in CASES:
        if r == role:
            seen |= run_case(r, setup_name, inp, real).seen
    assert seen == expand(TABLES[role])


def test_server_reset_inside_a_batch_is_not_clean() -> None:
    conn = server_after(Window(2).encode(), J(1))
    conn.connection_lost(now=0.0)
    ev = conn.next_event()
    assert isinstance(ev, ConnectionClosed) and not ev.clean


# =========================================================================== 2. tables as pictures


def to_dot(name: str, table: Table, inputs: tuple[str, ...]) -> str:
    """The table as Graphviz: its transitions solid; every input it does not list
    for a live state dashed to ``error`` (the implicit rule of the table)."""
    live = sorted({s for s, _ in table}, key=lambda s: s.value)
    states = sorted(set(live) | {t for ts in table.values() for t in ts} | {State.ERROR}, key=lambda s: s.value)
    lines = [f"digraph {name} {{"]
    lines += [f'  "{s.value}"{" [shape=doublecircle]" if s not in live else ""};' for s in states]
    for (src, inp), targets in sorted(table.items(), key=lambda kv: (kv[0][0].value, kv[0][1])):
        lines += [f'  "{src.value}" -> "{t.value}" [label="{inp}"];' for t in sorted(targets, key=lambda t: t.value)]
    lines += [f'  "{s.value}" -> "error" [label="{inp}", style=dashed];' for s in live for inp in inputs if (s, inp) not in table]
    return "\n".join([*lines, "}"])


EDGE = re.compile(r'^  "([^"]+)" -> "([^"]+)" \[label="([^"]+)"(, style=dashed)?\];$', re.M)


@pytest.mark.parametrize("role", ["server", "client"])
def test_dot_rendering_is_the_table(role: str) -> None:
    table, inputs = TABLES[role], INPUTS[role]
    dot = to_dot(role, table, inputs)
    for s in ROLE_STATES[role]:
        assert f'"{s.value}"' in dot, s
    for inp in inputs:
        assert f'label="{inp}"' in dot, inp
    solid: dict[tuple[State, str], set[State]] = {}
    dashed = set()
    for src, dst, inp, is_dashed in EDGE.findall(dot):
        if is_dashed:
            assert dst == State.ERROR.value
            dashed.add((State(src), inp))
        else:
            solid.setdefault((State(src), inp), set()).add(State(dst))
    assert {k: frozenset(v) for k, v in solid.items()} == dict(table)
    assert dashed.isdisjoint(table) and len(dashed) + len(table) == len({s for s, _ in table}) * len(inputs)


# =========================================================================== 3. the machine contract


def test_the_sansio_docstring_example_works_as_written() -> None:
    """refwire.sansio's example, verbatim: verbs return nothing, bytes come from data_to_send()."""
    client, server = ClientConnection(), ServerConnection()
    assert client.send_window([{"a": 1}], now=0.0) is None  # type: ignore[func-returns-value]
    server.receive_data(client.data_to_send(), now=0.0)
    batch = server.next_event()
    assert isinstance(batch, Batch)
    assert server.accept(batch, now=0.0) is None  # type: ignore[func-returns-value]
    client.receive_data(server.data_to_send(), now=0.0)
    assert client.next_event() == AckReceived(seq=1, newly=1, total=1, complete=True)
    assert client.data_to_send() == server.data_to_send() == b""


def test_verbs_are_send_with_an_event() -> None:
    a, b = ClientConnection(compression_level=0), ClientConnection(compression_level=0)
    a.send_window([{"x": 1}, {"y": 2}], now=1.0)
    b.send(SendWindow([{"x": 1}, {"y": 2}]), now=1.0)
    wire = a.data_to_send()
    assert wire == b.data_to_send() and wire[:6] == Window(2).encode()
    s1, s2 = ServerConnection(), ServerConnection()
    for s in (s1, s2):
        s.receive_data(wire, now=2.0)
    b1, b2 = s1.next_event(), s2.next_event()
    assert isinstance(b1, Batch) and isinstance(b2, Batch)
    s1.accept(b1, now=3.0)
    s2.send(Accept(b2), now=3.0)
    assert s1.data_to_send() == s2.data_to_send() == Ack(2).encode()
    with pytest.raises(TypeError):
        s1.send(b"raw bytes", now=3.0)
    with pytest.raises(TypeError):
        a.send(Accept(b1), now=3.0)


def test_closing_events_come_once() -> None:
    """A pump delivers until NEED_DATA: each closing event is returned once."""
    server = ServerConnection()
    server.receive_data(b"", now=0.0)
    assert server.next_event() == ConnectionClosed(clean=True)
    assert server.next_event() is NEED_DATA
    client = ClientConnection()
    client.connection_lost(now=0.0)
    assert client.next_event() == ConnectionClosed(clean=False, reason="reset")
    assert client.next_event() is NEED_DATA


def test_now_is_required() -> None:
    conn = ServerConnection()
    with pytest.raises(TypeError):
        conn.receive_data(b"", 0.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        conn.handle_timer(0.0)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ClientConnection().send_window([{"a": 1}])  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="now="):
        ServerConnection(idle_timeout=60.0)


def test_send_failed_server_leaves_batches_unacked() -> None:
    conn = server_after(Window(1).encode(), J(1))
    assert conn.pending_batches == 1 and not conn.lost
    conn.handle_timer(now=5.0)  # a keepalive the driver then fails to write
    conn.send_failed(now=5.0)
    assert conn.data_to_send() == b""
    assert conn.state is State.CLOSED and conn.lost and conn.pending_batches == 1
    assert conn.next_event() == ConnectionClosed(clean=False, reason="write failed")
    assert conn.next_event() is NEED_DATA


def test_send_failed_client_keeps_the_window_for_a_resend() -> None:
    conn = ClientConnection(compression_level=0)
    conn.send_window([{"n": i} for i in range(4)], now=0.0)
    conn.receive_data(Ack(1).encode(), now=1.0)
    assert isinstance(conn.next_event(), AckReceived)
    conn.send_failed(now=2.0)
    assert conn.data_to_send() == b""
    assert conn.state is State.CLOSED and conn.next_deadline() is None
    assert conn.next_event() == ConnectionClosed(clean=False, reason="write failed")
    assert conn.unacked() == [{"n": 1}, {"n": 2}, {"n": 3}]


# -- the server's receive timers (idle, batch, shutdown), in the machine


def timed_server(**kwargs: Any) -> ServerConnection:
    return ServerConnection(**{"idle_timeout": 60.0, "batch_timeout": 30.0, "keepalive_interval": 5.0, "now": 100.0, **kwargs})


def test_idle_timeout_counts_from_the_start_the_last_byte_and_the_last_ack() -> None:
    conn = timed_server()
    assert conn.next_deadline() == 160.0
    conn.handle_timer(now=159.9)
    assert conn.next_event() is NEED_DATA
    conn.receive_data(Window(1).encode() + J(1), now=120.0)  # a whole batch: pending, no receive timer
    batch = conn.next_event()
    assert isinstance(batch, Batch)
    assert conn.next_deadline() == 125.0  # only the keepalive
    conn.accept(batch, now=200.0)
    assert conn.next_deadline() == 260.0  # idle again, counted from the ack
    conn.handle_timer(now=260.0)
    assert conn.next_event() == IdleTimeout(60.0)
    assert conn.next_deadline() is None and conn.next_event() is NEED_DATA
    assert conn.state is State.AWAIT_WINDOW and not conn.transitions_seen - {
        ("await-window", "W", "in-batch"),
        ("in-batch", "data", "await-window"),
    }


def test_batch_timeout_counts_from_the_last_byte_of_an_incomplete_batch() -> None:
    conn = timed_server()
    conn.receive_data(Window(2).encode(), now=110.0)
    assert conn.next_event() is NEED_DATA and conn.next_deadline() == 140.0
    conn.receive_data(J(1)[:3], now=120.0)  # part of a frame
    assert conn.next_event() is NEED_DATA and conn.next_deadline() == 150.0
    conn.handle_timer(now=149.0)
    assert conn.next_event() is NEED_DATA
    conn.handle_timer(now=150.0)
    assert conn.next_event() == BatchTimeout(30.0)
    assert conn.next_deadline() is None


def test_receive_timers_pause_while_the_driver_waits_for_the_application() -> None:
    """Beyond pipeline_depth pending batches the driver reads nothing: no receive timer;
    keepalives go on."""
    conn = timed_server(pipeline_depth=2)
    data = b"".join(Window(1).encode() + J(i) for i in (1, 2, 3)) + Window(2).encode()
    conn.receive_data(data, now=110.0)
    batches = [b for _ in range(3) if isinstance(b := conn.next_event(), Batch)]
    assert len(batches) == 3 and conn.next_event() is NEED_DATA
    assert conn.mid_batch and conn.pending_batches == 3
    assert conn.next_deadline() == 115.0  # the keepalive only
    conn.accept(batches[0], now=150.0)  # two pending: the driver reads again
    assert conn.next_deadline() == 140.0  # the batch timeout, already due
    conn.handle_timer(now=150.0)
    assert conn.data_to_send() == Ack(1).encode()  # the next keepalive counts from the ack
    assert conn.next_event() == BatchTimeout(40.0)


def test_close_when_idle() -> None:
    conn = timed_server()
    conn.receive_data(Window(1).encode() + J(1), now=110.0)
    batch = conn.next_event()
    assert isinstance(batch, Batch)
    conn.close_when_idle(now=111.0)
    assert conn.next_deadline() == 115.0  # busy: the batch finishes first (keepalive meanwhile)
    conn.accept(batch, now=112.0)
    assert conn.next_deadline() == 111.0  # idle now: due at once
    conn.handle_timer(now=112.0)
    assert conn.next_event() == IdleAtShutdown()
    idle = timed_server()
    idle.close_when_idle(now=100.5)
    idle.handle_timer(now=100.5)
    assert idle.next_event() == IdleAtShutdown()


def test_the_package_exports_the_core_only() -> None:
    """``import refwire.lumberjack`` loads no trio, simulator or pipeline: the drivers are
    imported from its ``client`` / ``server`` modules explicitly."""
    import subprocess
    import sys

    code = (
        "import sys, refwire.lumberjack as p; "
        "bad = [m for m in sys.modules if m == 'trio' or m.startswith(('refwire.sim', 'refwire.pipeline'))]; "
        "assert not bad, bad; "
        "assert all(hasattr(p, name) for name in p.__all__)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
