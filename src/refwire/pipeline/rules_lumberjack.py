"""Lumberjack capture rules (specs/lumberjack/README.md §2-3), each a DataFrame query with a pure twin.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .rulekit import Rule, check_decodes

__all__ = ["LUMBERJACK_RULES", "check_acks"]

MAX_U32 = 0xFFFFFFFF


def _next_seq(seq: int) -> int:
    return 1 if seq >= MAX_U32 else seq + 1


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

    return frames.where(F.col("type") == "error").select(
        "conn", "direction", "frame_no", "offset", F.col("error").alias("detail")
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


LUMBERJACK_RULES: list[Rule] = [
    Rule("LJ-DECODES", "lumberjack", "every byte of both directions decodes", _lj_decodes, check_decodes),
    Rule("LJ-SEQ-CONTIGUOUS", "lumberjack", "data frame seqs are consecutive (mod 2**32, skipping 0)", _lj_seq_contiguous),
    Rule("LJ-WINDOW-COUNT", "lumberjack", "each W n is followed by exactly n data frames", _lj_window_count),
    Rule("LJ-ACK-MATCHES-WINDOW", "lumberjack", "acks close the windows in order, with each window's last seq", _lj_acks),
]
