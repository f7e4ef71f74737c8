"""``refwire analyze``: captures -> frames table -> conformance rules -> violations table.

The input may be a capture directory, a tcpflow
directory, or a pcap/pcapng file (reassembled with dpkt into a capture
directory under ``OUT/capture`` first), and may mix protocols: without
``protocol`` each connection's protocol is guessed from its first bytes, and
every protocol found has its rules run.  Output: ``OUT/frames`` (Parquet,
partitioned by protocol) and ``OUT/violations`` (Parquet).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

from .capture import connection_protocols, is_pcap, list_streams, read_pcap, sniff_protocol, write_capture
from .decoders import decoder_names

__all__ = ["AnalyzeResult", "analyze", "guess_protocol", "guess_protocols", "prepare_input"]


def guess_protocol(path: str | Path, *, server_ports: Iterable[int] = ()) -> str:
    """The registered decoder that decodes the most frames from the start of the
    capture's client streams before any error (ties: alphabetical)."""
    streams = [s for s in list_streams(path, server_ports=server_ports) if s.direction == "c2s" and s.size][:8]
    best = sniff_protocol(streams)
    if best is None:
        raise ValueError(f"{path}: no registered decoder ({', '.join(sorted(decoder_names()))}) recognises these streams; pass --protocol")
    return best


def guess_protocols(path: str | Path, *, server_ports: Iterable[int] = ()) -> list[str]:
    """Every protocol the capture's connections decode as (one guess per connection)."""
    found = sorted({p for p in connection_protocols(path, server_ports=server_ports).values() if p is not None})
    if not found:
        raise ValueError(f"{path}: no registered decoder ({', '.join(sorted(decoder_names()))}) recognises these streams; pass --protocol")
    return found


def prepare_input(path: str | Path, out: str | Path, *, server_ports: Iterable[int] = ()) -> Path:
    """A directory the data source can read: ``path`` itself, or a pcap reassembled to ``OUT/capture``."""
    p = Path(path)
    if p.is_file() and is_pcap(p):
        dest = Path(out) / "capture"
        write_capture(read_pcap(p, server_ports=server_ports), dest)
        return dest
    return p


@attrs.frozen
class AnalyzeResult:
    protocol: str
    frames_path: str
    violations_path: str
    frames: int
    connections: int
    errors: int
    violations: list[dict[str, Any]]  #: per rule: rule, connections, violations, first example
    rules: list[str]


def analyze(
    spark: Any,
    path: str | Path,
    out: str | Path,
    *,
    protocol: str | None = None,
    server_ports: Iterable[int] = (),
    partitions: int | None = None,
) -> AnalyzeResult:
    """Decode ``path`` on Spark through the ``refwire-capture`` data source, write the
    frames table, run the protocol's rules and write the violations table."""
    from pyspark.sql import functions as F

    from .datasource import register
    from .rules import rules_for, run_rules

    ports = list(server_ports)
    src = prepare_input(path, out, server_ports=ports)
    protos = [protocol] if protocol else guess_protocols(src, server_ports=ports)
    register(spark)
    reader = spark.read.format("refwire-capture").option("protocol", protos[0] if len(protos) == 1 else "auto")
    if ports:
        reader = reader.option("serverPorts", ",".join(map(str, ports)))
    if partitions:
        reader = reader.option("partitions", str(partitions))
    frames_path = str(Path(out) / "frames")
    violations_path = str(Path(out) / "violations")
    reader.load(str(src)).write.mode("overwrite").partitionBy("protocol").parquet(frames_path)
    frames = spark.read.parquet(frames_path).where(F.col("protocol").isin(*protos))
    violations = run_rules(frames, protos[0])
    for proto in protos[1:]:
        violations = violations.unionByName(run_rules(frames, proto))
    violations.coalesce(1).write.mode("overwrite").parquet(violations_path)
    v = spark.read.parquet(violations_path)
    stats = frames.agg(F.count("*").alias("n"), F.countDistinct("conn").alias("c"), F.sum((F.col("type") == "error").cast("int")).alias("e")).first()
    per_rule = (
        v.groupBy("rule")
        .agg(
            F.countDistinct("conn").alias("connections"),
            F.count("*").alias("violations"),
            F.min_by(F.concat_ws(" ", "conn", "direction", F.concat(F.lit("frame "), F.col("frame_no").cast("string")), F.concat(F.lit("offset "), F.col("offset").cast("string")), "detail"), F.struct("conn", "frame_no")).alias("example"),
        )
        .orderBy("rule")
        .collect()
    )
    return AnalyzeResult(
        protocol=",".join(protos),
        frames_path=frames_path,
        violations_path=violations_path,
        frames=int(stats["n"] or 0),
        connections=int(stats["c"] or 0),
        errors=int(stats["e"] or 0),
        violations=[r.asDict() for r in per_rule],
        rules=[r.id for proto in protos for r in rules_for(proto)],
    )
