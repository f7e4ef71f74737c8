"""TANK conformance rules (specs/tank/README.md §3-§6), each a DataFrame query with a pure twin.

* ``TK-DECODES`` -- every byte of both directions decodes, bundles included (§2-§5).
* ``TK-RESPONSE-MATCHES-REQUEST`` -- every broker response (Ping aside) carries the
  request id of a request of the same kind (a ProduceWithSeqnum is answered by a
  Produce) that the client sent earlier and that was not answered yet (§8.16).
* ``TK-CONSUME-SEQ-INCREASING`` -- per partition, the sequence numbers a consume
  response delivers increase inside the response and from one response to the next,
  unless the client asked again from an earlier sequence number (§5, §6).
* ``TK-PRODUCE-ACKED`` -- each produce request is answered by exactly one produce
  response (§3).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .rulekit import Found, Rule, check_decodes, decodes_query, fields, not_before, ordered, per_connection

__all__ = ["TANK_RULES"]

_PRODUCES = ("Produce", "ProduceWithSeqnum")


def _answers(request_type: str) -> str:
    return "Produce" if request_type == "ProduceWithSeqnum" else request_type


def check_response_matches(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    outstanding: dict[tuple[str, int], list[float | None]] = {}
    for r in ordered(rows, "c2s"):
        if r["seq"] is not None and r["type"] not in ("Ping", "error"):
            outstanding.setdefault((_answers(r["type"]), r["seq"]), []).append(r["ts"])
    out: list[Found] = []
    for r in ordered(rows, "s2c"):
        if r["seq"] is None or r["type"] in ("Ping", "error") or r.get("parent_offset") is not None:
            continue
        waiting = outstanding.get((r["type"], r["seq"]), [])
        i = next((k for k, ts in enumerate(waiting) if not_before(ts, r["ts"])), None)
        if i is None:
            out.append(("s2c", r["frame_no"], r["offset"], f"{r['type']} response with request id {r['seq']}, which matches no outstanding {r['type']} request"))
        else:
            del waiting[i]
    return out


def check_consume_seqs(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    last: dict[tuple[str, int], int] = {}
    out: list[Found] = []
    for r in ordered(rows, "s2c", "Consume"):
        for p in fields(r).get("partitions", []):
            first, end = p.get("first_seq"), p.get("last_seq")
            if first is None or end is None:
                continue
            key = (p["topic"], p["partition"])
            where = ("s2c", r["frame_no"], r["offset"])
            if not p.get("increasing", True) or end < first:
                out.append((*where, f"{key[0]}/{key[1]}: sequence numbers {first}..{end} do not increase inside the response"))
            prev = last.get(key)
            rewind = p.get("requested_seq") is not None and prev is not None and 0 < p["requested_seq"] <= prev
            if prev is not None and first <= prev and not rewind:
                out.append((*where, f"{key[0]}/{key[1]}: response starts at sequence number {first}, not after {prev} delivered before"))
            last[key] = end
    return out


def check_produce_acked(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    acks: dict[int, int] = {}
    for r in ordered(rows, "s2c", "Produce"):
        if r["seq"] is not None:
            acks[r["seq"]] = acks.get(r["seq"], 0) + 1
    out: list[Found] = []
    for r in ordered(rows, "c2s", *_PRODUCES):
        n = acks.get(r["seq"], 0)
        if n != 1:
            out.append(("c2s", r["frame_no"], r["offset"], f"{r['type']} request {r['seq']} answered by {n} produce responses"))
    return out


def _produce_acked(frames: Any) -> Any:
    from pyspark.sql import functions as F

    acks = frames.where((F.col("direction") == "s2c") & (F.col("type") == "Produce")).groupBy("conn", F.col("seq").alias("rid")).agg(F.count("*").alias("n"))
    reqs = frames.where((F.col("direction") == "c2s") & F.col("type").isin(*_PRODUCES))
    joined = reqs.join(acks, (reqs["conn"] == acks["conn"]) & (reqs["seq"] == acks["rid"]), "left").fillna({"n": 0})
    return joined.where(F.col("n") != 1).select(
        reqs["conn"], "direction", "frame_no", "offset",
        F.format_string("%s request %d answered by %d produce responses", "type", "seq", "n").alias("detail"),
    )


def _response_matches(frames: Any) -> Any:
    return per_connection(frames, check_response_matches)


def _consume_seqs(frames: Any) -> Any:
    return per_connection(frames, check_consume_seqs)


TANK_RULES: list[Rule] = [
    Rule("TK-DECODES", "tank", "every byte of both directions decodes, bundles included", decodes_query, check_decodes),
    Rule("TK-RESPONSE-MATCHES-REQUEST", "tank", "every response's request id matches an outstanding request of its kind", _response_matches, check_response_matches),
    Rule("TK-CONSUME-SEQ-INCREASING", "tank", "per partition, consume responses' sequence numbers increase", _consume_seqs, check_consume_seqs),
    Rule("TK-PRODUCE-ACKED", "tank", "each produce request gets exactly one produce response", _produce_acked, check_produce_acked),
]
