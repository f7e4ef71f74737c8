"""A server's memory budget, shared by its connections (``--server-memory``,
``Limits.max_server_memory``).

Each connection already has its own budget (``Limits.max_connection_memory``,
``--connection-memory``): every server turns it into caps on what it holds for
the connection, and a connection's peak cost (what it can add to the server's
resident memory) stays within :func:`connection_charge` of it, about 1.5 times
the budget.  Per-connection budgets multiply with the number of connections;
the server's budget bounds their sum.

**Admission.**  A connection that holds nothing holds no share of the server's
budget.  When bytes arrive for it, the server takes the connection's whole
charge from the pool *before* the machine sees the first of them (a frame's
header included), first come first served: while the pool cannot give it, the
connection's reads pause -- the bytes already read wait beside the machine,
nothing more is read, and TCP pushes back on the sender.  The charge is given
back once the connection holds nothing again: no partial frame, no batch or
request being received or awaiting its answer, no parked read, no reply
waiting to be written (each server says what it holds; see its docs).

* **Why the whole charge at once**: a compressed frame's inflated size is not
  declared before its body (Lumberjack ``C``, TANK's Snappy sets, Seastar's LZ4
  envelopes), and a Lumberjack batch's events stay held until the batch is
  acknowledged, across many frames.  A connection that took its memory frame by
  frame could hold part of a batch and wait for the rest while every other
  connection did the same: a deadlock.  Taking the connection's worst case
  before anything is held means a connection that holds budget never waits for
  more; those that wait hold nothing, so the holders always finish (or time out)
  and give their charge back.  The price is coarseness: at most
  ``max_server_memory // connection_charge`` connections are busy at once, so a
  server for many small clients sets a smaller ``--connection-memory``.
* **Time paused does not count**: a paused connection's machine has not seen the
  bytes that wait, so no frame or batch timer of it runs (it holds nothing), and
  its idle timer is held until the bytes are fed.  A connection that holds budget
  runs all its timers: a stalled peer gives its charge back at its own frame,
  batch or idle timeout.
* **A budget smaller than one connection's charge** lowers every connection's
  budget to fit (:func:`fit_connection_memory`): a frame or request larger than
  that is refused with the error of its per-connection limit.

Fixed overhead besides the budget: the bytes a paused connection has read and
not fed (at most one receive, 64 KiB by default), the kernel's socket buffers,
and what an idle connection costs (its machine, its tasks, a few KiB).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Final

import attrs
import trio

from .wire import Limits

__all__ = [
    "Admission",
    "CHARGE_NUM",
    "CHARGE_DEN",
    "DEFAULT_FRACTION_DEN",
    "DEFAULT_MIN_BUSY",
    "MemoryPool",
    "ServerBudget",
    "connection_charge",
    "default_server_memory",
    "fit_connection_memory",
    "server_memory",
]

#: A connection's charge is ``max_connection_memory * CHARGE_NUM // CHARGE_DEN``:
#: the peak a connection can add to the server's resident memory, measured on every
#: server, is at most 1.5 times its budget (plus a fixed 32 MiB for the process,
#: counted once, not per connection).
CHARGE_NUM: Final = 3
CHARGE_DEN: Final = 2

#: The default server budget is this fraction of the machine's physical memory ...
DEFAULT_FRACTION_DEN: Final = 2
#: ... and never less than this many connections' charges, so that a small machine still
#: serves a few busy connections at once (and a simulation does not depend on the machine
#: it runs on): 3 GiB at the default connection budget.
DEFAULT_MIN_BUSY: Final = 8


def connection_charge(limits: Limits) -> int:
    """What one busy connection takes from the server's budget."""
    return limits.max_connection_memory * CHARGE_NUM // CHARGE_DEN


def default_server_memory() -> int:
    """Half of this machine's physical memory (``sysconf``), or 1 GiB where it cannot be read."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 30
    return max(total // DEFAULT_FRACTION_DEN, 1)


def server_memory(limits: Limits) -> int:
    """``limits.max_server_memory``; where it is 0 (the default), :func:`default_server_memory`
    or :data:`DEFAULT_MIN_BUSY` connections' charges, whichever is more."""
    return limits.max_server_memory or max(default_server_memory(), DEFAULT_MIN_BUSY * connection_charge(limits))


def fit_connection_memory(limits: Limits) -> Limits:
    """``limits`` with ``max_connection_memory`` lowered, where needed, so that one
    connection's charge fits in the server's budget (``max_server_memory`` resolved)."""
    total = server_memory(limits)
    fits = total * CHARGE_DEN // CHARGE_NUM
    if limits.max_connection_memory <= fits:
        return attrs.evolve(limits, max_server_memory=total)
    return attrs.evolve(limits, max_server_memory=total, max_connection_memory=fits)


class MemoryPool:
    """A count of bytes, given out first come first served (like Seastar's RPC
    server's memory semaphore): a request that does not fit waits, and every
    request behind it waits too, so a large one is not starved by small ones."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"a memory pool needs a positive capacity, got {capacity}")
        self.capacity = capacity
        #: bytes given out and not yet given back
        self.in_use = 0
        self._waiters: deque[tuple[int, trio.Event]] = deque()
        #: connections that waited, and the longest wait (trio clock seconds), for logs and tests
        self.waited = 0
        self.longest_wait = 0.0

    @property
    def free(self) -> int:
        return self.capacity - self.in_use

    @property
    def waiting(self) -> int:
        """Requests waiting for bytes."""
        return len(self._waiters)

    async def acquire(self, n: int) -> None:
        """Take ``n`` bytes, waiting behind every earlier request until they are free.
        Cancelled while waiting, it takes nothing."""
        if n > self.capacity:
            raise ValueError(f"{n} bytes can never fit in a pool of {self.capacity}")
        if not self._waiters and n <= self.free:
            # no checkpoint: a server whose pool is never short schedules exactly as one
            # without a budget (the simulator's runs stay what their seeds made them)
            self.in_use += n
            return
        granted = trio.Event()
        entry = (n, granted)
        self._waiters.append(entry)
        self.waited += 1
        start = trio.current_time()
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():  # given the bytes as it was cancelled: give them back
                self.release(n)
            else:
                self._waiters.remove(entry)
                self._grant()  # it may have been the head that held the others back
            raise
        finally:
            self.longest_wait = max(self.longest_wait, trio.current_time() - start)

    def release(self, n: int) -> None:
        """Give back ``n`` bytes taken by :meth:`acquire`, and wake the requests they let through."""
        if n > self.in_use:
            raise ValueError(f"giving back {n} bytes but only {self.in_use} are taken")
        self.in_use -= n
        self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.free:
            n, granted = waiters.popleft()
            self.in_use += n
            granted.set()


@attrs.define
class Admission:
    """What a :class:`~refwire.drivers.Pump` needs to admit one server connection:
    the server's pool, the connection's charge, and whether the server holds
    anything for the connection beside what the pump itself sees (bytes not yet
    written, an event being handled)."""

    pool: MemoryPool
    charge: int
    #: True while the server holds anything for the connection: a partial frame in the
    #: machine's buffer, a batch or request being received or awaiting its answer, a parked
    #: read, a reply not yet handed to the pump.
    holding: Callable[[], bool]


class ServerBudget:
    """One server's budget: its limits with ``max_server_memory`` resolved and the
    per-connection budget fitted (:func:`fit_connection_memory`), its pool, and the
    charge of one connection."""

    def __init__(self, limits: Limits, pool: MemoryPool | None = None) -> None:
        self.limits = fit_connection_memory(limits)
        #: (``pool``: another listener's, when one server answers two dialects)
        self.pool = MemoryPool(self.limits.max_server_memory) if pool is None else pool
        self.charge = connection_charge(self.limits)

    def admission(self, holding: Callable[[], bool]) -> Admission:
        """A connection's :class:`Admission` (``holding``: see :attr:`Admission.holding`)."""
        return Admission(self.pool, self.charge, holding)

    def describe(self) -> str:
        """One line for the server's start-up log."""
        mib = 1024 * 1024
        return (
            f"server memory {self.limits.max_server_memory / mib:.0f} MiB shared by its connections, "
            f"{self.charge / mib:.0f} MiB for each busy one "
            f"(connection memory {self.limits.max_connection_memory / mib:.0f} MiB x {CHARGE_NUM}/{CHARGE_DEN}): "
            f"{self.limits.max_server_memory // self.charge} busy at once"
        )
