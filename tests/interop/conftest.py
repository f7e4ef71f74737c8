"""Fixtures for the Lumberjack interop tests: third-party peers as subprocesses,
a refwire server that records every batch, TLS material from trustme.

Peer availability: a peer that is not installed makes its tests FAIL when the
environment variable ``CI`` is set (the CI image must have every peer) and
SKIP with the reason otherwise.  Python peers are looked up in the interpreter
running pytest (``pip install -e .[dev,interop]``); the npm peer in
``tests/interop/node/node_modules`` (``npm ci --prefix tests/interop/node``).

Nothing here can hang: every wait is under ``trio.fail_after`` / ``move_on_after``,
every subprocess runs under a deadline and is killed on the way out, and every
server started is stopped when its ``async with`` block ends.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from refwire.drivers import parse_hostport
from refwire.lumberjack import Batch
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer, ServerConfig

HERE = Path(__file__).resolve().parent
PEERS = HERE / "peers"
NODE_DIR = HERE / "node"
NODE_MODULES = NODE_DIR / "node_modules"
LUMBERJACK_CLIENT_VERSION = "1.0.3"  # pinned in tests/interop/node/package.json
LOCALHOST = "127.0.0.1"


# --------------------------------------------------------------------------- peer availability


def require_peer(missing: str | None) -> None:
    """Fail (``CI`` set) or skip (otherwise) the running test when a peer is missing."""
    if missing is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"interop peer missing in CI: {missing}", pytrace=False)
    pytest.skip(f"interop peer missing: {missing}")


@dataclass(frozen=True)
class Peer:
    """A peer driver script.

    A missing peer skips the test while its fixture is set up (locally), or --
    with ``CI`` set -- fails it when the test asks for the command, in the call
    phase, so it is reported as a test FAILURE rather than a setup error.
    """

    cmd: list[str]
    env: dict[str, str] | None = None
    missing: str | None = None  #: why it cannot run, or None

    def command(self) -> list[str]:
        require_peer(self.missing)
        return list(self.cmd)


def _checked(peer: Peer) -> Peer:
    if peer.missing is not None and not os.environ.get("CI"):
        require_peer(peer.missing)  # skip now, with the reason
    return peer


def _python_peer(module: str, script: str, install: str) -> Peer:
    missing = None
    if importlib.util.find_spec(module) is None:
        missing = f"Python package {module!r} is not importable by {sys.executable} ({install})"
    return _checked(Peer([sys.executable, str(PEERS / script)], missing=missing))


@pytest.fixture
def pylogbeat_send() -> Peer:
    """``peers/pylogbeat_send.py`` (append ``HOST PORT N ...``)."""
    return _python_peer("pylogbeat", "pylogbeat_send.py", "pip install pylogbeat==2.1.0, or .[interop]")


@pytest.fixture
def timbersnake_send() -> Peer:
    return _python_peer("timbersnake", "timbersnake_send.py", "pip install timbersnake==0.1.0, or .[interop]")


@pytest.fixture
def timbersnake_recv() -> Peer:
    return _python_peer("timbersnake", "timbersnake_recv.py", "pip install timbersnake==0.1.0, or .[interop]")


@pytest.fixture
def lumberjack_client_send() -> Peer:
    """``node peers/lumberjack_client_send.js`` with NODE_PATH=tests/interop/node/node_modules."""
    node = shutil.which("node")
    pkg = NODE_MODULES / "lumberjack-client" / "package.json"
    install = "run: npm ci --prefix tests/interop/node"
    missing = None
    if node is None:
        missing = "`node` is not on PATH (Node 20 is needed for the npm peers)"
    elif not pkg.is_file():
        missing = f"npm package lumberjack-client is not installed in {NODE_MODULES} ({install})"
    else:
        version = json.loads(pkg.read_text()).get("version")
        if version != LUMBERJACK_CLIENT_VERSION:
            missing = f"lumberjack-client {version} is installed, the tests pin {LUMBERJACK_CLIENT_VERSION} ({install})"
    env = dict(os.environ, NODE_PATH=str(NODE_MODULES))
    return _checked(Peer([node or "node", str(PEERS / "lumberjack_client_send.js")], env, missing))


# --------------------------------------------------------------------------- TLS


@dataclass(frozen=True)
class TlsFiles:
    ca_pem: Path
    cert_pem: Path  #: server certificate chain (SAN IP:127.0.0.1, DNS:localhost)
    key_pem: Path
    server_context: ssl.SSLContext
    client_context: ssl.SSLContext


@pytest.fixture
def pravega_client() -> None:
    """The real Pravega client (``pravega==0.3.8``) must be importable."""
    require_peer(None if importlib.util.find_spec("pravega_client") else "pravega_client (pip install pravega==0.3.8)")


@pytest.fixture(scope="session")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    ca = trustme.CA()
    cert = ca.issue_cert(LOCALHOST, "localhost")
    d = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    cert.private_key_pem.write_to_path(str(d / "server.key"))
    chain = d / "server.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    return TlsFiles(d / "ca.pem", chain, d / "server.key", server_ctx, client_ctx)


# --------------------------------------------------------------------------- subprocesses


@dataclass
class PeerRun:
    cmd: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        """The peer script's last stdout line, a JSON object ({} if none)."""
        lines = [ln for ln in self.stdout.splitlines() if ln.strip()]
        try:
            return dict(json.loads(lines[-1])) if lines else {}
        except ValueError:
            return {}

    def describe(self) -> str:
        return f"$ {' '.join(self.cmd)}\nexit {self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


async def _run_peer(cmd: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> PeerRun:
    """Run a peer script to completion; fail the test if it outlives ``timeout``
    (trio terminates, then kills, the process on the way out)."""
    try:
        with trio.fail_after(timeout):
            proc = await trio.run_process(list(cmd), capture_stdout=True, capture_stderr=True, check=False, env=env)
    except trio.TooSlowError:
        pytest.fail(f"peer did not finish within {timeout}s: {' '.join(cmd)}", pytrace=False)
    return PeerRun(list(cmd), proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))


@pytest.fixture
def run_peer() -> Callable[..., Any]:
    """``await run_peer(cmd, timeout=..., env=...)`` -> :class:`PeerRun`."""
    return _run_peer


# --------------------------------------------------------------------------- refwire server


@dataclass
class Received:
    """What a refwire server handed to its application, in delivery order."""

    batches: list[tuple[int, Batch]] = field(default_factory=list)  #: (connection id, batch)

    def events(self) -> list[Any]:
        return [ev.fields() for _, b in self.batches for ev in b.events]

    def seqs(self) -> list[list[int]]:
        return [[ev.seq for ev in b.events] for _, b in self.batches]

    def connections(self) -> set[int]:
        return {cid for cid, _ in self.batches}


@dataclass
class RunningServer:
    server: LumberjackServer
    host: str
    port: int
    received: Received


@asynccontextmanager
async def _refwire_server(
    *, ssl_context: ssl.SSLContext | None = None, config: ServerConfig | None = None
) -> AsyncIterator[RunningServer]:
    received = Received()

    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        received.batches.append((info.id, batch))

    server = LumberjackServer(handler, config=config or ServerConfig(), ssl_context=ssl_context)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(5):
            addresses = await nursery.start(partial(server.serve_tcp, LOCALHOST, 0))
        host, port = parse_hostport(addresses[0])
        try:
            yield RunningServer(server, host, port, received)
        finally:
            with trio.move_on_after(5) as scope:
                scope.shield = True
                await server.shutdown(grace=1.0)
            nursery.cancel_scope.cancel()


@pytest.fixture
def refwire_server() -> Callable[..., Any]:
    """``async with refwire_server(ssl_context=..., config=...) as srv:`` -- a
    refwire Lumberjack server on 127.0.0.1:<random>, recording every batch;
    stopped when the block ends."""
    return _refwire_server


# --------------------------------------------------------------------------- timbersnake server


class TimbersnakeServer:
    """A running ``peers/timbersnake_recv.py``: its JSON lines, parsed as they come."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.port = 0
        self.events: list[tuple[int, Any]] = []  #: (seq, event) in arrival order
        self.errors: list[str] = []
        self.final: dict[str, Any] | None = None
        self.stderr = bytearray()
        self.eof = False  #: its stdout ended (it exited)
        self._changed = trio.Event()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        async for chunk in self.proc.stdout:
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if "listening" in msg:
                    self.port = parse_hostport(msg["listening"])[1]
                elif "seq" in msg:
                    self.events.append((msg["seq"], msg["event"]))
                elif "error" in msg:
                    self.errors.append(msg["error"])
                elif "count" in msg:
                    self.final = msg
            self._notify()
        self.eof = True
        self._notify()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for chunk in self.proc.stderr:
            self.stderr += chunk

    async def wait_until(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        try:
            with trio.fail_after(timeout):
                while not predicate():
                    if self.eof:
                        pytest.fail(
                            f"timbersnake_recv.py ended while waiting for {what}\n{self.stderr.decode(errors='replace')[-3000:]}",
                            pytrace=False,
                        )
                    await self._changed.wait()
        except trio.TooSlowError:
            pytest.fail(
                f"timbersnake server: no {what} within {timeout}s (events so far: {len(self.events)}, errors: {self.errors})",
                pytrace=False,
            )

    async def stop(self) -> dict[str, Any]:
        """Close its stdin (it prints its final count and exits); returns that line."""
        assert self.proc.stdin is not None
        await self.proc.stdin.aclose()
        await self.wait_until(lambda: self.final is not None, 5, "final count")
        with trio.fail_after(5):
            await self.proc.wait()
        assert self.final is not None
        return self.final


@asynccontextmanager
async def _timbersnake_server(cmd: list[str]) -> AsyncIterator[TimbersnakeServer]:
    async with trio.open_nursery() as nursery:
        with trio.fail_after(10):
            proc = await nursery.start(
                partial(trio.run_process, cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
            )
        ts = TimbersnakeServer(proc)
        nursery.start_soon(ts._read_stdout)
        nursery.start_soon(ts._read_stderr)
        try:
            await ts.wait_until(lambda: ts.port != 0, 10, "listening line")
            yield ts
        finally:
            # Normally ts.stop() already ended it; otherwise cancelling run_process
            # terminates (then kills) the process.
            nursery.cancel_scope.cancel()


@pytest.fixture
def timbersnake_server(timbersnake_recv: Peer) -> Callable[..., Any]:
    """``async with timbersnake_server(version, tls=None) as ts:`` -- timbersnake's
    server (v1 or v2) on 127.0.0.1:<random>; ``ts.events`` fills as it receives."""

    def start(version: int, tls: TlsFiles | None = None) -> Any:
        cmd = [*timbersnake_recv.command(), "--version", str(version)]
        if tls is not None:
            cmd += ["--tls-cert", str(tls.cert_pem), "--tls-key", str(tls.key_pem)]
        return _timbersnake_server(cmd)

    return start
