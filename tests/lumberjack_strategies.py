"""Hypothesis strategies and helpers for Lumberjack tests (shared by several test files)."""

from __future__ import annotations

import json
import zlib
from typing import Any

from hypothesis import strategies as st

from refwire.errors import RemoteProtocolError
from refwire.lumberjack import (
    NEED_DATA,
    V1,
    V2,
    Ack,
    Batch,
    Compressed,
    DataFrame,
    JsonFrame,
    ServerConnection,
    Window,
)

u32 = st.integers(0, 0xFFFFFFFF)
json_objects = st.dictionaries(
    st.text(max_size=8),
    st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=20), st.booleans(), st.none()),
    max_size=4,
)


def json_frame(seq: int, doc: dict[str, Any]) -> JsonFrame:
    return JsonFrame(seq, json.dumps(doc, separators=(",", ":")).encode())


frames_v2 = st.one_of(
    st.builds(Window, u32, st.just(V2)),
    st.builds(Ack, u32, st.sampled_from([V1, V2])),
    st.builds(json_frame, u32, json_objects),
    st.builds(Compressed, st.binary(max_size=40), st.sampled_from([V1, V2])),
)
frames_v1 = st.builds(
    DataFrame,
    u32,
    st.lists(st.tuples(st.binary(max_size=12), st.binary(max_size=12)), max_size=5).map(tuple),
    st.just(V1),
)
any_frame = st.one_of(frames_v2, frames_v1, st.builds(Window, u32, st.just(V1)))


@st.composite
def client_streams(draw: st.DrawFn) -> tuple[bytes, list[list[int]]]:
    """A valid client byte stream and the expected batches (as lists of seqs).

    Mixes every shape the real servers accept: plain frames, one C per window,
    W inside C, windows split across C and plain frames, nested C, several
    windows in one C.
    """
    version = draw(st.sampled_from([V1, V2]))
    n_windows = draw(st.integers(1, 4))
    seq = draw(st.sampled_from([1, 2**32 - 3]))
    pieces: list[bytes] = []
    expected: list[list[int]] = []
    for _ in range(n_windows):
        n = draw(st.integers(1, 6))
        frames: list[bytes] = [Window(n, version).encode()]
        seqs = []
        for _ in range(n):
            seqs.append(seq)
            if version == V2:
                frames.append(json_frame(seq, draw(json_objects)).encode())
            else:
                pairs = tuple(draw(st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=3)))
                frames.append(DataFrame(seq, pairs).encode())
            seq = 1 if seq == 0xFFFFFFFF else seq + 1
        expected.append(seqs)
        # Group consecutive frames into C frames (possibly nested) at random.
        i = 0
        while i < len(frames):
            j = draw(st.integers(i + 1, len(frames)))
            chunk = b"".join(frames[i:j])
            mode = draw(st.sampled_from(["plain", "plain", "C", "CC"]))
            if mode == "C":
                chunk = Compressed(zlib.compress(chunk, draw(st.integers(0, 9))), version).encode()
            elif mode == "CC":
                inner = Compressed(zlib.compress(chunk, 1), version).encode()
                chunk = Compressed(zlib.compress(inner, 6), version).encode()
            pieces.append(chunk)
            i = j
    return b"".join(pieces), expected


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, prev = [], 0
    for p in points:
        out.append(data[prev:p])
        prev = p
    out.append(data[prev:])
    return [c for c in out if c]


def drain(conn: ServerConnection, chunks: list[bytes], *, accept: bool = True) -> tuple[list[Batch], RemoteProtocolError | None, bytes]:
    """Feed ``chunks`` then EOF; collect batches (accepting each) until NEED_DATA,
    close, or error.  Returns (batches, error, bytes the server sent)."""
    batches: list[Batch] = []
    sent = bytearray()
    err: RemoteProtocolError | None = None

    def pump() -> bool:
        nonlocal err
        while True:
            try:
                ev = conn.next_event()
            except RemoteProtocolError as exc:
                err = exc
                return False
            if ev is NEED_DATA:
                return True
            sent.extend(conn.data_to_send())
            if isinstance(ev, Batch):
                batches.append(ev)
                if accept:
                    conn.accept(ev, now=0.0)
                    sent.extend(conn.data_to_send())
            elif type(ev).__name__ == "ConnectionClosed":
                return False

    for chunk in chunks:
        conn.receive_data(chunk, now=0.0)
        if not pump():
            return batches, err, bytes(sent)
    conn.receive_data(b"", now=0.0)
    pump()
    return batches, err, bytes(sent)


# --------------------------------------------------------------------------- hostile streams


def j(seq: int, payload: bytes, version: int = V2) -> bytes:
    return bytes((version, 0x4A)) + seq.to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload


payloads = st.one_of(
    st.dictionaries(st.text(max_size=4), st.integers(0, 9), max_size=2).map(lambda d: json.dumps(d).encode()),
    st.sampled_from([b"[1]", b"{", b"nul", b'"s"', b"{}"]),  # not an object, not JSON
)


@st.composite
def hostile_streams(draw: st.DrawFn) -> bytes:
    """Windows whose counts may not match what follows, J and D frames of
    either version byte, acks from the client, C frames around any of it."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["W", "J", "J", "J", "Jrun", "D", "A", "C"]))
        version = draw(st.sampled_from([V2, V2, V2, V1]))
        if kind == "W":
            parts.append(Window(draw(st.integers(0, 5)), version).encode())
        elif kind == "J":
            parts.append(j(draw(st.integers(0, 9)), draw(payloads), version))
        elif kind == "Jrun":
            n = draw(st.integers(1, 6))
            body = b"".join(j(i + 1, draw(payloads), version) for i in range(n))
            parts.append(Window(draw(st.integers(1, 6)), version).encode() + body)
        elif kind == "D":
            parts.append(bytes((version,)) + DataFrame(draw(st.integers(0, 9)), ((b"k", b"v"),)).encode()[1:])
        elif kind == "A":
            parts.append(Ack(1, version).encode())
        else:
            inner = b"".join(
                [Window(draw(st.integers(1, 4)), version).encode()]
                + [j(i + 1, draw(payloads), draw(st.sampled_from([V2, V1]))) for i in range(draw(st.integers(0, 4)))]
            )
            parts.append(Compressed(zlib.compress(inner, 1), version).encode())
    return b"".join(parts)
