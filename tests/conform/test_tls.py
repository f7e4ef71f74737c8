"""`refwire conform lumberjack --server … --tls`: the cases run over TLS, the
certificate is verified against --tls-ca, and a wrong CA is a clear exit 2."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest
import trio
import trustme

from refwire.cli import main
from refwire.drivers import parse_hostport
from refwire.lumberjack.server import LumberjackServer

pytestmark = pytest.mark.timeout(60)


async def _noop(batch: object, info: object) -> None:
    return None


async def test_cases_over_tls(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    other = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other))
    server = LumberjackServer(_noop, ssl_context=server_ctx)
    async with trio.open_nursery() as nursery:
        (address,) = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = parse_hostport(address)
        base = [
            "conform",
            "lumberjack",
            "--server",
            f"{host}:{port}",
            "--tls",
            "--cases",
            "lj.S1.1,lj.S6.1",
            "--quiet",
            "--seed",
            "1",
        ]
        ok = await trio.to_thread.run_sync(main, [*base, "--tls-ca", str(ca_file), "--out", str(tmp_path / "ok")])
        wrong = await trio.to_thread.run_sync(main, [*base, "--tls-ca", str(other), "--out", str(tmp_path / "wrong")])
        nursery.cancel_scope.cancel()
    assert ok == 0
    verdicts = {
        k: v["verdict"] for k, v in json.loads((tmp_path / "ok" / "index.json").read_text())["agents"][f"{host}:{port}"].items()
    }
    assert verdicts == {"lj.S1.1": "PASS", "lj.S6.1": "PASS"}
    assert wrong == 2  # the first connection fails its handshake: the run cannot start


def test_tls_options_need_tls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conform", "lumberjack", "--server", "127.0.0.1:1", "--tls-ca", str(tmp_path / "ca.pem")]) == 2
    assert "--tls-ca and --tls-insecure need --tls" in capsys.readouterr().err


async def test_the_runs_tls_material_is_removed_at_its_end() -> None:
    from refwire.conform.cases.lumberjack import CATALOGUE
    from refwire.conform.clients import ClientSetup, close_listeners

    setup = ClientSetup(exec_template="true")
    material = setup.tls_for(CATALOGUE.case("lj.C5.1"))
    assert material is not None and material.temporary is not None and Path(material.ca_file).is_file()
    assert setup.tls_for(CATALOGUE.case("lj.C1.1")) is None
    await close_listeners(setup)
    assert not Path(material.temporary).exists() and setup.tls is None
