"""Pravega 2017 draft conformance cases (``refwire conform pravega-draft-2017``):
every fast server case PASSes against refwire's store and FAILs against at
least one deliberately broken store (``broken_draft.py``), each broken store
is caught by the cases aimed at it; the CLI and ``--sim`` run them; the client
cases PASS refwire's own client (in the simulator and through ``--exec``) and
FAIL broken clients.  The server kill matrix is written as Markdown to
``$REFWIRE_KILL_MATRIX`` when set."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from support.confirm_alone import confirm_alone

import refwire.pravega.draft2017.client as client_mod
from refwire.cli import main
from refwire.conform.cases import pravega_draft as draft_conform
from refwire.conform.cases.pravega_draft import CATALOGUE, client_for_simulation, server_segments
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig, RunResult, run_cases
from refwire.conform.simulated import run_clients_in_simulator, run_in_simulator
from refwire.pravega.draft2017.writer import DraftWriterSession

from .broken_draft import BROKEN, Broken, draft_store

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
PEER = Path(__file__).resolve().parent / "peers" / "refwire_draft_client.py"
FAST = sorted(c.id for c in CATALOGUE.cases if c.role == "server" and "slow" not in c.tags)
CLIENT = sorted(c.id for c in CATALOGUE.cases if c.role == "client")
RUN_ID = "0d2a0f17"


async def _run(broken: Broken | None, include: list[str], *, alone: bool = False) -> RunResult:
    """``alone``: one job at time scale 1 (a verdict confirmed, see support.confirm_alone)."""
    async with draft_store(broken, [RUN_ID]) as (host, port):
        cfg = RunConfig(
            host=host,
            port=port,
            agent=broken.name if broken else "refwire",
            seed=3,
            run_id=RUN_ID,
            jobs=1 if alone else 8,
            time_scale=1.0 if alone else 0.7,
        )
        return await run_cases(CATALOGUE, cfg, include=include)


async def _confirmed(broken: Broken | None, include: list[str], want: Verdict) -> RunResult:
    """The run, each verdict other than ``want`` confirmed by that case alone at time scale 1."""
    return await confirm_alone(await _run(broken, include), lambda _: want, lambda cid: _run(broken, [cid], alone=True))


def verdicts(run: RunResult) -> dict[str, Verdict]:
    return {r.case.id: r.verdict for r in run.results}


def test_catalogue() -> None:
    server = [c for c in CATALOGUE.cases if c.role == "server"]
    assert len(server) >= 6 and len(CLIENT) >= 3
    spec = "specs/pravega-draft-2017/README.md §"
    assert all(c.id.startswith(("pd.S", "pd.C")) and c.requirement.startswith(spec) for c in CATALOGUE.cases)
    assert server_segments() == [f"conform-{c.id.replace('.', '-')}" for c in server]
    assert server_segments(RUN_ID) == [f"conform-{c.id.replace('.', '-')}-{RUN_ID}" for c in server]


def test_cases_name_real_vectors() -> None:
    names = set()
    for f in (ROOT / "specs" / "pravega-draft-2017" / "vectors").glob("*.json"):
        names |= {v["name"] for v in json.loads(f.read_text())["vectors"]}
    assert not [(c.id, v) for c in CATALOGUE.cases for v in c.vectors if v not in names]


async def test_every_fast_case_passes_against_refwire() -> None:
    run = await _confirmed(None, FAST, Verdict.PASS)
    bad = {r.case.id: (r.expected, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS}
    assert not bad, bad
    assert len(run.results) == len(FAST)


async def test_kill_matrix() -> None:
    runs: dict[str, RunResult] = {}

    async def one(b: Broken) -> None:
        runs[b.name] = await _confirmed(b, list(b.aimed_at), Verdict.FAIL)

    async with trio.open_nursery() as nursery:  # every broken store at once, each on its own port
        for b in BROKEN:
            nursery.start_soon(one, b)
    rows = []
    killed: set[str] = set()
    for b in BROKEN:
        run = runs[b.name]
        v = verdicts(run)
        failed = sorted(cid for cid, x in v.items() if x is Verdict.FAIL)
        assert set(b.aimed_at) <= set(failed), (b.name, {r.case.id: (r.verdict, r.observed, r.reason) for r in run.results})
        killed |= set(failed)
        rows.append(f"| `{b.name}` | {b.wrong} | {', '.join(failed)} |")
    assert set(FAST) <= killed, sorted(set(FAST) - killed)
    table = "| broken store | what is wrong | cases that FAIL it |\n| --- | --- | --- |\n" + "\n".join(rows)
    if os.environ.get("REFWIRE_KILL_MATRIX"):
        Path(os.environ["REFWIRE_KILL_MATRIX"]).write_text(table + "\n")


def test_the_cases_inside_the_simulator_same_seed_same_trace() -> None:
    a = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    b = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    assert a.trace_hash == b.trace_hash
    assert {r.case.id: r.verdict for r in a.result.results if r.verdict is not Verdict.SKIPPED} == dict.fromkeys(
        FAST, Verdict.PASS
    )


def test_cli_against_refwire_serve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``refwire serve pravega --draft-listen``, the §13 pre-create step, then the CLI exits 0."""
    assert main(["conform", "list", "pravega-draft-2017"]) == 0
    assert "pd.S2.1" in capsys.readouterr().out
    assert draft_conform.main(["--list"]) == 0
    assert capsys.readouterr().out.split() == server_segments()
    exe = Path(sys.executable).with_name("refwire")
    proc = subprocess.Popen(
        [str(exe), "serve", "pravega", "--listen", "127.0.0.1:0", "--no-controller", "--draft-listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addresses: list[str] = []
        deadline = time.monotonic() + 20
        assert proc.stderr is not None
        while len(addresses) < 2 and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if line.startswith("listening on "):
                addresses.append(line.split()[2])
        assert len(addresses) == 2, addresses
        store, draft = (addresses[0], addresses[1]) if "draft" not in addresses[0] else (addresses[1], addresses[0])
        assert draft_conform.main([store]) == 0
        said = capsys.readouterr().out
        assert "13 of 13 case segments created for run id " in said
        run_id = said.split("for run id ", 1)[1].split()[0]
        out = tmp_path / "report"
        assert main(["conform", "pravega-draft-2017", "--server", draft, "--seed", "3", "--run-id", run_id, "--out", str(out)]) == 0
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_cli_sim_and_unreachable(tmp_path: Path) -> None:
    base = ["conform", "pravega-draft-2017", "--seed", "3"]
    assert main([*base, "--sim", "--out", str(tmp_path / "sim")]) == 0
    assert main([*base, "--client", "--sim", "--out", str(tmp_path / "sim-clients")]) == 0
    assert main([*base, "--server", "127.0.0.1:1", "--out", str(tmp_path / "down")]) == 2


# --------------------------------------------------------------------------- client cases


def client_verdicts(catalogue: Any) -> dict[str, Verdict]:
    run = run_clients_in_simulator(catalogue, RunConfig(seed=5, role="client"))
    return {r.case.id: r.verdict for r in run.result.results}


def test_refwire_passes_every_client_case_in_the_simulator() -> None:
    assert client_verdicts(CATALOGUE) == dict.fromkeys(CLIENT, Verdict.PASS)


async def test_refwire_through_exec() -> None:
    template = shlex.join([sys.executable, str(PEER)]) + " {host} {port} {slug} {events} {seed}"
    cfg = RunConfig(role="client", agent="refwire-draft-client", seed=5, jobs=4)
    setup = ClientSetup(exec_template=template)

    async def one(case: Any, first: bool) -> Any:
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    with trio.fail_after(60):
        run = await run_cases(CATALOGUE, cfg, run_one=one)
    assert {r.case.id: r.verdict for r in run.results} == dict.fromkeys(CLIENT, Verdict.PASS), [
        (r.case.id, r.observed, r.reason) for r in run.results if r.verdict is not Verdict.PASS
    ]


async def writes_one_less(connect: Any, values: Any) -> int:
    return await client_for_simulation(connect, dict(values, events=str(int(values["events"]) - 1)))


class _Allergic(trio.abc.Stream):
    """Breaks the connection when the server's bytes hold ``marker`` (a client that cannot take them)."""

    def __init__(self, inner: trio.abc.Stream, marker: bytes) -> None:
        self.inner, self.marker = inner, marker

    async def send_all(self, data: Any) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        data = bytes(await self.inner.receive_some(max_bytes))
        if self.marker in data:
            raise trio.BrokenResourceError(f"refused {self.marker.hex()}")
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


def _allergic(marker: bytes) -> Any:
    async def client(connect: Any, values: Any) -> int:
        async def wrapped() -> trio.abc.Stream:
            return _Allergic(await connect(), marker)

        return await client_for_simulation(wrapped, values)

    return client


class _ResendsAll(DraftWriterSession):
    """Ignores the AppendSetup level: after every (re)connect it resends everything from offset 0 (wrong: §6.6)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.everything: list[Any] = []

    def add(self, payload: bytes) -> int:
        end = super().add(payload)
        self.everything.append(self.pending[-1])
        return end

    def on_append_setup(self, cmd: Any) -> None:
        super().on_append_setup(attrs.evolve(cmd, connection_offset_ack_level=0))
        self.pending = deque(self.everything)


async def resends_everything(connect: Any, values: Any) -> int:
    saved = client_mod.DraftWriterSession
    client_mod.DraftWriterSession = _ResendsAll  # type: ignore[misc]
    try:
        return await client_for_simulation(connect, values)
    finally:
        client_mod.DraftWriterSession = saved  # type: ignore[misc]


BROKEN_CLIENTS = {
    "writes-one-less": (writes_one_less, {"pd.C1.1"}),
    "no-partial-replies": (_allergic(b"\xff\xff\xff\xfe"), {"pd.C1.2"}),
    "resends-everything": (resends_everything, {"pd.C1.3"}),
    "chokes-on-keep-alives": (_allergic(b"\x00\x00\x00\x64\x00\x00\x00\x03"), {"pd.C1.4"}),
}


@pytest.mark.parametrize("name", sorted(BROKEN_CLIENTS))
def test_broken_clients_fail_the_cases_aimed_at_them(name: str) -> None:
    client, aimed = BROKEN_CLIENTS[name]
    got = client_verdicts(attrs.evolve(CATALOGUE, sim_client=client))
    assert {cid for cid, v in got.items() if v is Verdict.FAIL} >= aimed, got


def test_every_client_case_is_killed() -> None:
    assert set(CLIENT) <= set().union(*(aimed for _, aimed in BROKEN_CLIENTS.values()))
