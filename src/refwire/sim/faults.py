"""Fault knobs for the simulated network, and swarm generation per seed.

A :class:`Faults` value is immutable; :class:`~refwire.sim.net.SimNet` reads
``net.faults`` at every operation, so replacing the attribute (for instance with
:meth:`Faults.healed` at the start of the liveness phase) takes effect on
existing connections too.

Probabilities are in ``[0, 1]``; times are seconds of virtual time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import attrs

from .rand import SimRandom

__all__ = ["FAULT_GROUPS", "FAULT_KINDS", "PROBABILITY_KNOBS", "TIME_KNOBS", "Faults"]

#: Knobs that are probabilities (validated to lie in [0, 1]).
PROBABILITY_KNOBS: tuple[str, ...] = (
    "partial_read",
    "trickle",
    "boundary_split",
    "stall_prob",
    "reset_prob",
    "blackhole_prob",
    "torn_write_prob",
    "connect_refuse_prob",
)

#: Knobs that are durations in virtual seconds (validated to be >= 0).
TIME_KNOBS: tuple[str, ...] = ("latency_min", "latency_mean", "stall_mean")

#: Fault kind -> the knobs it consists of.  The shrinker switches off a whole
#: kind at a time with ``faults.without(kind)``.
FAULT_GROUPS: dict[str, tuple[str, ...]] = {
    "partial_read": ("partial_read",),
    "trickle": ("trickle",),
    "boundary_split": ("boundary_split",),
    "latency": ("latency_min", "latency_mean"),
    "stall": ("stall_prob", "stall_mean"),
    "reset": ("reset_prob",),
    "blackhole": ("blackhole_prob",),
    "torn_write": ("torn_write_prob",),
    "connect_refuse": ("connect_refuse_prob",),
}

#: The fault kinds, in a fixed order (the order :meth:`Faults.swarm` draws them).
FAULT_KINDS: tuple[str, ...] = tuple(FAULT_GROUPS)

#: Swarm ranges per knob: (low, high) of a uniform draw when the kind is on.
_SWARM_RANGES: dict[str, tuple[float, float]] = {
    "partial_read": (0.0, 1.0),
    "trickle": (0.0, 0.3),
    "boundary_split": (0.0, 0.3),
    "latency_min": (0.0, 0.03),
    "latency_mean": (0.001, 0.1),
    "stall_prob": (0.0, 0.02),
    "stall_mean": (0.0, 5.0),
    "reset_prob": (0.0, 0.005),
    "blackhole_prob": (0.0, 0.001),
    "torn_write_prob": (0.0, 0.05),
    "connect_refuse_prob": (0.0, 0.2),
}


def _probability(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValueError(f"{attribute.name} must be a probability in [0, 1], got {value!r}")


def _duration(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{attribute.name} must be a finite duration >= 0, got {value!r}")


def _knob(kind: str) -> Any:
    validator = _probability if kind == "p" else _duration
    return attrs.field(default=0.0, converter=float, validator=validator)


@attrs.frozen
class Faults:
    """Fault knobs of a simulated TCP network (all zero = a perfect network).

    Attributes:
        partial_read: probability that a receive returns fewer bytes than are
            ready (a uniform size in ``1..available``).
        trickle: probability that a receive returns exactly one byte.
        boundary_split: probability that a receive is cut at a write boundary
            (the end of some ``send_all``) minus one, exactly, or plus one.
        latency_min: minimum one-way delivery latency per write.
        latency_mean: mean of the exponential part added above ``latency_min``
            (capped at ten times the mean).
        stall_prob: per write, probability that the pipe freezes for
            ``expo(stall_mean)`` seconds (delay only, nothing is lost).
        stall_mean: mean stall duration.
        reset_prob: per ``send_all`` / ``receive_some`` call, probability that
            the connection is reset (RST).
        blackhole_prob: per write, probability that the connection becomes
            half-open: later writes in both directions vanish, no EOF ever.
        torn_write_prob: per ``send_all``, probability that a random prefix is
            delivered, then the sender waits (a checkpoint plus a latency-sized
            virtual sleep) before the rest, so a cancel leaves a prefix on the wire.
        connect_refuse_prob: per ``connect``, probability of
            ``ConnectionRefusedError`` even though a listener exists.
    """

    partial_read: float = _knob("p")
    trickle: float = _knob("p")
    boundary_split: float = _knob("p")
    latency_min: float = _knob("t")
    latency_mean: float = _knob("t")
    stall_prob: float = _knob("p")
    stall_mean: float = _knob("t")
    reset_prob: float = _knob("p")
    blackhole_prob: float = _knob("p")
    torn_write_prob: float = _knob("p")
    connect_refuse_prob: float = _knob("p")

    @classmethod
    def none(cls) -> Faults:
        """A perfect network: no faults, no latency."""
        return cls()

    @classmethod
    def swarm(cls, rng: SimRandom) -> Faults:
        """Draw a swarm-testing configuration from ``rng``.

        Each fault kind (see :data:`FAULT_KINDS`) is switched on by a fair coin;
        when on, each of its knobs gets a uniform value from its range.  Every
        coin and value is drawn whether or not it is used, so the draws for one
        kind never depend on another kind's outcome.  Pass a dedicated child
        stream, e.g. ``rng.child("faults")``.
        """
        values: dict[str, float] = {}
        for kind in FAULT_KINDS:
            on = rng.chance(0.5)
            for knob in FAULT_GROUPS[kind]:
                lo, hi = _SWARM_RANGES[knob]
                value = rng.between(lo, hi)
                values[knob] = value if on else 0.0
        return cls(**values)

    def to_dict(self) -> dict[str, float]:
        """All knobs as a plain ``{name: value}`` dict (JSON-friendly)."""
        return {a.name: float(getattr(self, a.name)) for a in attrs.fields(Faults)}

    @classmethod
    def from_dict(cls, d: Mapping[str, float]) -> Faults:
        """Inverse of :meth:`to_dict`; missing knobs are 0, unknown keys an error."""
        known = {a.name for a in attrs.fields(Faults)}
        unknown = sorted(k for k in d if k not in known)
        if unknown:
            raise ValueError(f"unknown fault knobs: {', '.join(unknown)}")
        return cls(**{k: float(v) for k, v in d.items()})

    def banner(self) -> str:
        """One line ``k=v ...`` listing only the non-zero knobs (``"none"`` if all are zero)."""
        parts = [f"{k}={v:.6g}" for k, v in self.to_dict().items() if v != 0.0]
        return " ".join(parts) if parts else "none"

    def without(self, *names: str) -> Faults:
        """Return a copy with the named fault kinds or individual knobs set to 0."""
        changes: dict[str, float] = {}
        knobs = set(PROBABILITY_KNOBS) | set(TIME_KNOBS)
        for name in names:
            if name in FAULT_GROUPS:
                changes.update(dict.fromkeys(FAULT_GROUPS[name], 0.0))
            elif name in knobs:
                changes[name] = 0.0
            else:
                raise ValueError(f"unknown fault kind or knob: {name!r}")
        return attrs.evolve(self, **changes)

    def healed(self) -> Faults:
        """Everything off except latency (for the liveness phase)."""
        return Faults(latency_min=self.latency_min, latency_mean=self.latency_mean)

    def enabled_kinds(self) -> tuple[str, ...]:
        """The fault kinds with at least one non-zero knob, in :data:`FAULT_KINDS` order."""
        return tuple(k for k in FAULT_KINDS if any(getattr(self, n) != 0.0 for n in FAULT_GROUPS[k]))
