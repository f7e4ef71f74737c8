"""What every conformance rule is made of (:mod:`refwire.pipeline.rules` holds the registry).

Kept apart from the registry so the per-protocol rule modules, and the Spark
workers that unpickle their pure checks, import it without importing every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["CHECK_COLUMNS", "Check", "Found", "Rule", "check_decodes", "decodes_query", "fields", "not_before", "ordered", "per_connection"]


#: ``(direction, frame_no, offset, detail)``: one violation found by a pure check.
Found = tuple[str, int, int, str]
#: A pure check: one connection's frames-table rows (dicts, both directions) -> violations.
Check = Callable[[Sequence[Mapping[str, Any]]], list[Found]]


@attrs.frozen
class Rule:
    id: str
    protocol: str
    description: str
    query: Callable[[Any], Any]  #: frames DataFrame (one protocol) -> conn, direction, frame_no, offset, detail
    check: Check | None = None  #: the pure-Python twin over one connection's rows, where there is one


def ordered(rows: Sequence[Mapping[str, Any]], direction: str, *types: str) -> list[Mapping[str, Any]]:
    """One direction's rows in frame order (only ``types`` when given)."""
    return sorted((r for r in rows if r["direction"] == direction and (not types or r["type"] in types)), key=lambda r: r["frame_no"])


def fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's ``fields_json``, parsed."""
    import orjson

    out = orjson.loads(row.get("fields_json") or "{}")
    return out if isinstance(out, dict) else {}


def not_before(req_ts: float | None, rep_ts: float | None) -> bool:
    """A request can answer a reply when it was not seen after it (no time index: always)."""
    return req_ts is None or rep_ts is None or req_ts <= rep_ts


def check_decodes(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    """Every byte decodes: one violation per error row."""
    return [(r["direction"], r["frame_no"], r["offset"], r["error"] or "decode error") for r in rows if r["type"] == "error"]


#: Columns a per-connection check sees on Spark.
CHECK_COLUMNS = ("direction", "frame_no", "offset", "parent_offset", "type", "size", "seq", "count", "name", "fields_json", "error", "ts")


def per_connection(frames: Any, check: Check) -> Any:
    """A rule query that runs a pure check over each connection's rows on Spark
    (for rules that walk a connection in order: request/reply pairing, sequences)."""
    from pyspark.sql import functions as F

    def run(items: list[Any] | None) -> list[Found]:
        return check([i.asDict() for i in items or []])

    # A lambda: PySpark 4 reads a function's type hints to pick a UDF kind, and warns on these.
    udf = F.udf(lambda items: run(items), "ARRAY<STRUCT<direction: STRING, frame_no: BIGINT, offset: BIGINT, detail: STRING>>")
    return (
        frames.groupBy("conn")
        .agg(F.collect_list(F.struct(*CHECK_COLUMNS)).alias("items"))
        .select("conn", F.explode(udf("items")).alias("v"))
        .select("conn", "v.direction", "v.frame_no", "v.offset", "v.detail")
    )


def decodes_query(frames: Any) -> Any:
    from pyspark.sql import functions as F

    return frames.where(F.col("type") == "error").select("conn", "direction", "frame_no", "offset", F.coalesce(F.col("error"), F.lit("decode error")).alias("detail"))
