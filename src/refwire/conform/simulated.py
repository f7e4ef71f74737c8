"""Cases against refwire's own server or client inside the deterministic simulator.

Where the testee is refwire's own machine, a case can run inside the
simulator: the same procedures, the same seeds, over
:class:`refwire.sim.net.SimNet` under virtual time (a 35 s stall takes no real
time), with every byte and every runner action recorded in the simulator's
trace.  The same seed gives the same trace hash, run after run -- the proof
that a case's bytes depend on nothing but (run seed, run id, case id); the run
id is the seed's (:func:`~refwire.conform.ids.seed_run_id`) unless the
configuration names one, and refwire's own server is given it, to hold what a
run needs beforehand (the 2017 draft's segments).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from refwire.sim.faults import Faults
from refwire.sim.net import SimNet
from refwire.sim.rand import SimRandom
from refwire.sim.runtime import run_deterministic
from refwire.sim.trace import Trace

from .clients import ClientSetup, run_client_case
from .model import Case, CaseResult
from .runner import Catalogue, RunConfig, RunResult, run_cases

__all__ = ["SimRun", "run_clients_in_simulator", "run_in_simulator"]

ADDRESS = "testee:conform"


@attrs.frozen
class SimRun:
    result: RunResult
    trace_hash: str


def run_in_simulator(
    catalogue: Catalogue,
    cfg: RunConfig,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    tags: str | Sequence[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> SimRun:
    """Run ``catalogue``'s server cases against refwire's own server in the simulator."""
    if catalogue.sim_server is None:
        raise ValueError(f"{catalogue.protocol} has no server to run inside the simulator")
    serve = catalogue.sim_server
    if catalogue.warm is not None:
        catalogue.warm()
    trace = Trace(max_lines=2000)
    record = _recorder(trace, on_result)

    async def main() -> RunResult:
        net = SimNet(SimRandom(cfg.seed).child("conform-net"), Faults.none(), trace)
        listener = net.listen(ADDRESS)
        with tempfile.TemporaryDirectory(prefix="refwire-conform-") as tmp:
            sink = str(Path(tmp) / "sink.jsonl")
            run_cfg = attrs.evolve(cfg, connect=lambda: net.connect(ADDRESS), sink=sink, host="sim", port=0, jobs=1)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve, listener, sink, run_cfg.the_run_id)
                result = await run_cases(catalogue, run_cfg, include=include, exclude=exclude, tags=tags, on_result=record)
                nursery.cancel_scope.cancel()
        return result

    result = run_deterministic(main, cfg.seed)
    return SimRun(result, trace.hash())


def _recorder(trace: Trace, on_result: Callable[[CaseResult], None] | None) -> Callable[[CaseResult], None]:
    """Every result's wire log and verdict into the trace (its hash is the run's fingerprint)."""

    def record(r: CaseResult) -> None:
        for e in r.wire_log:
            trace.record(
                float(e.get("t", 0.0)), r.case.id, e.get("kind"), e.get("hex") or e.get("text") or e.get("token") or e.get("how")
            )
        trace.record(0.0, r.case.id, "verdict", r.verdict.value)
        if on_result is not None:
            on_result(r)

    return record


def run_clients_in_simulator(
    catalogue: Catalogue,
    cfg: RunConfig,
    *,
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    tags: str | Sequence[str] | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> SimRun:
    """Run ``catalogue``'s client cases with refwire's own client as the testee,
    in the simulator: each case listens on an address of its own on the
    simulated network and the client (``catalogue.sim_client``) runs as a task
    where ``--exec`` would start a process; its return value is the exit status."""
    if catalogue.sim_client is None:
        raise ValueError(f"{catalogue.protocol} has no client to run inside the simulator")
    client = catalogue.sim_client
    trace = Trace(max_lines=2000)
    record = _recorder(trace, on_result)

    async def main() -> RunResult:
        net = SimNet(SimRandom(cfg.seed).child("conform-net"), Faults.none(), trace)

        async def open_listener(case: Case) -> tuple[trio.abc.Listener[Any], str, int]:
            return net.listen(f"conform:{case.id}"), f"conform:{case.id}", 0

        async def in_process(values: Mapping[str, str]) -> int:
            address = values["host"]
            return await client(lambda: net.connect(address), values)

        setup = ClientSetup(open_listener=open_listener, in_process=in_process)
        run_cfg = attrs.evolve(cfg, role="client", host="sim", port=0, jobs=1)

        async def one(case: Case, first: bool) -> CaseResult:
            return await run_client_case(case, catalogue, run_cfg, setup, 0)

        return await run_cases(catalogue, run_cfg, include=include, exclude=exclude, tags=tags, on_result=record, run_one=one)

    result = run_deterministic(main, cfg.seed)
    return SimRun(result, trace.hash())
