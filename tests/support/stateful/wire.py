"""What the stateful (RuleBasedStateMachine) models of the client/server
machine pairs share (``tests/test_stateful.py`` runs them): one direction of an
in-memory wire, the chunk sizes hypothesis cuts it into, the transition tables
as reachability, and :class:`MachinePair`, the base every dialect's model
(``support.stateful.<dialect>``) builds on."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

#: bytes moved by one step: torn frames, larger pieces, and whole flights
CHUNK = st.one_of(st.integers(1, 12), st.integers(13, 4096), st.just(1 << 20))


class Pipe:
    """One direction of the wire: bytes in flight, then (maybe) the writer's EOF."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.closing = False  # the writer closed: EOF follows the buffered bytes
        self.eof_delivered = False

    @property
    def busy(self) -> bool:
        return bool(self.buf) or (self.closing and not self.eof_delivered)

    def take(self, n: int) -> bytes:
        """The next ``n`` bytes, or ``b""`` (the EOF) once the buffer is empty and the writer closed."""
        if self.buf:
            chunk = bytes(self.buf[:n])
            del self.buf[:n]
            return chunk
        assert self.closing and not self.eof_delivered
        self.eof_delivered = True
        return b""

    def cut(self) -> None:
        """The transport broke: what was in flight is lost, nothing more arrives."""
        self.buf.clear()
        self.closing = self.eof_delivered = True


def triples(table: Mapping[tuple[Any, str], Any]) -> set[tuple[str, str, str]]:
    """The (state, input, new state) triples a table allows, as ``transitions_seen`` records them."""
    out = set()
    for (src, inp), dst in table.items():
        for d in dst if isinstance(dst, Iterable) and not hasattr(dst, "value") else (dst,):
            out.add((src.value, inp, d.value))
    return out


def reachable(table: Mapping[tuple[Any, str], Any], states: Iterable[Any]) -> dict[Any, set[Any]]:
    """state -> every state the table can move it to in any number of steps (itself included)."""
    edges: dict[Any, set[Any]] = {}
    for (src, _inp), dst in table.items():
        for d in dst if isinstance(dst, Iterable) and not hasattr(dst, "value") else (dst,):
            edges.setdefault(src, set()).add(d)
    out: dict[Any, set[Any]] = {}
    for s in states:
        seen, todo = {s}, [s]
        while todo:
            for n in edges.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        out[s] = seen
    return out


def moves_along(history: list[Any], reach: Mapping[Any, set[Any]]) -> None:
    """Assert every change of state in ``history`` is a path of the table."""
    for a, b in itertools.pairwise(history):
        assert b in reach[a], f"{a} -> {b} is not a path of the transition table"


class MachinePair(RuleBasedStateMachine):
    """What the client/server pair machines share: the wire between the two
    machines, the end of a connection and the reconnect, and the invariants on
    the machines' states.

    A subclass names its roles (``ROLES``: the client first; the attribute of
    each role's machine is the role's name, the attribute of its
    ``ConnectionClosed`` (or ``None``) is ``<role>_closed``), gives its
    protocol's ``STATE`` enum and transition tables, keeps ``now``, ``c2s``,
    ``s2c`` and ``states`` (role -> the states seen on this connection), and
    has ``pump_<role>()`` methods that hand the machine's events to the model.
    It may cut its wire into pieces of its own (``CHUNK``).
    """

    ROLES: tuple[str, str] = ("client", "server")
    STATE: Any  # the protocol's State enum (ERROR, CLOSED)
    #: the transition tables of the two roles' machines, in ``ROLES`` order
    TABLES: tuple[Mapping[tuple[Any, str], Any], Mapping[tuple[Any, str], Any]]
    #: role -> the (state, input, new state) triples its table allows, and what each state can reach
    TRIPLES: ClassVar[dict[str, set[tuple[str, str, str]]]]
    REACHABLE: ClassVar[dict[str, dict[Any, set[Any]]]]
    #: the sizes of the pieces ``move_c2s`` and ``move_s2c`` move
    CHUNK: ClassVar[st.SearchStrategy[int]] = CHUNK
    #: steps of a connection before the end-of-connection rule may run (let traffic flow first)
    END_AFTER_STEPS = 6
    #: the order ``connection_ends`` pumps the two sides in
    PUMP_ORDER: tuple[str, str] = ("server", "client")
    #: tell a machine that already closed about a reset (and check it stays quiet) or skip it
    TELL_CLOSED = False
    #: what ``collect`` says a machine did wrong when it wrote after its end
    WROTE_AFTER = "after its connection ended"

    now: float
    c2s: Pipe
    s2c: Pipe
    states: dict[str, list[Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TABLES" in vars(cls):
            cls.TRIPLES = {role: triples(table) for role, table in zip(cls.ROLES, cls.TABLES, strict=True)}
            cls.REACHABLE = {role: reachable(table, cls.STATE) for role, table in zip(cls.ROLES, cls.TABLES, strict=True)}

    def __init__(self) -> None:
        super().__init__()
        self.timer_last = False
        self.steps = 0

    # -- the two sides, by role ---------------------------------------------------
    def machine(self, role: str) -> Any:
        return getattr(self, role)

    def closed(self, role: str) -> Any:
        return getattr(self, f"{role}_closed")

    def pump(self, role: str) -> None:
        getattr(self, f"pump_{role}")()

    @property
    def open(self) -> bool:
        """Some side has not seen its connection end yet."""
        return any(self.closed(role) is None for role in self.ROLES)

    # -- hooks --------------------------------------------------------------------
    def app_shuts_write(self, who: str) -> None:
        """The application on ``who``'s side shuts its write (before the EOF is queued)."""

    def check_cut(self, was_open: Mapping[str, bool], who: str, how: str) -> None:
        """After a reset or failed write (``how``: ``"reset"`` or ``"send_failed"``, on
        ``who``'s side), both sides' connections ended (``was_open``: whose had not before)."""

    def may_end(self) -> bool:
        """Whether the end-of-connection rule may run now (some side's connection is open)."""
        return self.steps >= self.END_AFTER_STEPS

    def ended(self) -> None:
        """Before a new connection replaces one that ended."""

    # -- plumbing -----------------------------------------------------------------
    def collect(self) -> None:
        """Move what each machine owes onto its pipe (nothing once that side closed its write)."""
        for role, pipe in zip(self.ROLES, (self.c2s, self.s2c), strict=True):
            machine = self.machine(role)
            out = machine.data_to_send()
            if self.closed(role) is not None:
                assert out == b"", f"{type(machine).__name__} wrote {len(out)} bytes {self.WROTE_AFTER}"
            elif not pipe.closing:  # else the application shut this side's write: the driver writes nothing more
                pipe.buf += out
        for role in self.ROLES:
            m = self.machine(role)
            if m.state is not self.states[role][-1]:
                self.states[role].append(m.state)

    # -- rules: the wire ----------------------------------------------------------
    @precondition(lambda self: self.c2s.busy)
    @rule(n=st.runner().flatmap(lambda pair: pair.CHUNK))
    def move_c2s(self, n: int) -> None:
        self.timer_last = False
        self.machine(self.ROLES[1]).receive_data(self.c2s.take(n), now=self.now)
        self.pump(self.ROLES[1])

    @precondition(lambda self: self.s2c.busy)
    @rule(n=st.runner().flatmap(lambda pair: pair.CHUNK))
    def move_s2c(self, n: int) -> None:
        self.timer_last = False
        self.machine(self.ROLES[0]).receive_data(self.s2c.take(n), now=self.now)
        self.pump(self.ROLES[0])

    # -- rules: the end of the connection ------------------------------------------
    @precondition(lambda self: self.open and self.may_end())
    @rule(
        who=st.runner().flatmap(lambda pair: st.sampled_from(pair.ROLES)),
        how=st.sampled_from(["eof", "reset", "send_failed"]),
    )
    def connection_ends(self, who: str, how: str) -> None:
        self.timer_last = False
        other = self.ROLES[1] if who == self.ROLES[0] else self.ROLES[0]
        was_open = {role: self.closed(role) is None for role in self.ROLES}
        me, peer = self.machine(who), self.machine(other)
        out, back = (self.c2s, self.s2c) if who == self.ROLES[0] else (self.s2c, self.c2s)
        if how == "eof":
            self.app_shuts_write(who)
            out.closing = True  # this side shuts its write: EOF after the bytes in flight
        else:
            # a machine whose driver already closed the socket is not told again (unless TELL_CLOSED)
            if was_open[who] or self.TELL_CLOSED:
                if how == "reset":
                    me.connection_lost(now=self.now)
                else:
                    me.send_failed(now=self.now)
                assert me.data_to_send() == b""
            # the transport is gone both ways: what was in flight is lost
            out.cut()
            back.cut()
            if was_open[other] or self.TELL_CLOSED:
                peer.connection_lost(now=self.now)
        for role in self.PUMP_ORDER:
            self.pump(role)
        if how != "eof":
            for role in self.ROLES:
                assert self.closed(role) is not None, f"the {role} did not see its connection end"
            self.check_cut(was_open, who, how)

    @precondition(lambda self: not self.open and not self.c2s.busy and not self.s2c.busy)
    @rule()
    def reconnect(self) -> None:
        self.timer_last = False
        self.ended()
        self.new_connection()

    def new_connection(self) -> None:
        raise NotImplementedError

    # -- invariants ---------------------------------------------------------------
    @invariant()
    def count_steps(self) -> None:
        self.steps += 1

    @invariant()
    def nobody_is_in_error(self) -> None:
        for role in self.ROLES:
            assert self.machine(role).state is not self.STATE.ERROR, f"the {role} is in ERROR"

    @invariant()
    def states_move_along_the_tables(self) -> None:
        for role in self.ROLES:
            m = self.machine(role)
            assert m.transitions_seen <= self.TRIPLES[role], m.transitions_seen - self.TRIPLES[role]
            moves_along(self.states[role], self.REACHABLE[role])
