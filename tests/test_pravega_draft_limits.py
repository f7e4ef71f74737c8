"""2017 draft partial messages at their edges (specs/pravega-draft-2017/README.md §5).

:class:`Reassembly` driven directly: the type check once the first 4 bytes are
in (however they are split), the announced length checked against the limit
at exactly the limit and one past it, trailing and short messages, and the
error each raises: on the part that revealed it (field ``data`` at the part's
data offset), wrapping the inner error with its own field and offset.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.pravega.draft2017 import frames as df
from refwire.pravega.draft2017.frames import PROTOCOL, KeepAlive, Part, PartialMessage
from refwire.pravega.draft2017.partial import Reassembly, command_name, error, split_message, split_reply, wrap_inner
from refwire.pravega.frames_codec import Command, decode_command

HEADER = 8


def _head(code: int, length: int) -> bytes:
    return struct.pack(">ii", code, length)


class Types:
    """A ``check_type`` that records the codes it saw and refuses 99."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __call__(self, code: int) -> None:
        self.seen.append(code)
        if code == 99:
            raise error(f"type {code} not allowed here", None, "type", 0)


def _started(limit: int = 1000) -> Reassembly:
    r = Reassembly(limit)
    r.begin(40, in_block=True)
    return r


def test_initial_and_begun_state() -> None:
    r = Reassembly(123)
    assert (r.limit, r.buf, r.started_at, r.in_block, r.code, r.total, r.active) == (123, None, 0, False, None, None, False)
    r.begin(77, in_block=True)
    assert (r.buf, r.started_at, r.in_block, r.code, r.total, r.active) == (bytearray(), 77, True, None, None, True)
    r.begin(78, in_block=False)
    assert (r.started_at, r.in_block) == (78, False)


@pytest.mark.parametrize("cuts", [[], [1], [3], [4], [5], [7], [8], [9], [2, 6], [4, 8], [1, 2, 3, 4, 5, 6, 7, 8]])
def test_any_split_reassembles(cuts: list[int]) -> None:
    msg = KeepAlive(data=b"hello").encode()
    r = _started()
    types = Types()
    pieces = [msg[a:b] for a, b in zip([0, *cuts], [*cuts, len(msg)], strict=True)]
    for i, piece in enumerate(pieces):
        r.add(piece, 100 + i, types)
        if sum(map(len, pieces[: i + 1])) >= 4:
            assert r.code == 100
        else:
            assert r.code is None
        if sum(map(len, pieces[: i + 1])) >= HEADER:
            assert r.total == len(msg)
        else:
            assert r.total is None
    assert types.seen == [100]  # checked exactly once, as soon as 4 bytes are in
    out = r.finish(999)
    assert out == msg and type(out) is bytes
    assert not r.active


def test_type_refused_on_the_part_that_completes_it() -> None:
    r = _started()
    r.add(b"\x00\x00", 10, Types())
    r.add(b"\x00", 20, Types())
    with pytest.raises(LocalProtocolError) as info:
        r.add(b"\x63" + b"\x00" * 4, 30, Types())
    e = info.value
    assert (e.protocol, e.frame, e.field, e.offset) == (PROTOCOL, "PartialMessage", "data", 30)
    assert e.reason == "reassembled message: type 99 not allowed here"
    assert e.inner is not None and (e.inner.field, e.inner.protocol) == ("type", PROTOCOL)
    assert not isinstance(e, LimitExceeded)


def test_negative_code_is_signed() -> None:
    r = _started()
    types = Types()
    r.add(b"\xff\xff\xff\xfe", 0, types)
    assert types.seen == [-2] and r.code == -2


def test_length_at_the_limit_and_one_past() -> None:
    ok = _started(limit=HEADER + 10)
    ok.add(_head(100, 10), 0, Types())
    assert ok.total == HEADER + 10
    ok.add(b"x" * 10, 1, Types())
    assert ok.finish(2) == _head(100, 10) + b"x" * 10
    over = _started(limit=HEADER + 10)
    with pytest.raises(LimitExceeded) as info:
        over.add(_head(100, 11), 55, Types())
    e = info.value
    assert (e.protocol, e.frame, e.field, e.offset) == (PROTOCOL, "PartialMessage", "data", 55)
    inner = e.inner
    assert isinstance(inner, LimitExceeded)
    assert (inner.protocol, inner.frame, inner.field, inner.offset) == (PROTOCOL, "KeepAlive", "length", 4)
    assert "max_partial_size=18" in inner.reason


def test_length_one_past_the_limit_split_inside_the_length() -> None:
    r = _started(limit=HEADER + 10)
    r.add(_head(100, 11)[:6], 0, Types())
    assert r.total is None
    with pytest.raises(LimitExceeded) as info:
        r.add(_head(100, 11)[6:], 6, Types())
    assert info.value.offset == 6


@pytest.mark.parametrize("length", [-1, -(2**31)])
def test_negative_length(length: int) -> None:
    r = _started(limit=2**40)
    with pytest.raises(LocalProtocolError) as info:
        r.add(_head(100, length), 12, Types())
    e = info.value
    assert not isinstance(e, LimitExceeded)
    assert (e.field, e.offset, e.reason) == ("data", 12, f"reassembled message: negative length {length}")
    assert e.inner is not None
    assert (e.inner.frame, e.inner.field, e.inner.offset, e.inner.protocol) == ("KeepAlive", "length", 4, PROTOCOL)


def test_large_length_is_not_read_as_negative() -> None:
    r = _started(limit=2**40)
    r.add(_head(100, 0x7FFFFFFF), 0, Types())
    assert r.total == HEADER + 0x7FFFFFFF


def test_unknown_code_names_no_frame() -> None:
    r = _started(limit=HEADER + 1)
    with pytest.raises(LimitExceeded) as info:
        r.add(_head(555, 5), 0, Types())
    assert info.value.inner is not None and info.value.inner.frame is None
    r = _started()
    r.add(_head(555, 0), 0, Types())
    with pytest.raises(LocalProtocolError) as info2:
        r.add(b"z", 3, Types())
    assert info2.value.inner is not None and info2.value.inner.frame is None


def test_trailing_bytes_at_the_line() -> None:
    msg = KeepAlive(data=b"abc").encode()
    r = _started()
    r.add(msg, 0, Types())
    r.add(b"", 1, Types())  # an empty part adds nothing
    with pytest.raises(LocalProtocolError) as info:
        r.add(b"zz", 9, Types())
    e = info.value
    assert (e.field, e.offset) == ("data", 9)
    assert e.reason == "reassembled message: the parts carry 2 bytes more than the message"
    assert e.inner is not None and (e.inner.frame, e.inner.field, e.inner.offset) == ("KeepAlive", "(trailing)", len(msg))
    # one byte over in the same part as the header
    r = _started()
    with pytest.raises(LocalProtocolError, match="1 bytes more"):
        r.add(msg + b"z", 0, Types())


@pytest.mark.parametrize("have", [0, 3, 4, 7, 8, 10])
def test_end_before_the_message_is_complete(have: int) -> None:
    msg = KeepAlive(data=b"abc").encode()
    r = _started()
    r.add(msg[:have], 0, Types())
    with pytest.raises(LocalProtocolError) as info:
        r.finish(31)
    e = info.value
    assert (e.frame, e.field, e.offset) == ("PartialMessage", "data", 31)
    assert e.reason == f"reassembled message: End part after {have} bytes of the message"
    assert e.inner is not None
    assert (e.inner.field, e.inner.offset, e.inner.frame) == ("(eof)", 0, "KeepAlive" if have >= 4 else None)
    assert r.active  # still in progress: the caller decides


def test_wrap_inner_keeps_the_inner_error() -> None:
    inner = LocalProtocolError("bad", protocol=None, frame="X", field="f", offset=3)
    out = wrap_inner(inner, 17)
    assert inner.protocol == PROTOCOL  # filled in
    assert type(out) is LocalProtocolError and out.inner is inner
    assert (out.protocol, out.frame, out.field, out.offset, out.reason) == (
        PROTOCOL,
        "PartialMessage",
        "data",
        17,
        "reassembled message: bad",
    )
    other = LimitExceeded("big", protocol="other", frame="Y", field="g", offset=1)
    out2 = wrap_inner(other, 5)
    assert type(out2) is LimitExceeded and other.protocol == "other"
    e = error("why", "F", "fld", 9)
    assert isinstance(e, ProtocolError) and (e.reason, e.protocol, e.frame, e.field, e.offset) == ("why", PROTOCOL, "F", "fld", 9)


def test_command_name() -> None:
    assert command_name(100) == "KeepAlive"
    assert command_name(-2) == "PartialMessage"
    assert command_name(12345) is None


def test_split_message_and_reply() -> None:
    msg = KeepAlive(data=b"0123456789").encode()
    parts = split_message(msg, [])
    assert parts == [PartialMessage(part=Part.BEGIN, data=msg).encode(), PartialMessage(part=Part.END, data=b"").encode()]
    parts = split_message(msg, [5, 5, 100, -3])
    assert parts == [
        PartialMessage(part=Part.BEGIN, data=b"").encode(),
        PartialMessage(part=Part.MIDDLE, data=msg[:5]).encode(),
        PartialMessage(part=Part.MIDDLE, data=b"").encode(),
        PartialMessage(part=Part.MIDDLE, data=msg[5:]).encode(),
        PartialMessage(part=Part.END, data=b"").encode(),
    ]
    assert split_reply(msg, len(msg)) == msg
    cut = split_reply(msg, len(msg) - 1)
    assert cut == b"".join(
        [PartialMessage(part=Part.BEGIN, data=msg[:-1]).encode(), PartialMessage(part=Part.END, data=msg[-1:]).encode()]
    )
    three = split_reply(msg, 8)
    assert three == b"".join(
        [
            PartialMessage(part=Part.BEGIN, data=msg[:8]).encode(),
            PartialMessage(part=Part.MIDDLE, data=msg[8:16]).encode(),
            PartialMessage(part=Part.END, data=msg[16:]).encode(),
        ]
    )


# --------------------------------------------------------------------------- the draft's command table


def _i32(v: int) -> bytes:
    return struct.pack(">i", v)


def _i64(v: int) -> bytes:
    return struct.pack(">q", v)


def _utf(s: str) -> bytes:
    return struct.pack(">H", len(s.encode())) + s.encode()


_UID = uuid.UUID(int=0x1112131415161718191A1B1C1D1E1F20)


@pytest.mark.parametrize(
    ("cmd", "code", "body"),
    [
        (PartialMessage(part=Part.MIDDLE, data=b"xy"), -2, b"\x01xy"),
        (PartialMessage(part=Part.END), -2, b"\x02"),
        (df.Event(data=b"ev"), 0, b"ev"),
        (df.SetupAppend(connection_id=_UID, segment="s"), 1, _UID.bytes + _utf("s")),
        (df.AppendSetup(segment="s", connection_id=_UID, connection_offset_ack_level=-1), 2, _utf("s") + _UID.bytes + _i64(-1)),
        (df.BeginAppendBlock(connection_id=_UID, connection_offset=5, length=6), 3, _UID.bytes + _i64(5) + _i32(6)),
        (df.EndAppendBlock(connection_id=_UID, connection_offset=7, block_length=8), 4, _UID.bytes + _i64(7) + _i32(8)),
        (df.DataAppended(connection_id=_UID, ack_level=9), 5, _UID.bytes + _i64(9)),
        (df.ReadSegment(segment="s", offset=10, suggested_length=11), 6, _utf("s") + _i64(10) + _i32(11)),
        (
            df.SegmentRead(segment="s", offset=12, at_tail=True, end_of_segment=False, data=b"dd"),
            7,
            _utf("s") + _i64(12) + b"\x01\x00dd",
        ),
        (df.SegmentRead(segment="", offset=0, at_tail=False, end_of_segment=True), 7, _utf("") + _i64(0) + b"\x00\x01"),
        (KeepAlive(data=b"k"), 100, b"k"),
        (KeepAlive(), 100, b""),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, (int, bytes)) else None,
)
def test_draft_commands_exact_bytes(cmd: Command, code: int, body: bytes) -> None:
    wire = cmd.encode()
    assert wire == struct.pack(">ii", code, len(body)) + body
    assert type(cmd).TYPE == code and type(cmd).PROTOCOL == PROTOCOL
    assert decode_command(code, body, dialect=df.DRAFT, allow_inner=True) == cmd


def test_draft_directions_and_strictness() -> None:
    assert [(c, df.DRAFT.commands[c].DIRECTION) for c in sorted(df.DRAFT.commands)] == [
        (-2, "both"), (0, "inner"), (1, "request"), (2, "reply"), (3, "request"), (4, "request"),
        (5, "reply"), (6, "request"), (7, "reply"), (100, "both"),
    ]  # fmt: skip
    assert [int(p) for p in Part] == [0, 1, 2] and PROTOCOL == "pravega-draft-2017"
    with pytest.raises(LocalProtocolError) as info:
        decode_command(5, _UID.bytes + _i64(9) + b"!", dialect=df.DRAFT, base=8)
    assert (info.value.field, info.value.offset, info.value.protocol) == ("(trailing)", 32, PROTOCOL)
    with pytest.raises(LocalProtocolError):
        decode_command(0, b"x", dialect=df.DRAFT)  # an Event is not a top-level command


# --------------------------------------------------------------------------- the connection's memory budget (§11)


def _budget_server(budget: int) -> tuple[object, uuid.UUID]:
    """A draft server machine with ``max_connection_memory=budget`` and one ConnectionId set up."""
    import attrs

    from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, ServerConnection
    from refwire.sansio import NEED_DATA

    cid = uuid.UUID(int=5)
    conn = ServerConnection(attrs.evolve(DEFAULT_LIMITS, max_connection_memory=budget))
    conn.receive_data(df.SetupAppend(connection_id=cid, segment="s").encode(), now=0)
    while conn.next_event() is not NEED_DATA:
        pass
    conn.send(df.AppendSetup(segment="s", connection_id=cid, connection_offset_ack_level=0), now=0)
    conn.data_to_send()
    return conn, cid


def _refusal(conn: object, data: bytes) -> ProtocolError | None:
    from refwire.sansio import NEED_DATA

    try:
        conn.receive_data(data, now=0)  # type: ignore[attr-defined]
        while conn.next_event() is not NEED_DATA:  # type: ignore[attr-defined]
            pass
    except ProtocolError as exc:
        return exc
    return None


SHARE = (16 << 20) // 8


def test_budget_caps_the_block_at_its_eighth_and_names_the_limit() -> None:
    """§11: at 16 MiB a block's ``length`` may be 2 MiB; one more is refused on the field."""
    conn, cid = _budget_server(16 << 20)
    assert _refusal(conn, df.BeginAppendBlock(connection_id=cid, connection_offset=0, length=SHARE).encode()) is None
    conn, cid = _budget_server(16 << 20)
    exc = _refusal(conn, df.BeginAppendBlock(connection_id=cid, connection_offset=0, length=SHARE + 1).encode())
    assert exc is not None and exc.field == "length" and exc.frame == "BeginAppendBlock"
    assert f"length {SHARE + 1} exceeds the {SHARE} bytes the limit max_connection_memory=16777216" in str(exc)


def test_budget_caps_a_frame_at_its_eighth_from_its_header() -> None:
    """§11: a frame of 2 MiB is taken (a block's Event), one byte more refused at its header."""
    conn, cid = _budget_server(16 << 20)
    event = df.Event(data=b"e" * (SHARE - HEADER)).encode()
    begin = df.BeginAppendBlock(connection_id=cid, connection_offset=0, length=len(event)).encode()
    assert len(event) == SHARE and _refusal(conn, begin + event) is None
    conn, cid = _budget_server(16 << 20)
    start = len(df.SetupAppend(connection_id=cid, segment="s").encode())
    exc = _refusal(conn, df.KeepAlive(data=b"k" * (SHARE - HEADER + 1)).encode()[:HEADER])
    assert exc is not None and exc.field == "length" and exc.offset == start + 4
    assert f"exceeds the {SHARE} bytes the limit max_connection_memory=16777216" in str(exc)


def test_budget_caps_a_partial_message_at_its_eighth() -> None:
    """§11: a partial message announcing 2 MiB is taken; one announcing a byte more is refused
    as soon as its length is in (on the part, with the inner location)."""
    conn, _cid = _budget_server(16 << 20)
    assert _refusal(conn, PartialMessage(part=int(Part.BEGIN), data=_head(df.KeepAlive.TYPE, SHARE - HEADER)).encode()) is None
    conn, _cid = _budget_server(16 << 20)
    exc = _refusal(conn, PartialMessage(part=int(Part.BEGIN), data=_head(df.KeepAlive.TYPE, SHARE - HEADER + 1)).encode())
    assert isinstance(exc, ProtocolError) and "max_connection_memory=16777216" in str(exc)


def test_the_default_budget_leaves_the_draft_limits_in_force() -> None:
    """At 256 MiB the eighth (32 MiB) is above every draft limit (16 MiB): nothing changes."""
    from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, ServerConnection

    assert ServerConnection(DEFAULT_LIMITS).limits == DEFAULT_LIMITS
