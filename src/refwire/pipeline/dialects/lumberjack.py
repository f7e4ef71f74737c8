"""Lumberjack captures (specs/lumberjack/README.md §2-3): the decoder, the conformance rules, and synthetic captures.

**Decoder** (:func:`decode`, on the describer, :mod:`refwire.lumberjack.describe`, strict):
one row per frame, ``type`` = the frame letter (``W``, ``J``, ``D``, ``C``,
``A``).  Key fields: ``seq`` (J/D/A), ``count`` (W: window size; C: inner
frames; D: pairs).  The frames inside a compressed frame follow it, with
``parent_offset`` set to its offset and ``offset`` counted inside the
inflated bytes; an error inside the payload is a row, and decoding goes on.

**Rules** (:data:`RULES`), each a DataFrame query with a pure twin:

* ``LJ-DECODES`` -- every byte decodes (a bad byte, a bad zlib stream, or a
  truncated last frame is reported at its offset);
* ``LJ-SEQ-CONTIGUOUS`` -- inside a window, each data frame's seq is the next
  u32 after the previous one (skipping 0 at the rollover); a window starts at 1
  or continues the previous window's counter;
* ``LJ-WINDOW-COUNT`` -- each ``W n`` is followed by exactly n data frames, and
  no data frame comes before the first ``W``;
* ``LJ-ACK-MATCHES-WINDOW`` -- taking the acks in order (keepalive ``A 0``
  aside), every window is closed by an ack of its last seq, with only partial
  acks of seqs of that window before it; no ack for a window never sent, no
  window left unacked (:func:`check_acks`, a pure function).

**Synthetic captures** with injected faults, for tests, benchmarks and demos
(:func:`lumberjack_connection`, :func:`write_lumberjack_capture`), built with
refwire's own encoders: each connection sends windows of J frames (every other
window inside a C frame) and the server side acks each window with its last
seq.  Faults (:data:`FAULTS`): ``seq-gap`` (one seq skipped inside a window),
``wrong-ack`` (a window's ack one short of its last seq), ``garbage`` (bytes
that are not a frame after the last frame).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ...describe import Described
from ...errors import ProtocolError
from ..decoders import FrameRow, Peer, dumps, error_row
from ..rulekit import Rule, check_decodes

__all__ = ["FAULTS", "RULES", "check_acks", "decode", "lumberjack_connection", "write_lumberjack_capture"]

PROTOCOL = "lumberjack"
MAX_U32 = 0xFFFFFFFF
#: The faults :func:`lumberjack_connection` can inject.
FAULTS = ("seq-gap", "wrong-ack", "garbage")
#: How deep the decoder opens C frames inside C frames (a capture is read whole, however deep it nests).
_MAX_NESTING = 64


# --------------------------------------------------------------------------- decoder


def _rows(described: Iterable[Described], frame_no: int, parent: int | None) -> list[FrameRow]:
    """The rows of described frames numbered from ``frame_no``: a ``C``'s inner
    frames follow it (their offsets inside its inflated payload, ``parent_offset``
    its offset), then the error inside its payload if any (the stream goes on)."""
    rows: list[FrameRow] = []
    for d in described:
        no = frame_no + len(rows)
        f = d.frame
        size = len(d.data)
        if d.type == "J":
            info = {"seq": f.seq, "version": 2, "event": f.fields()}
            rows.append(FrameRow(no, d.offset, "J", size, parent, seq=f.seq, fields_json=_json(info)))
        elif d.type == "D":
            info = {"seq": f.seq, "version": 1, "event": f.fields()}
            rows.append(FrameRow(no, d.offset, "D", size, parent, seq=f.seq, count=len(f.pairs), fields_json=_json(info)))
        elif d.type == "W":
            info = {"count": f.count, "version": f.version - 0x30}
            rows.append(FrameRow(no, d.offset, "W", size, parent, count=f.count, fields_json=_json(info)))
        elif d.type == "A":
            info = {"seq": f.seq, "version": f.version - 0x30}
            rows.append(FrameRow(no, d.offset, "A", size, parent, seq=f.seq, fields_json=_json(info)))
        else:
            rows.extend(_compressed_rows(d, no, parent))
    return rows


def _compressed_rows(d: Described, frame_no: int, parent: int | None) -> list[FrameRow]:
    err: ProtocolError | None = d.fields.get("inner_error")
    inflated = d.fields.get("inflated_len")
    inner_rows = _rows(d.fields["inner_before_error"] if err is not None else d.inner, frame_no + 1, d.offset)
    info = {
        "version": d.frame.version - 0x30,
        "compressed_len": d.fields["len"],
        "inflated_len": inflated or 0,
        "frames": len(inner_rows),
    }
    rows = [FrameRow(frame_no, d.offset, "C", len(d.data), parent, count=len(inner_rows), fields_json=_json(info)), *inner_rows]
    if err is not None:
        held = d.fields.get("inner_held")
        if held is not None:
            err = ProtocolError(
                f"{held} bytes of an incomplete frame at the end of the inflated payload",
                protocol=PROTOCOL,
                frame=err.frame,
                field="(end)",
                offset=inflated - held,
            )
        # An inflate error is at its stream offset (the C's parent's); an inner frame's inside the inflated bytes.
        rows.append(error_row(frame_no + len(rows), err, d.offset, parent if inflated is None else d.offset))
    return rows


def _json(info: dict[str, Any]) -> str:
    return dumps(info)


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    """Lumberjack v1/v2 (specs/lumberjack/README.md §2) on the describer
    (:mod:`refwire.lumberjack.describe`), with the codec's checks of a conformant
    peer (JSON objects, version bytes per type).

    Key fields: ``seq`` (J/D/A), ``count`` (W: window size; C: inner frames; D: pairs)."""
    from refwire.lumberjack.describe import describer
    from refwire.lumberjack.frames import DEFAULT_LIMITS

    des = describer(DEFAULT_LIMITS.max_frame_size, direction, strict=True, max_nesting_depth=_MAX_NESTING)
    frame_no = 0
    for chunk in chunks:
        for d in des.feed(chunk):
            if d.error is not None:
                yield error_row(frame_no, d.error, d.offset, None)
                return
            rows = _rows((d,), frame_no, None)
            yield from rows
            frame_no += len(rows)
    for d in des.end():
        assert d.error is not None
        name = d.error.frame
        exc = ProtocolError(
            f"{len(d.data)} bytes of an incomplete {name or 'frame'} at the end of the stream",
            protocol=PROTOCOL,
            frame=name,
            field="(end)",
            offset=d.offset,
        )
        yield error_row(frame_no, exc, d.offset, None)


# --------------------------------------------------------------------------- rules


def check_acks(windows: Sequence[Sequence[Any]], acks: Sequence[Sequence[Any]]) -> list[tuple[str, int, int, str]]:
    """Pair one Lumberjack connection's acks with its windows, in order.

    ``windows``: ``(w_frame_no, w_offset, [seq, ...])`` per window on c2s in
    order; ``acks``: ``(frame_no, offset, seq)`` per ``A`` on s2c in order.
    Returns ``(direction, frame_no, offset, detail)`` per violation.
    """
    out: list[tuple[str, int, int, str]] = []
    k = 0
    partial: int | None = None
    for frame_no, offset, seq in acks:
        if seq == 0:
            continue  # keepalive
        if k >= len(windows):
            out.append(("s2c", frame_no, offset, f"ack {seq} but no window is outstanding ({len(windows)} sent)"))
            continue
        _, _, seqs = windows[k]
        if not seqs:
            k += 1  # an empty window needs no ack (refwire answers it; nothing to match)
            if k >= len(windows):
                out.append(("s2c", frame_no, offset, f"ack {seq} but no window is outstanding ({len(windows)} sent)"))
                continue
            _, _, seqs = windows[k]
        if seq == seqs[-1]:
            k, partial = k + 1, None
            continue
        if seq in seqs and (partial is None or seqs.index(seq) > seqs.index(partial)):
            partial = seq
            continue
        # Resynchronise: an ack that closes a later window skips the ones between.
        later = next((j for j in range(k + 1, len(windows)) if windows[j][2] and windows[j][2][-1] == seq), None)
        where = f"window {k + 1} (seqs {seqs[0]}..{seqs[-1]}, {len(seqs)} events" + (
            f", partial ack {partial})" if partial is not None else ")"
        )
        if later is not None:
            out.append(("s2c", frame_no, offset, f"ack {seq} closes window {later + 1} but {where} was never acked in full"))
            k = later + 1
        else:
            out.append(("s2c", frame_no, offset, f"ack {seq} does not match {where}"))
            k += 1
        partial = None
    for w_frame_no, w_offset, seqs in windows[k:]:
        if seqs:
            out.append(("c2s", w_frame_no, w_offset, f"window of {len(seqs)} events (seqs {seqs[0]}..{seqs[-1]}) never acked"))
    return out


def _check_rows(ws: list[Any] | None, ack_rows: list[Any] | None) -> list[tuple[str, int, int, str]]:
    return check_acks([(w[1], w[2], list(w[3])) for w in ws or []], [tuple(a) for a in ack_rows or []])


# --------------------------------------------------------------------------- lumberjack queries


def _with_windows(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("conn").orderBy("frame_no").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    c2s = frames.where((F.col("direction") == "c2s") & (F.col("type") != "error"))
    return c2s.withColumn("window_no", F.sum((F.col("type") == "W").cast("int")).over(w))


def _lj_decodes(frames: Any) -> Any:
    from pyspark.sql import functions as F

    # as its pure twin (check_decodes) and every other protocol's query: an error row without a message is "decode error"
    return frames.where(F.col("type") == "error").select(
        "conn", "direction", "frame_no", "offset", F.coalesce(F.col("error"), F.lit("decode error")).alias("detail")
    )


def _lj_seq_contiguous(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    data = _with_windows(frames).where(F.col("type").isin("J", "D"))
    w = Window.partitionBy("conn").orderBy("frame_no")
    prev = F.lag("seq").over(w)
    prev_window = F.lag("window_no").over(w)
    x = data.withColumn("prev", prev).withColumn("prev_window", prev_window)
    expected = F.when(F.col("prev") >= MAX_U32, F.lit(1)).otherwise(F.col("prev") + 1)
    new_window_restart = (F.col("window_no") != F.col("prev_window")) & (F.col("seq") == 1)
    bad = F.col("prev").isNotNull() & (F.col("seq") != expected) & ~new_window_restart
    return x.where(bad).select(
        "conn",
        "direction",
        "frame_no",
        "offset",
        F.format_string("seq %d after %d (expected %d)", F.col("seq"), F.col("prev"), expected).alias("detail"),
    )


def _lj_window_count(frames: Any) -> Any:
    from pyspark.sql import functions as F

    x = _with_windows(frames)
    is_data = F.col("type").isin("J", "D")
    declared = x.where(F.col("type") == "W").select(
        "conn", "window_no", "direction", "frame_no", "offset", F.col("count").alias("declared")
    )
    actual = x.where(is_data).groupBy("conn", "window_no").agg(F.count("*").alias("actual"))
    wrong = (
        declared.join(actual, ["conn", "window_no"], "left")
        .fillna({"actual": 0})
        .where(F.col("actual") != F.col("declared"))
        .select(
            "conn",
            "direction",
            "frame_no",
            "offset",
            F.format_string("W %d followed by %d data frames", "declared", "actual").alias("detail"),
        )
    )
    orphans = x.where(is_data & (F.col("window_no") == 0)).select(
        "conn", "direction", "frame_no", "offset", F.lit("data frame before any W").alias("detail")
    )
    return wrong.unionByName(orphans)


def _lj_acks(frames: Any) -> Any:
    from pyspark.sql import functions as F

    x = _with_windows(frames).where(F.col("window_no") > 0)
    data_item = F.when(F.col("type").isin("J", "D"), F.struct("frame_no", "seq"))
    per_window = x.groupBy("conn", "window_no").agg(
        F.min("frame_no").alias("w_frame_no"),
        F.min_by("offset", "frame_no").alias("w_offset"),
        F.sort_array(F.collect_list(data_item)).alias("items"),
    )
    windows = per_window.groupBy("conn").agg(
        F.sort_array(
            F.collect_list(
                F.struct("window_no", "w_frame_no", "w_offset", F.transform("items", lambda i: i["seq"]).alias("seqs"))
            )
        ).alias("windows")
    )
    acks = (
        frames.where((F.col("direction") == "s2c") & (F.col("type") == "A"))
        .groupBy("conn")
        .agg(F.sort_array(F.collect_list(F.struct("frame_no", "offset", "seq"))).alias("acks"))
    )

    # A lambda: pyspark reads type hints to pick a UDF kind and warns on these.
    udf = F.udf(
        lambda ws, ack_rows: _check_rows(ws, ack_rows),
        "ARRAY<STRUCT<direction: STRING, frame_no: BIGINT, offset: BIGINT, detail: STRING>>",
    )
    return (
        windows.join(acks, "conn", "full_outer")
        .select("conn", F.explode(udf("windows", "acks")).alias("v"))
        .select("conn", "v.direction", "v.frame_no", "v.offset", "v.detail")
    )


RULES: list[Rule] = [
    Rule("LJ-DECODES", PROTOCOL, "every byte of both directions decodes", _lj_decodes, check_decodes),
    Rule("LJ-SEQ-CONTIGUOUS", PROTOCOL, "data frame seqs are consecutive (mod 2**32, skipping 0)", _lj_seq_contiguous),
    Rule("LJ-WINDOW-COUNT", PROTOCOL, "each W n is followed by exactly n data frames", _lj_window_count),
    Rule("LJ-ACK-MATCHES-WINDOW", PROTOCOL, "acks close the windows in order, with each window's last seq", _lj_acks),
]


# --------------------------------------------------------------------------- synthetic captures


def lumberjack_connection(windows: int = 5, window_size: int = 20, *, fault: str = "", first_seq: int = 1) -> tuple[bytes, bytes]:
    """``(c2s, s2c)`` bytes of one connection; ``first_seq`` runs across windows."""
    from refwire.lumberjack.frames import Ack, Compressed, JsonFrame, Window

    c2s: list[bytes] = []
    s2c: list[bytes] = []
    seq = first_seq
    for w in range(windows):
        seqs = []
        for _ in range(window_size):
            seqs.append(seq)
            seq = 1 if seq >= 0xFFFFFFFF else seq + 1
        if fault == "seq-gap" and w == windows // 2:
            seqs[window_size // 2 :] = [s + 1 for s in seqs[window_size // 2 :]]
        frames = b"".join(JsonFrame(s, json.dumps({"w": w, "seq": s, "message": "x" * (s % 23)}).encode()).encode() for s in seqs)
        c2s.append(Window(window_size).encode())
        c2s.append(Compressed.wrap(frames).encode() if w % 2 else frames)
        ack = seqs[-1] - 1 if fault == "wrong-ack" and w == windows // 2 else seqs[-1]
        s2c.append(Ack(0).encode() if w == 0 else b"")
        s2c.append(Ack(ack).encode())
    if fault == "garbage":
        c2s.append(b"\x00\xffnot a frame")
    return b"".join(c2s), b"".join(s2c)


def write_lumberjack_capture(out: str | Path, faults: Sequence[str] = ("",), *, windows: int = 5, window_size: int = 20) -> list[str]:
    """One connection per entry of ``faults`` ("" = clean); returns the connection names."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    names = []
    for i, fault in enumerate(faults, 1):
        if fault and fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {FAULTS}")
        name = f"conn{i:05d}"
        c2s, s2c = lumberjack_connection(windows, window_size, fault=fault, first_seq=1 + 1000 * i)
        (d / f"{name}.c2s").write_bytes(c2s)
        (d / f"{name}.s2c").write_bytes(s2c)
        names.append(name)
    return names
