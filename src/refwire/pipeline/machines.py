"""Every state and transition of each protocol's machines, for the coverage table.

A campaign row lists the transitions a run saw as ``"machine:state-input->state"``
strings (the scenarios build them from each machine's ``transitions_seen``).
The coverage table also needs the ones *never* seen, so it needs each
machine's whole transition table (:func:`catalog`).  The tables are named in
each protocol's descriptor (:mod:`refwire.protocols`): every machine keeps its
states and transitions in a table, as data (see :mod:`refwire.sansio`).

A scenario may instead expose ``all_transitions()`` returning the same strings;
:func:`catalog` uses it when the protocol's descriptor names no tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = ["Transition", "catalog", "parse_transition"]


@attrs.frozen(order=True)
class Transition:
    machine: str
    source: str
    input: str
    target: str

    @property
    def key(self) -> str:
        """The string form the simulator reports."""
        return f"{self.machine}:{self.source}-{self.input}->{self.target}"


def _from_table(machine: str, table: Mapping[Any, Any]) -> list[Transition]:
    """Walk a ``(state, input) -> target`` table; a target may be one state or a set of them."""
    out = []
    for (state, inp), targets in table.items():
        many: Iterable[Any] = targets if isinstance(targets, frozenset | set | tuple | list) else (targets,)
        for t in many:
            out.append(Transition(machine, str(getattr(state, "value", state)), inp, str(getattr(t, "value", t))))
    return out


def catalog(protocol: str) -> list[Transition] | None:
    """Every transition of ``protocol``'s machines, sorted; None when unknown.

    The tables come from the protocol's descriptor (:mod:`refwire.protocols`);
    a protocol without tables there may have a scenario with ``all_transitions()``.
    """
    from refwire.protocols import registry

    d = registry().get(protocol)
    if d is None:
        return None
    if d.machines:
        return sorted({t for machine, table in d.transition_tables() for t in _from_table(machine, table)})
    if d.scenario is None:
        return None
    hook = getattr(d.load("scenario"), "all_transitions", None)
    if hook is None:
        return None
    out = [parse_transition(k) for k in hook()]
    return sorted({t for t in out if t is not None})


def parse_transition(key: str, known: Mapping[str, Transition] | None = None) -> Transition | None:
    """Split ``"machine:state-input->state"``.

    State names may contain ``-`` themselves, so an exact split needs the
    catalogue (``known``, key -> transition); without it the input is taken to
    be the last ``-``-separated word before ``->``.
    """
    if known is not None and key in known:
        return known[key]
    machine, sep, rest = key.partition(":")
    left, arrow, target = rest.rpartition("->")
    if not sep or not arrow:
        return None
    source, dash, inp = left.rpartition("-")
    if not dash:
        return None
    return Transition(machine, source, inp, target)
