"""Real peers: the third-party implementations themselves, built from their
pinned sources by ``peers/build.sh`` (peers/README.md), run on 127.0.0.1 and
put through ``refwire conform``.

- ``REFWIRE_PEERS=skip`` skips every test here, with that reason.
- A peer that cannot be built (no toolchain and not root to install it, a
  compile error) skips its tests with the build's own words -- unless
  ``CI=true``, where the tests fail (in their call phase, so a strict xfail,
  which expects an AssertionError, does not hide it).  A machine with no
  source at all (no snapshot, and the clone cannot fetch) skips them, CI or
  not, and says so.
- A first build takes minutes (peers/README.md); after that the cache answers
  at once.  Every wait has a deadline; every process started here runs in a
  process group of its own and is stopped (SIGTERM, then SIGKILL) in a
  ``finally``.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from real_peers import ROOT as ROOT_DIR
from real_peers import Peer, PeerRun, Verdicts, build_peer, conform, free_port, in_ci, merge, server
from sessions import record_server_session
from support.commands import REFWIRE


@pytest.fixture(scope="session", autouse=True)
def _real_peers_on() -> None:
    """``REFWIRE_PEERS=skip``: skip before anything is built."""
    if os.environ.get("REFWIRE_PEERS", "").strip().lower() == "skip":
        pytest.skip("REFWIRE_PEERS=skip: the real-peer tests are turned off")


@pytest.fixture(scope="session")
def go_lumber_peer() -> Peer:
    """go-lumber v0.2.0 built by peers/build.sh: ``bin/ljserver``, ``bin/ljclient``."""
    return build_peer("go-lumber")


@pytest.fixture(scope="session")
def logstash_peer() -> Peer:
    """Logstash's Beats input (logstash-input-beats 7.0.9) built by peers/build.sh: ``bin/logstash-beats``."""
    return build_peer("logstash")


@pytest.fixture(scope="session")
def tank_peer() -> Peer:
    """The TANK broker and tank-cli (phaistos-networks/TANK) built by peers/build.sh."""
    return build_peer("tank")


@pytest.fixture(scope="session")
def seastar_peer() -> Peer:
    """Seastar 25.05's RPC library with our testee program, built by peers/build.sh."""
    return build_peer("seastar")


# --------------------------------------------------------------------------- the runs
# Session fixtures: each module asserts its peer's verdicts, and the
# compatibility matrix (test_peer_matrix.py) shows them all, from one run each.

#: The 80 MiB zlib bomb runs alone: while a server inflates it (and Logstash's few
#: executor threads parse it), the batches of cases running beside it would wait
#: for their acks.
LJ_BOMB = "lj.S4.4"


def _lj_server_run(peer: str, program: str, profile: str, common: list[str], tmp: Path, how: str, log: Path) -> PeerRun:
    fast = conform([*common, "--profile", profile, "--jobs", "4", "--exclude", LJ_BOMB], tmp / "report")
    bomb = conform([*common, "--profile", profile, "--cases", LJ_BOMB], tmp / "report-bomb")
    return PeerRun(peer, program, "server", "lumberjack", profile, merge(fast, bomb), how, log.read_text(errors="replace"))


@pytest.fixture(scope="session")
def go_lumber_server_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljserver (go-lumber's server) with its defaults, every fast server case."""
    program, how = "ljserver", "ljserver -bind 127.0.0.1:0 -out SINK"
    if (unbuilt := Verdicts.of(go_lumber_peer)) is not None:
        return PeerRun("go-lumber", program, "server", "lumberjack", "go-lumber", unbuilt, how)
    tmp = tmp_path_factory.mktemp("go-lumber-server")
    sink = tmp / "sink.jsonl"
    argv = [str(go_lumber_peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(sink), "-q"]
    with server(argv, tmp / "ljserver.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
        assert ready is not None
        common = ["--server", ready[1], "--agent", "go-lumber-server", "--sink", str(sink)]
        run = _lj_server_run("go-lumber", program, "go-lumber", common, tmp, how, tmp / "ljserver.log")
        record_server_session("go-lumber", tmp, ready[1])  # (test_peer_dissector.py, while the server is up)
        return run


def _go_lumber_client_run(level: int, go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    program = f"ljclient -compress {level}"
    how = f"ljclient -c {{host}}:{{port}} -n {{events}} -compress {level} -timeout 30s -tls-ca {{tls_ca}}"
    if (unbuilt := Verdicts.of(go_lumber_peer)) is not None:
        return PeerRun("go-lumber", program, "client", "lumberjack", "go-lumber", unbuilt, how)
    tmp = tmp_path_factory.mktemp(f"go-lumber-client-z{level}")
    exec_ = f"{go_lumber_peer.dir() / 'bin'}/{how}"
    # The library leaves reconnecting and resending to its caller (libbeat, not run here).
    (declare := tmp / "declare.toml").write_text('unsupported = ["resend"]\n')
    args = ["--client", "--exec", exec_, "--agent", f"go-lumber-client-z{level}", "--profile", "go-lumber", "--jobs", "4"]
    args += ["--declare", str(declare)]
    return PeerRun("go-lumber", program, "client", "lumberjack", "go-lumber", conform(args, tmp / "report"), how)


@pytest.fixture(scope="session")
def go_lumber_client_plain_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljclient (go-lumber's v2 SyncClient) sending plain J frames, every fast client case."""
    return _go_lumber_client_run(0, go_lumber_peer, tmp_path_factory)


@pytest.fixture(scope="session")
def go_lumber_client_zlib3_run(go_lumber_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """ljclient sending one C per window at zlib level 3 (Beats' default)."""
    return _go_lumber_client_run(3, go_lumber_peer, tmp_path_factory)


@pytest.fixture(scope="session")
def logstash_server_run(logstash_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """logstash-beats (Logstash's Beats input) with the plugin's defaults, every fast server case."""
    program, how = "logstash-beats", "logstash-beats --port PORT --out SINK"
    if (unbuilt := Verdicts.of(logstash_peer)) is not None:
        return PeerRun("logstash", program, "server", "lumberjack", "logstash", unbuilt, how)
    tmp = tmp_path_factory.mktemp("logstash-server")
    sink = tmp / "sink.jsonl"
    port = free_port()
    argv = [str(logstash_peer.dir() / "bin" / "logstash-beats"), "--port", str(port), "--out", str(sink)]
    with server(argv, tmp / "logstash.log", port=port):
        common = ["--server", f"127.0.0.1:{port}", "--agent", "logstash-beats", "--sink", str(sink)]
        run = _lj_server_run("logstash", program, "logstash", common, tmp, how, tmp / "logstash.log")
        record_server_session("logstash", tmp, f"127.0.0.1:{port}")  # (test_peer_dissector.py, while the server is up)
        return run


# --------------------------------------------------------------------------- TANK

TANK_PROFILE = "tank-broker"


@pytest.fixture(scope="session")
def tank_server_run(tank_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """The broker on a new data directory, every server case (the slow idle close too: it overlaps the rest)."""
    program, how = "tank", "tank -p DATADIR -l 127.0.0.1:PORT"
    if (unbuilt := Verdicts.of(tank_peer)) is not None:
        return PeerRun("tank", program, "server", "tank", TANK_PROFILE, unbuilt, how)
    tmp = tmp_path_factory.mktemp("tank-broker")
    data = tmp / "data"
    data.mkdir()
    port = free_port()
    argv = [str(tank_peer.dir() / "bin" / "tank"), "-p", str(data), "-l", f"127.0.0.1:{port}"]
    with server(argv, tmp / "tank.log", port=port):
        args = ["--server", f"127.0.0.1:{port}", "--agent", "tank-broker", "--profile", TANK_PROFILE, "--jobs", "8", "--tags", "slow"]
        verdicts = conform(args, tmp / "report", protocol="tank")
        record_server_session("tank", tmp, f"127.0.0.1:{port}")  # (test_peer_dissector.py, while the server is up)
    return PeerRun("tank", program, "server", "tank", TANK_PROFILE, verdicts, how, (tmp / "tank.log").read_text(errors="replace"))


#: tank-client's BUNDLE and FETCH: one message a bundle, so a 64-byte chunk holds several
#: bundles and tk.C1.2 cuts one; then all of a case's messages in one bundle, larger than
#: the fetch size, so tk.C1.3 cuts inside the first bundle and tk.C1.2 has nothing to cut.
CLIENT_SHAPES = {"bundle1": (1, 64), "one-bundle": (1000, 64)}


def _tank_cli_run(shape: str, tank_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    bundle, fetch = CLIENT_SHAPES[shape]
    program = f"tank-cli, bundles of {bundle}" if bundle < 1000 else "tank-cli, one bundle"
    how = f"tank-client {{host}} {{port}} {{slug}} {{events}} {{seed}} {bundle} {fetch}"
    if (unbuilt := Verdicts.of(tank_peer)) is not None:
        return PeerRun("tank", program, "client", "tank", TANK_PROFILE, unbuilt, how)
    tmp = tmp_path_factory.mktemp(f"tank-cli-{shape}")
    exec_ = f"{tank_peer.dir() / 'bin'}/{how}"
    args = ["--client", "--exec", exec_, "--agent", f"tank-cli-{shape}", "--profile", TANK_PROFILE, "--jobs", "4"]
    return PeerRun("tank", program, "client", "tank", TANK_PROFILE, conform(args, tmp / "report", protocol="tank"), how)


@pytest.fixture(scope="session")
def tank_cli_bundle1_run(tank_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """tank-cli producing one message a bundle, consuming with a 64-byte fetch size."""
    return _tank_cli_run("bundle1", tank_peer, tmp_path_factory)


@pytest.fixture(scope="session")
def tank_cli_one_bundle_run(tank_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """tank-cli producing all of a case's messages in one bundle, consuming with a 64-byte fetch size."""
    return _tank_cli_run("one-bundle", tank_peer, tmp_path_factory)


# --------------------------------------------------------------------------- Seastar

#: Seastar's own options for a small shared machine: one shard, 256 MiB, no busy polling, epoll.
SEASTAR_FLAGS = ("-c1", "-m256M", "--overprovisioned", "--reactor-backend=epoll")
#: The cases a single-factory server (``--compress lz4``) is run through again: the
#: compressor choice, and the LZ4 cases it supports (LZ4_FRAGMENTED declared left out).
SINGLE_FACTORY = ("ss.S1.3", "ss.S4.1", "ss.S4.2", "ss.S4.3")


def _seastar_server_run(peer: Peer, tmp: Path, compress: str, args: list[str]) -> PeerRun:
    program = f"seastar-testee --compress {compress}"
    how = f"seastar-testee {' '.join(SEASTAR_FLAGS)} --listen 127.0.0.1:0 --compress {compress}"
    if (unbuilt := Verdicts.of(peer)) is not None:
        return PeerRun("seastar", program, "server", "seastar-rpc", "seastar", unbuilt, how)
    argv = [str(peer.dir() / "bin" / "seastar-testee"), *SEASTAR_FLAGS, "--listen", "127.0.0.1:0", "--compress", compress]
    log = tmp / "seastar.log"
    with server(argv, log, ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
        assert ready is not None
        common = ["--server", ready[1], "--agent", f"seastar-{compress}", "--profile", "seastar"]
        v = conform([*common, *args], tmp / "report", protocol="seastar-rpc")
        if compress == "multi":
            record_server_session("seastar", tmp, ready[1])  # (test_peer_dissector.py, while the server is up)
    return PeerRun("seastar", program, "server", "seastar-rpc", "seastar", v, how, log.read_text(errors="replace"))


@pytest.fixture(scope="session")
def seastar_server_run(seastar_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """Our testee over Seastar 25.05 with the multi-algorithm compressor factory, every fast server case."""
    return _seastar_server_run(seastar_peer, tmp_path_factory.mktemp("seastar-server"), "multi", ["--jobs", "2"])


@pytest.fixture(scope="session")
def seastar_single_factory_run(seastar_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """The same with Seastar's single LZ4 factory (as rpc_demo), LZ4_FRAGMENTED declared left out."""
    tmp = tmp_path_factory.mktemp("seastar-server-lz4")
    (declare := tmp / "declare.toml").write_text('unsupported = ["lz4-fragmented"]\n')
    return _seastar_server_run(seastar_peer, tmp, "lz4", ["--cases", ",".join(SINGLE_FACTORY), "--declare", str(declare)])


@pytest.fixture(scope="session")
def seastar_client_run(seastar_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """The real ``rpc::client`` following §12 (our testee's client mode), every fast client case."""
    how = "seastar-testee " + " ".join(SEASTAR_FLAGS) + " --connect {host}:{port} --events {events} --seed {seed} --case {case}"
    if (unbuilt := Verdicts.of(seastar_peer)) is not None:
        return PeerRun("seastar", "seastar-testee --connect", "client", "seastar-rpc", "seastar", unbuilt, how)
    tmp = tmp_path_factory.mktemp("seastar-client")
    exec_ = f"{seastar_peer.dir() / 'bin'}/{how}"
    args = ["--client", "--exec", exec_, "--agent", "seastar-client", "--profile", "seastar", "--jobs", "2"]
    v = conform(args, tmp / "report", protocol="seastar-rpc")
    return PeerRun("seastar", "seastar-testee --connect", "client", "seastar-rpc", "seastar", v, how)


# --------------------------------------------------------------------------- keepalives (spec §3.4)

#: Seconds each server's application holds a batch (a keepalive is owed after 5 s + 1.5 s).
HOLD = 7
HELD_CASES = ("lj.S1.1", "lj.S1.2", "lj.S5.4", "lj.S5.5")

#: go-lumber's lj.S1.1 run without --holds-batches, by report directory.
UNDECLARED: dict[str, Verdicts] = {}


def _common(address: str, agent: str, profile: str) -> list[str]:
    return ["--server", address, "--agent", agent, "--profile", profile, "--holds-batches", str(HOLD)]


def _go_lumber(peer: Peer, tmp: Path) -> Verdicts:
    """One ljserver per case: it hands its batches to one loop, which holds each 7 s in turn."""
    if (unbuilt := Verdicts.of(peer)) is not None:
        return unbuilt

    def one(case: str) -> Verdicts:
        argv = [str(peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(tmp / f"{case}.jsonl"), "-q"]
        argv += ["-ack-delay", f"{HOLD}s"]
        with server(argv, tmp / f"ljserver-{case}.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
            assert ready is not None
            return conform([*_common(ready[1], "go-lumber-held", "go-lumber"), "--cases", case], tmp / f"report-{case}")

    def undeclared() -> Verdicts:
        """lj.S1.1 without --holds-batches: only the keepalives stretch its wait for the ack."""
        argv = [str(peer.dir() / "bin" / "ljserver"), "-bind", "127.0.0.1:0", "-out", str(tmp / "undeclared.jsonl"), "-q"]
        argv += ["-ack-delay", f"{HOLD}s"]
        with server(argv, tmp / "ljserver-undeclared.log", ready=r"^listening on (127\.0\.0\.1:\d+)$") as (_, ready):
            assert ready is not None
            args = ["--server", ready[1], "--agent", "go-lumber-undeclared", "--profile", "go-lumber", "--cases", "lj.S1.1"]
            return conform(args, tmp / "report-undeclared")

    with ThreadPoolExecutor(len(HELD_CASES) + 1) as pool:
        later = pool.submit(undeclared)
        held = merge(*pool.map(one, HELD_CASES))
        UNDECLARED[str(tmp)] = later.result()
    return held


def _logstash(peer: Peer, tmp: Path) -> Verdicts:
    """Executor threads enough for every case at once (the listener holds its thread 7 s)."""
    if (unbuilt := Verdicts.of(peer)) is not None:
        return unbuilt
    port = free_port()
    argv = [str(peer.dir() / "bin" / "logstash-beats"), "--port", str(port), "--out", str(tmp / "sink.jsonl")]
    argv += ["--ack-delay-ms", str(HOLD * 1000), "--executor-threads", "8"]
    with server(argv, tmp / "logstash.log", port=port):
        common = _common(f"127.0.0.1:{port}", "logstash-held", "logstash")
        return conform([*common, "--jobs", "4", "--cases", ",".join(HELD_CASES)], tmp / "report")


def _refwire(tmp: Path) -> Verdicts:
    port = free_port()
    argv = [*REFWIRE, "serve", "lumberjack", "--listen", f"127.0.0.1:{port}", "--out", str(tmp / "sink.jsonl")]
    argv += ["--ack-delay", str(HOLD)]
    with server(argv, tmp / "refwire.log", port=port):
        common = _common(f"127.0.0.1:{port}", "refwire-held", "strict")
        return conform([*common, "--jobs", "4", "--cases", ",".join(HELD_CASES)], tmp / "report")


@pytest.fixture(scope="session")
def held_runs(go_lumber_peer: Peer, logstash_peer: Peer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, PeerRun]:
    """go-lumber, Logstash and refwire's own server holding each batch 7 s, put
    through the keepalive cases with ``--holds-batches 7``: the three runs at once."""
    # (the directories are made here: tmp_path_factory is not for threads)
    tmp = {name: tmp_path_factory.mktemp(f"{name}-held") for name in ("go-lumber", "logstash", "refwire")}
    runs: dict[str, Callable[[], Verdicts]] = {
        "go-lumber": lambda: _go_lumber(go_lumber_peer, tmp["go-lumber"]),
        "logstash": lambda: _logstash(logstash_peer, tmp["logstash"]),
        "refwire": lambda: _refwire(tmp["refwire"]),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {name: pool.submit(fn) for name, fn in runs.items()}
        done = {name: f.result() for name, f in futures.items()}
    how = {
        "go-lumber": ("ljserver -ack-delay 7s", "ljserver -bind 127.0.0.1:0 -out SINK -ack-delay 7s (a server per case)"),
        "logstash": ("logstash-beats --ack-delay-ms 7000", "logstash-beats --port PORT --ack-delay-ms 7000 --executor-threads 8"),
        "refwire": ("refwire serve lumberjack --ack-delay 7", "refwire serve lumberjack --ack-delay 7"),
    }
    profile = {"go-lumber": "go-lumber", "logstash": "logstash", "refwire": "strict"}
    return {n: PeerRun(n, how[n][0], "server", "lumberjack", profile[n], v, how[n][1] + ", --holds-batches 7") for n, v in done.items()}


# --------------------------------------------------------------------------- the PyPI and npm peers
# Installed by the test command (the `interop` extra, `npm ci --prefix tests/interop/node`); no
# profile of their own, so judged under strict.  tests/interop asserts what they get wrong.

INTEROP = ROOT_DIR / "tests" / "interop"
CONFORM_PEERS = ROOT_DIR / "tests" / "conform" / "peers"


def _need(what: str | None, name: str) -> None:
    """Skip (fail with CI=true) when a PyPI or npm peer is not installed."""
    if what is None:
        return
    if in_ci():
        pytest.fail(f"{name}: {what}", pytrace=False)
    pytest.skip(f"{name}: {what}")


def _module(name: str, install: str) -> str | None:
    return None if importlib.util.find_spec(name) else f"Python package {name!r} is not importable ({install})"


def _client_run(peer: str, program: str, protocol: str, template: str, tmp: Path, profile: str = "strict", **kw: Any) -> PeerRun:
    args = ["--client", "--exec", template, "--agent", peer, "--profile", profile, "--jobs", "4"]
    return PeerRun(peer, program, "client", protocol, profile, conform(args, tmp / "report", protocol, **kw), template)


@pytest.fixture(scope="session")
def pylogbeat_client_run(tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """pylogbeat 2.1.0 (PyPI), windows of 3, every fast client case."""
    _need(_module("pylogbeat", "pip install pylogbeat==2.1.0, or .[interop]"), "pylogbeat")
    script = shlex.quote(str(INTEROP / "peers" / "pylogbeat_send.py"))
    tls = "${REFWIRE_TLS_CA:+--tls-ca $REFWIRE_TLS_CA}"
    template = f"sh -c '{shlex.quote(sys.executable)} {script} {{host}} {{port}} {{events}} --batch 3 --timeout 35 {tls}'"
    return _client_run("pylogbeat", "pylogbeat 2.1.0", "lumberjack", template, tmp_path_factory.mktemp("pylogbeat"))


@pytest.fixture(scope="session")
def timbersnake_client_run(tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """timbersnake 0.1.0's client (PyPI), every fast client case."""
    _need(_module("timbersnake", "pip install timbersnake==0.1.0, or .[interop]"), "timbersnake")
    template = shlex.join([sys.executable, str(CONFORM_PEERS / "timbersnake_client.py")]) + " {host} {port} {events} {tls_ca}"
    return _client_run("timbersnake", "timbersnake 0.1.0", "lumberjack", template, tmp_path_factory.mktemp("timbersnake-c"))


@pytest.fixture(scope="session")
def timbersnake_server_run(tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """timbersnake 0.1.0's v2 server (PyPI), every fast server case (the bomb alone)."""
    _need(_module("timbersnake", "pip install timbersnake==0.1.0, or .[interop]"), "timbersnake")
    tmp = tmp_path_factory.mktemp("timbersnake-s")
    argv = [sys.executable, str(INTEROP / "peers" / "timbersnake_recv.py"), "--version", "2"]
    with server(argv, tmp / "timbersnake.log", ready=r'"listening": "(127\.0\.0\.1:\d+)"', stdin_open=True) as (_, ready):
        assert ready is not None
        common = ["--server", ready[1], "--agent", "timbersnake-server"]
        return _lj_server_run("timbersnake", "timbersnake 0.1.0", "strict", common, tmp, "timbersnake_recv.py --version 2", tmp / "timbersnake.log")


@pytest.fixture(scope="session")
def npm_client_run(tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """The npm lumberjack-client 1.0.3, every fast client case."""
    node = shutil.which("node")
    modules = INTEROP / "node" / "node_modules"
    missing = None
    if node is None:
        missing = "`node` is not on PATH (Node 20)"
    elif not (modules / "lumberjack-client" / "package.json").is_file():
        missing = f"npm package lumberjack-client is not installed in {modules} (npm ci --prefix tests/interop/node)"
    _need(missing, "lumberjack-client (npm)")
    template = shlex.join([str(node), str(CONFORM_PEERS / "lumberjack_client.js")]) + " {host} {port} {events} {tls_ca}"
    tmp = tmp_path_factory.mktemp("npm-client")
    return _client_run("lumberjack-client", "lumberjack-client 1.0.3 (npm)", "lumberjack", template, tmp, env={"NODE_PATH": str(modules)})


@pytest.fixture(scope="session")
def pravega_rust_client_run(tmp_path_factory: pytest.TempPathFactory) -> PeerRun:
    """The Pravega client (PyPI pravega 0.3.8, Rust core) through the case's controller, every fast client case."""
    _need(_module("pravega_client", "pip install pravega==0.3.8, or .[interop]"), "pravega")
    template = shlex.join([sys.executable, str(CONFORM_PEERS / "pravega_rust_client.py")]) + " {controller} {slug} {events} {seed}"
    tmp = tmp_path_factory.mktemp("pravega-rust")
    return _client_run("pravega-rust-client", "pravega 0.3.8 (Rust)", "pravega", template, tmp, profile="rust-client")
