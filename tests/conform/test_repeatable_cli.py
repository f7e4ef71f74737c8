"""``refwire conform`` from the command line: the run id printed and
recorded beside the seed; ``replay`` keeping every recorded option (TLS,
``--declare``, ``--sink``, ``--time-scale``) under a fresh run id it masks;
selections and ``--declare`` keys that match nothing refused with the known
names (exit 2, the plugin: a usage error); a testee that only closes judged by
the cases, never a harness error; case ids listed in natural order."""

from __future__ import annotations

import json
import re
import ssl
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trustme

from refwire.cli import main
from refwire.conform import cli as conform_cli
from refwire.conform.cases.lumberjack import CATALOGUE as LUMBERJACK
from refwire.conform.cases.tank import CATALOGUE as TANK
from refwire.conform.ids import natural_key
from refwire.conform.replay import diff_records, recorded_options
from refwire.conform.runner import RunConfig, run_cases
from refwire.drivers import parse_hostport
from refwire.lumberjack.server import LumberjackServer
from refwire.reference import RunningServer

from .conftest import lumberjack_testee

pytestmark = pytest.mark.timeout(60)

pytest_plugins = ["pytester"]

ARGS = ("-p", "no:cacheprovider", "-p", "no:randomly")


async def _main(argv: list[str]) -> int:
    status: int = await trio.to_thread.run_sync(main, argv)
    return status


def _record(out: Path, case: str) -> dict[str, Any]:
    (path,) = out.glob(f"*/{case}.json")
    rec: dict[str, Any] = json.loads(path.read_text())
    return rec


# --------------------------------------------------------------------------- run id


async def test_the_run_id_is_printed_and_recorded_beside_the_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with lumberjack_testee() as (host, port):
        base = ["conform", "lumberjack", "--server", f"{host}:{port}", "--cases", "lj.S1.1", "--seed", "4", "--quiet"]
        assert await _main([*base, "--out", str(tmp_path / "a")]) == 0
        assert await _main([*base, "--out", str(tmp_path / "b"), "--run-id", "00c0ffee"]) == 0
    out = capsys.readouterr().out
    drawn = re.findall(r"seed 4, run id ([0-9a-f]{8})", out)
    assert len(drawn) == 2 and drawn[1] == "00c0ffee" and drawn[0] != drawn[1], out
    for name, rid in (("a", drawn[0]), ("b", "00c0ffee")):
        index = json.loads((tmp_path / name / "index.json").read_text())
        assert index["run"]["seed"] == 4 and index["run"]["run_id"] == rid
        assert _record(tmp_path / name, "lj.S1.1")["replay"].endswith(f"--cases lj.S1.1 --seed 4 --run-id {rid}")


def test_a_run_id_is_eight_hex_digits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse refuses it
        main(["conform", "lumberjack", "--server", "127.0.0.1:9", "--run-id", "nope"])
    assert exited.value.code == 2
    assert "is not a run id: 8 lowercase hex digits" in capsys.readouterr().err


# --------------------------------------------------------------------------- replay


async def test_replay_keeps_the_sink_and_the_declared_features_and_masks_the_run_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sink = tmp_path / "sink.jsonl"
    declare = tmp_path / "declare.toml"
    declare.write_text('unsupported = ["v1"]\n')
    out = tmp_path / "run"
    async with lumberjack_testee(sink=sink) as (host, port):
        argv = ["conform", "lumberjack", "--server", f"{host}:{port}", "--sink", str(sink), "--declare", str(declare)]
        argv += ["--cases", "lj.S5.3,lj.S1.2", "--seed", "8", "--time-scale", "0.5", "--quiet", "--out", str(out)]
        assert await _main(argv) == 0
        recorded = _record(out, "lj.S5.3")
        assert recorded["verdict"] == "PASS" and _record(out, "lj.S1.2")["verdict"] == "UNSUPPORTED"
        capsys.readouterr()
        # a fresh run id against the same sink (not emptied): the same bytes once the ids are masked
        assert await _main(["conform", "replay", str(out / f"{host}_{port}" / "lj.S5.3.json")]) == 0
        said = capsys.readouterr().out
        assert "recorded PASS, now PASS" in said and "same bytes sent" in said, said
        assert "--time-scale" not in recorded["replay"] or "--time-scale 0.5" in recorded["replay"]
        # --declare kept: the v1 case is still declared out
        assert await _main(["conform", "replay", str(out / f"{host}_{port}" / "lj.S1.2.json")]) == 0
        assert "recorded UNSUPPORTED, now UNSUPPORTED" in capsys.readouterr().out
        # the recorded run id against the sink that was not emptied: the sink decides, ERROR saying so
        rid = recorded["replay"].rsplit("--run-id ", 1)[1]
        assert await _main(["conform", "replay", str(out / f"{host}_{port}" / "lj.S5.3.json"), "--run-id", rid]) == 1
        said = capsys.readouterr().out
        assert "recorded PASS, now ERROR" in said and "sent different" not in said, said
    args = recorded_options(Path("x"), recorded, LUMBERJACK)
    assert (args.time_scale, args.sink, args.declare) == (0.5, str(sink), declare)


def test_a_case_that_did_not_run_is_said_so_not_blamed_on_the_seed() -> None:
    old = {"verdict": "PASS", "wire_log": [{"kind": "tx", "hex": "3257"}], "close": {}, "replay": "x --run-id 0000aaaa"}
    new = {"verdict": "UNSUPPORTED", "reason": "needs --sink", "wire_log": [], "close": {}}
    lines = diff_records(old, new)
    assert lines[0] == "the case did not run now (UNSUPPORTED): needs --sink"
    assert not any("seed" in line or "bytes" in line for line in lines)


async def test_replay_keeps_tls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    async def noop(batch: object, info: object) -> None:
        return None

    server = LumberjackServer(noop, ssl_context=server_ctx)
    async with trio.open_nursery() as nursery:
        (address,) = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = parse_hostport(address)
        argv = ["conform", "lumberjack", "--server", f"{host}:{port}", "--tls", "--tls-ca", str(ca_file), "--cases", "lj.S1.1"]
        assert await _main([*argv, "--seed", "2", "--quiet", "--out", str(tmp_path / "run")]) == 0
        capsys.readouterr()
        assert await _main(["conform", "replay", str(tmp_path / "run" / f"{host}_{port}" / "lj.S1.1.json")]) == 0
        said = capsys.readouterr().out
        assert "recorded PASS, now PASS" in said and "same bytes sent" in said, said
        nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- selections that match nothing


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--cases", "nosuch"], r"--cases 'nosuch' matches no lumberjack server case; the ids \(or slugs\): lj\.S1\.1, lj\.S1\.2, "),
        (["--cases", "lj.S1.1,lj.C1.1"], r"--cases 'lj.C1.1' matches no lumberjack server case"),
        (["--exclude", "nosuch"], r"--exclude 'nosuch' matches no lumberjack server case"),
        (["--tags", "nosuch"], r"--tags nosuch: no lumberjack server case carries it; the tags: .*holds-batches.*slow"),
        (["--client", "--cases", "lj.S1.1"], r"--cases 'lj.S1.1' matches no lumberjack client case; the ids \(or slugs\): lj\.C1\.1"),
    ],
)
def test_a_selection_matching_nothing_is_exit_2_with_the_known_names(
    extra: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = [] if "--client" in extra else ["--server", "127.0.0.1:9"]
    assert main(["conform", "lumberjack", *where, *extra, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert re.search(said, err), err
    assert not (tmp_path / "index.json").exists()


@pytest.mark.parametrize(
    ("toml", "said"),
    [
        ('unsuported = ["v1"]\n', "unknown key(s) unsuported; known: unsupported, or a table per protocol"),
        ('[lumberjack]\nunsuported = ["v1"]\n', "unknown key(s) in [lumberjack]: unsuported; known: unsupported"),
        ('unsupported = ["v3"]\n', "unknown feature(s) v3; lumberjack has: "),
    ],
)
def test_a_misspelled_declare_key_is_exit_2(toml: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    declare = tmp_path / "declare.toml"
    declare.write_text(toml)
    assert main(["conform", "lumberjack", "--server", "127.0.0.1:9", "--declare", str(declare)]) == 2
    assert said in capsys.readouterr().err


def test_the_plugin_refuses_cases_matching_nothing(pytester: pytest.Pytester, lumberjack_server: RunningServer) -> None:
    result = pytester.runpytest(
        *ARGS, "--refwire-conform", "lumberjack", "--refwire-server", lumberjack_server.address, "--refwire-cases", "nosuch"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--refwire-cases 'nosuch' matches no lumberjack server case; the ids (or slugs): lj.S1.1,*"])


def test_the_plugin_runs_twice_against_one_server_and_prints_the_run_id(
    pytester: pytest.Pytester, tank_broker: RunningServer
) -> None:
    """The second session gets the same outcome as the first (its topics are its own)."""
    for _ in range(2):
        result = pytester.runpytest(
            *ARGS, "--refwire-conform", "tank", "--refwire-server", tank_broker.address, "--refwire-cases", "tk.S2.*,tk.S3.1"
        )
        result.assert_outcomes(passed=5)
        result.stdout.fnmatch_lines(["refwire conform tank: seed 0, run id *"])


# --------------------------------------------------------------------------- a testee that only closes


async def test_a_testee_that_only_closes_is_judged_by_the_cases_not_a_harness_error() -> None:
    """TANK's cases against a Lumberjack server: it sends nothing and closes at the
    first bytes it cannot read (its verdict), so the cases FAIL it -- none is a
    harness error (refwire's client machine refusing to go on after the close)."""
    async with lumberjack_testee() as (host, port):
        cfg = RunConfig(host=host, port=port, seed=1, jobs=8, time_scale=0.25)
        run = await run_cases(TANK, cfg, include="tk.S2.1,tk.S2.2,tk.S4.1,tk.S1.4")
    assert {r.verdict.value for r in run.results} == {"FAIL"}, {r.case.id: r.reason for r in run.results}
    assert not any(r.harness_fault or "harness" in r.reason for r in run.results)


# --------------------------------------------------------------------------- natural order


def test_list_sorts_ids_naturally(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    shuffled = attrs.evolve(LUMBERJACK, cases=tuple(reversed(LUMBERJACK.cases)))
    monkeypatch.setattr(conform_cli, "_catalogue", lambda protocol: shuffled)
    assert main(["conform", "list", "lumberjack", "--role", "server"]) == 0
    ids = re.findall(r"^  (lj\.\S+)", capsys.readouterr().out, re.M)
    assert ids == sorted(ids, key=natural_key) and ids.index("lj.S6.2") < ids.index("lj.S6.10")
    assert main(["conform", "list", "lumberjack", "--tags", "nosuch"]) == 2


def test_replay_masks_a_run_id_cut_by_a_seeded_split() -> None:
    """The run ids are masked over the stream written, not chunk by chunk."""

    def rec(rid: str, cut: int) -> dict[str, Any]:
        data = f"topic-conform-tk-S2-1-{rid}!".encode()
        return {
            "verdict": "PASS",
            "close": {"by": "refwire", "how": "FIN"},
            "replay": f"refwire conform tank --server h:1 --cases tk.S2.1 --seed 1 --run-id {rid}",
            "wire_log": [{"kind": "tx", "hex": data[:cut].hex()}, {"kind": "tx", "hex": data[cut:].hex()}],
        }

    assert diff_records(rec("0000aaaa", 25), rec("1234beef", 25)) == []
    assert diff_records(rec("0000aaaa", 25), rec("1234beef", 26))  # other chunk boundaries are a difference
