"""``refwire.interrupts.OneInterrupt``: the Ctrl-C of a command of seeds (``refwire sim``,
the campaigns) is never lost, and no verdict is recorded after it.

A Ctrl-C that lands while the garbage collector runs a finalizer was dropped by
Python ("Exception ignored in: <function Nursery.__del__ ...>") and ``refwire sim
pravega --seeds 5000`` ran on for its 5000 seeds.  These tests make the signal land
exactly there: ``signal.raise_signal`` runs the Python handler before it returns,
so inside the frame that calls it.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
import trio

from refwire.interrupts import OneInterrupt


@pytest.fixture(autouse=True)
def _python_sigint() -> Iterator[None]:
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


class _CtrlCInFinalizer:
    """Presses Ctrl-C from its ``__del__`` and finishes the finalizer afterwards."""

    finished = 0

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)
        _CtrlCInFinalizer.finished += 1  # the finalizer is not cut short either


def _drop_one() -> None:
    _CtrlCInFinalizer()  # no reference kept: its __del__ runs at once


def _run_on() -> None:
    """What the command does next: it must be interrupted here (a hang guard of 60 s;
    the Ctrl-C comes within milliseconds)."""
    for _ in range(6000):
        time.sleep(0.01)
    pytest.fail("the Ctrl-C was lost: the command ran on")


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_ctrl_c_landing_in_a_finalizer_is_raised_once_it_returns() -> None:
    _CtrlCInFinalizer.finished = 0
    with OneInterrupt() as ctrl_c, pytest.raises(KeyboardInterrupt):
        _drop_one()
        _run_on()
    assert _CtrlCInFinalizer.finished == 1  # the finalizer was not cut short
    assert ctrl_c.count == 1  # delivered again, not counted as a second Ctrl-C


def test_a_ctrl_c_in_a_finalizer_run_by_the_collector_is_raised() -> None:
    """The same through a reference cycle, whose finalizer only the collector runs."""

    class Cycle(_CtrlCInFinalizer):
        def __init__(self) -> None:
            self.me = self

    with OneInterrupt() as ctrl_c, pytest.raises(KeyboardInterrupt):
        Cycle()
        gc.collect()
        _run_on()
    assert ctrl_c.count == 1


def test_with_hard_exit_the_redelivery_is_not_a_second_ctrl_c() -> None:
    """A command with ``hard_exit`` ends the process on a *second* Ctrl-C: the first,
    delivered again after a finalizer, must still be a KeyboardInterrupt."""
    code = textwrap.dedent(
        """
        import signal, sys, time
        from refwire.interrupts import OneInterrupt

        class F:
            def __del__(self):
                signal.raise_signal(signal.SIGINT)

        with OneInterrupt(hard_exit=True, on_hard_exit=lambda: print("hard exit")):
            try:
                F()
                for _ in range(6000):
                    time.sleep(0.01)
            except KeyboardInterrupt:
                print("KeyboardInterrupt")
                sys.exit(7)
        print("not interrupted")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (7, "KeyboardInterrupt\n"), proc.stdout + proc.stderr


def test_a_ctrl_c_lost_on_its_way_stops_the_next_verdict() -> None:
    """Where Python drops the KeyboardInterrupt anyway (code that swallows it), the
    next verdict is not recorded: :meth:`OneInterrupt.deferred` raises on entry."""
    recorded = []
    with OneInterrupt() as ctrl_c, pytest.raises(KeyboardInterrupt):
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # swallowed
        with ctrl_c.deferred():
            recorded.append("verdict")
    assert recorded == [] and ctrl_c.interrupted


def test_a_ctrl_c_inside_deferred_waits_for_its_end() -> None:
    recorded = []
    with OneInterrupt() as ctrl_c, pytest.raises(KeyboardInterrupt):
        with ctrl_c.deferred():
            signal.raise_signal(signal.SIGINT)
            recorded.append("verdict")
        recorded.append("after")
    assert recorded == ["verdict"] and ctrl_c.count == 1


def test_refwire_sim_records_no_verdict_after_a_swallowed_ctrl_c(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``refwire sim``: a seed whose run swallows the Ctrl-C is not printed, nor any after it; 130."""
    import refwire.sim.runner
    from refwire.cli import main

    real = refwire.sim.runner.run_seed
    calls = []

    def run_seed(*args: object, **kw: object) -> object:
        calls.append(args)
        if len(calls) == 2:
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(refwire.sim.runner, "run_seed", run_seed)
    assert main(["sim", "lumberjack", "--seeds", "4"]) == 130
    out, err = capsys.readouterr()
    assert len(calls) == 2
    assert "seed=0 " in out and "seed=1 " not in out and "runs," not in out, out
    assert "interrupted after 1 seeds" in err, err


def test_a_ctrl_c_during_a_simulated_run_is_trios_and_reaches_the_main_task_at_a_checkpoint() -> None:
    """Inside a seed's ``trio.run`` the Ctrl-C is trio's: handed to the main task at its next
    checkpoint, never raised inside the scheduler (a run left to the garbage collector
    printed "Exception ignored in: <coroutine ...>"); the run ends with KeyboardInterrupt,
    which OneInterrupt counts as its first."""
    from refwire.sim.runtime import run_deterministic

    reached = []

    async def seed() -> None:
        signal.raise_signal(signal.SIGINT)
        reached.append("the signal")  # not cut here: no checkpoint yet
        await trio.sleep(1)
        reached.append("the checkpoint")

    with OneInterrupt() as ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            run_deterministic(seed, 1)
        assert reached == ["the signal"] and ctrl_c.count == 1
        assert signal.getsignal(signal.SIGINT) == ctrl_c._handler  # OneInterrupt's again after the run
        with pytest.raises(KeyboardInterrupt):  # and no verdict after it
            with ctrl_c.deferred():
                pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_simulated_run_without_ctrl_c_leaves_the_handler_as_it_was() -> None:
    from refwire.sim.runtime import run_deterministic

    async def seed() -> int:
        await trio.sleep(1)
        return 7

    with OneInterrupt() as ctrl_c:
        assert run_deterministic(seed, 1) == 7
        assert signal.getsignal(signal.SIGINT) == ctrl_c._handler and ctrl_c.count == 0
    assert run_deterministic(seed, 1) == 7  # no OneInterrupt: nothing handed over
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
