"""Pravega client cases (``refwire conform pravega --client``): refwire's own
client passes every one, through ``--exec`` and inside the simulator; each
broken client fails the cases aimed at it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from refwire.conform.cases.pravega import CATALOGUE, client_for_simulation
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, run_cases
from refwire.conform.simulated import run_clients_in_simulator
from refwire.pravega import client as client_mod
from refwire.pravega.frames import Hello

pytestmark = pytest.mark.timeout(120)

PEER = Path(__file__).resolve().parent / "peers" / "refwire_pravega_client.py"
CLIENT = sorted(c.id for c in CATALOGUE.cases if c.role == "client")


def verdicts(catalogue: Any, seed: int = 5) -> dict[str, Verdict]:
    run = run_clients_in_simulator(catalogue, RunConfig(seed=seed, role="client"))
    return {r.case.id: r.verdict for r in run.result.results}


@pytest.mark.parametrize("seed", [5, 8])
def test_refwire_passes_every_client_case_in_the_simulator(seed: int) -> None:
    assert len(CLIENT) >= 4
    assert verdicts(CATALOGUE, seed) == dict.fromkeys(CLIENT, Verdict.PASS)


def test_same_seed_same_trace() -> None:
    a = run_clients_in_simulator(CATALOGUE, RunConfig(seed=2, role="client"))
    b = run_clients_in_simulator(CATALOGUE, RunConfig(seed=2, role="client"))
    assert a.trace_hash == b.trace_hash


async def test_refwire_through_exec_with_a_controller() -> None:
    template = shlex.join([sys.executable, str(PEER)]) + " {host} {port} {slug} {events} {seed}"
    cfg = RunConfig(role="client", agent="refwire-pravega-client", seed=5, jobs=5)
    setup = ClientSetup(exec_template=template)

    async def one(case: Any, first: bool) -> Any:
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    with trio.fail_after(60):
        run = await run_cases(CATALOGUE, cfg, run_one=one)
    assert {r.case.id: r.verdict for r in run.results} == dict.fromkeys(CLIENT, Verdict.PASS), [
        (r.case.id, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS
    ]
    # every case served a controller, and said where
    assert all(any("controller on 127.0.0.1:" in str(e.get("text", "")) for e in r.wire_log) for r in run.results)


# --------------------------------------------------------------------------- broken clients


async def writes_one_less(connect: Any, values: Any) -> int:
    return await client_for_simulation(connect, dict(values, events=str(int(values["events"]) - 1)))


async def claims_success(connect: Any, values: Any) -> int:
    await client_for_simulation(connect, values)
    return 0  # whatever happened (wrong: exit 0 only when every event came back once)


async def gives_up_at_once(connect: Any, values: Any) -> int:
    saved = client_mod.WriterConfig
    client_mod.WriterConfig = lambda **kw: saved(**dict(kw, max_attempts=1))  # type: ignore[misc]
    try:
        return await client_for_simulation(connect, values)
    finally:
        client_mod.WriterConfig = saved  # type: ignore[misc]


async def resends_everything(connect: Any, values: Any) -> int:
    """Ignores AppendSetup.lastEventNumber: resends every unacked event after a reconnect."""
    saved = client_mod.EventWriter._open

    async def _open(self: Any) -> Any:
        def naive(cmd: Any) -> None:
            self.session.ready, self.session._unsent = True, 0

        self.session.on_append_setup = naive
        return await saved(self)

    client_mod.EventWriter._open = _open  # type: ignore[method-assign]
    try:
        return await client_for_simulation(connect, values)
    finally:
        client_mod.EventWriter._open = saved  # type: ignore[method-assign]


class _ForgesHello(trio.abc.Stream):
    """Reads any server Hello as Hello(17, 5): a client that never checks the store's versions."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: Any) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = bytes(await self.inner.receive_some(max_bytes))
        return data.replace(Hello(high_version=4, low_version=2).encode(), Hello().encode())

    async def aclose(self) -> None:
        await self.inner.aclose()


async def ignores_hello_versions(connect: Any, values: Any) -> int:
    async def wrapped() -> trio.abc.Stream:
        return _ForgesHello(await connect())

    return await client_for_simulation(wrapped, values)


BROKEN = {
    "writes-one-less": (writes_one_less, {"pv.C1.1"}),
    "claims-success": (claims_success, {"pv.C1.4", "pv.C1.5"}),
    "gives-up-at-once": (gives_up_at_once, {"pv.C1.2", "pv.C1.3"}),
    "resends-everything": (resends_everything, {"pv.C1.3"}),
    "ignores-hello-versions": (ignores_hello_versions, {"pv.C1.5"}),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_clients_fail_the_cases_aimed_at_them(name: str) -> None:
    client, aimed = BROKEN[name]
    got = verdicts(attrs.evolve(CATALOGUE, sim_client=client))
    assert {cid for cid, v in got.items() if v is Verdict.FAIL} >= aimed, got


def test_every_client_case_is_killed() -> None:
    assert set(CLIENT) <= set().union(*(aimed for _, aimed in BROKEN.values()))
