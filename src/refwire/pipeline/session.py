"""The one place that builds a SparkSession.

``local_spark()`` applies settings chosen by measurement: workers run this
interpreter (``PYSPARK_PYTHON``; otherwise they run whatever ``python3`` is on
``PATH`` and fail to import pyarrow), loopback only, no UI or console progress
bars, as many shuffle partitions as cores, UTC, Python filter pushdown on
(a reader that defines ``pushFilters`` fails without it), a log4j2 file that
keeps the JVM quiet, and, for short local runs, the C1-only JIT and serial GC
(about 35 % less CPU at start-up).  With ``jvm_log`` the JVM's stderr (its
start-up warnings such as "Using incubator modules", log4j's errors, the Python
workers' output) goes to that file instead of the terminal.

The same builder takes ``master`` (``spark://…``, ``yarn``, ``k8s://…``) to run
on a cluster; refwire must then be installed on the executors (a wheel via
``spark.submit.pyFiles`` or a packed venv via ``spark.archives``) and their
Python named by ``PYSPARK_PYTHON`` (docs/guides/pipeline.rst, "Running on a cluster").
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["SparkUnavailable", "java_problem", "local_spark"]

#: Spark logs errors only, including the logger that silences the gateway banner.
LOG4J2_PROPERTIES = """\
rootLogger.level = error
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.pygw.name = org.apache.spark.api.python.PythonGatewayServer
logger.pygw.level = error
"""


class SparkUnavailable(RuntimeError):
    """pyspark or Java is missing; the message says how to install it."""


def java_problem() -> str | None:
    """Why Spark cannot start a JVM here, or None if ``java`` is found."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        "no Java found (Spark 4 needs Java 17 or 21): install one, e.g. `apt-get install -y openjdk-17-jre-headless`, "
        "or set JAVA_HOME (scripts/test.sh does this for CI)"
    )


def _log4j_file() -> str:
    path = Path(tempfile.gettempdir()) / f"refwire-log4j2-{os.getuid() if hasattr(os, 'getuid') else 0}.properties"
    if not path.exists() or path.read_text() != LOG4J2_PROPERTIES:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(LOG4J2_PROPERTIES)
        os.replace(tmp, path)
    return str(path)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` (appended) for the block, so a process
    started meanwhile (the JVM) keeps writing its stderr there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def local_spark(
    app: str = "refwire",
    *,
    master: str | None = None,
    cores: int | None = None,
    fast_jvm: bool = True,
    conf: dict[str, str] | None = None,
    jvm_log: str | Path | None = None,
) -> Any:
    """Build (or return the running) SparkSession with the settings above.

    ``master`` defaults to ``local[cores]`` (cores defaults to the CPU count).
    ``jvm_log``: a file for the JVM's stderr (default: this process's stderr).

    Raises:
        SparkUnavailable: pyspark is not installed, no Java is found, or (with
            ``jvm_log``) the JVM did not start (the message quotes the log's last line).
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable('pyspark is not installed: pip install "refwire[spark]"') from None
    problem = java_problem()
    if problem is not None:
        raise SparkUnavailable(problem)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    n = cores or os.cpu_count() or 2
    jopts = f"-Dlog4j.configurationFile={_log4j_file()}"
    if fast_jvm:
        jopts += " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    settings = {
        "spark.driver.extraJavaOptions": jopts,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(n),
        "spark.default.parallelism": str(n),
        "spark.sql.session.timeZone": "UTC",
        "spark.python.worker.reuse": "true",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        # Arrow batches from mapInArrow are small rows; keep Python workers' batches modest.
        "spark.sql.execution.arrow.maxRecordsPerBatch": "2000",
    }
    settings.update(conf or {})
    # SparkSession.builder is a new Builder on every access: chain in one expression.
    builder = SparkSession.builder.master(master or f"local[{n}]").appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is None:
        return builder.getOrCreate()
    log = Path(jvm_log)
    try:
        with _stderr_to(log):
            return builder.getOrCreate()
    except Exception as exc:
        said = _last_line(log)
        raise SparkUnavailable(f"Spark did not start: {said or exc} (the JVM's output is in {log})") from None
