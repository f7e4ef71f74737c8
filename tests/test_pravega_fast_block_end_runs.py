"""AppendBlockEnds decoded in runs against frame by frame (specs/pravega/README.md §5.1, §5.3, §5.4).

``CommandDecoder.block_ends`` decodes the complete regular AppendBlockEnds at the
head of the buffer in columns without consuming them; ``ServerConnection``
delivers such a run one :class:`Append` per ``next_event``, checking each
against the writer's records as they are then, and consuming its frame only
then.  The oracles: ``next_command`` alone (the decoder) and the machine's
general path (built with ``fast=False``), fed the same streams split anyhow, with
the store's outcomes applied between the events.  Runs are the speed path's
(``refwire.pravega._fast_frames``, ``_fast_connection``): the decoders and
machines under test select it with ``fast=True``, the oracles the plain path with
``fast=False``, so these tests mean the same under ``REFWIRE_REFERENCE=1``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pravega_block_end_runs import HDR, SMALL, W3, block_end_frame, block_end_session, raw_block_end
from support.pravega_machines import SEG, W2, Harness, W, block_end, ready, where

from refwire.errors import ProtocolError
from refwire.pravega.frames import AppendBlockEnd, CommandDecoder, Hello, KeepAlive
from refwire.pravega.frames_codec import MAX_RUN, MAX_RUN_BYTES, BlockEndRun
from refwire.sansio import NEED_DATA
from refwire.wire import Limits


@st.composite
def _streams(draw: st.DrawFn) -> tuple[Limits | None, list[bytes], list[int]]:
    raw = b"".join(draw(st.lists(block_end_frame([W, W2]), max_size=10)))
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    return draw(st.sampled_from([None, SMALL])), parts, draw(st.lists(st.integers(2, 5), min_size=1, max_size=5))


def _decode(limits: Limits | None, parts: Sequence[bytes], run_sizes: list[int] | None) -> list[object]:
    fast = run_sizes is not None  # the oracle: next_command alone, on the plain path
    dec = CommandDecoder(fast=fast) if limits is None else CommandDecoder(limits, fast=fast)
    got: list[object] = []
    k = 0
    try:
        for part in parts:
            dec.feed(part)
            while True:
                if run_sizes is not None:
                    run = dec.block_ends(run_sizes[k % len(run_sizes)])
                    k += 1
                    if run is not None:
                        assert 0 < len(run) <= run_sizes[(k - 1) % len(run_sizes)]
                        before = (dec.offset, dec.buffered)
                        cmds = run.commands()
                        assert (dec.offset, dec.buffered) == before  # decoded ahead, not consumed
                        dec.consume(sum(run.frame_sizes))
                        got.extend(cmds)
                        continue
                cmd = dec.next_command()
                if cmd is None:
                    break
                got.append(cmd)
    except ProtocolError as e:
        got.append(("error", type(e), str(e), e.frame, e.field, e.offset))
    got.append(("state", dec.offset, dec.buffered))
    return got


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_runs_decode_as_next_command_does(case: tuple[Limits | None, list[bytes], list[int]]) -> None:
    limits, parts, sizes = case
    assert _decode(limits, parts, sizes) == _decode(limits, parts, None)


def test_a_run_holds_regular_block_ends_and_stops_before_the_rest() -> None:
    regular = [block_end(0, b"e%d" % i, 1, i, rid=i) for i in (1, 2)]
    short = raw_block_end(W2, 5, b"xy", struct.pack(">iq", 1, 3))
    dec = CommandDecoder(fast=True)
    dec.feed(b"".join([*regular, short, KeepAlive().encode(), regular[0]]))
    run = dec.block_ends()
    assert run is not None and len(run) == 3
    assert run.writer_ids == [W.bytes, W.bytes, W2.bytes] and run.request_ids == [1, 2, -1]
    assert run.data == [b"e1", b"e2", b"xy"] and run.sizes == [0, 0, 5] and run.num_events == [1, 1, 1]
    assert run.last_event_numbers == [1, 2, 3] and run.frame_sizes == [len(f) for f in [*regular, short]]
    assert run.commands()[2] == AppendBlockEnd(
        writer_id=W2, size_of_whole_events=5, data=b"xy", num_events=1, last_event_number=3, request_id=-1
    )
    assert dec.offset == 0  # nothing consumed yet
    dec.consume(sum(run.frame_sizes))
    assert dec.block_ends() is None and dec.next_command() == KeepAlive()
    assert dec.block_ends() is None  # a lone AppendBlockEnd: next_command's
    assert dec.next_command() == AppendBlockEnd(
        writer_id=W, size_of_whole_events=0, data=b"e1", num_events=1, last_event_number=1, request_id=1
    )


def test_a_run_holds_two_frames_at_least() -> None:
    dec = CommandDecoder(fast=True)
    dec.feed(block_end(0, b"", 1, 1))
    assert dec.block_ends() is None
    dec.feed(block_end(0, b"", 1, 2))
    run = dec.block_ends(2)
    assert run is not None and len(run) == 2
    with pytest.raises(ValueError):
        dec.block_ends(1)


def test_max_frames_at_the_line_and_one_past() -> None:
    dec = CommandDecoder(fast=True)
    dec.feed(b"".join(block_end(0, b"", 1, i) for i in range(MAX_RUN + 1)))
    run = dec.block_ends()
    assert run is not None and len(run) == MAX_RUN
    assert (run2 := dec.block_ends(MAX_RUN + 1)) is not None and len(run2) == MAX_RUN + 1


@pytest.mark.parametrize("cut", [1, 8, 40])
def test_an_incomplete_block_end_is_not_in_the_run(cut: int) -> None:
    whole = block_end(0, b"abc", 1, 1)
    dec = CommandDecoder(fast=True)
    dec.feed(whole * 2 + whole[:-cut])
    run = dec.block_ends()
    assert run is not None and len(run) == 2
    dec.feed(whole[-cut:])
    run = dec.block_ends()
    assert run is not None and len(run) == 3


def test_a_run_out_of_a_bytearray_buffer_holds_bytes() -> None:
    raw = block_end(0, b"abc", 1, 1) + block_end(0, b"defg", 1, 2)
    dec = CommandDecoder(fast=True)
    dec.feed(raw[:-2])
    dec.feed(raw[-2:-1])
    assert type(dec._buf.data) is bytearray
    dec.feed(raw[-1:])
    run = dec.block_ends()
    assert run is not None and run.data == [b"abc", b"defg"] and [type(d) for d in run.data] == [bytes, bytes]


def test_the_frame_limit_at_the_line_and_one_past() -> None:
    n = SMALL.max_frame_size - 8 - 44  # data bytes that bring the frame to exactly max_frame_size
    at = block_end(0, b"d" * n, 1, 1)
    assert len(at) == SMALL.max_frame_size
    dec = CommandDecoder(SMALL, fast=True)
    dec.feed(at * 2 + block_end(0, b"d" * (n + 1), 1, 2))
    run = dec.block_ends()
    assert run is not None and len(run) == 2
    dec.consume(sum(run.frame_sizes))
    assert dec.block_ends() is None
    with pytest.raises(ProtocolError) as exc:
        dec.next_command()
    assert (exc.value.field, exc.value.offset) == ("length", 2 * len(at) + 4)


def test_consume_refuses_more_than_is_buffered() -> None:
    dec = CommandDecoder(fast=True)
    dec.feed(KeepAlive().encode())
    with pytest.raises(ValueError):
        dec.consume(9)
    dec.consume(8)
    assert dec.offset == 8 and dec.buffered == 0


def test_only_the_current_dialect_makes_runs() -> None:
    from refwire.pravega.draft2017.frames import DRAFT

    dec = CommandDecoder(dialect=DRAFT, fast=True)
    dec.feed(block_end(0, b"abc", 1, 1))
    assert dec.block_ends() is None


def test_run_columns_must_agree() -> None:
    with pytest.raises(ValueError):
        BlockEndRun([W.bytes], [0], [b""], [1], [1], [1], [])
    run = BlockEndRun([W.bytes], [0], [b""], [1], [1], [1], [44])
    assert len(run) == 1 and "1 AppendBlockEnds" in repr(run)


# --------------------------------------------------------------------------- the server machine


def _serve(writers: list[uuid.UUID], parts: list[bytes], *, runs: bool) -> list[object]:
    h = Harness(fast=runs)  # without: the general path, every frame through next_command and _on_command
    assert h.feed(Hello().encode()) != []
    for w in writers:
        h.setup(w)
    seen: list[object] = []
    for part in parts:
        replies = h.feed(part)
        seen.append([attrs.asdict(r) for r in replies])
        err = h.error
        seen.append(None if err is None else (type(err), str(err), err.frame, err.field, err.offset))
        seen.append((h.conn.state, h.conn._decoder.offset, h.conn._decoder.buffered, sorted(h.conn.transitions_seen)))
        seen.append({w: attrs.asdict(s) if (s := h.conn.writer_state(SEG, w)) else None for w in (W, W2, W3)})
    seen.append(h.data)
    return seen


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_end_session())
def test_the_server_serves_runs_as_its_general_path_does(case: tuple[list[uuid.UUID], list[bytes]]) -> None:
    writers, parts = case
    assert _serve(writers, parts, runs=True) == _serve(writers, parts, runs=False)


def test_a_failed_check_mid_run_leaves_the_frame_to_the_general_path() -> None:
    h = Harness(fast=True)
    h.feed(Hello().encode())
    h.setup(W)
    replies = h.feed(block_end(0, b"a", 1, 1) + block_end(0, b"b", 1, 2) + block_end(0, b"c", 1, 1))
    assert [r.event_number for r in replies] == [1, 2]
    assert h.error is not None and "last event number went backwards: 1 after 2" in str(h.error)
    assert (h.error.frame, h.error.field) == ("AppendBlockEnd", "last_event_number")
    # the field of the third frame (consumed by the general path): header 8, id and sizes 24, data 1, num 4
    assert h.error.offset == h.conn._decoder.offset - len(block_end(0, b"c", 1, 1)) + 8 + 24 + 1 + 4
    assert h.data == b"ab"


def test_a_run_goes_stale_when_the_general_path_consumes() -> None:
    h = Harness(fast=True)
    h.feed(Hello().encode())
    h.setup(W)
    conn = h.conn
    conn.receive_data(block_end(0, b"a", 1, 1) + block_end(0, b"b", 1, 2), now=0.0)
    first = conn.next_event()
    assert first.data == b"a" and conn._run_rows is not None
    fast_append, conn._fast_append = conn._fast_append, None  # the next one through the general path
    second = conn.next_event()
    assert second.data == b"b"
    conn._fast_append = fast_append
    conn.receive_data(block_end(0, b"c", 1, 3), now=0.0)
    third = conn.next_event()
    assert third.data == b"c" and third.event_number == 3  # not b"b" again from the stale run


def test_after_a_new_setup_an_event_below_the_stored_one_closes_on_the_run_path_too() -> None:
    # a new SetupAppend resets the session's event number (Java's default 0) but not the
    # writer's stored one: the run path checks both, as the general path does (§5.4)
    outcomes = []
    for runs in (True, False):
        h = Harness(fast=runs)
        h.feed(Hello().encode())
        h.setup(W)
        h.feed(b"".join(block_end(0, b"e", 1, i) for i in (1, 2, 3)))
        assert h.setup(W, rid=9).last_event_number == 3
        h.feed(block_end(0, b"x", 1, 2))
        assert h.error is not None
        outcomes.append((str(h.error), h.error.frame, h.error.offset, h.data))
    assert outcomes[0] == outcomes[1]


def test_a_delivered_append_keeps_the_run_current() -> None:
    h = Harness(fast=True)
    h.feed(Hello().encode())
    h.setup(W)
    conn = h.conn
    conn.receive_data(b"".join(block_end(0, b"%d" % i, 1, i) for i in (1, 2, 3)), now=0.0)
    run = None
    for i in (1, 2):
        assert conn.next_event().data == b"%d" % i
        run = run or conn._run_rows
        assert conn._run_rows is run and conn._run_offset == conn._decoder.offset  # decoded once, not again
    assert conn.next_event().data == b"3"
    assert conn.next_event() is NEED_DATA and conn._run_rows is None


def test_the_smallest_regular_block_end_joins_a_run() -> None:
    smallest = raw_block_end(W, 0, b"", struct.pack(">iq", 1, 1))  # 36 bytes: no data, no request id
    dec = CommandDecoder(fast=True)
    dec.feed(smallest * 2 + raw_block_end(W, 0, b"", struct.pack(">iq", 1, 2))[:-1])
    run = dec.block_ends()
    assert run is not None and run.frame_sizes == [44, 44] and run.request_ids == [-1, -1]


@pytest.mark.parametrize("past", [0, 1])
def test_a_run_holds_max_run_bytes_of_data_at_most(past: int) -> None:
    half = MAX_RUN_BYTES // 2
    dec = CommandDecoder(fast=True)
    dec.feed(block_end(0, bytes(half), 1, 1) + block_end(0, bytes(half + past), 1, 2) + block_end(0, b"", 1, 3))
    run = dec.block_ends()
    if past:
        assert run is None  # the second would pass the line: a run of one is none
        assert dec.next_command() is not None
        run = dec.block_ends()
        assert run is not None and run.last_event_numbers == [2, 3]
    else:
        assert run is not None and run.last_event_numbers == [1, 2, 3]  # exactly at the line, the third adds no data


def test_a_writer_dropped_between_two_appends_of_a_run_is_the_general_paths() -> None:
    # the store refuses the first append of a run (append_failed drops the writer state):
    # the second, already decoded ahead, must then fail as the general path fails it
    from refwire.errors import RemoteProtocolError
    from refwire.pravega.frames import SegmentIsSealed

    outcomes = []
    for fast in (True, False):
        s = ready(fast=fast)
        s.receive_data(block_end(0, b"a", 1, 1) + block_end(0, b"b", 1, 2) + block_end(0, b"c", 1, 3), now=0.0)
        first = s.next_event()
        assert first.data == b"a"
        s.append_failed(first, SegmentIsSealed(request_id=2, segment=SEG), now=0.0)
        with pytest.raises(RemoteProtocolError) as exc:
            s.next_event()
        outcomes.append((str(exc.value), where(exc.value), s.data_to_send()))
    assert outcomes[0] == outcomes[1]
    assert "before its AppendSetup" in outcomes[0][0]


# --------------------------------------------------------------------------- the decoder around the runs


def test_commands_keeps_the_stream_offset() -> None:
    frames = [KeepAlive().encode(), block_end(0, b"abc", 1, 1), Hello().encode()]
    dec = CommandDecoder(fast=True)
    dec.feed(b"".join(frames) + frames[0][:5])
    assert len(list(dec.commands())) == 3
    assert dec.offset == sum(map(len, frames)) and dec.buffered == 5


@pytest.mark.parametrize("skip", [0, 8])
def test_peek_frame_at_the_line_and_one_short(skip: int) -> None:
    keepalive = KeepAlive().encode()  # a frame of exactly its 8-byte header
    frame = block_end(0, b"abc", 1, 1)
    dec = CommandDecoder(SMALL, fast=True)
    dec.feed(keepalive)
    dec.consume(8)  # the buffer now starts 8 bytes in, nothing buffered
    dec.feed(keepalive[:skip] + frame[:-1])
    assert dec.peek_frame(skip=skip) is None  # one byte short
    dec.feed(frame[-1:])
    got = dec.peek_frame(skip=skip)
    assert got is not None
    code, data, start, end = got
    assert (code, bytes(data[start - 8 : end])) == (4, frame) and end == len(data)
    if skip:
        k = dec.peek_frame()
        assert k is not None and (k[0], k[2], k[3]) == (100, k[2], k[2])  # the KeepAlive: 8 bytes, empty payload


def test_peek_frame_takes_a_header_only_frame_alone_in_the_buffer() -> None:
    dec = CommandDecoder(fast=True)
    dec.feed(KeepAlive().encode())
    got = dec.peek_frame()
    assert got is not None and (got[0], got[2], got[3]) == (100, 8, 8)


@pytest.mark.parametrize(("n", "ok"), [(-1, False), (SMALL.max_frame_size - 8, True), (SMALL.max_frame_size - 7, False)])
def test_peek_frame_refuses_a_negative_or_oversized_length(n: int, ok: bool) -> None:
    dec = CommandDecoder(SMALL, fast=True)
    dec.feed(HDR(4, n) + bytes(max(n, 0)))
    assert (dec.peek_frame() is not None) is ok


def test_a_run_starts_at_the_read_position_not_at_the_buffer_start() -> None:
    dec = CommandDecoder(fast=True)
    dec.feed(KeepAlive().encode() + block_end(0, b"a", 1, 1) + block_end(0, b"b", 1, 2))
    assert dec.block_ends() is None  # a KeepAlive first
    assert dec.next_command() == KeepAlive()
    run = dec.block_ends()
    assert run is not None and run.data == [b"a", b"b"]
    dec2 = CommandDecoder(fast=True)
    dec2.feed(block_end(0, b"a", 1, 1) + KeepAlive().encode() + block_end(0, b"b", 1, 2) + block_end(0, b"c", 1, 3))
    assert dec2.block_ends() is None  # one AppendBlockEnd, then a KeepAlive
    dec2.next_command()
    dec2.next_command()
    run = dec2.block_ends()
    assert run is not None and run.data == [b"b", b"c"]


def test_a_run_stops_before_an_irregular_block_end() -> None:
    lying = raw_block_end(W, 0, b"x", struct.pack(">iqq", 1, 3, 3), declared=99)
    dec = CommandDecoder(fast=True)
    dec.feed(block_end(0, b"a", 1, 1) + block_end(0, b"b", 1, 2) + lying)
    run = dec.block_ends()
    assert run is not None and run.data == [b"a", b"b"]


def test_no_run_in_the_draft_dialect_even_for_several_block_ends() -> None:
    from refwire.pravega.draft2017.frames import DRAFT

    dec = CommandDecoder(dialect=DRAFT, fast=True)
    dec.feed(block_end(0, b"abc", 1, 1) + block_end(0, b"d", 1, 2))
    assert dec.block_ends() is None


def test_the_decoder_errors_say_what_they_are() -> None:
    with pytest.raises(ValueError, match=r"^a run holds at least 2 frames: max_frames=1$"):
        CommandDecoder(fast=True).block_ends(1)
    with pytest.raises(ValueError, match=r"^a BlockEndRun's columns must have one entry per frame$"):
        BlockEndRun([W.bytes], [0], [b""], [1], [1], [1], [])
    dec = CommandDecoder(fast=True)
    dec.feed(bytes(8))
    dec.consume(4)
    with pytest.raises(ValueError, match=r"^consume\(\) past the end of the buffer$"):
        dec.consume(5)  # 4 left (a bound that ignored the 4 consumed would allow 12)
    run = BlockEndRun([W.bytes, W.bytes], [0, 0], [b"", b""], [1, 1], [1, 2], [1, 2], [44, 44])
    run.data.pop()
    with pytest.raises(ValueError):
        run.commands()  # columns changed after the run was made


def test_an_optional_blob_with_its_length_and_no_data_is_an_error() -> None:
    from refwire.pravega.frames import ReadTableKeys, decode_command

    whole = ReadTableKeys(request_id=1, segment="t", delegation_token="", suggested_key_count=2).encode()
    # the last field's length says 5 bytes, and none follow: exactly 4 bytes remain for it
    raw = whole[:-4] + struct.pack(">i", 5)
    with pytest.raises(ProtocolError) as exc:
        decode_command(83, raw, start=8, end=len(raw))
    assert exc.value.field == "to_key"


def test_a_truncated_table_key_names_its_data() -> None:
    from refwire.pravega.frames import RemoveTableKeys, TableKey, decode_command

    whole = RemoveTableKeys(request_id=1, segment="t", delegation_token="", keys=(TableKey(b"abcd", 7),)).encode()
    raw = whole[: 8 + 8 + 3 + 2 + 4 + 4 + 4 + 2]  # the key's data cut after 2 of its 4 bytes
    raw = HDR(76, len(raw) - 8) + raw[8:]
    with pytest.raises(ProtocolError) as exc:
        decode_command(76, raw, start=8, end=len(raw))
    assert exc.value.field == "keys[0].data"


def test_an_unencodable_value_says_which_and_why() -> None:
    with pytest.raises(ProtocolError, match=r"cannot encode 'x': "):
        AppendBlockEnd(writer_id=W, size_of_whole_events="x", data=b"", num_events=1, last_event_number=1, request_id=1).encode()  # type: ignore[arg-type]
