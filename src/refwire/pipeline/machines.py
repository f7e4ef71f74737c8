"""Every state and transition of each protocol's machines, for the coverage table.

A campaign row lists the transitions a run saw as ``"machine:state-input->state"``
strings (the scenarios build them from each machine's ``transitions_seen``).
The coverage table also needs the ones *never* seen, so it needs each
machine's whole transition table: that is :data:`CATALOGS`, protocol name ->
function returning :class:`Transition` values.  Adding a protocol is one small
function that walks its ``*_TRANSITIONS`` tables (every machine keeps its
states and transitions in a table, as data: see :mod:`refwire.sansio`).

A scenario may instead expose ``all_transitions()`` returning the same strings;
:func:`catalog` uses it when the protocol has no entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

__all__ = ["CATALOGS", "Transition", "catalog", "parse_transition"]


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


def _lumberjack() -> list[Transition]:
    from refwire.lumberjack.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

    return _from_table("client", CLIENT_TRANSITIONS) + _from_table("server", SERVER_TRANSITIONS)


def _pravega() -> list[Transition]:
    from refwire.pravega.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

    return _from_table("client", CLIENT_TRANSITIONS) + _from_table("server", SERVER_TRANSITIONS)


def _pravega_draft() -> list[Transition]:
    from refwire.pravega.draft2017.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

    return _from_table("client", CLIENT_TRANSITIONS) + _from_table("server", SERVER_TRANSITIONS)


def _tank() -> list[Transition]:
    from refwire.tank.connection import BROKER_TRANSITIONS, CLIENT_TRANSITIONS

    return _from_table("client", CLIENT_TRANSITIONS) + _from_table("broker", BROKER_TRANSITIONS)


def _seastar_rpc() -> list[Transition]:
    from refwire.seastar_rpc.connection import CLIENT_TRANSITIONS, SERVER_TRANSITIONS

    return _from_table("client", CLIENT_TRANSITIONS) + _from_table("server", SERVER_TRANSITIONS)


#: protocol -> its machines' whole transition tables.  The machine names are the
#: ones the scenarios put in front of the transitions they saw (sim/scenarios/*.py).
CATALOGS: dict[str, Callable[[], list[Transition]]] = {
    "lumberjack": _lumberjack,
    "pravega": _pravega,
    "pravega-draft-2017": _pravega_draft,
    "tank": _tank,
    "seastar-rpc": _seastar_rpc,
}


def catalog(protocol: str) -> list[Transition] | None:
    """Every transition of ``protocol``'s machines, sorted; None when unknown."""
    fn = CATALOGS.get(protocol)
    if fn is not None:
        return sorted(set(fn()))
    try:
        from refwire.sim.scenarios import SCENARIOS

        scenario = SCENARIOS.get(protocol)
    except ImportError:  # pragma: no cover - refwire.sim ships with refwire
        scenario = None
    hook = getattr(scenario, "all_transitions", None)
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
