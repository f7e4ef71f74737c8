"""Responses decoded in runs against responses decoded frame by frame
(specs/seastar-rpc/README.md §3, §4).

``FrameDecoder.next_responses`` on the speed path (``fast=True``,
refwire.seastar_rpc._fast_frames) takes every complete regular response with
``msg_id >= 0`` at the head of the buffer as one :class:`ResponseRun` (columns);
the client connection on the speed path (refwire.seastar_rpc._fast_connection)
delivers a run one event per ``next_event``.  The oracle is the plain path
(``fast=False``): ``next_frame`` alone (the decoder) and the frame-by-frame pump
(the machine).  For any stream, split anyhow, both must give the same frames, the
same events, the same errors (class, words, frame, field, offset) and the same
state, with cancels, timers and resets between the events.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import attrs
import lz4.block
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refwire.errors import ProtocolError
from refwire.seastar_rpc import ClientConnection, Features, Response, make_compressor
from refwire.seastar_rpc.compression import envelope
from refwire.seastar_rpc.frames import MAX_RUN, UNMEASURED, FrameDecoder, ResponseRun
from refwire.wire import Limits

RSP16 = struct.Struct("<qII").pack
RSP12 = struct.Struct("<qI").pack
u32 = struct.Struct("<I").pack
LAST = 0x80000000
SMALL = Limits(max_frame_size=64, max_decompressed_size=96, max_string_size=1024, max_buffered=1 << 20)
BIG = Limits(max_frame_size=1 << 20, max_decompressed_size=1 << 20, max_string_size=1024, max_buffered=1 << 22)


def _response(msg_id: int, payload: bytes, duration: bool, *, declared: int | None = None) -> bytes:
    n = len(payload) if declared is None else declared
    return (RSP16(msg_id, n, 7) if duration else RSP12(msg_id, n)) + payload


def _wrap(comp: str | None, inner: bytes) -> bytes:
    return inner if comp is None else envelope(make_compressor(comp), inner)


def _raw_env(comp: str, payload: bytes, declared: int) -> bytes:
    """An envelope around any block, declaring any size."""
    word = declared | (LAST if comp == "LZ4_FRAGMENTED" else 0)
    return u32(len(payload) + 4) + u32(word) + payload


@st.composite
def _piece(draw: st.DrawFn, comp: str | None, duration: bool, limits: Limits) -> bytes:
    """One frame of a response stream: mostly regular responses, else anything the run must stop before."""
    kind = draw(
        st.sampled_from(
            ["ok"] * 6
            + ["zero", "exception", "over", "lying", "garbage"]
            + (["trailing", "short", "block", "noop", "mismatch"] if comp else [])
        )
    )
    payload = draw(st.binary(max_size=40))
    if kind in ("ok", "zero"):
        msg_id = 0 if kind == "zero" else draw(st.integers(1, 12) | st.integers(1, 2**63 - 1))
        return _wrap(comp, _response(msg_id, payload, duration))
    if kind == "exception":
        return _wrap(comp, _response(-draw(st.integers(1, 12)), b"\x01\x00\x00\x00\x02\x00\x00\x00hi", duration))
    if kind == "over":  # at the frame limit and one past it, with or without the data
        n = limits.max_frame_size + draw(st.integers(0, 1))
        return _wrap(comp, _response(1, b"o" * n if draw(st.booleans()) else b"", duration, declared=n))
    if kind == "lying":  # a len past the (compressed) frame's end
        return _wrap(comp, _response(2, payload, duration, declared=len(payload) + 1))
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=24))
    assert comp is not None
    inner = _response(3, payload, duration)
    if kind == "trailing":
        return _wrap(comp, inner + b"tail")
    if kind == "short":
        return _wrap(comp, inner[: draw(st.integers(1, 15 if duration else 11))])
    if kind == "block":
        return _raw_env(comp, draw(st.binary(min_size=1, max_size=12)), draw(st.integers(1, 40)))
    if kind == "noop":  # 00 00 00 00 (§4), or LZ4_FRAGMENTED's empty frame
        return u32(0) if comp == "LZ4" else envelope(make_compressor(comp), b"")
    block = lz4.block.compress(inner, store_size=False)
    return _raw_env(comp, block, len(inner) + draw(st.sampled_from([-1, 1])))


@st.composite
def _streams(draw: st.DrawFn) -> tuple[str | None, bool, Limits, list[bytes]]:
    comp = draw(st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"]))
    duration = draw(st.booleans())
    limits = draw(st.sampled_from([SMALL, BIG]))
    raw = b"".join(draw(st.lists(_piece(comp, duration, limits), max_size=10)))
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=5)))
    parts = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]
    if draw(st.booleans()):
        parts = [bytearray(p) for p in parts]  # type: ignore[misc]
    return comp, duration, limits, parts


def _decoder(comp: str | None, duration: bool, limits: Limits, *, fast: bool = True) -> FrameDecoder:
    dec = FrameDecoder("response", limits=limits, negotiation=False, fast=fast)
    dec.configure(duration=duration, compressor=None if comp is None else make_compressor(comp))
    return dec


def _decode(dec: FrameDecoder, parts: Sequence[bytes], *, runs: bool) -> tuple[list[object], int]:
    """Every frame (with its payload's type), the error (class, words, frame, field,
    offset), the decoder's position; and how many frames came in runs."""
    got: list[object] = []
    in_runs = 0
    try:
        for part in parts:
            dec.feed(part)
            while True:
                run = dec.next_responses() if runs else None
                if run is not None:
                    assert len(run) > 0
                    got.extend((f, type(f.payload)) for f in run.frames())
                    assert [type(p) for p in run.payloads] == [bytes] * len(run)
                    in_runs += len(run)
                    continue
                f = dec.next_frame()
                if f is None:
                    break
                got.append((f, type(getattr(f, "payload", None))))
        err = dec.eof_error()
        if err is not None:
            raise err
    except ProtocolError as e:
        got.append(("error", type(e), str(e), e.frame, e.field, e.offset))
    got.append(("state", dec.offset, dec.buffered, dec.in_frame))
    return got, in_runs


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_streams())
def test_runs_decode_as_next_frame_does(case: tuple[str | None, bool, Limits, list[bytes]]) -> None:
    comp, duration, limits, parts = case
    want, _ = _decode(_decoder(comp, duration, limits, fast=False), parts, runs=False)
    got, _ = _decode(_decoder(comp, duration, limits), parts, runs=True)
    assert got == want


@pytest.mark.parametrize("comp", [None, "LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("duration", [False, True])
def test_a_run_takes_every_regular_response_and_stops_before_the_rest(comp: str | None, duration: bool) -> None:
    frames = [_response(i, b"p%d" % i, duration) for i in (1, 0, 2**63 - 1)]
    exc = _response(-4, b"\x01\x00\x00\x00\x00\x00\x00\x00", duration)
    raw = b"".join(_wrap(comp, f) for f in [*frames, exc, frames[0]])
    dec = _decoder(comp, duration, BIG)
    dec.feed(raw)
    run = dec.next_responses()
    assert run is not None
    want_duration = 7 if duration else None
    assert run.frames() == [Response(i, b"p%d" % i, want_duration) for i in (1, 0, 2**63 - 1)]
    assert run.msg_ids == [1, 0, 2**63 - 1]
    assert run.durations == ([7, 7, 7] if duration else None)
    assert dec.offset == sum(len(_wrap(comp, f)) for f in frames)
    assert dec.next_responses() is None  # the exception is next_frame's (its payload's offset matters)
    assert dec.next_frame() == Response(-4, b"\x01\x00\x00\x00\x00\x00\x00\x00", want_duration)
    assert dec.next_responses() is None  # a lone frame: next_frame's
    assert dec.next_frame() == Response(1, b"p1", want_duration)
    assert dec.next_responses() is None and dec.next_frame() is None and not dec.in_frame


@pytest.mark.parametrize("duration", [False, True])
def test_a_run_stops_at_the_frame_limit_and_one_past_it(duration: bool) -> None:
    limit = SMALL.max_frame_size
    at = _response(1, b"x" * limit, duration)
    past = _response(2, b"x" * (limit + 1), duration)
    dec = _decoder(None, duration, SMALL)
    dec.feed(at + past)
    run = dec.next_responses()
    assert run is not None and run.msg_ids == [1] and run.payloads == [b"x" * limit]
    assert dec.next_responses() is None
    with pytest.raises(ProtocolError) as exc:
        dec.next_frame()
    assert (exc.value.field, exc.value.offset) == ("len", len(at) + 8)


@pytest.mark.parametrize("comp", [None, "LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("duration", [False, True])
def test_empty_responses_to_the_last_byte_are_one_run(comp: str | None, duration: bool) -> None:
    dec = _decoder(comp, duration, BIG)
    dec.feed(b"".join(_wrap(comp, _response(i, b"", duration)) for i in (1, 2)))
    run = dec.next_responses()
    assert run is not None and run.msg_ids == [1, 2] and run.payloads == [b"", b""] and dec.buffered == 0


@pytest.mark.parametrize("duration", [False, True])
def test_a_run_out_of_a_bytearray_buffer_stops_at_its_end(duration: bool) -> None:
    frames = [_response(i, b"%d" % i * 5, duration) for i in (1, 2, 3)]
    raw = b"".join(frames)
    dec = _decoder(None, duration, BIG)
    dec.feed(raw[:-2])
    dec.feed(raw[-2:-1])  # a chunk shorter than what is held: the buffer becomes a bytearray
    assert type(dec._buf.data) is bytearray
    run = dec.next_responses()
    assert run is not None and run.msg_ids == [1, 2] and run.payloads == [b"11111", b"22222"]
    assert [type(p) for p in run.payloads] == [bytes, bytes]
    assert dec.offset == len(frames[0]) * 2 and dec.buffered == len(frames[2]) - 1
    dec.feed(raw[-1:])
    assert dec.next_responses() is None  # alone in the buffer
    frame = dec.next_frame()
    assert isinstance(frame, Response) and frame.payload == b"33333" and dec.buffered == 0


def test_an_incomplete_response_waits_and_the_rest_is_kept() -> None:
    raw = _response(1, b"abc", True) + _response(2, b"defg", True)
    dec = _decoder(None, True, BIG)
    dec.feed(raw[:-1])
    run = dec.next_responses()
    assert run is not None and run.msg_ids == [1]
    assert dec.next_responses() is None and dec.buffered == len(raw) - 1 - 19
    dec.feed(raw[-1:])
    assert dec.next_responses() is None  # alone in the buffer
    assert dec.next_frame() == Response(2, b"defg", 7) and dec.buffered == 0


@pytest.mark.parametrize("comp", ["LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("past", [0, 1])
def test_a_declared_size_past_lz4s_ratio_is_refused_before_lz4_is_asked(
    comp: str, past: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    real = lz4.block.decompress

    def spy(block: bytes, size: int) -> bytes:
        asked.append(size)
        return real(block, size)  # type: ignore[no-any-return]

    monkeypatch.setattr(lz4.block, "decompress", spy)
    block = lz4.block.compress(b"\0" * 64, store_size=False)
    size = 255 * len(block) + 16 + past  # the line is 255 * (clen - 4) + 16 (§4)
    dec = _decoder(comp, False, BIG)
    dec.feed(_raw_env(comp, block, size) + _wrap(comp, _response(1, b"", False)))
    assert dec.next_responses() is None
    assert asked == ([] if past else [size])


@pytest.mark.parametrize("kind", ["request", "stream"])
def test_only_a_response_decoder_makes_runs(kind: Any) -> None:
    dec = FrameDecoder(kind, negotiation=False, fast=True)
    dec.configure()
    dec.feed(_response(1, b"abc", False) * 3)
    assert dec.next_responses() is None


def test_no_runs_before_negotiation_or_with_a_general_compressor() -> None:
    dec = FrameDecoder("response", fast=True)
    dec.feed(_response(1, b"abc", False))
    assert dec.next_responses() is None  # the negotiation frame comes first

    class Generic(type(make_compressor("LZ4"))):  # type: ignore[misc]
        pass

    dec = FrameDecoder("response", negotiation=False, fast=True)
    dec.configure(compressor=Generic())
    dec.feed(_wrap("LZ4", _response(1, b"abc", False)) * 2)
    assert dec.next_responses() is None
    assert dec.next_frame() == Response(1, b"abc", None)


def test_run_columns_must_agree() -> None:
    with pytest.raises(ValueError):
        ResponseRun([1, 2], [b""], None)
    with pytest.raises(ValueError):
        ResponseRun([1], [b""], [1, 2])
    run = ResponseRun([1], [b"a"], None)
    assert len(run) == 1 and run.frames() == [Response(1, b"a", None)] and "1 responses" in repr(run)


# --------------------------------------------------------------------------- the client machine


Op = tuple[Any, ...]


@st.composite
def _sessions(draw: st.DrawFn) -> tuple[str | None, bool, int, list[float | None], list[Op]]:
    comp = draw(st.sampled_from([None, "LZ4", "LZ4_FRAGMENTED"]))
    duration = draw(st.booleans())
    calls = draw(st.integers(0, 8))
    timeouts = draw(st.lists(st.sampled_from([None, 1.0, 2.0, 3.0]), min_size=calls, max_size=calls))
    limits = BIG
    pieces = draw(st.lists(_piece(comp, duration, limits), max_size=12))
    raw = b"".join(pieces)
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    ops: list[Op] = []
    for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        if b > a:  # (b"" is EOF)
            ops.append(("data", raw[a:b]))
        for _ in range(draw(st.integers(0, 6))):
            ops.append(
                draw(
                    st.sampled_from(
                        [("event",)] * 4
                        + [("cancel", draw(st.integers(1, 9))), ("timer", draw(st.sampled_from([1.5, 2.5, 9.0])))]
                    )
                )
            )
    ops.append(draw(st.sampled_from([("eof",), ("reset",), ("event",)])))
    ops.extend([("event",)] * 40)
    return comp, duration, calls, timeouts, ops


def _client(fast: bool, comp: str | None, duration: bool, timeouts: list[float | None]) -> ClientConnection:
    """A negotiated client on the speed path (``fast=True``: runs) or the plain one
    (every frame through next_frame and _on_frame)."""
    client = ClientConnection(compressors=(comp,) if comp else (), handler_duration=duration, timeout=False, fast=fast)
    client.initiate(now=0.0)
    for t in timeouts:
        client.call(5, b"ask", now=0.0, timeout=t)
    client.receive_data(Features(compress=comp, handler_duration=duration).encode(), now=0.0)
    assert type(client.next_event()).__name__ == "Negotiated"
    return client


def _run(client: ClientConnection, ops: list[Op]) -> list[object]:
    seen: list[object] = []
    for op in ops:
        try:
            if op[0] == "data":
                client.receive_data(op[1], now=0.0)
            elif op[0] == "event":
                ev = client.next_event()
                seen.append((type(ev).__name__, attrs.asdict(ev) if attrs.has(type(ev)) else None))
            elif op[0] == "cancel":
                client.cancel(op[1])
            elif op[0] == "timer":
                client.handle_timer(now=op[1])
            elif op[0] == "eof":
                client.receive_data(b"", now=0.0)
            else:
                client.connection_lost(now=0.0)
        except ProtocolError as e:
            seen.append(("error", type(e), str(e), e.frame, e.field, e.offset))
        seen.append((client.state, client.pending, sorted(client.transitions_seen, key=repr)))
    return seen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sessions())
def test_the_client_delivers_runs_as_it_delivered_frames(
    case: tuple[str | None, bool, int, list[float | None], list[Op]],
) -> None:
    comp, duration, _calls, timeouts, ops = case
    want = _run(_client(False, comp, duration, timeouts), ops)
    got = _run(_client(True, comp, duration, timeouts), ops)
    assert got == want


def test_a_cancel_between_two_events_of_one_run_makes_the_later_reply_stray() -> None:
    client = _client(True, None, True, [None, None, None])
    client.receive_data(b"".join(_response(i, b"r%d" % i, True) for i in (1, 2, 3)), now=0.0)
    first = client.next_event()
    assert (type(first).__name__, first.msg_id, first.payload, first.handler_duration) == ("Reply", 1, b"r1", 7)
    client.cancel(2)
    assert type(client.next_event()).__name__ == "StrayReply"
    third = client.next_event()
    assert type(third).__name__ == "Reply" and third.msg_id == 3 and client.pending == ()


def test_a_reset_drops_the_rest_of_a_run() -> None:
    client = _client(True, "LZ4", False, [None, None])
    client.receive_data(b"".join(_wrap("LZ4", _response(i, b"", False)) for i in (1, 2)), now=0.0)
    assert client.next_event().msg_id == 1
    client.connection_lost(now=0.0)
    closed = client.next_event()
    assert type(closed).__name__ == "ConnectionClosed" and closed.pending == (2,)
    assert type(client.next_event()).__name__ == "NeedData"


def test_unmeasured_duration_passes_through() -> None:
    client = _client(True, None, True, [None])
    client.receive_data(RSP16(1, 0, UNMEASURED), now=0.0)
    assert client.next_event().handler_duration == UNMEASURED


def test_run_errors_and_repr_say_what_they_are() -> None:
    with pytest.raises(ValueError, match=r"^a ResponseRun's columns must have one entry per response$"):
        ResponseRun([1], [], None)
    assert repr(ResponseRun([1, 2, 3], [b""] * 3, None)) == "ResponseRun(3 responses, msg_ids [1, 2, 3])"
    assert repr(ResponseRun([1, 2, 3, 4], [b""] * 4, None)) == "ResponseRun(4 responses, msg_ids [1, 2, 3]...)"


@pytest.mark.parametrize("durations", [None, [5, 6]])
def test_frames_refuses_columns_changed_after_the_run_was_made(durations: list[int] | None) -> None:
    run = ResponseRun([1, 2], [b"a", b"b"], durations)
    run.payloads.pop()
    with pytest.raises(ValueError):
        run.frames()


def _envelope_of_clen(comp: str, clen: int) -> tuple[bytes, int]:
    """A single-block envelope whose ``clen`` is exactly ``clen`` (an incompressible
    payload, searched for), holding a regular response; and its inner size."""
    import random

    rnd = random.Random(7)
    for n in range(clen):
        inner = _response(1, rnd.randbytes(n), False)
        env = _wrap(comp, inner)
        if struct.unpack_from("<I", env)[0] == clen:
            return env, len(inner)
    raise AssertionError(f"no payload gives clen {clen}")


@pytest.mark.parametrize("comp", ["LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("past", [0, 1])
def test_compressed_limits_at_the_line_and_one_past(comp: str, past: int) -> None:
    limit = SMALL.max_frame_size
    # an envelope of exactly max_frame_size (and one past); inner len exactly max_frame_size;
    # a decompressed frame of exactly max_decompressed_size (trailing bytes count, §4)
    env, inner_size = _envelope_of_clen(comp, limit + past)
    assert inner_size <= SMALL.max_decompressed_size
    at_len = _wrap(comp, _response(2, bytes(limit + past), False))
    full = SMALL.max_decompressed_size - 16 - limit
    at_size = _wrap(comp, _response(3, bytes(limit), True) + bytes(full + past))
    for raw, duration in ((env, False), (at_len, False), (at_size, True)):
        dec = _decoder(comp, duration, SMALL)
        ok = _wrap(comp, _response(9, b"ok", duration))
        dec.feed(ok + raw)
        run = dec.next_responses()
        assert run is not None
        assert len(run) == (1 if past else 2), raw[:8].hex()


@pytest.mark.parametrize("comp", [None, "LZ4"])
@pytest.mark.parametrize("duration", [False, True])
def test_a_run_holds_max_run_responses_at_most(comp: str | None, duration: bool) -> None:
    dec = _decoder(comp, duration, BIG)
    dec.feed(b"".join(_wrap(comp, _response(i, b"r", duration)) for i in range(1, MAX_RUN + 2)))
    run = dec.next_responses()
    assert run is not None and len(run) == MAX_RUN and run.msg_ids[-1] == MAX_RUN
    assert dec.next_responses() is None  # the last one alone
    last = dec.next_frame()
    assert isinstance(last, Response) and last.msg_id == MAX_RUN + 1 and dec.buffered == 0
    dec.feed(b"".join(_wrap(comp, _response(i, b"r", duration)) for i in (1, 2, 3)))
    run = dec.next_responses(2)
    assert run is not None and run.msg_ids == [1, 2]
    with pytest.raises(ValueError):
        dec.next_responses(0)


def test_the_client_delivers_more_responses_than_one_run_holds() -> None:
    n = 2 * MAX_RUN + 3
    client = _client(True, None, True, [None] * n)
    client.receive_data(b"".join(_response(i, b"%d" % i, True) for i in range(1, n + 1)), now=0.0)
    got = [client.next_event() for _ in range(n)]
    assert [(e.msg_id, e.payload) for e in got] == [(i, b"%d" % i) for i in range(1, n + 1)]
    assert client.pending == () and type(client.next_event()).__name__ == "NeedData"


@pytest.mark.parametrize("comp", [None, "LZ4", "LZ4_FRAGMENTED"])
@pytest.mark.parametrize("duration", [False, True])
def test_a_lone_response_is_next_frames_and_a_byte_behind_it_makes_a_run(comp: str | None, duration: bool) -> None:
    one = _wrap(comp, _response(1, b"abc", duration))
    dec = _decoder(comp, duration, BIG)
    dec.feed(one)
    assert dec.next_responses() is None and dec.offset == 0
    dec.feed(b"\x00")  # the first byte of the next frame
    run = dec.next_responses()
    assert run is not None and run.msg_ids == [1] and dec.offset == len(one) and dec.buffered == 1


@pytest.mark.parametrize("lone", [True, False])
def test_a_reply_to_id_0_is_stray_and_never_an_exception(lone: bool) -> None:
    # msg id 0 is never issued (ids start at 1); its payload is data, even one that
    # would decode as an exception (only a negative id carries one, §3)
    client = _client(True, None, True, [None])
    exc_payload = b"\x00\x00\x00\x00\x02\x00\x00\x00hi"  # USER, "hi"
    tail = b"" if lone else _response(1, b"r", True)
    client.receive_data(_response(0, exc_payload, True) + tail, now=0.0)
    stray = client.next_event()
    assert type(stray).__name__ == "StrayReply"
    assert (stray.msg_id, stray.known, stray.error) == (0, False, None)


def test_a_run_s_reply_to_the_next_id_not_yet_issued_is_stray_and_unknown() -> None:
    client = _client(True, None, False, [None])  # call 1; the next id is 2
    assert client.next_msg_id == 2
    client.receive_data(_response(2, b"early", False) + _response(1, b"r", False), now=0.0)
    stray = client.next_event()
    assert type(stray).__name__ == "StrayReply" and (stray.msg_id, stray.known) == (2, False)
    assert client.next_event().msg_id == 1


def test_max_frames_one_is_the_smallest_run_and_zero_says_why() -> None:
    dec = _decoder(None, False, BIG)
    dec.feed(_response(1, b"a", False) + _response(2, b"b", False))
    run = dec.next_responses(1)
    assert run is not None and run.msg_ids == [1]
    with pytest.raises(ValueError, match=r"^a run holds at least 1 response: max_frames=0$"):
        dec.next_responses(0)
