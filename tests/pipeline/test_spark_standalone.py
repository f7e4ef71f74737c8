"""The cluster path, proven: a Spark standalone master and worker (two JVMs on
127.0.0.1, started from the installed pyspark) run ``refwire campaign`` and
``refwire analyze`` given ``--master spark://…``.

Opt-in (``--run-slow``): starting two JVMs and an application takes a minute
on two cores.  Each command runs in its own interpreter, so the session is
built for the cluster and not taken over from another test's local one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from refwire.pipeline.dialects.lumberjack import write_lumberjack_capture
from refwire.pipeline.session import java_problem

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(600)]

LOCAL = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the {what} exited with status {proc.returncode}")
        try:
            with socket.create_connection((LOCAL, port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"the {what} did not listen on {port} within {timeout}s")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if java_problem() is not None:
        pytest.skip(java_problem() or "no Java")
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    work = tmp_path_factory.mktemp("spark-standalone")
    env = dict(os.environ, SPARK_HOME=str(home), SPARK_LOCAL_IP=LOCAL, SPARK_WORKER_DIR=str(work / "worker"))
    env["SPARK_DAEMON_JAVA_OPTS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    port, ui = _free_port(), _free_port()
    logs = (work / "master.log").open("wb"), (work / "worker.log").open("wb")
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", LOCAL, "--port", str(port), "--webui-port", str(ui)],
        env=env,
        stdout=logs[0],
        stderr=subprocess.STDOUT,
    )
    procs = [master]
    try:
        _wait_port(port, master, "master")
        url = f"spark://{LOCAL}:{port}"
        worker = subprocess.Popen(
            [
                *(spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", LOCAL, "--cores", "2", "--memory", "2g"),
                *("--webui-port", str(_free_port()), "--work-dir", str(work / "worker")),
            ],
            env=env,
            stdout=logs[1],
            stderr=subprocess.STDOUT,
        )
        procs.append(worker)
        deadline = time.monotonic() + 120
        while b"Successfully registered with master" not in (work / "worker.log").read_bytes():
            assert worker.poll() is None and time.monotonic() < deadline, (work / "worker.log").read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for f in logs:
            f.close()


def _refwire(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refwire.cli", *args], capture_output=True, text=True, timeout=480)


def test_campaign_and_analyze_on_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    out = tmp_path / "campaigns"
    done = _refwire("campaign", "--master", cluster, "--protocols", "lumberjack,tank", "--seeds", "4", "--out", str(out), "--campaign", "c1")
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    assert "8 runs" in done.stdout or "8 passed" in done.stdout or "runs 8" in done.stdout, done.stdout
    assert cluster in done.stdout  # the summary names the master the runs went to
    parquet = list((out / "runs" / "campaign=c1").glob("protocol=*/*.parquet"))
    assert {p.parent.name for p in parquet} == {"protocol=lumberjack", "protocol=tank"}

    capture = tmp_path / "capture"
    write_lumberjack_capture(capture, ("", "wrong-ack"))
    analysis = tmp_path / "analysis"
    done = _refwire("analyze", str(capture), "--out", str(analysis), "--master", cluster, "--allow-failures")
    assert done.returncode == 0, done.stderr[-3000:]
    assert list((analysis / "frames").rglob("*.parquet")) and list((analysis / "violations").rglob("*.parquet"))
    summary = done.stdout + done.stderr
    assert "LJ-" in summary, summary  # the injected wrong ack is reported as a Lumberjack rule violation
