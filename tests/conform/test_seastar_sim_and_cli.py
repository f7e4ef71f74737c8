"""Seastar RPC conformance inside the simulator (same seed, same trace hash)
and through ``refwire conform seastar-rpc`` against a real ``refwire serve``
subprocess-free server (CLI smoke)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from refwire.cli import main
from refwire.conform.cases.seastar_rpc import CATALOGUE
from refwire.conform.model import Verdict
from refwire.conform.runner import RunConfig
from refwire.conform.simulated import run_clients_in_simulator, run_in_simulator
from refwire.protocols import descriptor

from .broken_seastar import broken_seastar

pytestmark = pytest.mark.timeout(60)


def test_server_cases_in_the_simulator_same_seed_same_trace() -> None:
    a = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    b = run_in_simulator(CATALOGUE, RunConfig(seed=5))
    c = run_in_simulator(CATALOGUE, RunConfig(seed=6))
    assert a.trace_hash == b.trace_hash != c.trace_hash
    verdicts = {r.case.id: r.verdict for r in a.result.results}
    bad = {r.case.id: (r.observed, r.reason) for r in a.result.results if r.verdict not in (Verdict.PASS, Verdict.SKIPPED)}
    assert not bad, bad
    # the stream case opened its parent connection through the simulator's network too
    assert verdicts["ss.S5.1"] is Verdict.PASS and len(verdicts) == len([c for c in CATALOGUE.cases if c.role == "server"])


def test_client_cases_in_the_simulator_same_seed_same_trace() -> None:
    a = run_clients_in_simulator(CATALOGUE, RunConfig(seed=5, role="client"))
    b = run_clients_in_simulator(CATALOGUE, RunConfig(seed=5, role="client"))
    assert a.trace_hash == b.trace_hash
    assert {r.case.id: r.verdict for r in a.result.results} == {c.id: Verdict.PASS for c in CATALOGUE.cases if c.role == "client"}


def test_descriptor_names_the_catalogue() -> None:
    assert descriptor("seastar-rpc").conform == "refwire.conform.cases.seastar_rpc:CATALOGUE"


async def _cli(args: list[str]) -> int:
    return await trio.to_thread.run_sync(main, args)


async def test_cli_against_refwire_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with broken_seastar(None) as (host, port):
        code = await _cli(
            [
                "conform",
                "seastar-rpc",
                "--server",
                f"{host}:{port}",
                "--quiet",
                "--seed",
                "3",
                "--cases",
                "ss.S1.*,ss.S3.1",
                "--out",
                str(tmp_path),
            ]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "9 PASS" in out  # ss.S1.1-ss.S1.8 and ss.S3.1
    index = json.loads(next(tmp_path.rglob("index.json")).read_text())
    assert index["run"]["protocol"] == "seastar-rpc"


async def test_cli_declare_makes_cases_unsupported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with broken_seastar(None) as (host, port):
        declare = tmp_path / "declare.toml"
        declare.write_text('unsupported = ["lz4"]\n')
        code = await _cli(
            [
                "conform",
                "seastar-rpc",
                "--server",
                f"{host}:{port}",
                "--quiet",
                "--declare",
                str(declare),
                "--cases",
                "ss.S4.*",
                "--out",
                str(tmp_path / "out"),
            ]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "2 UNSUPPORTED" in out and "1 PASS" in out


def test_conformance_verbs_beside_the_demo_verbs() -> None:
    from refwire.seastar_rpc.conform_verbs import CONFORM_VERBS, add_conformance_verbs
    from refwire.seastar_rpc.demo import DEMO_VERBS, demo_registry

    names = add_conformance_verbs(demo_registry()).names()
    assert not set(CONFORM_VERBS.values()) & set(DEMO_VERBS.values())
    assert set(CONFORM_VERBS.values()) | set(DEMO_VERBS.values()) == set(names)


async def test_refwire_serve_serves_the_conformance_verbs() -> None:
    import sys

    from refwire.seastar_rpc.client import SeastarClient

    proc = await trio.lowlevel.open_process(
        [
            sys.executable,
            "-c",
            "import sys; from refwire.cli import main; sys.exit(main(sys.argv[1:]))",
            "serve",
            "seastar-rpc",
            "--listen",
            "127.0.0.1:0",
        ],
        stderr=-1,
    )
    try:
        assert proc.stderr is not None
        text = b""
        with trio.fail_after(20):
            while b"listening on" not in text or not text.endswith(b"\n"):
                text += await proc.stderr.receive_some(4096)
        host, port = text.decode().split("listening on ")[1].split()[0].rsplit(":", 1)
        async with SeastarClient.connect_tcp(host, int(port)) as client:
            with trio.fail_after(10):
                assert await client.call(100, b"abc") == b"abc"
                assert await client.call(103, b"abcd") == (4).to_bytes(8, "little")
    finally:
        proc.kill()
        await proc.wait()


async def test_oversized_requests_are_answered_after_their_body() -> None:
    """refwire answers an oversized request once its whole body has been read and
    discarded, as Seastar does (§3): PASS for both profiles.  Time scale 3: the
    case listens 0.9 s for an early answer (loaded machines)."""
    from refwire.conform.runner import run_cases

    async with broken_seastar(None) as (host, port):
        for profile in ("strict", "seastar"):
            run = await run_cases(CATALOGUE, RunConfig(host=host, port=port, profile=profile, time_scale=3.0), include="ss.S6.1")
            (r,) = run.results
            assert r.verdict is Verdict.PASS, (r.observed, r.reason)
            assert "answered after the body" in r.observation.facts if r.observation else False


def test_every_named_vector_exists_and_every_requirement_cites_the_spec() -> None:
    root = Path(__file__).resolve().parents[2] / "specs" / "seastar-rpc"
    names: set[str] = set()

    def walk(o: object) -> None:
        if isinstance(o, dict):
            if isinstance(o.get("name"), str):
                names.add(o["name"])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)

    for f in (root / "vectors").glob("*.json"):
        walk(json.loads(f.read_text()))
    assert not [(c.id, v) for c in CATALOGUE.cases for v in c.vectors if v not in names]
    spec = (root / "README.md").read_text()
    assert "## 11. Conformance verb set" in spec and "## 12. Conformance testee contract" in spec
    assert all(c.requirement.startswith("specs/seastar-rpc/README.md §") for c in CATALOGUE.cases)


def test_every_requirement_of_a_server_testee_is_a_declarable_feature() -> None:
    """§11 states each requirement of a server testee; each is a feature ``--declare``
    can leave out, used by the cases that need it, and named in the spec."""
    from refwire.conform.cases.seastar_rpc._common import FEATURES

    used = {f for c in CATALOGUE.cases if c.role == "server" for f in c.features}
    assert used == set(FEATURES)
    spec = (Path(__file__).resolve().parents[2] / "specs" / "seastar-rpc" / "README.md").read_text()
    section = spec.split("## 11. Conformance verb set", 1)[1].split("## 12.", 1)[0]
    assert all(f"`{f}`" in section for f in FEATURES), [f for f in FEATURES if f"`{f}`" not in section]


async def test_declared_requirements_make_their_cases_unsupported() -> None:
    from refwire.conform.runner import run_cases

    async with broken_seastar(None) as (host, port):
        off = frozenset({"streams", "memory-limit", "verb-raise"})
        run = await run_cases(
            CATALOGUE, RunConfig(host=host, port=port, declared_off=off), include="ss.S3.2,ss.S5.*,ss.S6.1"
        )
    assert {r.case.id: r.verdict for r in run.results} == {
        c: Verdict.UNSUPPORTED for c in ("ss.S3.2", "ss.S5.1", "ss.S5.2", "ss.S5.3", "ss.S6.1")
    }


def test_every_checked_mark_names_a_case_and_a_profile() -> None:
    """``[checked: CASE PROFILE]`` in the spec marks a claim about the real library that
    the case checks under the profile (tests/peers/test_peer_seastar.py runs them)."""
    import re

    spec = (Path(__file__).resolve().parents[2] / "specs" / "seastar-rpc" / "README.md").read_text()
    marks = re.findall(r"\[checked: (\S+) (\S+)\]", spec)
    assert marks
    ids = {c.id for c in CATALOGUE.cases}
    assert not [(c, p) for c, p in marks if c not in ids or p not in CATALOGUE.profiles]
