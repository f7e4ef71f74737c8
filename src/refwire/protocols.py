"""The protocols refwire implements, each described once.

Every protocol package holds a ``descriptor.py`` with one :class:`Descriptor`:
its name, its spec, and *where* its pieces are -- the CLI commands, the
simulator scenario, the capture decoder, the capture rules, the conformance
cases and the machines' transition tables -- as lazy ``"module:attribute"`` strings.  The command line,
the simulator, the pipeline and the conformance tools all read this one
registry, so adding a protocol is one folder plus one line in :data:`PACKAGES`,
and importing a protocol's core never imports trio, the simulator or the
pipeline (nothing named here is imported until it is asked for)::

    >>> from refwire.protocols import descriptor
    >>> descriptor("lumberjack").spec
    'lumberjack'
    >>> descriptor("lumberjack").load("decoder")  # doctest: +ELLIPSIS
    <function decode at ...>
"""

from __future__ import annotations

import importlib
from typing import Any, Literal

import attrs

__all__ = ["PACKAGES", "Descriptor", "descriptor", "load", "names", "registry"]

#: The protocol packages, in the order commands and tables list them.
PACKAGES: tuple[str, ...] = (
    "refwire.lumberjack",
    "refwire.pravega",
    "refwire.pravega.draft2017",
    "refwire.tank",
    "refwire.seastar_rpc",
)

#: The pieces a descriptor may name.
Piece = Literal["cli", "scenario", "decoder", "rules", "conform", "chaos", "reference_server", "describer", "layout", "dissector"]


def load(ref: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute."""
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"{ref!r} is not a 'module:attribute' reference")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@attrs.frozen(kw_only=True)
class Descriptor:
    """One protocol's entry: what it is called and where its pieces live.

    Every piece is optional (the 2017 Pravega draft has no capture decoder yet);
    :meth:`load` imports one on demand.
    """

    #: The name used on the command line, in campaign rows and captures (``"seastar-rpc"``).
    name: str
    #: A one-line title for help texts and reports.
    title: str
    #: The folder under ``specs/`` with the protocol's README and vectors.
    spec: str
    #: The package of its core (frames, events, connection machines).
    package: str
    #: ``register(Commands)`` adding its ``serve``/``send``/... subcommands.
    cli: str | None = None
    #: ``describer(max_frame_size, direction="c2s", session=None)``: a fresh lenient
    #: :class:`refwire.describe.Describer` of one direction of one connection, the one
    #: reading of its traffic every tool uses.
    describer: str | None = None
    #: Its frames as data, a :class:`refwire.describe.Layout` (fixed-position fields per frame type).
    layout: str | None = None
    #: Its Wireshark dissector part (a :class:`refwire.dissector.generate.Part`): what of the
    #: Lua ``refwire dissector`` generates from :attr:`layout` is its own (ports, heuristic,
    #: the hand-written Lua for what a table cannot say).
    dissector: str | None = None
    #: Its simulator scenario (a :class:`refwire.sim.scenarios.Scenario`).
    scenario: str | None = None
    #: Its capture decoder (a :class:`refwire.pipeline.decoders.Decoder`).
    decoder: str | None = None
    #: Its capture rules (a list of :class:`refwire.pipeline.rulekit.Rule`).
    rules: str | None = None
    #: Its conformance cases (a :class:`refwire.conform.runner.Catalogue`).
    conform: str | None = None
    #: Its fault-proxy adapter (a :class:`refwire.chaos.adapter.Adapter`): how ``refwire chaos``
    #: cuts its traffic into frames, which fields rules may name, and its ``--check`` invariants.
    chaos: str | None = None
    #: ``async serve_reference(nursery, config) -> RunningServer``: starts refwire's own server on
    #: 127.0.0.1 and a free port (see :mod:`refwire.reference`); the pytest plugin's fixture runs it.
    reference_server: str | None = None
    #: The name of the pytest fixture that runs :attr:`reference_server` (``<fixture>_config`` is its config).
    fixture: str | None = None
    #: ``(machine name, "module:TABLE")`` per machine: each table maps
    #: ``(state, input)`` to the next state(s) (see :mod:`refwire.sansio`).
    machines: tuple[tuple[str, str], ...] = ()

    def has(self, piece: Piece) -> bool:
        return getattr(self, piece) is not None

    def load(self, piece: Piece) -> Any:
        """The named piece, imported now; a clear error when the protocol lacks it."""
        ref = getattr(self, piece)
        if ref is None:
            raise LookupError(f"{self.name} has no {piece}")
        return load(ref)

    def transition_tables(self) -> list[tuple[str, Any]]:
        """``(machine name, table)`` for each of its machines."""
        return [(machine, load(ref)) for machine, ref in self.machines]


_REGISTRY: dict[str, Descriptor] | None = None


def registry() -> dict[str, Descriptor]:
    """name -> descriptor for every package in :data:`PACKAGES` (built once; the
    dict is shared, so a test may add an entry with ``monkeypatch.setitem``)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, Descriptor] = {}
        for package in PACKAGES:
            d = load(f"{package}.descriptor:DESCRIPTOR")
            if not isinstance(d, Descriptor):
                raise TypeError(f"{package}.descriptor.DESCRIPTOR is not a Descriptor")
            if d.name in found:
                raise ValueError(f"two protocols are called {d.name!r}")
            found[d.name] = d
        _REGISTRY = found
    return _REGISTRY


def names(piece: Piece | None = None) -> tuple[str, ...]:
    """The protocols' names, in :data:`PACKAGES` order; with ``piece``, only those that have it."""
    return tuple(n for n, d in registry().items() if piece is None or d.has(piece))


def descriptor(name: str, piece: Piece | None = None) -> Descriptor:
    """The protocol called ``name`` (which must have ``piece``, if given);
    :class:`ValueError` naming the known ones otherwise."""
    d = registry().get(name)
    if d is None or (piece is not None and not d.has(piece)):
        what = {
            "cli": "commands",
            "scenario": "simulation scenario",
            "decoder": "capture decoder",
            "rules": "capture rules",
            "conform": "conformance cases",
            "chaos": "fault-proxy adapter",
            "reference_server": "reference server",
            "describer": "describer",
            "layout": "frame layout",
            "dissector": "Wireshark dissector",
            "machines": "state machines",
            None: "protocol",
        }.get(piece, str(piece))
        raise ValueError(f"no {what} for {name!r}; known: {', '.join(names(piece))}")
    return d
