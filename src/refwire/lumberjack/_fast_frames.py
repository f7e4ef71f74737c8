"""The speed paths of Lumberjack's frame codec (the plain paths are
:mod:`refwire.lumberjack.frames` and :mod:`refwire.lumberjack.codec`).

They do the work of the plain paths, faster, and give the same frames, bytes
and errors at the same offsets (tests/test_lumberjack_differential.py):

* :func:`scan`, :class:`~refwire.lumberjack.frames.FrameDecoder`'s scanner: one
  hot loop with its names bound to locals, a complete well-formed ``J`` frame
  decoded at the top of it without a call; with ``runs``, consecutive ``J``
  frames go to :class:`~refwire.lumberjack.codec.JsonRun` columns (no object per
  frame) whose JSON is checked a run at a time (:func:`_check_runs`);
* :func:`encode_events`: a window's dicts straight to orjson, into one buffer;
* :func:`scan_acks`: the server's ``A`` frames read as tuples, no frame objects.

Importing this module registers them with the plain modules
(:data:`~refwire.lumberjack.frames.SCANNERS`,
:data:`~refwire.lumberjack.frames.ACK_SCANNERS`,
:data:`~refwire.lumberjack.codec.EVENT_ENCODERS`); the package
:mod:`refwire.lumberjack` imports it, so they are there before anything is
built.  What takes which path is decided once per object by
:func:`refwire.speed.use_fast` (``fast=``, else ``REFWIRE_REFERENCE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Final

import orjson

from ..errors import LocalProtocolError, ProtocolError
from ..wire import U32BE
from .codec import (
    _HDR8,
    _HDR10,
    _JSON_SETTERS,
    _PACK_J_HDR,
    ACK,
    COMPRESSED,
    DATA,
    EVENT_ENCODERS,
    JSON,
    PROTOCOL,
    V1,
    V2,
    WINDOW,
    Ack,
    Compressed,
    EncodedWindow,
    JsonFrame,
    JsonRun,
    Window,
    _dumps,
    _err,
    _limit,
    _new,
    encode_data,
    encode_event,
)
from .frames import ACK_SCANNERS, SCANNERS, FrameDecoder

__all__ = ["encode_events", "scan", "scan_acks"]

# --------------------------------------------------------------------------- the decoder


def scan(
    dec: FrameDecoder, data: bytes | bytearray, pos: int, end: int, base: int, out: list[Any], runs: bool = False
) -> tuple[int, int]:
    """The speed path's :data:`~refwire.lumberjack.frames.Scanner`: decode
    frames in ``data[pos:end]`` into ``out``; ``pos + base`` is the stream
    offset.  Returns ``(new_pos, need)``.  The plain one is
    :func:`~refwire.lumberjack.frames.scan_frames`."""
    mv = memoryview(data) if type(data) is not bytes else None
    try:
        try:
            done = _scan_inner(dec, data, mv, pos, end, base, out, runs)
        except ProtocolError:
            if runs and dec.validate_json:
                _check_runs(out)  # a bad payload before the bad frame is the first error
            raise
        if runs and dec.validate_json:
            _check_runs(out)
        return done
    finally:
        if mv is not None:
            mv.release()


def _scan_inner(
    dec: FrameDecoder,
    data: bytes | bytearray,
    mv: memoryview | None,
    pos: int,
    end: int,
    base: int,
    out: list[Any],
    runs: bool,
) -> tuple[int, int]:
    max_frame = dec.limits.max_frame_size
    validate = dec.validate_json
    unpack8 = _HDR8.unpack_from
    unpack4 = U32BE.unpack_from
    append = out.append
    # Strict RFC 8259 JSON (orjson): UTF-8 only, no byte-order mark, no NaN or
    # Infinity -- Jackson's defaults, as Logstash parses.  Integers beyond 64
    # bits come back as floats; JsonFrame.payload always keeps the exact bytes.
    loads = orjson.loads
    new = _new
    json_cls = JsonFrame
    set_seq, set_payload, set_version, set_data = _JSON_SETTERS
    strict_versions = dec.strict_versions
    unpack10 = _HDR10.unpack_from
    v1 = V1
    v2 = V2
    json_t = JSON
    run: JsonRun | None = None  # the run the next fast-path J joins (runs mode)
    run_version = 0
    add_seq = add_payload = append
    while True:
        avail = end - pos
        if avail >= 10:
            ver, typ, seq, ln = unpack10(data, pos)
            if (
                typ == json_t
                and (ver == v2 or (ver == v1 and not strict_versions))
                and 0 < ln
                and ln + 10 <= max_frame
                and pos + 10 + ln <= end
            ):
                # Fast path: a complete, well-formed J frame (the common case).
                # (A non-J frame, or a J that is short or malformed, goes to the
                # checks below, which return what it needs or raise.)
                stop = pos + 10 + ln
                payload = data[pos + 10 : stop] if mv is None else mv[pos + 10 : stop].tobytes()
                if runs:  # (JSON is checked for the whole run at once, by _check_runs)
                    if run is None or ver != run_version:
                        run = JsonRun(ver, pos + base)
                        run_version = ver
                        append(run)
                        add_seq = run.seqs.append
                        add_payload = run.payloads.append
                    add_seq(seq)
                    add_payload(payload)
                    pos = stop
                    continue
                if validate:
                    try:
                        doc = loads(payload)
                    except ValueError as exc:
                        raise _err(
                            f"J payload is not valid JSON: {exc}", frame="J", field="json", offset=pos + 10 + base
                        ) from None
                    if type(doc) is not dict:
                        raise _err(
                            f"J payload must be a JSON object, got {type(doc).__name__}",
                            frame="J",
                            field="json",
                            offset=pos + 10 + base,
                        )
                else:
                    doc = None
                f = new(json_cls)
                set_seq(f, seq)
                set_payload(f, payload)
                set_version(f, ver)  # '1' only when strict_versions is off (the type decides then)
                set_data(f, doc)
                append(f)
                pos = stop
                continue
        elif avail < 2:
            return pos, 2
        run = None  # any other frame ends the run (a J comes back to the fast path)
        ver = data[pos]
        typ = data[pos + 1]
        if ver != V2 and ver != V1:
            raise _err(
                f"bad version byte 0x{ver:02x} (expected 0x31 '1' or 0x32 '2')",
                frame=None,
                field="version",
                offset=pos + base,
            )
        if typ == JSON:
            if avail < 10:
                return pos, 10
            seq, ln = unpack8(data, pos + 2)
            if ver != V2 and strict_versions:
                raise _err("J frame with version byte '1' (J exists only in v2)", frame="J", field="version", offset=pos + base)
            if ln == 0:
                raise _err("J payload length is 0", frame="J", field="len", offset=pos + 6 + base)
            if ln + 10 > max_frame:
                raise _limit(
                    f"J frame of {ln + 10} bytes exceeds {dec.frame_limit}",
                    frame="J",
                    field="len",
                    offset=pos + 6 + base,
                )
            stop = pos + 10 + ln
            if stop > end:
                return pos, 10 + ln
            # Complete and well-formed: the fast path above takes it on the next
            # turn (its condition is exactly the negation of the checks here).
            continue
        elif typ == WINDOW or typ == ACK:
            if avail < 6:
                return pos, 6
            (val,) = unpack4(data, pos + 2)
            append(Window(val, ver) if typ == WINDOW else Ack(val, ver))
            pos += 6
        elif typ == COMPRESSED:
            if avail < 6:
                return pos, 6
            (ln,) = unpack4(data, pos + 2)
            if ln + 6 > max_frame:
                raise _limit(
                    f"C frame of {ln + 6} bytes exceeds {dec.frame_limit}",
                    frame="C",
                    field="len",
                    offset=pos + 2 + base,
                )
            stop = pos + 6 + ln
            if stop > end:
                return pos, 6 + ln
            payload = data[pos + 6 : stop] if mv is None else mv[pos + 6 : stop].tobytes()
            append(Compressed(payload, ver))  # type: ignore[arg-type]
            pos = stop
        elif typ == DATA:
            r = dec._scan_data(data, mv, pos, end, base, ver)
            if isinstance(r, int):
                return pos, r
            append(r[0])
            pos = r[1]
        else:
            raise _err(f"unknown frame type 0x{typ:02x}", frame=None, field="type", offset=pos + 1 + base)


_ONLY_DICTS: Final = {dict}


def _check_runs(out: list[Any]) -> None:
    """Parse the payloads of every :class:`JsonRun` in ``out`` as strict JSON
    objects (``docs``), a run at a time.  At the first that is not one, ``out``
    is cut to the frames before it and the error the frame-by-frame decoder
    raises is raised (same words, field ``json``, at the payload's offset)."""
    loads = orjson.loads
    for i, f in enumerate(out):
        if type(f) is not JsonRun:
            continue
        payloads = f.payloads
        try:
            docs = list(map(loads, payloads))
        except ValueError:
            docs = None
        if docs is not None and set(map(type, docs)) == _ONLY_DICTS:
            f.docs = docs
            continue
        at = f.start
        for k, payload in enumerate(payloads):  # the first that is not a JSON object
            try:
                doc = loads(payload)
            except ValueError as exc:
                error = _err(f"J payload is not valid JSON: {exc}", frame="J", field="json", offset=at + 10)
            else:
                if type(doc) is dict:
                    at += 10 + len(payload)
                    continue
                error = _err(
                    f"J payload must be a JSON object, got {type(doc).__name__}", frame="J", field="json", offset=at + 10
                )
            del out[i + 1 :]
            if k == 0:
                del out[i]
            else:
                del f.seqs[k:], payloads[k:]
                f.docs = list(map(loads, payloads))
            raise error
        raise AssertionError("a run failed its check as a whole but not payload by payload")  # pragma: no cover


# --------------------------------------------------------------------------- the client


def encode_events(version: int, events: Sequence[Any], seqs: Sequence[int] | None = None) -> EncodedWindow:
    """:func:`~refwire.lumberjack.codec.encode_events`' speed path: encode a
    window's application events once (:func:`encode_event` for each), numbered
    ``seqs`` (default ``1..n``, the window numbering of §3.2).

    The hot path of a client: a plain ``dict`` goes straight to orjson and
    each encoded event is copied into the window's buffer and dropped at once.
    """
    n = len(events)
    numbers = list(range(1, n + 1)) if seqs is None else list(seqs)
    if len(numbers) != n:
        raise ValueError(f"{len(numbers)} sequence numbers for {n} events")
    body = bytearray()
    starts: list[int] = []
    mark = starts.append
    if version == V2:
        dumps = orjson.dumps
        pack = _PACK_J_HDR
        for seq, event in zip(numbers, events, strict=True):
            if type(event) is dict:
                try:
                    payload = dumps(event)
                except TypeError:  # what orjson refuses (non-string keys, integers past 64 bits)
                    payload = _dumps(event)
            else:
                payload = encode_event(event, V2)  # type: ignore[assignment]
            mark(len(body))
            body += pack(V2, JSON, seq, len(payload))
            body += payload
    else:
        for seq, event in zip(numbers, events, strict=True):
            mark(len(body))
            body += encode_data(V1, seq, encode_event(event, V1))
    return EncodedWindow(version, body, starts, numbers)


def scan_acks(buf: bytes | bytearray, base: int = 0) -> Iterator[tuple[int, int, int]]:
    """:func:`~refwire.lumberjack.frames.scan_acks`' speed path: the ``A``
    frames at the start of ``buf`` (what a client reads), one at a time as
    ``(version, seq, position in buf)``, no frame objects; stops at an
    incomplete frame.

    The version and type bytes are checked as soon as they are there, not once
    all 6 bytes are in: anything but ``1A`` / ``2A`` raises
    :class:`~refwire.errors.LocalProtocolError` at ``base`` + its position, after
    the good acks before it have been yielded.
    """
    pos = 0
    while len(buf) - pos >= 1:
        ver = buf[pos]
        if ver != V1 and ver != V2:
            raise LocalProtocolError(f"bad version byte 0x{ver:02x}", protocol=PROTOCOL, field="version", offset=base + pos)
        if len(buf) - pos < 2:
            return
        typ = buf[pos + 1]
        if typ != ACK:
            raise LocalProtocolError(
                f"unexpected frame type 0x{typ:02x} from the server (only A is allowed)",
                protocol=PROTOCOL,
                field="type",
                offset=base + pos + 1,
            )
        if len(buf) - pos < 6:
            return
        (seq,) = U32BE.unpack_from(buf, pos + 2)
        yield ver, seq, pos
        pos += 6


# --------------------------------------------------------------------------- registration

SCANNERS[True] = scan
ACK_SCANNERS[True] = scan_acks
EVENT_ENCODERS[True] = encode_events
