"""``spark.read.format("refwire-capture")``: a Python Data Source over capture directories.

Spark's Python Data Source API runs every method in Python processes the JVM starts,
so everything here is picklable and imports its helpers inside ``read()``;
partitioning is ours: one :class:`CapturePartition` per group of whole
connections (both directions of a connection stay together, and a stateful
stream decoder never starts mid-stream), balanced by bytes.  ``read()`` streams
each file in chunks (``chunkSize``), so a huge connection never sits in memory.

Options (strings): ``path`` (or ``load(path)``), ``protocol`` (required: a
protocol with a capture decoder, :func:`~refwire.pipeline.decoders.decoder_names`,
or ``auto`` to guess it per connection, so one capture may mix
protocols), ``partitions`` (default: about 32 MiB of capture per
partition, at least one per core up to the number of connections),
``chunkSize`` (bytes, default 1 MiB), ``serverPorts`` (comma-separated, for
tcpflow directories).

    from refwire.pipeline.datasource import register
    register(spark)
    frames = spark.read.format("refwire-capture").option("protocol", "auto").load("capture/")
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .capture import plan_partitions
from .decoders import FRAME_COLUMNS
from .schema import spark_ddl

__all__ = ["CaptureDataSource", "CapturePartition", "register"]

NAME = "refwire-capture"
TARGET_BYTES = 32 * 1024 * 1024


class CapturePartition(InputPartition):
    def __init__(self, streams: list[tuple[str, str, str, int, str | None]]) -> None:
        super().__init__(streams)
        self.streams = streams


class CaptureReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path = options.get("path") or options.get("paths", "")
        if not self.path:
            raise ValueError('refwire-capture needs a path: .load("DIR") or .option("path", "DIR")')
        protocol = options.get("protocol")
        if not protocol:
            from refwire.pipeline.decoders import decoder_names

            raise ValueError(
                f'refwire-capture needs a protocol: .option("protocol", NAME) with NAME one of {", ".join(decoder_names())}, or auto'
            )
        self.protocol = protocol
        self.partitions_opt = int(options.get("partitions", "0"))
        self.chunk_size = int(options.get("chunkSize", str(1 << 20)))
        ports = options.get("serverPorts", "")
        self.server_ports = [int(p) for p in ports.split(",") if p.strip()]

    def partitions(self) -> list[CapturePartition]:
        import os

        from refwire.pipeline.capture import list_streams

        streams = [(s.conn, s.direction, s.path, s.size, s.meta_path) for s in list_streams(self.path, server_ports=self.server_ports)]
        if not streams:
            return [CapturePartition([])]
        total = sum(s[3] for s in streams)
        n = self.partitions_opt or max(os.cpu_count() or 1, -(-total // TARGET_BYTES))
        return [CapturePartition(p) for p in plan_partitions(streams, n)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        from refwire.pipeline.capture import Stream, decode_stream_file
        from refwire.pipeline.decoders import FRAME_COLUMNS as cols

        names = [c for c, _ in cols]
        assert isinstance(partition, CapturePartition)
        streams = [Stream(conn, direction, path, size, meta) for conn, direction, path, size, meta in partition.streams]
        protos: dict[str, str | None] = {}
        if self.protocol == "auto":  # one guess per connection (both directions are in this partition)
            from refwire.pipeline.capture import sniff_protocol

            by_conn: dict[str, list[Stream]] = {}
            for s in streams:
                by_conn.setdefault(s.conn, []).append(s)
            protos = {c: sniff_protocol([s for s in ss if s.direction == "c2s" and s.size] or ss) for c, ss in by_conn.items()}
        for stream in streams:
            proto = protos.get(stream.conn) if self.protocol == "auto" else self.protocol
            if proto is None:
                continue
            for row in decode_stream_file(proto, stream, self.chunk_size):
                yield tuple(row[c] for c in names)


class CaptureDataSource(DataSource):
    """Frames of recorded connections, decoded by refwire's own Sans-IO decoders."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return spark_ddl(FRAME_COLUMNS)

    def reader(self, schema: Any) -> CaptureReader:
        return CaptureReader(dict(self.options))


def register(spark: Any) -> None:
    """Make ``spark.read.format("refwire-capture")`` available in this session."""
    spark.dataSource.register(CaptureDataSource)
