"""Hypothesis strategies of AppendBlockEnd streams (specs/pravega/README.md §5.1, §5.3,
§5.4): single frames, regular or hostile, and whole writer sessions, for the
tests comparing block-end runs with the frame-by-frame path."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

from hypothesis import strategies as st

from refwire.pravega.frames import KeepAlive, SetupAppend
from refwire.wire import Limits
from support.pravega_machines import SEG, W2, W, block, block_end

#: A frame header (type, length), packed.
HDR = struct.Struct(">ii").pack
#: A third writer, never set up.
W3 = uuid.UUID(int=3)
#: Limits small enough for a frame to pass them.
SMALL = Limits(max_frame_size=120, max_buffered=1 << 20)


def raw_block_end(writer: uuid.UUID, size: int, data: bytes, tail: bytes, *, declared: int | None = None) -> bytes:
    """An AppendBlockEnd frame from its parts; ``declared`` overrides the data length written."""
    body = writer.bytes + struct.pack(">ii", size, len(data) if declared is None else declared) + data + tail
    return HDR(4, len(body)) + body


@st.composite
def block_end_frame(draw: st.DrawFn, writers: Sequence[uuid.UUID]) -> bytes:
    """A frame of ``writers``: mostly a regular AppendBlockEnd, else an irregular one, a KeepAlive or garbage."""
    kind = draw(
        st.sampled_from(
            ["regular"] * 8 + ["short-tail", "long-tail", "lying", "negative", "tiny", "keepalive", "over", "garbage"]
        )
    )
    writer = draw(st.sampled_from(writers))
    data = draw(st.binary(max_size=30))
    num = draw(st.sampled_from([1, 1, 2, 0, -1]))
    last = draw(st.integers(-2, 40))
    rid = draw(st.integers(-1, 9))
    if kind == "regular":
        return raw_block_end(writer, draw(st.integers(-1, 40)), data, struct.pack(">iqq", num, last, rid))
    if kind == "short-tail":  # no request id: -1 (an old client's block end)
        return raw_block_end(writer, 0, data, struct.pack(">iq", num, last) + draw(st.binary(max_size=7)))
    if kind == "long-tail":
        return raw_block_end(writer, 0, data, struct.pack(">iqq", num, last, rid) + draw(st.binary(min_size=1, max_size=8)))
    if kind == "lying":  # a data length past the frame's end
        return raw_block_end(writer, 0, data, struct.pack(">iqq", num, last, rid), declared=len(data) + draw(st.integers(1, 30)))
    if kind == "negative":
        return raw_block_end(writer, 0, data, struct.pack(">iqq", num, last, rid), declared=-1)
    if kind == "tiny":  # under the 36 bytes of the smallest regular one
        return HDR(4, draw(st.integers(0, 35))) + bytes(35)[: draw(st.integers(0, 35))]
    if kind == "keepalive":
        return KeepAlive().encode()
    if kind == "over":
        return HDR(4, SMALL.max_frame_size - 8 + draw(st.integers(0, 1))) + bytes(12)
    return draw(st.binary(min_size=1, max_size=12))


@st.composite
def block_end_session(draw: st.DrawFn) -> tuple[list[uuid.UUID], list[bytes]]:
    """Writers to set up, and a stream of their appends (good and bad) and other frames, split anyhow."""
    writers = draw(st.lists(st.sampled_from([W, W2]), min_size=1, max_size=2, unique=True))
    frames: list[bytes] = []
    last = {w: 0 for w in (W, W2, W3)}
    for _ in range(draw(st.integers(0, 14))):
        kind = draw(st.sampled_from(["append"] * 6 + ["back", "equal", "zero", "stranger", "java", "setup", "keepalive", "any"]))
        w = draw(st.sampled_from([W, W2]))
        if kind == "append":
            last[w] += draw(st.integers(1, 3))
            frames.append(block_end(0, draw(st.binary(max_size=12)), 1, last[w], rid=last[w], writer=w))
        elif kind in ("back", "equal"):
            frames.append(block_end(0, b"b", 1, last[w] - (kind == "back"), writer=w))
        elif kind == "zero":
            frames.append(block_end(0, b"z", 0, last[w] + 1, writer=w))
        elif kind == "stranger":
            frames.append(block_end(0, b"s", 1, 1, writer=W3))
        elif kind == "java":
            last[w] += 1
            frames.append(block(b"\x00\x00\x00\x00\x00\x00\x00\x02ja", writer=w) + block_end(10, b"", 1, last[w], writer=w))
        elif kind == "setup":
            frames.append(SetupAppend(request_id=7, writer_id=w, segment=SEG).encode())
        elif kind == "keepalive":
            frames.append(KeepAlive().encode())
        else:
            frames.append(draw(block_end_frame([W, W2])))
    raw = b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    return writers, [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if b > a]
