"""``refwire serve seastar-rpc`` and ``refwire send seastar-rpc`` as processes."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from refwire.cli import build_parser


def _refwire(*args: str) -> list[str]:
    return [sys.executable, "-m", "refwire.cli", *args]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    proc = subprocess.Popen(_refwire("serve", "seastar-rpc", "--listen", "127.0.0.1:0"), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
        assert m, line
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _send(addr: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_refwire("send", "seastar-rpc", addr, *args), capture_output=True, text=True, timeout=60, check=False)


def test_sum_and_compressors(server: str) -> None:
    r = _send(server, "sum", "--int32", "2", "--int32", "3", "--compress", "LZ4_FRAGMENTED,LZ4")
    assert r.returncode == 0, r.stderr
    assert "(int32 5)" in r.stdout and "compressor=LZ4_FRAGMENTED" in r.stderr


def test_errors_are_one_clear_line(server: str) -> None:
    r = _send(server, "boom")
    assert r.returncode == 1 and r.stderr.strip().endswith("refwire: remote verb error: boom"), r.stderr
    r = _send(server, "999")
    assert r.returncode == 1 and "unknown verb 999" in r.stderr
    r = _send(server, "sleep", "--int32", "2000", "--timeout", "0.2")
    assert r.returncode == 1 and "timed out" in r.stderr
    r = _send(server, "nope")
    assert r.returncode == 2 and "neither a number nor a demo verb" in r.stderr
    assert "Traceback" not in r.stderr


def test_stream_echo(server: str) -> None:
    r = _send(server, "stream_echo", "--stream", "a", "--stream", "bb", "--compress", "LZ4")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-2:] == ["stream: a", "stream: bb"]


def test_usage_errors() -> None:
    p = build_parser()
    with pytest.raises(SystemExit):
        p.parse_args(["send", "seastar-rpc", "127.0.0.1:1", "1", "--compress", "ZSTD"])
    args = p.parse_args(["serve", "seastar-rpc", "--group", "sg1=2", "--group", "x"])
    assert args.group == [(b"sg1", 2), (b"x", None)]


def test_benchmark_quick_run_completes() -> None:
    """The harness runs end to end and checks every reply itself; no timing is asserted."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, str(root / "benchmarks" / "seastar_bench.py"), "--quick"],
                         capture_output=True, text=True, timeout=110, check=False, cwd=root)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for section in ("1. Calls/s", "2. MB/s", "3. Decode", "Ratios"):
        assert section in out.stdout
