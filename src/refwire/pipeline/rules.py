"""Conformance rules as data: rule id -> DataFrame query over the frames table.

Each rule has a stable id, a protocol, a sentence
saying what it checks, and a query from the frames table
(:data:`~refwire.pipeline.decoders.FRAME_COLUMNS`) to violations
(``conn, direction, frame_no, offset, detail``); :func:`run_rules` adds the
rule id and protocol and unions them into the violations table.

Every rule may also carry ``check``, a pure-Python twin over one connection's
rows, so captures can be checked without Spark (:func:`check_rows`); rules
that walk a connection in order run that same function on Spark through
:func:`per_connection`.  Each protocol's rules are ``RULES`` of its dialect
module, ``dialects/<protocol>.py``, named by its descriptor (:mod:`refwire.protocols`).

"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .rulekit import Check, Found, Rule, per_connection
from .schema import Columns

__all__ = ["VIOLATION_COLUMNS", "Check", "Found", "Rule", "check_rows", "per_connection", "rules_for", "run_rules"]

VIOLATION_COLUMNS: Columns = (
    ("rule", "string"),
    ("protocol", "string"),
    ("conn", "string"),
    ("direction", "string"),
    ("frame_no", "int64"),
    ("offset", "int64"),
    ("detail", "string"),
)


def check_rows(rows: Iterable[Mapping[str, Any]], protocol: str | None = None) -> list[dict[str, Any]]:
    """The violations table computed in plain Python: every rule with a pure twin,
    over each connection's rows (``protocol`` None: each row's own protocol)."""
    by_conn: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        by_conn.setdefault((protocol or r["protocol"], r["conn"]), []).append(r)
    out: list[dict[str, Any]] = []
    for (proto, conn), conn_rows in sorted(by_conn.items()):
        conn_rows = [r for r in conn_rows if r.get("protocol", proto) == proto]
        for rule in rules_for(proto):
            if rule.check is None:
                continue
            for direction, frame_no, offset, detail in rule.check(conn_rows):
                out.append(
                    {
                        "rule": rule.id,
                        "protocol": proto,
                        "conn": conn,
                        "direction": direction,
                        "frame_no": frame_no,
                        "offset": offset,
                        "detail": detail,
                    }
                )
    return out


def rules_for(protocol: str) -> list[Rule]:
    """``protocol``'s rules, from its descriptor (none when it has no capture rules)."""
    from refwire.protocols import registry

    d = registry().get(protocol)
    if d is None or d.rules is None:
        return []
    return list(d.load("rules"))


def run_rules(frames: Any, protocol: str, rule_ids: Sequence[str] | None = None) -> Any:
    """The violations table of ``protocol``'s rules (or the listed ones) over ``frames``."""
    from pyspark.sql import functions as F

    chosen = [r for r in rules_for(protocol) if rule_ids is None or r.id in rule_ids]
    frames = frames.where(F.col("protocol") == protocol)
    spark = frames.sparkSession
    from .schema import spark_ddl

    result = spark.createDataFrame([], spark_ddl(VIOLATION_COLUMNS))
    for rule in chosen:
        v = rule.query(frames).select(
            F.lit(rule.id).alias("rule"),
            F.lit(protocol).alias("protocol"),
            "conn",
            "direction",
            F.col("frame_no").cast("bigint"),
            F.col("offset").cast("bigint"),
            "detail",
        )
        result = result.unionByName(v)
    return result
