"""Lumberjack codec and server machine: properties and the edge cases of
specs/lumberjack/README.md §4 (each checked against what the real servers do)."""

from __future__ import annotations

import zlib
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lumberjack_strategies import any_frame, client_streams, drain, json_frame, split

from refwire.errors import LocalProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.lumberjack import (
    DEFAULT_LIMITS,
    NEED_DATA,
    V1,
    V2,
    Batch,
    Compressed,
    ConnectionClosed,
    DataFrame,
    EmptyWindow,
    FrameDecoder,
    JsonFrame,
    ServerConnection,
    Window,
    decode_all,
)
from refwire.lumberjack import frames as frames_mod
from refwire.lumberjack.frames import inflate

W = Window
J = json_frame


def C(*frames: bytes | object, level: int = 6, version: int = V2) -> bytes:
    raw = b"".join(f if isinstance(f, bytes) else f.encode() for f in frames)  # type: ignore[attr-defined]
    return Compressed(zlib.compress(raw, level), version).encode()


def enc(*frames: object) -> bytes:
    return b"".join(f if isinstance(f, bytes) else f.encode() for f in frames)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- properties


@given(st.lists(any_frame, max_size=8))
def test_round_trip(frames: list[object]) -> None:
    data = enc(*frames)
    assert decode_all(data, validate_json=False) == frames


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(client_streams(), st.lists(st.integers(0, 10_000), max_size=30))
def test_any_split_of_a_valid_stream_decodes_the_same(stream: tuple[bytes, list[list[int]]], cuts: list[int]) -> None:
    data, expected = stream
    whole, err1, acks1 = drain(ServerConnection(), [data])
    pieces, err2, acks2 = drain(ServerConnection(), split(data, cuts))
    assert err1 is None and err2 is None
    assert [[e.seq for e in b.events] for b in whole] == expected
    assert whole == pieces
    assert acks1 == acks2


def test_one_byte_at_a_time() -> None:
    data = enc(W(2), J(1, {"a": 1}), J(2, {"b": 2}), W(1, V2), J(3, {}), C(W(1), J(7, {})))
    batches, err, sent = drain(ServerConnection(), [data[i : i + 1] for i in range(len(data))])
    assert err is None
    assert [[e.seq for e in b.events] for b in batches] == [[1, 2], [3], [7]]
    assert sent == bytes.fromhex("324100000002" "324100000003" "324100000007")


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_only_raises_remote_protocol_error(data: bytes) -> None:
    conn = ServerConnection()
    conn.receive_data(data, now=0.0)
    conn.receive_data(b"", now=0.0)
    try:
        for _ in range(len(data) + 2):
            ev = conn.next_event()
            if ev is NEED_DATA or isinstance(ev, ConnectionClosed):
                break
        else:
            raise AssertionError("more events than bytes")
    except RemoteProtocolError as exc:
        assert exc.protocol == "lumberjack"
        assert exc.offset is not None


@given(client_streams(), st.integers(0, 10_000), st.integers(0, 255))
def test_mutated_streams_only_raise_remote_protocol_error(stream: tuple[bytes, list[list[int]]], where: int, byte: int) -> None:
    data = bytearray(stream[0])
    data[where % len(data)] = byte
    try:
        drain(ServerConnection(), [bytes(data)])
    except Exception as exc:  # pragma: no cover - the assertion is the test
        raise AssertionError(f"escaped: {exc!r}") from exc


def count_scans(monkeypatch: pytest.MonkeyPatch, fast: bool) -> dict[str, int]:
    """Count the buffer scans of decoders built with ``fast`` from now on (work,
    not seconds): the scanner a decoder takes comes from ``frames.SCANNERS``."""
    calls = {"n": 0}
    real = frames_mod.SCANNERS[fast]

    def counting(*a: Any) -> tuple[int, int]:
        calls["n"] += 1
        return real(*a)

    monkeypatch.setitem(frames_mod.SCANNERS, fast, counting)
    return calls


def count_calls(monkeypatch: pytest.MonkeyPatch, method: str) -> dict[str, int]:
    """Count calls of a FrameDecoder method (work, not seconds)."""
    calls = {"n": 0}
    real = getattr(FrameDecoder, method)

    def counting(self: FrameDecoder, *a: object) -> object:
        calls["n"] += 1
        return real(self, *a)

    monkeypatch.setattr(FrameDecoder, method, counting)
    return calls


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast"])
def test_linear_time_feeding_counts_scans(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    """One byte at a time, the decoder looks at the buffer O(frames) times, not O(bytes)."""
    calls = count_scans(monkeypatch, fast)
    big = J(1, {"m": "x" * 200_000}).encode()
    frames = [W(50).encode()] + [J(i, {"i": i}).encode() for i in range(1, 50)] + [big]
    data = b"".join(frames)
    dec = FrameDecoder(fast=fast)
    got = 0
    for i in range(len(data)):
        dec.feed(data[i : i + 1])
        got += len(dec.frames())
    assert got == 51
    assert calls["n"] <= 3 * 51 + 3


@pytest.mark.parametrize("fast", [False, True], ids=["plain", "fast"])
def test_huge_d_frame_trickle_is_linear(monkeypatch: pytest.MonkeyPatch, fast: bool) -> None:
    calls = count_calls(monkeypatch, "_scan_data")
    pairs = tuple((b"k%d" % i, b"v" * 3) for i in range(3000))
    data = DataFrame(1, pairs).encode()
    dec = FrameDecoder(fast=fast)
    out = []
    for i in range(0, len(data), 1):
        dec.feed(data[i : i + 1])
        out += dec.frames()
    assert out == [DataFrame(1, pairs)]
    assert calls["n"] <= 2 * 2 * len(pairs) + 4  # bounded by pairs, not pairs squared


# --------------------------------------------------------------------------- accepted shapes (Logstash's)


def seqs(batches: list[Batch]) -> list[list[int]]:
    return [[e.seq for e in b.events] for b in batches]


def test_acks_name_the_last_seq_and_w0_gets_a0() -> None:
    batches, err, sent = drain(ServerConnection(), [enc(W(0), W(2), J(5, {}), J(6, {}))])
    assert err is None and seqs(batches) == [[5, 6]]
    assert sent == bytes.fromhex("324100000000" "324100000006")


def test_count_ack_mode_is_go_lumber_style() -> None:
    _, _, sent = drain(ServerConnection(ack_mode="count"), [enc(W(2), J(5, {}), J(6, {}))])
    assert sent == bytes.fromhex("324100000002")


def test_a0_for_a_pipelined_w0_waits_behind_pending_batches() -> None:
    # Acks leave in window order (§3.3, §3.5): the A 0 answering a W 0 that arrives
    # while earlier batches wait for the application is sent after their acks.
    data = enc(W(1), J(1, {}), W(0), W(1), J(2, {}), W(0), W(0))
    for chunks in ([data], [data[i : i + 1] for i in range(len(data))]):
        conn = ServerConnection()
        for chunk in chunks:
            conn.receive_data(chunk, now=0.0)
        events = []
        while (ev := conn.next_event()) is not NEED_DATA:
            events.append(ev)
        assert [type(e) for e in events] == [Batch, EmptyWindow, Batch, EmptyWindow, EmptyWindow]
        b1, b2 = events[0], events[2]
        assert conn.data_to_send() == b""  # nothing may overtake A 1
        conn.accept(b1, now=1.0)
        assert conn.data_to_send() == bytes.fromhex("324100000001" "324100000000")
        conn.accept(b2, now=2.0)
        assert conn.data_to_send() == bytes.fromhex("324100000002" "324100000000" "324100000000")
        conn.receive_data(W(0).encode(), now=3.0)  # nothing pending: answered at once
        assert isinstance(conn.next_event(), EmptyWindow)
        assert conn.data_to_send() == bytes.fromhex("324100000000")


def test_empty_window_can_be_ignored_like_go_lumber() -> None:
    conn = ServerConnection(answer_empty_window=False)
    conn.receive_data(W(0).encode(), now=0.0)
    assert isinstance(conn.next_event(), EmptyWindow)
    assert conn.data_to_send() == b""


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("window split over C and plain", enc(W(3), C(J(1, {})), J(2, {}), C(J(3, {}))), [[1, 2, 3]]),
        ("nested C", enc(W(2), C(C(J(1, {}), J(2, {})))), [[1, 2]]),
        ("W inside C", C(W(2), J(1, {}), J(2, {})), [[1, 2]]),
        ("two windows in one C", C(W(1), J(1, {}), W(1), J(2, {})), [[1], [2]]),
        ("stored zlib block (level 0)", enc(W(1), C(J(1, {}), level=0)), [[1]]),
        ("empty C", enc(W(1), C(b""), J(1, {})), [[1]]),
        ("pipelined windows", enc(W(2), J(1, {}), J(2, {}), W(2), J(1, {}), J(2, {})), [[1, 2], [1, 2]]),
        ("rollover inside a batch", enc(W(3), J(2**32 - 2, {}), J(2**32 - 1, {}), J(1, {})), [[2**32 - 2, 2**32 - 1, 1]]),
        ("D with zero pairs (go-lumber accepts)", enc(W(1, V1), DataFrame(1, ())), [[1]]),
    ],
)
def test_accepted_shapes(name: str, data: bytes, expected: list[list[int]]) -> None:
    batches, err, _ = drain(ServerConnection(), [data])
    assert err is None, err
    assert seqs(batches) == expected


def test_batch_crossing_2_32_is_acked_with_its_last_seq() -> None:
    _, _, sent = drain(ServerConnection(), [enc(W(3), J(2**32 - 2, {}), J(2**32 - 1, {}), J(0, {}))])
    # Logstash would answer A 0 here (signed compare); we ack the last event's seq, which is 0
    # only because this client numbered an event 0 -- refwire's client never does (skips 0).
    assert sent == bytes.fromhex("324100000000")


def test_v1_d_frame_fields() -> None:
    batches, err, _ = drain(ServerConnection(), [enc(W(1, V1), DataFrame(1, ((b"line", b"hi"), (b"line", b"again"))))])
    assert err is None
    assert batches[0].events[0].fields() == {"line": "again"}  # last duplicate wins, as both servers


def test_keepalive_timer_while_batch_pending() -> None:
    conn = ServerConnection(keepalive_interval=5.0)
    conn.receive_data(enc(W(1), J(1, {})), now=100.0)
    batch = conn.next_event()
    assert isinstance(batch, Batch)
    assert conn.next_deadline() == 105.0
    conn.handle_timer(now=104.9)
    assert conn.data_to_send() == b""
    conn.handle_timer(now=105.0)
    assert conn.data_to_send() == bytes.fromhex("324100000000")
    assert conn.next_deadline() == 110.0
    conn.accept(batch, now=107.0)
    assert conn.data_to_send() == bytes.fromhex("324100000001")
    assert conn.next_deadline() is None


def test_keepalive_version_follows_connection_or_v2_switch() -> None:
    for kv, expected in (("connection", "314100000000"), ("v2", "324100000000")):
        conn = ServerConnection(keepalive_version=kv)  # type: ignore[arg-type]
        conn.receive_data(enc(W(1, V1), DataFrame(1, ((b"a", b"b"),))), now=0.0)
        assert isinstance(conn.next_event(), Batch)
        conn.handle_timer(now=5.0)
        assert conn.data_to_send().hex() == expected


def test_batches_must_be_accepted_in_order() -> None:
    conn = ServerConnection()
    conn.receive_data(enc(W(1), J(1, {}), W(1), J(2, {})), now=0.0)
    b1, b2 = conn.next_event(), conn.next_event()
    assert isinstance(b1, Batch) and isinstance(b2, Batch)
    with pytest.raises(Exception, match="order"):
        conn.accept(b2, now=0.0)
    conn.accept(b1, now=0.0)
    assert conn.data_to_send()[-1] == 1
    conn.accept(b2, now=0.0)
    assert conn.data_to_send()[-1] == 2


def test_mixed_versions_switch_follows_logstash() -> None:
    # A v1 batch after a v2 one: go-lumber closes (our default), Logstash serves both.
    data = enc(W(1), J(1, {}), W(1, V1), DataFrame(2, ()))
    _, err, _ = drain(ServerConnection(), [data])
    assert err is not None and (err.frame, err.field, err.offset) == ("W", "version", 18)
    batches, err, sent = drain(ServerConnection(accept_mixed_versions=True), [data])
    assert err is None and seqs(batches) == [[1], [2]]
    assert sent == bytes.fromhex("324100000001" "314100000002")  # each batch acked with its W's version
    # '1J' inside a v2 batch: Logstash accepts it (the batch is v2); a D in a v2 batch it resets.
    one_j = enc(W(1)) + bytes.fromhex("314a0000000100000002") + b"{}"
    _, err, _ = drain(ServerConnection(), [one_j])
    assert err is not None and err.field == "version"
    batches, err, _ = drain(ServerConnection(accept_mixed_versions=True), [one_j])
    assert err is None and seqs(batches) == [[1]]
    d_in_v2 = enc(W(1), DataFrame(1, ()))
    _, err, _ = drain(ServerConnection(accept_mixed_versions=True), [d_in_v2])
    assert err is not None and (err.frame, err.field) == ("D", "type")


# A J frame whose version byte is neither '1' nor '2' (spec §3.10: Logstash checks
# every frame's byte is one of them).  W 1 at 0, then 'ff' 'J' at offset 6.
BAD_VERSION_J = bytes.fromhex("325700000001ff4a00000001000000027b7d")


@pytest.mark.parametrize("bad", [0x00, 0xFF, 0x30, 0x33])
@pytest.mark.parametrize("mixed", [True, False], ids=["mixed", "strict"])
def test_j_frame_with_a_bad_version_byte_is_refused_whole_and_split(bad: int, mixed: bool) -> None:
    data = bytearray(BAD_VERSION_J)
    data[6] = bad
    for cut in range(len(data) + 1):
        chunks = [bytes(data[:cut]), bytes(data[cut:])]
        batches, err, sent = drain(ServerConnection(accept_mixed_versions=mixed), [c for c in chunks if c])
        assert batches == [] and sent == b"", (cut, batches, sent)
        assert err is not None, cut
        assert (err.frame, err.field, err.offset) == (None, "version", 6), (cut, err)


def test_one_j_records_its_version_byte() -> None:
    one_j = bytes.fromhex("314a0000000100000002") + b"{}"
    for cut in range(len(one_j) + 1):
        dec = FrameDecoder(strict_versions=False)
        got = []
        for chunk in (one_j[:cut], one_j[cut:]):
            dec.feed(chunk)
            got += dec.frames()
        assert len(got) == 1 and isinstance(got[0], JsonFrame), cut
        assert got[0].version == V1, cut  # recorded as it came, not as '2'
        assert got[0].encode() == one_j  # and re-encoded as it came


def test_one_j_in_a_v2_batch_is_accepted_under_mixed_versions_at_every_split() -> None:
    data = enc(W(2), J(1, {})) + bytes.fromhex("314a0000000200000002") + b"{}"
    for cut in range(len(data) + 1):
        chunks = [c for c in (data[:cut], data[cut:]) if c]
        batches, err, sent = drain(ServerConnection(accept_mixed_versions=True), chunks)
        assert err is None, (cut, err)
        assert seqs(batches) == [[1, 2]] and batches[0].version == V2
        assert [e.version for e in batches[0].events] == [V2, V1]
        assert sent == bytes.fromhex("324100000002")  # acked with its W's version byte
        _, err, _ = drain(ServerConnection(), chunks)
        assert err is not None and (err.frame, err.field, err.offset) == ("J", "version", 6 + 12), (cut, err)


@st.composite
def mixed_version_streams(draw: st.DrawFn) -> tuple[bytes, list[list[int]], int | None, str | None]:
    """Plain frames whose version bytes are drawn freely (mostly '1'/'2', sometimes
    anything), with the outcome Logstash's rule (§3.10) predicts: the batches
    delivered before the first bad frame, and that frame's offset and field."""
    out = bytearray()
    expected: list[list[int]] = []
    ver_byte = st.one_of(st.sampled_from([V1, V2]), st.sampled_from([V1, V2]), st.integers(0, 255))
    seq = 1
    for _ in range(draw(st.integers(1, 4))):
        wver = draw(ver_byte)
        n = draw(st.integers(1, 4))
        if wver not in (V1, V2):
            return bytes(out + bytes([wver]) + b"W" + n.to_bytes(4, "big")), expected, len(out), "version"
        out += bytes([wver]) + b"W" + n.to_bytes(4, "big")
        batch = []
        for _ in range(n):
            fver = draw(ver_byte)
            typ = draw(st.sampled_from(["J", "D"] if draw(st.integers(0, 9)) == 0 else ["J" if wver == V2 else "D"]))
            if typ == "J":
                payload = b'{"s":%d}' % seq
                frame = bytes([fver]) + b"J" + seq.to_bytes(4, "big") + len(payload).to_bytes(4, "big") + payload
            else:
                frame = bytes([fver]) + b"D" + seq.to_bytes(4, "big") + (1).to_bytes(4, "big")
                frame += (1).to_bytes(4, "big") + b"k" + (1).to_bytes(4, "big") + b"v"
            if fver not in (V1, V2):
                return bytes(out + frame), expected, len(out), "version"
            if (typ == "J") != (wver == V2):
                return bytes(out + frame), expected, len(out) + 1, "type"
            out += frame
            batch.append(seq)
            seq += 1
        expected.append(batch)
    return bytes(out), expected, None, None


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(mixed_version_streams(), st.lists(st.integers(0, 10_000), max_size=20))
def test_mixed_versions_any_split_gives_the_same_result(
    stream: tuple[bytes, list[list[int]], int | None, str | None], cuts: list[int]
) -> None:
    data, expected, bad_offset, bad_field = stream
    whole = drain(ServerConnection(accept_mixed_versions=True), [data])
    pieces = drain(ServerConnection(accept_mixed_versions=True), split(data, cuts))
    for batches, err, _ in (whole, pieces):
        assert seqs(batches) == expected
        if bad_offset is None:
            assert err is None
        else:
            assert err is not None and (err.field, err.offset) == (bad_field, bad_offset), err
    assert whole[0] == pieces[0] and whole[2] == pieces[2]
    assert [e.version for b in whole[0] for e in b.events] == [e.version for b in pieces[0] for e in b.events]


def test_validate_json_off_passes_payloads_through() -> None:
    bad = enc(W(1)) + bytes.fromhex("324a0000000100000005") + b"[1,2]"
    batches, err, _ = drain(ServerConnection(validate_json=False), [bad])
    assert err is None and batches[0].events[0].payload == b"[1,2]"


# --------------------------------------------------------------------------- refused input


J_HDR = bytes.fromhex("324a00000001")


@pytest.mark.parametrize(
    ("name", "data", "frame", "field", "offset"),
    [
        ("unknown type", enc(W(1)) + b"2X\x00\x00\x00\x00", None, "type", 7),
        ("bad version", b"3W\x00\x00\x00\x01", None, "version", 0),
        ("first byte newline", b"\nW\x00\x00\x00\x01", None, "version", 0),
        ("D on v2", enc(W(1)) + b"2D" + bytes(8), "D", "version", 6),
        ("J on v1", enc(W(1, V1)) + b"1J" + bytes(8), "J", "version", 6),
        ("A from client", enc(W(1)) + bytes.fromhex("324100000001"), "A", "type", 7),
        ("J length 0", enc(W(1)) + J_HDR + bytes(4), "J", "len", 12),
        ("J not JSON", enc(W(1)) + J_HDR + b"\x00\x00\x00\x03abc", "J", "json", 16),
        ("J a JSON array", enc(W(1)) + J_HDR + b"\x00\x00\x00\x05[1,2]", "J", "json", 16),
        ("J without W", enc(J(1, {})), "J", "type", 1),
        ("W inside an unfinished window", enc(W(2), J(1, {}), W(1)), "W", "type", 19),
        ("W over max_window", enc(W(20_000)), "W", "count", 2),
        ("more events in C than W announced", enc(W(1), C(J(1, {}), J(2, {}))), "C>J", "type", 6),
        ("frame split across two C", enc(W(1), Compressed(zlib.compress(J(1, {}).encode()[:5])), Compressed(zlib.compress(J(1, {}).encode()[5:]))), "C", "(end)", 6),
        ("garbage zlib", enc(W(1)) + b"2C\x00\x00\x00\x04abcd", "C", "payload", 6),
        ("raw deflate, no zlib header", enc(W(1), Compressed(zlib.compress(J(1, {}).encode())[2:-4])), "C", "payload", 6),
        ("truncated zlib", enc(W(1), Compressed(zlib.compress(J(1, {}).encode())[:-6])), "C", "payload", 6),
        ("bytes after the zlib stream", enc(W(1), Compressed(zlib.compress(J(1, {}).encode()) + b"xx")), "C", "payload", 6),
    ],
)
def test_refused_input(name: str, data: bytes, frame: str | None, field: str, offset: int) -> None:
    _, err, _ = drain(ServerConnection(), [data])
    assert err is not None, name
    assert (err.frame, err.field, err.offset) == (frame, field, offset), str(err)
    assert "lumberjack" in str(err)


def test_eof_inside_a_frame_and_inside_a_batch() -> None:
    _, err, _ = drain(ServerConnection(), [enc(W(1)) + J_HDR])
    assert err is not None and (err.frame, err.field, err.offset) == ("J", "(eof)", 6)
    _, err, _ = drain(ServerConnection(), [enc(W(2), J(1, {}))])
    assert err is not None and "inside a batch" in str(err)


def test_frames_before_a_bad_byte_are_delivered_first() -> None:
    data = enc(W(1), J(1, {}), W(1), J(2, {})) + b"2X"
    batches, err, _ = drain(ServerConnection(), [data])
    assert seqs(batches) == [[1], [2]]
    assert err is not None and err.field == "type"
    conn = ServerConnection()
    conn.receive_data(data, now=0.0)
    assert isinstance(conn.next_event(), Batch)
    assert isinstance(conn.next_event(), Batch)
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    with pytest.raises(RemoteProtocolError):  # and it stays broken
        conn.next_event()


# --------------------------------------------------------------------------- limits


def test_zlib_bomb_is_refused_without_inflating_it() -> None:
    bomb = zlib.compress(b"\0" * (256 * 1024 * 1024), 9)  # 256 MiB inflated, ~250 KB on the wire
    assert len(bomb) < 300_000
    with pytest.raises(Exception) as info:
        inflate(bomb, max_size=1024 * 1024)
    assert "max_decompressed_size" in str(info.value)
    _, err, _ = drain(ServerConnection(), [enc(W(1), Compressed(bomb))])
    assert isinstance(err, RemoteLimitExceeded)


def test_oversized_frames_are_refused_from_the_header() -> None:
    import attrs

    limits = attrs.evolve(DEFAULT_LIMITS, max_frame_size=1000)
    for data in (
        enc(W(1)) + J_HDR + (10**9).to_bytes(4, "big"),
        enc(W(1)) + b"2C" + (10**9).to_bytes(4, "big"),
        enc(W(1, V1)) + b"1D\x00\x00\x00\x01" + (10**8).to_bytes(4, "big"),
        enc(W(1, V1)) + b"1D\x00\x00\x00\x01\x00\x00\x00\x01" + (10**9).to_bytes(4, "big"),
    ):
        conn = ServerConnection(limits=limits)
        conn.receive_data(data, now=0.0)  # header only: the claimed payload is never allocated
        with pytest.raises(RemoteLimitExceeded):
            conn.next_event()


def test_nesting_depth_limit() -> None:
    inner = enc(W(1), J(1, {}))
    for _ in range(DEFAULT_LIMITS.max_nesting_depth + 1):
        inner = C(inner)
    _, err, _ = drain(ServerConnection(), [inner])
    assert isinstance(err, RemoteLimitExceeded) and "max_nesting_depth" in str(err)


def test_frame_constructors_validate() -> None:
    with pytest.raises(LocalProtocolError, match="count"):
        Window(-1)
    with pytest.raises(LocalProtocolError, match="version"):
        Window(1, 0x33)
    with pytest.raises(LocalProtocolError, match="only in version 2"):
        JsonFrame(1, b"{}", V1)
    with pytest.raises(LocalProtocolError, match="seq"):
        DataFrame(2**32, ())
    assert frames_mod.TYPE_NAMES[0x57] == "W"


@pytest.mark.parametrize(
    "payload",
    [b'{"a":NaN}', b'{"a":Infinity}', b"\xef\xbb\xbf{}", b'{"a":"\xff"}', b'{"a":1', b'{"a":1}{"b":2}'],
    ids=["NaN", "Infinity", "byte-order-mark", "invalid-utf8", "truncated", "two-documents"],
)
def test_strict_json_is_refused_like_jackson(payload: bytes) -> None:
    data = enc(W(1)) + b"2J\x00\x00\x00\x01" + len(payload).to_bytes(4, "big") + payload
    _, err, _ = drain(ServerConnection(), [data])
    assert err is not None and (err.frame, err.field, err.offset) == ("J", "json", 16)


def test_json_edge_values_keep_exact_payload() -> None:
    payload = b'{"big":123456789012345678901234567890,"u":"\\u00e9","nested":{"a":[1,2,{"b":null}]}}'
    data = enc(W(1)) + b"2J\x00\x00\x00\x01" + len(payload).to_bytes(4, "big") + payload
    batches, err, _ = drain(ServerConnection(), [data])
    assert err is None
    ev = batches[0].events[0]
    assert ev.payload == payload  # byte-exact, whatever the parser does with huge integers
    assert ev.fields()["u"] == "é" and ev.fields()["nested"]["a"][2] == {"b": None}


# --------------------------------------------------------------------------- max_batch_bytes (§4)


def _big_j(seq: int, size: int) -> JsonFrame:
    """A J frame whose payload is exactly ``size`` bytes."""
    return JsonFrame(seq, b'{"m":"' + b"x" * (size - 8) + b'"}')


@pytest.mark.parametrize("compressed", [False, True])
def test_batch_budget_at_the_line_and_one_past(compressed: bool) -> None:
    """The events a connection holds for one batch are capped by
    max_batch_bytes, plain or inside C frames, each under every other limit."""
    budget = 100_000
    limits = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=budget)
    sizes = [30_000, 30_000, 40_000]  # exactly the budget

    def window(extra: int) -> bytes:
        frames = [_big_j(i + 1, n + (extra if i == 2 else 0)) for i, n in enumerate(sizes)]
        if compressed:
            return enc(W(3), *(C(f) for f in frames))
        return enc(W(3), *frames)

    batches, err, _ = drain(ServerConnection(limits=limits), [window(0)])
    assert err is None and [len(b) for b in batches] == [3]
    batches, err, _ = drain(ServerConnection(limits=limits), [window(1)])
    assert batches == [] and isinstance(err, RemoteLimitExceeded)
    assert f"max_batch_bytes={budget}" in str(err) and err.field == "payload"
    if compressed:
        third_c = len(enc(W(3), C(_big_j(1, 30_000)), C(_big_j(2, 30_000))))
        assert (err.frame, err.offset) == ("C", third_c)
    else:
        third_j = len(enc(W(3), _big_j(1, 30_000), _big_j(2, 30_000)))
        assert (err.frame, err.offset) == ("J", third_j + 10)


def test_the_budget_is_per_batch() -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=50_000)
    windows = [enc(W(1), C(_big_j(1, 40_000))) for _ in range(5)]  # 200 KB in all, 40 KB per batch
    batches, err, _ = drain(ServerConnection(limits=limits), windows)
    assert err is None and len(batches) == 5


def test_many_compressed_frames_cannot_grow_a_batch_without_bound() -> None:
    """Thousands of small C frames, each inflating under max_decompressed_size:
    refused once the batch holds max_batch_bytes, long before the window ends."""
    limits = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=1 << 20)
    one = C(_big_j(1, 64 * 1024), level=9)  # ~100 bytes on the wire, 64 KiB held
    conn = ServerConnection(limits=limits)
    conn.receive_data(enc(W(10_000)) + one * 10_000, now=0.0)
    with pytest.raises(RemoteLimitExceeded, match="max_batch_bytes=1048576") as info:
        while conn.next_event() is not NEED_DATA:
            pass
    assert info.value.offset == len(enc(W(10_000))) + 16 * len(one)  # the 17th frame passes 1 MiB


def test_a_large_compressed_frame_costs_about_its_inflated_size_not_twice() -> None:
    """The inflated payload streams into the frame decoder: the peak is the
    events it holds plus one inflate step, not the whole inflated payload and
    the frames cut from it too."""
    import tracemalloc

    events = 24
    inner = b"".join(_big_j(i + 1, 1 << 20).encode() for i in range(events))  # 24 MiB inflated
    wire = enc(W(events), Compressed(zlib.compress(inner, 1)))
    del inner
    conn = ServerConnection(validate_json=False)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base, _ = tracemalloc.get_traced_memory()
        conn.receive_data(wire, now=0.0)
        batch = conn.next_event()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(batch, Batch) and len(batch) == events
    held = events << 20
    assert peak - base < held * 1.3, f"peak {(peak - base) >> 20} MiB for {held >> 20} MiB of events"
