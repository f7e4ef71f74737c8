"""Run a trio program deterministically: virtual time plus a seeded scheduler.

Two things make a trio run reproducible from a seed:

1. Virtual time: ``trio.testing.MockClock(autojump_threshold=0)`` jumps the
   clock to the next deadline as soon as every task is blocked, so results do
   not depend on real time (and idle time costs nothing).
2. Scheduling order: trio's run loop randomises the order of each batch of
   runnable tasks with the module-level ``trio._core._run._r`` generator, and
   only sorts the batch by task creation order first when the private flag
   ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING`` is true (trio sets it
   itself for Hypothesis).  :func:`run_deterministic` sets that flag, seeds
   ``_r`` from the simulation seed, and restores both afterwards.

Both hooks are private.  If a trio upgrade removes them,
:func:`run_deterministic` fails loudly (naming the trio version) instead of
silently producing runs that do not replay.

The remaining requirements are on the code under test: no real I/O or threads,
all randomness from :class:`~refwire.sim.rand.SimRandom`, and no behaviour that
depends on the iteration order of sets of ``str``/``bytes``, which changes from
process to process unless ``PYTHONHASHSEED`` is fixed (see
:func:`check_hash_seed`).
"""

from __future__ import annotations

import importlib
import os
import random
import warnings
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import TypeVar

import trio
import trio.testing

from ..interrupts import sigint_to_trio
from .rand import derive_seed

__all__ = ["check_hash_seed", "check_trio_hooks", "run_deterministic", "scheduler_seed", "virtual_clock"]

T = TypeVar("T")

_RUN_MODULE = "trio._core._run"
_FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"
_RNG = "_r"


def check_trio_hooks() -> tuple[ModuleType, random.Random]:
    """Return trio's run module and its scheduler RNG, or raise RuntimeError.

    Raises:
        RuntimeError: if the private names this module relies on are missing
            or have changed type in the installed trio.
    """
    try:
        module = importlib.import_module(_RUN_MODULE)
    except ImportError as exc:  # pragma: no cover - trio layout change
        raise RuntimeError(
            f"refwire.sim needs {_RUN_MODULE}, which trio {trio.__version__} does not have; "
            "deterministic scheduling is unavailable (pin a supported trio version)"
        ) from exc
    flag = getattr(module, _FLAG, None)
    rng = getattr(module, _RNG, None)
    if not isinstance(flag, bool) or not isinstance(rng, random.Random):
        raise RuntimeError(
            f"trio {trio.__version__} lacks {_RUN_MODULE}.{_FLAG} (bool) or {_RUN_MODULE}.{_RNG} "
            "(random.Random); deterministic scheduling is unavailable (pin a supported trio version)"
        )
    return module, rng


def virtual_clock() -> trio.testing.MockClock:
    """``MockClock(autojump_threshold=0)`` whose ``current_time`` skips the real clock.

    At rate 0 (always, here) ``MockClock.current_time`` reads ``perf_counter`` and
    returns ``virtual_base + 0.0 * (real - real_base)``, i.e. ``virtual_base``; the
    simulator asks for the time thousands of times per seed.  The value is the same
    float, so runs are the same.  MockClock is final, so the method is replaced on
    the instance; ``_rate`` and ``_virtual_base`` are its private state: if a trio
    upgrade renames them, the clock keeps MockClock's own method.
    """
    clock = trio.testing.MockClock(autojump_threshold=0)
    state = vars(clock)
    if isinstance(state.get("_rate"), float) and isinstance(state.get("_virtual_base"), float):
        slow = clock.current_time

        def current_time() -> float:
            return state["_virtual_base"] if state["_rate"] == 0.0 else slow()

        clock.current_time = current_time  # type: ignore[method-assign]
    return clock


def scheduler_seed(seed: int) -> int:
    """The seed given to trio's scheduler RNG for simulation seed ``seed``."""
    return derive_seed(seed, "trio/scheduler")


def run_deterministic(async_fn: Callable[[], Awaitable[T]], seed: int) -> T:
    """Run ``async_fn()`` under virtual time with trio's scheduler seeded from ``seed``.

    Uses ``trio.run(async_fn, clock=virtual_clock())`` (a ``MockClock(autojump_threshold=0)``);
    Ctrl-C is trio's for the run (:func:`refwire.interrupts.sigint_to_trio`) and reaches it at a
    checkpoint of the main task: the run ends with KeyboardInterrupt.  The
    scheduling flag and the scheduler RNG state are restored on return, also
    on error, so other trio runs in the same process are unaffected.

    Raises:
        RuntimeError: if trio's private scheduling hooks are missing (see
            :func:`check_trio_hooks`), or if called from inside a trio run.
    """
    module, rng = check_trio_hooks()
    saved_flag: bool = getattr(module, _FLAG)
    saved_state = rng.getstate()
    setattr(module, _FLAG, True)
    rng.seed(scheduler_seed(seed))
    try:
        with sigint_to_trio():  # Ctrl-C reaches the run at a checkpoint of its main task, never the scheduler
            return trio.run(async_fn, clock=virtual_clock(), restrict_keyboard_interrupt_to_checkpoints=True)
    finally:
        setattr(module, _FLAG, saved_flag)
        rng.setstate(saved_state)


def check_hash_seed(strict: bool = False) -> None:
    """Warn (or raise, if ``strict``) unless ``PYTHONHASHSEED`` is fixed.

    ``hash()`` of ``str`` and ``bytes`` is salted per process unless
    ``PYTHONHASHSEED`` is set to an integer, so the iteration order of a
    ``set`` (or of a ``dict`` built from one) differs between processes.  Any
    behaviour that depends on such an order makes a seed replay differently in
    a new process.  The runner should set ``PYTHONHASHSEED=0`` (re-executing
    itself if needed) before any simulation.

    Raises:
        RuntimeError: if ``strict`` and the hash seed is not fixed.
    """
    value = os.environ.get("PYTHONHASHSEED")
    if value is not None and value.isdigit():
        return
    message = (
        "PYTHONHASHSEED is not set to an integer: iteration order of sets of str/bytes "
        "differs between processes, so a simulation seed may not replay identically; "
        "run with PYTHONHASHSEED=0"
    )
    if strict:
        raise RuntimeError(message)
    warnings.warn(message, RuntimeWarning, stacklevel=2)
