"""Seastar RPC conformance rules (specs/seastar-rpc/README.md §1-§3), each a DataFrame query with a pure twin.

* ``SS-DECODES`` -- every byte of both directions decodes, envelopes included (§2-§4).
* ``SS-NEGOTIATION-FIRST`` -- each direction starts with its negotiation frame (§1).
* ``SS-RESPONSE-MATCHES-REQUEST`` -- every response's msg id (its absolute value: a
  negative id carries an exception) is the id of a request the client sent earlier on
  the connection and that was not answered yet (§3: replies for other ids are stray).
* ``SS-NO-REPLY-TO-ONE-WAY`` -- a request of a one-way verb gets no response (§3), an
  UNKNOWN_VERB exception aside.  Whether a verb is one-way is not on the wire: it is
  the application's, given as :data:`ONE_WAY_VERBS` (refwire's demo registry: the
  ``note`` verb 4, as in the captured sessions of specs/seastar-rpc/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from refwire.seastar_rpc.demo import DEMO_ONE_WAY

from .rulekit import Found, Rule, check_decodes, decodes_query, fields, not_before, ordered, per_connection

__all__ = ["ONE_WAY_VERBS", "SEASTAR_RULES"]


#: Verbs whose calls expect no reply.
ONE_WAY_VERBS: Final = DEMO_ONE_WAY


def check_negotiation_first(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    out: list[Found] = []
    for d in ("c2s", "s2c"):
        top = [r for r in ordered(rows, d) if r.get("parent_offset") is None]
        if top and top[0]["type"] != "negotiation":
            r = top[0]
            out.append((d, r["frame_no"], r["offset"], f"the first frame is {r['type']}, not the negotiation frame"))
    return out


def check_response_matches(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    outstanding: dict[int, list[float | None]] = {}
    for r in ordered(rows, "c2s", "request"):
        outstanding.setdefault(r["seq"], []).append(r["ts"])
    out: list[Found] = []
    for r in ordered(rows, "s2c", "response"):
        mid = abs(r["seq"])
        waiting = outstanding.get(mid, [])
        i = next((k for k, ts in enumerate(waiting) if not_before(ts, r["ts"])), None)
        if i is None:
            out.append(("s2c", r["frame_no"], r["offset"], f"response for msg id {r['seq']}, which matches no outstanding request"))
        else:
            del waiting[i]
    return out


def check_no_reply_to_one_way(rows: Sequence[Mapping[str, Any]], one_way: frozenset[int] = ONE_WAY_VERBS) -> list[Found]:
    ids = {r["seq"] for r in ordered(rows, "c2s", "request") if r["name"] is not None and int(r["name"]) in one_way}
    return [
        ("s2c", r["frame_no"], r["offset"], f"response for msg id {r['seq']}, a call of one-way verb(s) {sorted(one_way)}")
        for r in ordered(rows, "s2c", "response")
        if abs(r["seq"]) in ids and fields(r).get("exception") != "UNKNOWN_VERB"
    ]


def _negotiation_first(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("conn", "direction").orderBy("frame_no")
    first = frames.where(F.col("parent_offset").isNull()).withColumn("n", F.row_number().over(w)).where("n = 1")
    return first.where(F.col("type") != "negotiation").select(
        "conn", "direction", "frame_no", "offset", F.format_string("the first frame is %s, not the negotiation frame", "type").alias("detail")
    )


def _no_reply_to_one_way(frames: Any) -> Any:
    from pyspark.sql import functions as F

    verbs = sorted(ONE_WAY_VERBS)
    calls = frames.where((F.col("direction") == "c2s") & (F.col("type") == "request") & F.col("name").cast("bigint").isin(*verbs)).select(
        "conn", F.col("seq").alias("mid")
    ).distinct()
    resp = frames.where((F.col("direction") == "s2c") & (F.col("type") == "response"))
    exc = F.get_json_object("fields_json", "$.exception")
    return (
        resp.join(calls, (resp["conn"] == calls["conn"]) & (F.abs(resp["seq"]) == calls["mid"]))
        .where(exc.isNull() | (exc != "UNKNOWN_VERB"))
        .select(resp["conn"], "direction", "frame_no", "offset",
                F.format_string(f"response for msg id %d, a call of one-way verb(s) {verbs}", "seq").alias("detail"))
    )


def _response_matches(frames: Any) -> Any:
    return per_connection(frames, check_response_matches)


SEASTAR_RULES: list[Rule] = [
    Rule("SS-DECODES", "seastar-rpc", "every byte of both directions decodes, compressed envelopes included", decodes_query, check_decodes),
    Rule("SS-NEGOTIATION-FIRST", "seastar-rpc", "each direction starts with its negotiation frame", _negotiation_first, check_negotiation_first),
    Rule("SS-RESPONSE-MATCHES-REQUEST", "seastar-rpc", "every response's msg id matches an outstanding request of the connection", _response_matches, check_response_matches),
    Rule("SS-NO-REPLY-TO-ONE-WAY", "seastar-rpc", "calls of one-way verbs get no response", _no_reply_to_one_way, check_no_reply_to_one_way),
]
