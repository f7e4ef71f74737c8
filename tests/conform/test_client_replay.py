"""`refwire conform replay` of a client case: the recorded --exec runs again with
the recorded seed; the same client replays clean, another client diverges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.conform_clients import command
from support.conform_clients import run_lumberjack_client_cases as _run

from refwire.conform.replay import replay_record
from refwire.conform.report import write_reports

pytestmark = pytest.mark.timeout(120)


async def test_replay_a_client_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = await _run(command(), include="lj.C1.2")
    (result,) = run.results
    result.replay = f"refwire conform lumberjack --client --exec '{command()}' --cases lj.C1.2 --seed 5"
    write_reports(run, tmp_path, formats=["json"])
    record = tmp_path / "refwire-client" / "lj.C1.2.json"
    assert json.loads(record.read_text())["verdict"] == "PASS"
    assert await replay_record(record) == 0
    assert "same bytes sent, same frames and close observed" in capsys.readouterr().out
    # a client that claims success without waiting for acks does something else
    rc = await replay_record(record, exec_template="python3 -c 'import sys; sys.exit(0)' {host} {port}")
    out = capsys.readouterr().out
    assert rc == 1 and "first divergence" in out and "recorded PASS" in out
