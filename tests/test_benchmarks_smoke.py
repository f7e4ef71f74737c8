"""The benchmark harness still runs end to end (its --quick mode checks every
count itself and exits non-zero on any shortfall).  No timing is asserted:
performance is read from the benchmark's own side-by-side output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]



def run_benchmark(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/SCRIPT ARGS`` in a fresh process; it must exit 0 within 110 s."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True, timeout=110, check=False, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out

@pytest.mark.interop
def test_lumberjack_benchmark_quick_run_completes() -> None:
    for peer in ("timbersnake", "pylogbeat"):
        if os.environ.get("CI"):
            __import__(peer)  # CI installs the peers: missing is a failure, not a skip
        else:
            pytest.importorskip(peer)
    out = run_benchmark("lumberjack_bench.py", "--quick")
    for section in ("1. Server ingest", "2. Client send", "3. Decode", "Ratios"):
        assert section in out.stdout


def test_chaos_benchmark_quick_run_completes() -> None:
    out = run_benchmark("chaos_bench.py", "--quick")
    assert "through refwire chaos (frames decoded)" in out.stdout and "events/s" in out.stdout


def test_sim_benchmark_quick_run_completes() -> None:
    out = run_benchmark("sim_bench.py", "--quick", "--profile", "--top", "3")
    for protocol in ("lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc"):
        assert protocol in out.stdout
    assert "seeds/s (CPU)" in out.stdout and "Where the time goes" in out.stdout and "by area" in out.stdout
