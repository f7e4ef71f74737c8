"""The speed path of the Lumberjack server machine (the plain path is
:mod:`refwire.lumberjack.connection`).

With it, a :class:`~refwire.lumberjack.connection.ServerConnection` asks its
decoder (on its own speed path, :mod:`refwire.lumberjack._fast_frames`) for a
window's ``J`` frames as :class:`~refwire.lumberjack.codec.JsonRun` columns and
takes each run a window's worth at a time (:func:`take_run`): the same checks in
the same order as one ``J`` frame after another, the events kept in columns that
become the :class:`~refwire.lumberjack.events.Batch` without a
:class:`~refwire.lumberjack.codec.JsonFrame` per event.  Every other frame goes
through the plain :meth:`~refwire.lumberjack.connection.ServerConnection._take_frame`,
except ``D`` frames, taken inline in the loop (the v1 hot path).

Importing this module registers :func:`take_frames` in
:data:`~refwire.lumberjack.connection.FRAME_LOOPS` (the package imports it); a
machine built with ``fast`` false (or under ``REFWIRE_REFERENCE=1``) never runs
it.  tests/test_lumberjack_differential.py holds both paths to the same
batches, acks, transitions and errors.
"""

from __future__ import annotations

from typing import Any

from .codec import V2, DataFrame, JsonFrame, JsonRun, held_bytes
from .connection import _IN_BATCH_DATA, FRAME_LOOPS, ServerConnection, State

__all__ = ["take_frames", "take_run"]


def take_frames(conn: ServerConnection, frames: list[Any], depth: int, c_offset: int | None, base: int = 0) -> None:
    """The speed path's frame loop: a :class:`JsonRun` through :func:`take_run`,
    a ``J`` or ``D`` frame taken here (the checks of
    :meth:`ServerConnection._take_event`, inline), every other frame through
    :meth:`ServerConnection._take_frame`."""
    take_frame = conn._take_frame
    mixed = conn.accept_mixed_versions
    in_batch = State.IN_BATCH
    for i, f in enumerate(frames):
        t = type(f)
        if t is JsonRun:
            take_run(conn, f, frames, i, base, c_offset)
        elif t is JsonFrame or t is DataFrame:
            if conn.state is not in_batch:
                name = "J" if t is JsonFrame else "D"
                raise conn._error_at(
                    "data frame outside a window (no W announced it)", frames, i, base, c_offset, name, "type", 1
                )
            if mixed:
                # Logstash's rule (§3.10): the batch's W decides what it holds --
                # J frames in a '2' batch, D frames in a '1' one -- whatever the
                # frame's own version byte (the decoder checked it is '1' or '2').
                if (t is JsonFrame) != (conn._batch_version == V2):
                    name = "J" if t is JsonFrame else "D"
                    raise conn._error_at(
                        f"{name} frame in a version {chr(conn._batch_version)!r} batch",
                        frames,
                        i,
                        base,
                        c_offset,
                        name,
                        "type",
                        1,
                    )
            elif f.version != conn._batch_version:
                name = "J" if t is JsonFrame else "D"
                raise conn._error_at(
                    f"version byte {chr(f.version)!r} on a version {chr(conn._batch_version)!r} connection",
                    frames,
                    i,
                    base,
                    c_offset,
                    name,
                    "version",
                    0,
                )
            if t is JsonFrame:
                assert isinstance(f, JsonFrame)
                conn._cur_cols.append((f.version, [f.seq], [f.payload], None if f.data is None else [f.data]))
            else:
                conn._cur.append(f)
            conn._cur_bytes += held_bytes(f)
            if conn._cur_bytes > conn._cap:
                raise conn._error_at(
                    conn._over_cap(),
                    frames,
                    i,
                    base,
                    c_offset,
                    "J" if t is JsonFrame else "D",
                    "payload",
                    10 if t is JsonFrame else 6,
                    limit=True,
                )
            conn._cur_n += 1
            n = conn._cur_n
            if n == conn._cur_count:
                conn._finish_batch()
            elif n == 1:
                # in-batch -> in-batch, recorded once per batch rather than per frame (hot path)
                conn.transitions_seen.add(_IN_BATCH_DATA)
        else:
            take_frame(f, frames, i, depth, base, c_offset)


def _into(run: JsonRun, within: int, rel: int) -> int:
    """``rel`` bytes into the ``within``-th frame of ``run``, counted from the
    run's first frame (what ``_error_at`` adds to the run's offset)."""
    return 10 * within + sum(map(len, run.payloads[:within])) + rel


def take_run(conn: ServerConnection, run: JsonRun, frames: list[Any], i: int, base: int, c_offset: int | None) -> None:
    """The ``J`` frames of ``run`` (``frames[i]``), a window's worth at a
    time: the same checks, in the same order, as one ``J`` frame after
    another in :meth:`ServerConnection._take_event`, and the same error at
    the same frame."""
    seqs, payloads, docs = run.seqs, run.payloads, run.docs
    n = len(seqs)
    limit = conn._cap
    j = 0
    while j < n:
        if conn.state is not State.IN_BATCH:
            raise conn._error_at(
                "data frame outside a window (no W announced it)", frames, i, base, c_offset, "J", "type", _into(run, j, 1)
            )
        if conn.accept_mixed_versions:
            if conn._batch_version != V2:  # §3.10: a '1' batch holds D frames
                raise conn._error_at(
                    f"J frame in a version {chr(conn._batch_version)!r} batch",
                    frames,
                    i,
                    base,
                    c_offset,
                    "J",
                    "type",
                    _into(run, j, 1),
                )
        elif run.version != conn._batch_version:
            raise conn._error_at(
                f"version byte {chr(run.version)!r} on a version {chr(conn._batch_version)!r} connection",
                frames,
                i,
                base,
                c_offset,
                "J",
                "version",
                _into(run, j, 0),
            )
        before = conn._cur_n
        k = min(conn._cur_count - before, n - j)
        whole = j == 0 and k == n
        part = payloads if whole else payloads[j : j + k]
        held = conn._cur_bytes + sum(map(len, part))
        if held > limit:
            over = conn._cur_bytes
            for m, p in enumerate(part):  # the frame that went past the limit
                over += len(p)
                if over > limit:
                    if before == 0 and m > 0 and conn._cur_count > 1:
                        conn.transitions_seen.add(_IN_BATCH_DATA)  # as the frames before it did
                    raise conn._error_at(
                        conn._over_cap(),
                        frames,
                        i,
                        base,
                        c_offset,
                        "J",
                        "payload",
                        _into(run, j + m, 10),
                        limit=True,
                    )
        conn._cur_bytes = held
        if whole:
            conn._cur_cols.append((run.version, seqs, payloads, docs))
        else:
            conn._cur_cols.append((run.version, seqs[j : j + k], part, None if docs is None else docs[j : j + k]))
        conn._cur_n = before + k
        if before == 0 and conn._cur_count > 1:
            # in-batch -> in-batch, recorded once per batch rather than per frame (hot path)
            conn.transitions_seen.add(_IN_BATCH_DATA)
        if conn._cur_n == conn._cur_count:
            conn._finish_batch()
        j += k


FRAME_LOOPS[True] = take_frames
