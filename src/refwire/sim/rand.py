"""Seeded, named random streams for the simulator.

One simulation seed fixes every decision.  Rather than sharing one generator
(where adding a connection would shift every later draw), each consumer asks for
a *child* stream named by a path, e.g. ``rng.child("net", "c3", "a>b")``.  The
child's state is derived from ``(seed, path)`` through SHA-256 only, so it is
independent of how many draws other streams made and of creation order.

Python only promises that ``Random.random()`` and ``Random.getrandbits()``
produce the same values for the same seed across versions (``randint``,
``choice``, ``shuffle`` and friends have changed in the past).  All helpers here
are therefore built on those two primitives.  Helpers whose outcome is a
yes/no decision (:meth:`SimRandom.chance`, :meth:`SimRandom.expo`,
:meth:`SimRandom.between`) consume exactly one draw whatever their arguments,
so switching a fault knob off does not shift the remaining decisions of a
stream (useful when shrinking a failing seed).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["SimRandom", "derive_seed"]

T = TypeVar("T")

#: Above this span a float draw could round up to the span itself or lose
#: resolution, so :meth:`SimRandom.int_between` falls back to rejection sampling.
_FLOAT_EXACT_SPAN = 1 << 52


def derive_seed(seed: int, path: str) -> int:
    """Return a 256-bit integer derived from ``seed`` and ``path`` via SHA-256."""
    digest = hashlib.sha256(f"refwire-sim\x00{int(seed)}\x00{path}".encode()).digest()
    return int.from_bytes(digest, "big")


class SimRandom(random.Random):
    """A deterministic random stream identified by ``(seed, path)``.

    ``SimRandom(seed)`` is the root stream; :meth:`child` derives named
    sub-streams.  The inherited ``random.Random.seed()`` method is replaced by
    the read-only :attr:`seed` property, so a stream cannot be re-seeded in
    place; use :meth:`child` or construct a new one.
    """

    def __init__(self, seed: int, path: str = "") -> None:
        """Create the stream for ``(seed, path)``."""
        self._sim_seed = int(seed)
        self._sim_path = path
        random.Random.seed(self, derive_seed(self._sim_seed, path))
        self.gauss_next = None

    @property
    def seed(self) -> int:  # type: ignore[override]
        """The root simulation seed this stream was derived from."""
        return self._sim_seed

    @property
    def path(self) -> str:
        """The stream's name below the root, ``""`` for the root itself."""
        return self._sim_path

    def __repr__(self) -> str:
        """Show seed and path, which together identify the stream."""
        return f"SimRandom(seed={self._sim_seed}, path={self._sim_path!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle/copy support: rebuild from (seed, path), then restore the state."""
        return (SimRandom, (self._sim_seed, self._sim_path), self.getstate())

    def __setstate__(self, state: Any) -> None:
        """Restore the generator state (used by ``copy`` and ``pickle``)."""
        self.setstate(state)

    def child(self, *names: str | int) -> SimRandom:
        """Derive an independent stream named ``path/name1/name2...``.

        The result depends only on the root seed and the full path, never on
        this stream's current state.
        """
        parts = [str(n) for n in names]
        path = "/".join([self._sim_path, *parts]) if self._sim_path else "/".join(parts)
        return SimRandom(self._sim_seed, path)

    # -- helpers built only on random() / getrandbits() ----------------------

    def chance(self, p: float) -> bool:
        """Return True with probability ``p`` (always consumes one draw)."""
        r = self.random()
        return r < p

    def between(self, lo: float, hi: float) -> float:
        """Uniform float in ``[lo, hi)`` (one draw)."""
        return lo + (hi - lo) * self.random()

    def int_between(self, lo: int, hi: int) -> int:
        """Uniform integer in ``[lo, hi]``, both ends inclusive.

        Consumes one ``random()`` draw for spans up to 2**52, otherwise uses
        rejection sampling over ``getrandbits``.
        """
        span = hi - lo + 1
        if span <= 0:
            raise ValueError(f"empty range [{lo}, {hi}]")
        if span <= _FLOAT_EXACT_SPAN:
            return lo + min(int(self.random() * span), span - 1)
        bits = span.bit_length()
        while True:
            r = self.getrandbits(bits)
            if r < span:
                return lo + r

    def expo(self, mean: float, cap: float) -> float:
        """Exponential variate with the given mean, clamped to ``[0, cap]``.

        Returns 0.0 if ``mean <= 0``.  Always consumes exactly one draw.
        """
        u = self.random()
        if mean <= 0.0:
            return 0.0
        value = -mean * math.log1p(-u)
        return max(0.0, min(value, cap))

    def pick(self, seq: Sequence[T]) -> T:
        """Return a uniformly chosen element of a non-empty sequence."""
        if not seq:
            raise IndexError("cannot pick from an empty sequence")
        return seq[self.int_between(0, len(seq) - 1)]
