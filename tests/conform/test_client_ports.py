"""Client mode's fixed ports: --from-port N puts case i on port N+i, --listen
HOST:PORT one case on that port; both judged like the default port 0."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import trio
from support.conform_clients import command

from refwire.cli import main

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("how", ["from-port", "listen"])
async def test_fixed_ports(how: str, tmp_path: Path) -> None:
    port = _free_port()
    where = ["--from-port", str(port)] if how == "from-port" else ["--listen", f"127.0.0.1:{port}"]
    argv = [
        "conform",
        "lumberjack",
        "--client",
        "--exec",
        command(),
        *where,
        "--cases",
        "lj.C1.2",
        "--seed",
        "2",
        "--quiet",
        "--out",
        str(tmp_path),
    ]
    assert await trio.to_thread.run_sync(main, argv) == 0
    (record,) = (tmp_path).glob("*/lj.C1.2.json")
    rec = json.loads(record.read_text())
    assert rec["verdict"] == "PASS"
    assert any(f"127.0.0.1:{port}" in str(e.get("text", "")) for e in rec["wire_log"]), [
        e for e in rec["wire_log"] if e["kind"] == "action"
    ][:5]


def test_listen_with_a_port_and_from_port_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "lumberjack", "--client", "--listen", "127.0.0.1:7000", "--from-port", "7100"]) == 2
    assert "exclude each other" in capsys.readouterr().err
