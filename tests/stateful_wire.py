"""Helpers the stateful (RuleBasedStateMachine) tests of the client/server
machine pairs share: one direction of an in-memory wire, the chunk sizes
hypothesis cuts it into, and the transition tables as reachability."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

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
