"""Pravega captures (specs/pravega/README.md §1, §4-§7): the decoder and the conformance rules.

**Decoder** (:func:`decode`, on the describer
:class:`refwire.pravega.describe.PravegaDescriber`): one row per wire command, ``type`` = the command name (``Hello``,
``SetupAppend``, ``DataAppended`` ...).  Key fields: ``seq`` = the request id
(when the command has one; ``-1``, Java's "absent", is kept as is), ``name`` =
the segment, ``count`` = ``num_events`` of an AppendBlockEnd.  ``fields_json``
holds every field of the command, byte fields as ``{"len": n}`` and writer ids
as UUID strings, so the rules can read ``writer_id``, ``event_number``,
``previous_event_number``, ``last_event_number`` and ``offset``.

The client direction is decoded with the server's limits
(:data:`~refwire.pravega.frames.DEFAULT_LIMITS`), the server direction with the
client's (:data:`~refwire.pravega.frames.CLIENT_LIMITS`, §1.1).  Append blocks
are one row each: the events inside them are the application's bytes (the
server stores them unparsed, §5.3), so they are not rows of their own.

**Rules** (:data:`RULES`), each a DataFrame query with a pure twin:

* ``PR-DECODES`` -- every byte of both directions decodes (§1).
* ``PR-HELLO-FIRST`` -- the client's first command is Hello (§7.1: the client speaks first).
* ``PR-REQUEST-ID-ECHOED`` -- every reply's request id (other than Java's absent ``-1``)
  is the request id of a command the client sent earlier on the connection.  The Java
  server's quirk of answering a refused read with the read *offset* as request id (§6.1)
  is accepted.
* ``PR-READ-OFFSET-ECHOED`` -- a SegmentRead's offset is the offset of the ReadSegment it
  answers (same request id and segment; §6: "the reply offset always equals the request
  offset").
* ``PR-ACK-CHAIN`` -- per writer, each DataAppended's ``previous_event_number`` is the
  writer's previous ack (its last DataAppended, or the AppendSetup's
  ``last_event_number`` after a setup), and event numbers increase (§5.4).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ...describe import UNDECODED, Described, Describer
from ...errors import ProtocolError
from ..decoders import FrameRow, Peer, dumps, error_row, json_value
from ..rulekit import Found, Rule, check_decodes, decodes_query, not_before, ordered
from ..rulekit import fields as row_fields

__all__ = ["RULES", "StrictTail", "command_fields", "decode", "described"]

PROTOCOL = "pravega"
NO_REQUEST = -1
_NOT_REPLIES = ("Hello", "KeepAlive", "error")


# --------------------------------------------------------------------------- decoder


def command_fields(cmd: Any) -> dict[str, Any]:
    """Every field of a command as JSON-able values."""
    return {a.name: json_value(getattr(cmd, a.name)) for a in attrs.fields(type(cmd))}


def described(chunks: Iterable[bytes], describer: Describer) -> Iterator[Described]:
    """Every frame of a direction, then what the describer held at its end."""
    for chunk in chunks:
        yield from describer.feed(chunk)
    yield from describer.end()


class StrictTail:
    """The bytes from the first one that is no frame on (the describer's undecoded
    records), with the error the strict codec gives them: a capture's error row
    says what :class:`~refwire.pravega.frames_codec.CommandDecoder` says (a header
    length first, an unknown type once its frame is whole, §1), or, when the
    stream ends first, that it ended inside a frame."""

    def __init__(self, limits: Any, *, allow_inner: bool = False, dialect: Any = None) -> None:
        from refwire.pravega.frames_codec import CURRENT, CommandDecoder

        self._dialect = dialect if dialect is not None else CURRENT
        self._decoder = CommandDecoder(limits, allow_inner=allow_inner, dialect=self._dialect)
        self._started = False

    @property
    def offset(self) -> int:
        return self._decoder.offset

    def feed(self, d: Described) -> ProtocolError | None:
        """Take undecoded bytes; the codec's error, once it has one."""
        if not self._started:
            self._started = True
            self._decoder.offset = d.offset
        self._decoder.feed(d.data)
        try:
            self._decoder.next_command()  # no frame decodes where the describer found none
        except ProtocolError as exc:
            return exc
        return None

    def end(self) -> ProtocolError | None:
        """The stream ended: the error of bytes held for an incomplete frame (or None)."""
        dec = self._decoder
        if not dec.buffered:
            return None
        name = dec.pending_frame_name()
        return ProtocolError(
            f"{dec.buffered} bytes of an incomplete {name or 'frame'} at the end of the stream",
            protocol=self._dialect.protocol,
            frame=name,
            field="(end)",
            offset=dec.offset,
        )


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from refwire.pravega.describe import PravegaDescriber
    from refwire.pravega.frames import CLIENT_LIMITS, DEFAULT_LIMITS

    limits = DEFAULT_LIMITS if direction == "c2s" else CLIENT_LIMITS
    tail = StrictTail(limits)
    frame_no = 0
    # inner commands at the top level are errors here, as the strict codec has them (§5.3)
    for d in described(chunks, PravegaDescriber(limits.max_frame_size, allow_inner=False)):
        if d.type == UNDECODED:
            exc = tail.feed(d)
            if exc is not None:
                yield error_row(frame_no, exc, tail.offset, None)
                return
            continue
        if d.error is not None:
            yield error_row(frame_no, d.error, d.offset, None)
            return
        cmd = d.frame
        rid = getattr(cmd, "request_id", None)
        segment = getattr(cmd, "segment", None) or getattr(cmd, "segment_name", None)
        count = getattr(cmd, "num_events", None)
        yield FrameRow(
            frame_no,
            d.offset,
            d.type,
            len(d.data),
            None,
            seq=rid if isinstance(rid, int) else None,
            count=count if isinstance(count, int) else None,
            name=segment if isinstance(segment, str) else None,
            fields_json=dumps(command_fields(cmd)),
        )
        frame_no += 1
    end = tail.end()
    if end is not None:
        yield error_row(frame_no, end, tail.offset, None)


# --------------------------------------------------------------------------- rules: pure twins


def check_hello_first(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    c2s = [r for r in ordered(rows, "c2s") if r.get("parent_offset") is None]
    if c2s and c2s[0]["type"] not in ("Hello", "error"):
        r = c2s[0]
        return [("c2s", r["frame_no"], r["offset"], f"the client's first command is {r['type']}, not Hello")]
    return []


def check_request_ids(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    sent: dict[int, list[float | None]] = {}
    for r in ordered(rows, "c2s"):
        if r["seq"] is not None and r["seq"] != NO_REQUEST:
            sent.setdefault(r["seq"], []).append(r["ts"])
        if r["type"] == "ReadSegment":  # the AuthTokenCheckFailed quirk (§6.1)
            sent.setdefault(int(row_fields(r).get("offset", NO_REQUEST)), []).append(r["ts"])
    out: list[Found] = []
    for r in ordered(rows, "s2c"):
        rid = r["seq"]
        if r["type"] in _NOT_REPLIES or rid is None or rid == NO_REQUEST:
            continue
        if not any(not_before(ts, r["ts"]) for ts in sent.get(rid, [])):
            out.append(("s2c", r["frame_no"], r["offset"], f"{r['type']} answers request id {rid}, which the client never sent before it"))
    return out


def check_read_offsets(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    asked = {(r["seq"], r["name"], row_fields(r).get("offset")) for r in ordered(rows, "c2s", "ReadSegment")}
    by_rid: dict[Any, list[Any]] = {}
    for rid, seg, off in asked:
        by_rid.setdefault((rid, seg), []).append(off)
    out: list[Found] = []
    for r in ordered(rows, "s2c", "SegmentRead"):
        off = row_fields(r).get("offset")
        if r["seq"] is None or r["seq"] == NO_REQUEST or (r["seq"], r["name"], off) in asked:
            continue
        want = sorted(by_rid.get((r["seq"], r["name"]), []))
        what = f"ReadSegment {r['seq']} asked for offset {', '.join(map(str, want))}" if want else f"no ReadSegment {r['seq']} of {r['name']}"
        out.append(("s2c", r["frame_no"], r["offset"], f"SegmentRead offset {off} but {what}"))
    return out


def check_ack_chain(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    last: dict[str, int] = {}
    out: list[Found] = []
    for r in ordered(rows, "s2c", "AppendSetup", "DataAppended"):
        f = row_fields(r)
        w = str(f.get("writer_id"))
        if r["type"] == "AppendSetup":
            last[w] = int(f["last_event_number"])
            continue
        ev, prev = int(f["event_number"]), int(f.get("previous_event_number", NO_REQUEST))
        before = last.get(w)
        where = ("s2c", r["frame_no"], r["offset"])
        if before is None:
            out.append((*where, f"DataAppended {ev} for writer {w}, which was never set up on this connection"))
        elif prev != NO_REQUEST and prev != before:
            out.append((*where, f"DataAppended {ev} of writer {w}: previous_event_number {prev}, but the previous ack was {before}"))
        elif ev <= before or (prev != NO_REQUEST and ev <= prev):
            out.append((*where, f"DataAppended {ev} of writer {w} does not increase (previous {before})"))
        last[w] = ev
    return out


# --------------------------------------------------------------------------- rules: DataFrame queries


def _hello_first(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("conn").orderBy("frame_no")
    first = frames.where((F.col("direction") == "c2s") & F.col("parent_offset").isNull()).withColumn("n", F.row_number().over(w)).where("n = 1")
    return first.where(~F.col("type").isin("Hello", "error")).select(
        "conn", "direction", "frame_no", "offset", F.format_string("the client's first command is %s, not Hello", "type").alias("detail")
    )


def _request_ids(frames: Any) -> Any:
    from pyspark.sql import functions as F

    c2s = frames.where(F.col("direction") == "c2s")
    ids = c2s.where(F.col("seq").isNotNull() & (F.col("seq") != NO_REQUEST)).select("conn", F.col("seq").alias("rid"), F.col("ts").alias("rts"))
    quirk = c2s.where(F.col("type") == "ReadSegment").select(
        "conn", F.get_json_object("fields_json", "$.offset").cast("bigint").alias("rid"), F.col("ts").alias("rts")
    )
    sent = ids.unionByName(quirk)
    replies = frames.where((F.col("direction") == "s2c") & ~F.col("type").isin(*_NOT_REPLIES) & F.col("seq").isNotNull() & (F.col("seq") != NO_REQUEST))
    cond = (replies["conn"] == sent["conn"]) & (replies["seq"] == sent["rid"]) & (sent["rts"].isNull() | replies["ts"].isNull() | (sent["rts"] <= replies["ts"]))
    return replies.join(sent, cond, "left_anti").select(
        "conn", "direction", "frame_no", "offset",
        F.format_string("%s answers request id %d, which the client never sent before it", "type", "seq").alias("detail"),
    )


def _read_offsets(frames: Any) -> Any:
    from pyspark.sql import functions as F

    off = F.get_json_object("fields_json", "$.offset").cast("bigint")
    asked = frames.where((F.col("direction") == "c2s") & (F.col("type") == "ReadSegment")).select(
        "conn", F.col("seq").alias("rid"), F.col("name").alias("seg"), off.alias("asked")
    )
    reads = frames.where((F.col("direction") == "s2c") & (F.col("type") == "SegmentRead") & (F.col("seq") != NO_REQUEST)).withColumn("got", off)
    same = (reads["conn"] == asked["conn"]) & (reads["seq"] == asked["rid"]) & (reads["name"] == asked["seg"])
    wanted = asked.groupBy("conn", "rid", "seg").agg(F.array_join(F.sort_array(F.collect_set(F.col("asked").cast("string"))), ", ").alias("want"))
    bad = reads.join(asked, same & reads["got"].eqNullSafe(asked["asked"]), "left_anti")
    return bad.join(wanted, (bad["conn"] == wanted["conn"]) & (bad["seq"] == wanted["rid"]) & (bad["name"] == wanted["seg"]), "left").select(
        bad["conn"], "direction", "frame_no", "offset",
        F.when(F.col("want").isNull(), F.format_string("SegmentRead offset %d but no ReadSegment %d of %s", "got", "seq", "name"))
        .otherwise(F.format_string("SegmentRead offset %d but ReadSegment %d asked for offset %s", "got", "seq", "want")).alias("detail"),
    )


def _ack_chain(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    j = F.get_json_object
    x = frames.where((F.col("direction") == "s2c") & F.col("type").isin("AppendSetup", "DataAppended")).select(
        "conn", "direction", "frame_no", "offset", "type",
        j("fields_json", "$.writer_id").alias("writer"),
        F.when(F.col("type") == "AppendSetup", j("fields_json", "$.last_event_number")).otherwise(j("fields_json", "$.event_number")).cast("bigint").alias("ev"),
        F.coalesce(j("fields_json", "$.previous_event_number").cast("bigint"), F.lit(NO_REQUEST)).alias("prev"),
    )
    w = Window.partitionBy("conn", "writer").orderBy("frame_no")
    x = x.withColumn("before", F.lag("ev").over(w)).where(F.col("type") == "DataAppended")
    detail = (
        F.when(F.col("before").isNull(), F.format_string("DataAppended %d for writer %s, which was never set up on this connection", "ev", "writer"))
        .when((F.col("prev") != NO_REQUEST) & (F.col("prev") != F.col("before")),
              F.format_string("DataAppended %d of writer %s: previous_event_number %d, but the previous ack was %d", "ev", "writer", "prev", "before"))
        .when((F.col("ev") <= F.col("before")) | ((F.col("prev") != NO_REQUEST) & (F.col("ev") <= F.col("prev"))),
              F.format_string("DataAppended %d of writer %s does not increase (previous %d)", "ev", "writer", "before"))
    )
    return x.withColumn("detail", detail).where(F.col("detail").isNotNull()).select("conn", "direction", "frame_no", "offset", "detail")


RULES: list[Rule] = [
    Rule("PR-DECODES", PROTOCOL, "every byte of both directions decodes", decodes_query, check_decodes),
    Rule("PR-HELLO-FIRST", PROTOCOL, "the client's first command is Hello", _hello_first, check_hello_first),
    Rule("PR-REQUEST-ID-ECHOED", PROTOCOL, "every reply's request id is one the client sent earlier on the connection", _request_ids, check_request_ids),
    Rule("PR-READ-OFFSET-ECHOED", PROTOCOL, "SegmentRead.offset is its ReadSegment's offset", _read_offsets, check_read_offsets),
    Rule("PR-ACK-CHAIN", PROTOCOL, "DataAppended chains previous_event_number per writer, event numbers increasing", _ack_chain, check_ack_chain),
]
