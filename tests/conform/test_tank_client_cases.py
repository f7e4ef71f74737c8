"""TANK client cases (``refwire conform tank --client``): refwire's own client
passes every one, through ``--exec`` and inside the simulator; each broken
client fails the cases aimed at it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from refwire.conform.cases.tank import CATALOGUE, client_for_simulation
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, run_cases
from refwire.conform.simulated import run_clients_in_simulator

pytestmark = pytest.mark.timeout(120)

PEER = Path(__file__).resolve().parent / "peers" / "refwire_tank_client.py"
CLIENT = sorted(c.id for c in CATALOGUE.cases if c.role == "client")


def verdicts(catalogue: Any) -> dict[str, Verdict]:
    run = run_clients_in_simulator(catalogue, RunConfig(seed=5, role="client"))
    return {r.case.id: r.verdict for r in run.result.results}


def test_refwire_passes_every_client_case_in_the_simulator() -> None:
    assert len(CLIENT) >= 3
    assert verdicts(CATALOGUE) == dict.fromkeys(CLIENT, Verdict.PASS)


async def test_refwire_through_exec() -> None:
    template = shlex.join([sys.executable, str(PEER)]) + " {host} {port} {slug} {events} {seed}"
    cfg = RunConfig(role="client", agent="refwire-tank-client", seed=5, jobs=4)
    setup = ClientSetup(exec_template=template)

    async def one(case: Any, first: bool) -> Any:
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    with trio.fail_after(60):
        run = await run_cases(CATALOGUE, cfg, run_one=one)
    assert {r.case.id: r.verdict for r in run.results} == dict.fromkeys(CLIENT, Verdict.PASS), [
        (r.case.id, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS
    ]


# --------------------------------------------------------------------------- broken clients


async def produces_one_less(connect: Any, values: Any) -> int:
    return await client_for_simulation(connect, dict(values, events=str(int(values["events"]) - 1)))


class _PingAllergic(trio.abc.Stream):
    """Breaks the connection at the broker's second Ping (a client that takes Pings for garbage)."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner, self.pings = inner, 0

    async def send_all(self, data: Any) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = bytes(await self.inner.receive_some(max_bytes))
        self.pings += data.count(b"\x03\x00\x00\x00\x00")
        if self.pings > 1:
            raise trio.BrokenResourceError("a Ping after the first: refused")
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def chokes_on_pings(connect: Any, values: Any) -> int:
    async def wrapped() -> trio.abc.Stream:
        return _PingAllergic(await connect())

    return await client_for_simulation(wrapped, values)


async def no_partial_chunks(connect: Any, values: Any) -> int:
    """Gives up (exit 1) on a chunk that ends inside a bundle."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import ClientConfig, TankClient

    n, topic = int(values["events"]), values["slug"]
    async with TankClient(connect, config=ClientConfig(ping_interval=None, fetch_size=64)) as client:
        for i in range(0, n, 4):
            await client.produce(topic, 0, [Message(b"m%d" % j, ts=1) for j in range(i, min(i + 4, n))], compress=False)
        seq, got = 1, 0
        while got < n:
            pd = await client.consume(topic, 0, seq)
            if pd.chunk is None or pd.chunk.partial:
                return 1
            got += len(pd.messages)
            seq = pd.chunk.next_seq
    return 0


async def one_bundle(connect: Any, values: Any) -> int:
    """Produces all its messages in one bundle, then consumes them back (right, but no chunk holds two bundles)."""
    from refwire.tank.bundles import Message
    from refwire.tank.client import ClientConfig, TankClient

    n, topic = int(values["events"]), values["slug"]
    sent = [b"m%d" % i for i in range(n)]
    got: list[bytes] = []
    async with TankClient(connect, config=ClientConfig(ping_interval=None, fetch_size=64)) as client:
        await client.produce(topic, 0, [Message(m, ts=1) for m in sent], compress=False)
        seq = 1
        while len(got) < n:
            pd = await client.consume(topic, 0, seq)
            got += [m.content for m in pd.messages]  # type: ignore[attr-defined]
            assert pd.chunk is not None
            seq = pd.chunk.next_seq
    return 0 if got == sent else 1


def test_a_partial_bundle_never_served_is_not_exercised() -> None:
    """tk.C1.2 against a client whose every chunk holds one bundle: nothing was cut, so INFO, not PASS."""
    run = run_clients_in_simulator(attrs.evolve(CATALOGUE, sim_client=one_bundle), RunConfig(seed=5, role="client"), include=["tk.C1.2"])
    (r,) = [r for r in run.result.results if r.case.id == "tk.C1.2"]
    assert r.verdict is Verdict.INFO, (r.observed, r.reason)
    assert r.observation is not None and "partial bundles served: 0" in r.observation.facts
    assert "not exercised" in r.reason


def test_the_reference_client_is_served_partial_bundles() -> None:
    """refwire's own client meets a cut in tk.C1.2 (a PASS that exercised the case)."""
    run = run_clients_in_simulator(CATALOGUE, RunConfig(seed=5, role="client"), include=["tk.C1.2"])
    (r,) = [r for r in run.result.results if r.case.id == "tk.C1.2"]
    assert r.verdict is Verdict.PASS and r.observation is not None
    assert any(f.startswith("partial bundles served: ") and f != "partial bundles served: 0" for f in r.observation.facts)


BROKEN = {
    "produces-one-less": (produces_one_less, {"tk.C1.1"}),
    "chokes-on-pings": (chokes_on_pings, {"tk.C1.4"}),
    "no-partial-chunks": (no_partial_chunks, {"tk.C1.2", "tk.C1.3"}),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_clients_fail_the_cases_aimed_at_them(name: str) -> None:
    client, aimed = BROKEN[name]
    got = verdicts(attrs.evolve(CATALOGUE, sim_client=client))
    assert {cid for cid, v in got.items() if v is Verdict.FAIL} >= aimed, got


def test_every_client_case_is_killed() -> None:
    assert set(CLIENT) <= set().union(*(aimed for _, aimed in BROKEN.values()))
