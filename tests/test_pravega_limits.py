"""Pravega codec edges (specs/pravega/README.md §1-§4, §9): the frame length at
the limit and one past it (whole and split), negative lengths, and the field and
stream offset of every refusal; optional and trailing fields; the fast decoders
agreeing with the generic one at their edges; counts and lengths that lie.
"""

from __future__ import annotations

import struct
import uuid

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError
from refwire.pravega import frames as pf
from refwire.pravega import frames_codec as fc
from refwire.pravega.draft2017 import frames as draft
from refwire.pravega.frames_codec import (
    BOOL,
    I32,
    I64,
    UTF,
    CommandDecoder,
    Dialect,
    decode_command,
    encode_command,
    f,
    split_frames,
)
from refwire.pravega.writer import MAX_BLOCK, MAX_EVENT_SIZE, PendingEvent, WriterSession
from refwire.wire import Limits

WID = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)


def hdr(code: int, n: int) -> bytes:
    return struct.pack(">ii", code, n)


def utf(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">H", len(b)) + b


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def drain(dec: CommandDecoder, data: bytes, step: int) -> list[pf.Command]:
    out: list[pf.Command] = []
    for i in range(0, len(data), step):
        dec.feed(data[i : i + step])
        out += list(dec.commands())
    return out


def refused(dec: CommandDecoder, data: bytes, step: int) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        drain(dec, data, step)
    return info.value


PRE = pf.KeepAlive().encode()  # 8 bytes before the frame under test


@pytest.mark.parametrize("step", [1, 5, 8, 10_000])
def test_frame_length_at_the_limit_and_one_past(step: int) -> None:
    frame = pf.AppendBlock(writer_id=WID, data=b"d" * 76).encode()  # 8 + 16 + 76 = 100
    assert len(frame) == 100
    got = drain(CommandDecoder(Limits(max_frame_size=100)), PRE + frame, step)
    assert got == [pf.KeepAlive(), pf.AppendBlock(writer_id=WID, data=b"d" * 76)]
    e = refused(CommandDecoder(Limits(max_frame_size=99)), PRE + frame, step)
    assert isinstance(e, LimitExceeded)
    assert (e.frame, e.field, e.offset) == ("AppendBlock", "length", 12)
    assert "exceeds the limit max_frame_size-8=91" in e.reason
    e = refused(CommandDecoder(Limits(max_frame_size=99)), PRE + hdr(12345, 92), step)
    assert (e.frame, e.offset) == ("type 12345", 12)


@pytest.mark.parametrize("step", [1, 10_000])
def test_negative_frame_length(step: int) -> None:
    e = refused(CommandDecoder(), PRE + hdr(100, -1), step)
    assert not isinstance(e, LimitExceeded)
    assert (e.frame, e.field, e.offset) == ("KeepAlive", "length", 12) and "negative frame length -1" in e.reason


def test_offsets_advance_per_frame_and_name_the_pending_frame() -> None:
    dec = CommandDecoder()
    dec.feed(PRE + PRE + hdr(1, 100)[:7])
    assert list(dec.commands()) == [pf.KeepAlive(), pf.KeepAlive()]
    assert dec.offset == 16 and dec.buffered == 7 and dec.pending_frame_name() is None
    dec.feed(b"d")
    assert dec.pending_frame_name() == "SetupAppend"
    dec2 = CommandDecoder()
    dec2.feed(hdr(999, 0))
    assert dec2.pending_frame_name() is None
    dec3 = CommandDecoder()
    dec3.feed(hdr(-127, 8) + i32(17) + i32(5))
    assert dec3.next_command() == pf.Hello(high_version=17, low_version=5) and dec3.offset == 16
    assert dec3.next_command() is None


def test_unknown_and_inner_commands_at_the_top_level() -> None:
    e = refused(CommandDecoder(), PRE + hdr(4242, 0), 100)
    assert (e.frame, e.field, e.offset) == (None, "type", 8) and "unknown wire command: type 4242" in e.reason
    e = refused(CommandDecoder(), PRE + pf.encode_event(b"x"), 100)
    assert (e.frame, e.field, e.offset) == ("Event", "type", 8) and "Event is not a top-level command" in e.reason
    e = refused(CommandDecoder(), PRE + pf.PartialEvent(data=b"x").encode(), 100)
    assert e.frame == "PartialEvent"
    # Padding (-1) is allowed at the top level and takes its length from the payload
    assert drain(CommandDecoder(), hdr(-1, 3) + b"\x00\x00\x00", 1) == [pf.Padding(length=3)]
    assert drain(CommandDecoder(allow_inner=True), pf.encode_event(b"xy"), 1) == [pf.Event(data=b"xy")]


def test_optional_fields_and_trailing_bytes() -> None:
    body = WID.bytes + i64(5)
    assert decode_command(7, body) == pf.DataAppended(writer_id=WID, event_number=5)
    assert decode_command(7, body + i64(4)).previous_event_number == 4
    # 7 bytes are not an optional i64: it takes its default; the bytes are ignored
    assert decode_command(7, body + b"\x00" * 7).previous_event_number == -1
    # bytes after the last field are ignored by today's Pravega, an error for a strict dialect
    full = pf.KeepAlive().encode()[8:] + b"zz"
    assert decode_command(100, full) == pf.KeepAlive()
    strict = Dialect("strict", {100: pf.KeepAlive}, strict_trailing=True)
    with pytest.raises(LocalProtocolError) as info:
        decode_command(100, b"zz", base=50, dialect=strict)
    assert (info.value.field, info.value.offset, info.value.reason) == (
        "(trailing)",
        50,
        "2 bytes after the last field of KeepAlive",
    )
    # a missing mandatory field: named at the offset where it should start
    with pytest.raises(LocalProtocolError) as info:
        decode_command(7, WID.bytes + b"\x00" * 7, base=100)
    assert (info.value.field, info.value.offset) == ("event_number", 116)


def test_prefixed_fields_are_located_at_their_prefix() -> None:
    # SetupAppend: request_id, writer_id, segment (UTF claiming 10 bytes, 3 present)
    body = i64(1) + WID.bytes + struct.pack(">H", 10) + b"abc"
    with pytest.raises(LocalProtocolError) as info:
        decode_command(1, body, base=1000)
    assert (info.value.frame, info.value.field, info.value.offset) == ("SetupAppend", "segment", 1024)
    # AppendBlockEnd's data blob claiming more than is there
    body = WID.bytes + i32(0) + i32(50) + b"x" * 10
    with pytest.raises(LocalProtocolError) as info:
        decode_command(4, body, base=1000)
    assert (info.value.field, info.value.offset) == ("data", 1020)
    # ... while a negative data length is read as empty (Java: "if (dataLength > 0)")
    body = WID.bytes + i32(0) + i32(-5) + i32(0) + i64(9)
    cmd = decode_command(4, body)
    assert isinstance(cmd, pf.AppendBlockEnd) and cmd.data == b"" and cmd.last_event_number == 9
    # ConditionalAppend's event must be an Event frame (type 0)
    body = WID.bytes + i64(1) + i64(2) + hdr(3, 1) + b"e"
    with pytest.raises(LocalProtocolError) as info:
        decode_command(5, body, base=1000)
    assert (info.value.field, info.value.offset) == ("event", 1032) and "event type must be 0, got 3" in info.value.reason
    ok = decode_command(5, WID.bytes + i64(1) + i64(2) + hdr(0, 1) + b"e")
    assert isinstance(ok, pf.ConditionalAppend) and ok.event == b"e" and ok.request_id == -1


def test_counts_that_lie() -> None:
    base = i64(1) + utf("seg")
    # TableEntriesUpdated: LONGS count of 2 needs 16 bytes
    assert decode_command(75, i64(1) + i32(2) + i64(3) + i64(4)).updated_versions == (3, 4)  # type: ignore[attr-defined]
    with pytest.raises(LocalProtocolError) as info:
        decode_command(75, i64(1) + i32(2) + i64(3) + b"\x00" * 7, base=10)
    assert (info.value.field, info.value.offset) == (
        "updated_versions.count",
        18,
    ) and "count 2 needs at least 16 bytes, 15 left" in info.value.reason
    with pytest.raises(LocalProtocolError) as info:
        decode_command(75, i64(1) + i32(-1), base=10)
    assert (info.value.field, info.value.offset) == ("updated_versions.count", 18) and "negative count -1" in info.value.reason
    # TableRead ENTRIES: each entry takes at least 16 bytes
    with pytest.raises(LocalProtocolError, match="count 1 needs at least 16 bytes, 15 left"):
        decode_command(79, base + i32(1) + b"\x00" * 15)
    empty_key_entry = i32(4) + i32(0) + i32(4) + i32(0)
    cmd = decode_command(79, base + i32(1) + empty_key_entry)
    assert isinstance(cmd, pf.TableRead)
    assert cmd.entries == (pf.TableEntry(pf.TableKey(b"", pf.NO_VERSION), b""),)
    # ReadTable KEYS, one key with a version
    key = i32(4 + 2 + 8) + i32(2) + b"kk" + i64(7)
    cmd = decode_command(78, base + utf("") + i32(1) + key)
    assert isinstance(cmd, pf.ReadTable) and cmd.keys == (pf.TableKey(b"kk", 7),)
    assert (
        pf.ReadTable(request_id=1, segment="seg", delegation_token="", keys=(pf.TableKey(b"kk", 7),)).encode()[8:]
        == base + utf("") + i32(1) + key
    )


def test_error_codes_normalize_as_java() -> None:
    for code, want in ((1, 1), (0, 0), (-1, -1), (2, 0), (-2, 0)):
        cmd = decode_command(60, i64(1) + utf("") + i32(code))
        assert isinstance(cmd, pf.AuthTokenCheckFailed) and cmd.error_code == want
    for code, want in ((0, 0), (-1, -1), (1, -1), (7, -1)):
        cmd = decode_command(61, i64(1) + utf("s") + utf("m") + i32(code))
        assert isinstance(cmd, pf.ErrorMessage) and cmd.error_code == want


def test_encode_limits() -> None:
    cmd = pf.AppendBlock(writer_id=WID, data=b"d" * 76)
    assert len(encode_command(cmd, max_frame_size=100)) == 100
    with pytest.raises(LocalProtocolError) as info:
        encode_command(cmd, max_frame_size=99)
    assert (info.value.frame, info.value.field) == ("AppendBlock", "length") and "frame of 100 bytes" in info.value.reason
    ok = pf.SetupAppend(request_id=1, writer_id=WID, segment="s" * 0xFFFF)
    assert len(ok.encode()) == 8 + 8 + 16 + 2 + 0xFFFF + 2
    with pytest.raises(LocalProtocolError) as info:
        pf.SetupAppend(request_id=1, writer_id=WID, segment="s" * 0x10000).encode()
    assert (info.value.frame, info.value.field) == ("SetupAppend", "segment") and "65536 bytes" in info.value.reason
    with pytest.raises(LocalProtocolError) as info:
        pf.Hello(high_version=2**31).encode()
    assert (info.value.frame, info.value.field) == ("Hello", "high_version")
    assert pf.Padding(length=3).encode() == hdr(-1, 3) + b"\x00" * 3
    assert pf.encode_event(b"ab") == hdr(0, 2) + b"ab"


def test_split_frames() -> None:
    data = pf.encode_event(b"a") + pf.Padding(length=2).encode()
    assert split_frames(data) == [pf.Event(data=b"a"), pf.Padding(length=2)]
    with pytest.raises(LocalProtocolError) as info:
        split_frames(data[:-1], base=100)
    assert info.value.offset == 100 + len(pf.encode_event(b"a")) and "truncated frame" in info.value.reason


@pytest.mark.parametrize(
    "cmd",
    [
        pf.AppendBlockEnd(writer_id=WID, size_of_whole_events=3, data=b"abc", num_events=1, last_event_number=9, request_id=4),
        pf.AppendBlockEnd(writer_id=WID, size_of_whole_events=0, data=b"", num_events=0, last_event_number=-1),
        pf.AppendBlock(writer_id=WID, data=b""),
        pf.AppendBlock(writer_id=WID, data=b"xyz"),
        pf.DataAppended(writer_id=WID, event_number=5, previous_event_number=4, request_id=3, current_segment_write_offset=99),
        pf.SegmentRead(segment="s/é", offset=5, at_tail=True, end_of_segment=False, data=b"dd", request_id=7),
        pf.SegmentRead(segment="", offset=0, at_tail=False, end_of_segment=True, data=b"", request_id=-1),
        # an ASCII name followed by ASCII-looking bytes: a string read one byte too long would still look valid
        pf.SegmentRead(segment="abc", offset=0x4142434445464748, at_tail=False, end_of_segment=False, data=b"zz", request_id=1),
    ],
    ids=lambda c: type(c).__name__,
)
def test_fast_decoders_agree_with_the_layout(cmd: pf.Command) -> None:
    """The speed path's hand-written decoders (``fast=True``) against the layout
    interpreter (``fast=False``): the same command, and for every truncation the
    same command or the same error."""
    wire = cmd.encode()
    code, n = struct.unpack_from(">ii", wire)
    for fast in (True, False):
        assert decode_command(code, wire, start=8, end=8 + n, fast=fast) == cmd
        assert decode_command(code, wire[8:], fast=fast) == cmd
    # every truncation is refused or read with defaults, never misread as something else
    for cut in range(8, len(wire)):
        outcomes = []
        for fast in (True, False):
            try:
                got: object = decode_command(code, wire[8:cut], fast=fast)
            except LocalProtocolError as exc:
                got = (type(exc), str(exc), exc.frame, exc.field, exc.offset)
            outcomes.append(got)
        assert outcomes[0] == outcomes[1]
        assert not isinstance(outcomes[0], pf.Command) or type(outcomes[0]) is type(cmd)


# --------------------------------------------------------------------------- WriterSession (pravega/writer.py)


SEG = "scope/stream/0.#epoch.0"


def _ready(session: WriterSession, last: int = pf.NULL_VALUE) -> WriterSession:
    session.setup(5)
    session.on_append_setup(pf.AppendSetup(request_id=5, segment=SEG, writer_id=WID, last_event_number=last))
    return session


def test_writer_event_size_at_the_line() -> None:
    s = WriterSession(SEG, WID)
    assert s.add(b"x" * MAX_EVENT_SIZE) == 1
    with pytest.raises(LocalProtocolError) as info:
        s.add(b"x" * (MAX_EVENT_SIZE + 1))
    e = info.value
    assert (e.protocol, e.frame, e.field) == ("pravega", "Event", "data")
    assert e.reason == f"event of {MAX_EVENT_SIZE + 1} bytes is larger than {MAX_EVENT_SIZE}"
    assert s.next_number == 2 and s.unacked == 1
    assert (MAX_EVENT_SIZE, MAX_BLOCK) == (8 * 1024 * 1024, 2 * 256 * 1024 - 1024)


def test_writer_initial_state_and_setup() -> None:
    s = WriterSession(SEG, WID, token="tok")
    assert (s.style, s.max_batch_bytes, s.max_batch_events, s.next_number, s.ready, s.last_acked, s.request_id) == (
        "rust", MAX_BLOCK, 499, 1, False, pf.NULL_VALUE, 0,
    )  # fmt: skip
    assert s.java_block_sizes is None and s.unacked == 0
    assert s.setup(9) == pf.SetupAppend(request_id=9, writer_id=WID, segment=SEG, delegation_token="tok")
    assert s.request_id == 9 and not s.ready
    s.add(b"a")
    assert s.pending[0] == PendingEvent(1, pf.encode_event(b"a"))


def test_writer_rust_batches_at_the_line() -> None:
    s = _ready(WriterSession(SEG, WID, max_batch_events=2, max_batch_bytes=27))
    for p in (b"a", b"b", b"c" * 10, b"d"):
        s.add(p)
    dec = CommandDecoder()
    dec.feed(s.take())
    cmds = list(dec.commands())
    ev = [pf.encode_event(p) for p in (b"a", b"b", b"c" * 10, b"d")]
    assert cmds == [
        pf.AppendBlockEnd(
            writer_id=WID, size_of_whole_events=18, data=ev[0] + ev[1], num_events=2, last_event_number=2, request_id=5
        ),
        pf.AppendBlockEnd(
            writer_id=WID, size_of_whole_events=27, data=ev[2] + ev[3], num_events=2, last_event_number=4, request_id=5
        ),
    ]
    # one byte less: the second batch no longer holds both
    s = _ready(WriterSession(SEG, WID, max_batch_events=5, max_batch_bytes=26))
    for p in (b"c" * 10, b"d"):
        s.add(p)
    dec = CommandDecoder()
    dec.feed(s.take())
    assert [c.num_events for c in dec.commands()] == [1, 1]  # type: ignore[attr-defined]
    # an event larger than the batch still goes, alone
    s = _ready(WriterSession(SEG, WID, max_batch_bytes=1))
    s.add(b"big")
    dec = CommandDecoder()
    dec.feed(s.take())
    assert [c.num_events for c in dec.commands()] == [1]  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    rounds=st.lists(st.lists(st.integers(0, 60), max_size=12), min_size=1, max_size=4),
    max_events=st.integers(1, 6),
    max_bytes=st.integers(0, 200),
)
def test_writer_rust_batches_are_greedy_within_both_bounds(rounds: list[list[int]], max_events: int, max_bytes: int) -> None:
    """Each take() sends only the events not yet sent, in order, as AppendBlockEnds
    that each hold 1..max_events events, more than one only while they fit in
    max_bytes, and as many as the bounds allow (the next event did not fit)."""
    s = _ready(WriterSession(SEG, WID, max_batch_events=max_events, max_batch_bytes=max_bytes))
    sent: list[int] = []
    for sizes in rounds:
        first = s.next_number
        for n in sizes:
            s.add(b"e" * n)
        data = s.take()
        dec = CommandDecoder()
        dec.feed(data)
        blocks = list(dec.commands())
        assert bool(blocks) == bool(sizes) and (data == b"") == (not sizes)
        frames = [8 + n for n in sizes]
        i = 0
        for b in blocks:
            assert isinstance(b, pf.AppendBlockEnd)
            k = b.num_events
            assert 1 <= k <= max_events and b.data == b"".join(pf.encode_event(b"e" * n) for n in sizes[i : i + k])
            assert k == 1 or sum(frames[i : i + k]) <= max_bytes
            if i + k < len(sizes):  # greedy: the next event was left out for a bound
                assert k == max_events or sum(frames[i : i + k + 1]) > max_bytes
            sent += range(first + i, first + i + k)
            assert b.last_event_number == first + i + k - 1
            i += k
        assert i == len(sizes)
    assert sent == list(range(1, s.next_number)) and s.take() == b""


def test_writer_batch_bounds_are_checked() -> None:
    assert WriterSession(SEG, WID, max_batch_events=1).max_batch_events == 1
    with pytest.raises(ValueError, match="max_batch_events must be at least 1, not 0"):
        WriterSession(SEG, WID, max_batch_events=0)


@pytest.mark.parametrize("sizes", [[1], [0], [5, 1, 30], [MAX_BLOCK - 8]])
def test_writer_rust_bytes_are_the_generic_encoders(sizes: list[int]) -> None:
    s = _ready(WriterSession(SEG, WID, max_batch_events=3))
    for n in sizes:
        s.add(bytes(range(256)) * (n // 256) + b"z" * (n % 256))
    frames = [pf.encode_event(p.frame[8:]) for p in s.pending]
    assert s.take() == pf.AppendBlockEnd(
        writer_id=WID,
        size_of_whole_events=sum(map(len, frames)),
        data=b"".join(frames),
        num_events=len(sizes),
        last_event_number=len(sizes),
        request_id=5,
    ).encode()


def test_writer_rust_block_past_the_frame_limit_is_refused_by_the_generic_encoder() -> None:
    s = _ready(WriterSession(SEG, WID, max_batch_bytes=1 << 25))
    s.add(b"x" * MAX_EVENT_SIZE)
    s.add(b"x" * MAX_EVENT_SIZE)  # one block of 16 MiB + 16 + 52 bytes: past MAX_WIRECOMMAND_SIZE
    with pytest.raises(LocalProtocolError) as info:
        s.take()
    assert (info.value.frame, info.value.field) == ("AppendBlockEnd", "length")


def test_writer_rust_block_of_exactly_the_frame_limit_is_sent_one_byte_more_is_refused() -> None:
    # two events whose AppendBlockEnd (52 bytes besides the data) is exactly 0x00FFFFFF bytes long
    second = pf.MAX_WIRECOMMAND_SIZE - 52 - 16 - MAX_EVENT_SIZE
    s = _ready(WriterSession(SEG, WID, max_batch_bytes=1 << 25))
    s.add(b"x" * MAX_EVENT_SIZE)
    s.add(b"y" * second)
    out = s.take()
    assert len(out) == pf.MAX_WIRECOMMAND_SIZE
    assert out[:32] == struct.pack(">ii16sii", 4, pf.MAX_WIRECOMMAND_SIZE - 8, WID.bytes, len(out) - 52, len(out) - 52)
    assert out[-20:] == struct.pack(">iqq", 2, 2, 5)
    s = _ready(WriterSession(SEG, WID, max_batch_bytes=1 << 25))
    s.add(b"x" * MAX_EVENT_SIZE)
    s.add(b"y" * (second + 1))
    with pytest.raises(LocalProtocolError) as info:
        s.take()
    assert (info.value.frame, info.value.field) == ("AppendBlockEnd", "length")
    assert info.value.reason == f"frame of {pf.MAX_WIRECOMMAND_SIZE + 1} bytes is larger than the limit of {pf.MAX_WIRECOMMAND_SIZE}"


def test_writer_java_blocks_exact() -> None:
    s = _ready(WriterSession(SEG, WID, style="java"))
    s.java_block_sizes = [20]
    for p in (b"a", b"bbbbbbbbbbbbbbbb"):
        s.add(p)
    ev1, ev2 = pf.encode_event(b"a"), pf.encode_event(b"b" * 16)
    dec = CommandDecoder()
    dec.feed(s.take())
    cmds = list(dec.commands())
    # block of 20: event 1 (9 bytes) whole, then the head of event 2 as a PartialEvent of 11 bytes
    assert cmds[0] == pf.AppendBlock(writer_id=WID, data=ev1 + pf.PartialEvent(data=ev2[:11]).encode())
    assert cmds[1] == pf.AppendBlockEnd(
        writer_id=WID, size_of_whole_events=9, data=ev2[11:], num_events=2, last_event_number=2, request_id=5
    )
    # a block that the events do not fill is closed with Padding
    s = _ready(WriterSession(SEG, WID, style="java"))
    s.java_block_sizes = [30]
    s.add(b"a")
    dec = CommandDecoder()
    dec.feed(s.take())
    blk, end = list(dec.commands())
    assert blk == pf.AppendBlock(writer_id=WID, data=ev1 + pf.Padding(length=21).encode())
    assert end == pf.AppendBlockEnd(
        writer_id=WID, size_of_whole_events=9, data=b"", num_events=1, last_event_number=1, request_id=5
    )
    # a block no larger than the first event: that event alone, unbatched
    s = _ready(WriterSession(SEG, WID, style="java"))
    s.java_block_sizes = [9]
    s.add(b"a")
    dec = CommandDecoder()
    dec.feed(s.take())
    assert list(dec.commands()) == [
        pf.AppendBlock(writer_id=WID, data=ev1),
        pf.AppendBlockEnd(writer_id=WID, size_of_whole_events=9, data=b"", num_events=1, last_event_number=1, request_id=5),
    ]
    # without block sizes the block is the whole batch: exactly filled, then Padding of 0
    s = _ready(WriterSession(SEG, WID, style="java"))
    s.add(b"a")
    s.add(b"c")
    dec = CommandDecoder()
    dec.feed(s.take())
    blk, end = list(dec.commands())
    ev3 = pf.encode_event(b"c")
    assert blk == pf.AppendBlock(writer_id=WID, data=ev1 + pf.PartialEvent(data=ev3[:9]).encode())
    assert end.data == b"" and end.num_events == 2  # type: ignore[attr-defined]


def test_writer_block_sizes_cycle() -> None:
    s = _ready(WriterSession(SEG, WID, style="java", max_batch_events=1))
    s.java_block_sizes = [9, 100]
    for p in (b"a", b"b", b"c"):
        s.add(p)
    dec = CommandDecoder()
    dec.feed(s.take())
    blocks = [c for c in dec.commands() if isinstance(c, pf.AppendBlock)]
    assert [len(b.data) for b in blocks] == [9, 100 + 8, 9]  # a batched block carries blockSize + 8 (§5.1)


def test_writer_acks_and_setup_errors() -> None:
    s = _ready(WriterSession(SEG, WID))
    for p in (b"a", b"b", b"c"):
        s.add(p)
    assert s.take()
    with pytest.raises(LocalProtocolError) as info:
        s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=4, previous_event_number=3))
    assert (info.value.frame, info.value.field, info.value.protocol) == ("DataAppended", "event_number", "pravega")
    assert "bad ack: event 4 after 3 (lowest in flight 1, last written 3)" in info.value.reason
    assert s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=3, previous_event_number=0)) == [1, 2, 3]
    assert s.last_acked == 3 and s.unacked == 0
    with pytest.raises(LocalProtocolError, match="lowest in flight None"):
        s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=4, previous_event_number=3))
    s2 = WriterSession(SEG, WID)
    s2.add(b"a")
    s2.add(b"b")
    s2.setup(1)
    with pytest.raises(LocalProtocolError) as info:
        s2.on_append_setup(pf.AppendSetup(request_id=1, segment="other", writer_id=WID, last_event_number=0))
    assert (info.value.frame, info.value.field) == ("AppendSetup", "writer_id")
    with pytest.raises(LocalProtocolError) as info:
        s2.on_append_setup(pf.AppendSetup(request_id=1, segment=SEG, writer_id=WID, last_event_number=3))
    assert info.value.field == "last_event_number" and "event 3 is stored, but only 2 were written" in info.value.reason
    s2.on_append_setup(pf.AppendSetup(request_id=1, segment=SEG, writer_id=WID, last_event_number=2))
    assert s2.unacked == 0 and s2.last_acked == 2 and s2.ready
    s2.on_append_setup(pf.AppendSetup(request_id=1, segment=SEG, writer_id=WID, last_event_number=pf.NULL_VALUE))
    assert s2.last_acked == 2
    s2.connection_lost()
    assert not s2.ready and s2.take() == b""


def test_writer_resends_after_a_partial_ack() -> None:
    s = _ready(WriterSession(SEG, WID))
    for p in (b"a", b"b", b"c"):
        s.add(p)
    s.take()
    assert s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=1, previous_event_number=pf.NULL_VALUE)) == [1]
    s.add(b"d")
    dec = CommandDecoder()
    dec.feed(s.take())
    (only,) = list(dec.commands())
    assert only.last_event_number == 4 and only.num_events == 1  # type: ignore[attr-defined]
    s.connection_lost()
    _ready(s, last=2)
    dec = CommandDecoder()
    dec.feed(s.take())
    (again,) = list(dec.commands())
    assert again.num_events == 2 and again.last_event_number == 4  # type: ignore[attr-defined]


def _blocks(s: WriterSession) -> list[pf.Command]:
    dec = CommandDecoder()
    dec.feed(s.take())
    return list(dec.commands())


def test_writer_batch_limits_count_every_event() -> None:
    s = _ready(WriterSession(SEG, WID, max_batch_events=2))
    for p in (b"a", b"b", b"c"):
        s.add(p)
    assert [c.num_events for c in _blocks(s)] == [2, 1]  # type: ignore[attr-defined]
    s = _ready(WriterSession(SEG, WID, max_batch_bytes=20))
    for p in (b"a", b"b", b"c"):  # 9 bytes each: 18 fit, 27 do not
        s.add(p)
    assert [c.num_events for c in _blocks(s)] == [2, 1]  # type: ignore[attr-defined]
    assert WriterSession(SEG, WID).setup(1).delegation_token == ""


def test_writer_sends_new_events_after_everything_was_acked() -> None:
    s = _ready(WriterSession(SEG, WID))
    s.add(b"a")
    s.add(b"b")
    s.take()
    assert s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=1, previous_event_number=pf.NULL_VALUE)) == [1]
    assert s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=2, previous_event_number=1)) == [2]
    s.add(b"c")
    (blk,) = _blocks(s)
    assert blk.last_event_number == 3 and blk.num_events == 1  # type: ignore[attr-defined]


def test_writer_refuses_an_ack_that_does_not_move() -> None:
    s = _ready(WriterSession(SEG, WID))
    for p in (b"a", b"b", b"c"):
        s.add(p)
    s.take()
    s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=2, previous_event_number=pf.NULL_VALUE))
    with pytest.raises(LocalProtocolError):
        s.on_data_appended(pf.DataAppended(writer_id=WID, event_number=2, previous_event_number=2))
    assert s.unacked == 1


def test_writer_block_sizes_cycle_forward() -> None:
    s = _ready(WriterSession(SEG, WID, style="java", max_batch_events=1))
    s.java_block_sizes = [9, 100, 50]
    for p in (b"a", b"b", b"c", b"d"):
        s.add(p)
    blocks = [c for c in _blocks(s) if isinstance(c, pf.AppendBlock)]
    assert [len(b.data) for b in blocks] == [9, 108, 58, 9]


def test_writer_setup_errors_in_full() -> None:
    s = WriterSession(SEG, WID)
    s.add(b"a")
    s.setup(1)
    with pytest.raises(LocalProtocolError) as info:
        s.on_append_setup(pf.AppendSetup(request_id=1, segment=SEG, writer_id=uuid.UUID(int=1), last_event_number=0))
    e = info.value
    assert (e.reason, e.protocol, e.frame, e.field) == (
        "AppendSetup for another writer or segment",
        "pravega",
        "AppendSetup",
        "writer_id",
    )
    with pytest.raises(LocalProtocolError) as info:
        s.on_append_setup(pf.AppendSetup(request_id=1, segment=SEG, writer_id=WID, last_event_number=2))
    e = info.value
    assert (e.reason, e.protocol, e.frame, e.field) == (
        "server says event 2 is stored, but only 1 were written", "pravega", "AppendSetup", "last_event_number"
    )  # fmt: skip


# --------------------------------------------------------------------------- frames_codec: what the first run left


SAMPLES: list[pf.Command] = [
    pf.SetupAppend(request_id=1, writer_id=WID, segment="seg", delegation_token="tok"),
    pf.AppendBlockEnd(writer_id=WID, size_of_whole_events=1, data=b"ab", num_events=1, last_event_number=2, request_id=3),
    pf.ConditionalAppend(writer_id=WID, event_number=1, expected_offset=2, event=b"ev", request_id=4),
    pf.SegmentRead(segment="s", offset=5, at_tail=True, end_of_segment=False, data=b"dd", request_id=7),
    pf.CreateSegment(request_id=1, segment="s", target_rate=2, scale_type=1),
    pf.TableEntriesUpdated(request_id=1, updated_versions=(3, 4)),
    pf.ReadTable(request_id=1, segment="s", delegation_token="", keys=(pf.TableKey(b"k", 9), pf.TableKey(b""))),
    pf.TableRead(request_id=1, segment="s", entries=(pf.TableEntry(pf.TableKey(b"k", 9), b"v"),)),
    pf.DeleteTableSegment(request_id=1, segment="s", must_be_empty=True),
]


@pytest.mark.parametrize("cmd", SAMPLES, ids=lambda c: type(c).__name__)
def test_every_truncation_names_a_field_of_the_command(cmd: pf.Command) -> None:
    wire = cmd.encode()
    code = type(cmd).TYPE
    names = [n for n, _k, _o in type(cmd).LAYOUT]
    for cut in range(8, len(wire)):
        try:
            decode_command(code, wire[8:cut], base=8)
        except LocalProtocolError as e:
            assert (e.protocol, e.frame) == ("pravega", type(cmd).NAME)
            assert e.field is not None and any(e.field == n or e.field.startswith((n + ".", n + "[")) for n in names), e.field
            assert 8 <= e.offset <= cut  # type: ignore[operator]


def test_opt_blob_edges() -> None:
    head = i64(1) + utf("s") + utf("") + i32(10)
    assert decode_command(83, head + b"\x00\x00\x00").continuation_token == b""  # type: ignore[attr-defined]
    with pytest.raises(LocalProtocolError) as info:
        decode_command(83, head + i32(5) + b"abcd")
    assert info.value.field == "continuation_token"
    assert decode_command(83, head + i32(-3)).continuation_token == b""  # type: ignore[attr-defined]
    assert decode_command(83, head + i32(2) + b"ct").continuation_token == b"ct"  # type: ignore[attr-defined]


def test_negative_lengths_inside_entries_and_blobs() -> None:
    with pytest.raises(LocalProtocolError):
        decode_command(79, i64(1) + utf("s") + i32(1) + i32(4) + i32(0) + i32(4) + i32(-1))
    with pytest.raises(LocalProtocolError):
        decode_command(6, i64(1) + WID.bytes + i32(0) + i32(-1))  # a BLOB32 outside AppendBlockEnd


def test_errors_name_the_dialect() -> None:
    with pytest.raises(LocalProtocolError) as info:
        draft.SetupAppend(connection_id=WID, segment="s" * 0x10000).encode()
    assert info.value.protocol == "pravega-draft-2017"
    with pytest.raises(LocalProtocolError) as info:
        draft.ReadSegment(segment="s", offset=2**63, suggested_length=1).encode()
    assert info.value.protocol == "pravega-draft-2017"
    with pytest.raises(LocalProtocolError) as info:
        pf.SetupAppend(request_id=1, writer_id=WID, segment="s" * 0x10000).encode()
    assert info.value.protocol == "pravega"
    with pytest.raises(LocalProtocolError) as info:
        encode_command(pf.KeepAlive(), max_frame_size=7)
    assert info.value.protocol == "pravega"
    with pytest.raises(LocalProtocolError) as info:
        decode_command(4242, b"")
    assert (info.value.protocol, info.value.offset) == ("pravega", -8)
    with pytest.raises(LocalProtocolError) as info:
        decode_command(5, b"", dialect=draft.DRAFT)
    assert info.value.protocol == "pravega-draft-2017"
    with pytest.raises(LocalProtocolError) as info:
        split_frames(pf.KeepAlive().encode()[:5])
    e = info.value
    assert (e.reason, e.protocol, e.offset) == ("truncated frame at the end of the buffer", "pravega", 0)
    for data in (hdr(100, -1), hdr(100, 2**24)):
        with pytest.raises(LocalProtocolError) as info:
            drain(CommandDecoder(), data, 100)
        assert info.value.protocol == "pravega"
    dec = CommandDecoder(dialect=draft.DRAFT)
    dec.feed(draft.DataAppended(connection_id=WID, ack_level=3).encode())
    assert list(dec.commands()) == [draft.DataAppended(connection_id=WID, ack_level=3)]


def test_a_new_dialect_registers_its_commands() -> None:
    d = Dialect("test-proto", {})

    @d.command(9, "reply")
    @attrs.frozen(kw_only=True)
    class Probe(pf.Command):
        a: int = f(I64)
        s: str = f(UTF, default="dflt")
        b: bool = f(BOOL, optional=True)
        c: int = f(I32, default=5, optional=-1)

    assert (Probe.TYPE, Probe.NAME, Probe.DIRECTION, Probe.PROTOCOL) == (9, "Probe", "reply", "test-proto")
    assert Probe.LAYOUT == (("a", I64, fc._NO_DEFAULT), ("s", UTF, fc._NO_DEFAULT), ("b", BOOL, True), ("c", I32, -1))
    assert d.commands == {9: Probe}
    p = Probe(a=1)
    assert (p.s, p.b, p.c) == ("dflt", True, 5)
    assert decode_command(9, i64(1) + utf("x"), dialect=d) == Probe(a=1, s="x", b=True, c=-1)
    assert decode_command(9, p.encode()[8:], dialect=d) == p
    with pytest.raises(ValueError, match="type code 9 registered twice"):
        d.command(9, "reply")(Probe)
    code = 31_999
    try:
        cls = fc.command(code, "both")(attrs.frozen(kw_only=True)(type("Probe2", (pf.Command,), {"__annotations__": {}})))
        assert pf.COMMANDS[code] is cls and cls.DIRECTION == "both" and cls.PROTOCOL == "pravega"
    finally:
        pf.COMMANDS.pop(code, None)


def test_request_id_of() -> None:
    assert pf.request_id_of(pf.Hello()) == 0
    assert pf.request_id_of(pf.KeepAlive()) == -1
    assert pf.request_id_of(pf.AppendBlock(writer_id=WID)) == -1
    assert pf.request_id_of(pf.SetupAppend(request_id=7, writer_id=WID, segment="s")) == 7
