"""The server machine's speed path (``fast=True``) decodes a window's ``J``
frames in columns (``JsonRun``) and builds a ``Batch``'s frames only when asked.
It must be the plain per-frame machine (``fast=False``) exactly: the same
batches, acks, transitions, and the same error (class, frame, field, offset,
words) at the same byte, for any stream, valid or hostile, however it is split
(specs/lumberjack/README.md §2.3, §3.1-§3.4, §3.10, §4).  The tests of runs
select the speed path explicitly, so they hold under ``REFWIRE_REFERENCE=1`` too."""

from __future__ import annotations

import zlib
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lumberjack_strategies import drain, hostile_streams, j, split

from refwire.errors import LimitExceeded, RemoteProtocolError
from refwire.lumberjack import V1, V2, Ack, Batch, Compressed, DataFrame, JsonFrame, ServerConnection, Window
from refwire.lumberjack.frames import DEFAULT_LIMITS, FrameDecoder, JsonRun, inflate_frames, json_frames


def outcome(conn: ServerConnection, chunks: list[bytes]) -> tuple[Any, ...]:
    batches, err, sent = drain(conn, chunks)
    shown = [
        (
            b.version,
            b.number,
            len(b),
            b.last_seq,
            [(type(e).__name__, e.seq, getattr(e, "payload", None), e.version, getattr(e, "data", None)) for e in b.events],
        )
        for b in batches
    ]
    error = None if err is None else (type(err).__name__, str(err), err.frame, err.field, err.offset)
    return shown, error, sent, sorted(conn.transitions_seen), conn.state


configs = st.fixed_dictionaries(
    {
        "validate_json": st.booleans(),
        "accept_mixed_versions": st.booleans(),
        "ack_mode": st.sampled_from(["last-seq", "count"]),
        "max_batch_bytes": st.sampled_from([DEFAULT_LIMITS.max_batch_bytes, 1, 20, 40]),
    }
)


def machines(cfg: dict[str, Any]) -> tuple[ServerConnection, ServerConnection]:
    limits = attrs.evolve(DEFAULT_LIMITS, max_batch_bytes=cfg["max_batch_bytes"])
    kw = {k: v for k, v in cfg.items() if k != "max_batch_bytes"}
    return ServerConnection(limits=limits, fast=True, **kw), ServerConnection(limits=limits, fast=False, **kw)


@settings(max_examples=400, deadline=None)
@given(hostile_streams(), configs, st.lists(st.integers(0, 400), max_size=4))
def test_runs_decide_as_frame_by_frame(stream: bytes, cfg: dict[str, Any], cuts: list[int]) -> None:
    fast, slow = machines(cfg)
    chunks = split(stream, cuts)
    assert outcome(fast, chunks) == outcome(slow, chunks)


@pytest.mark.parametrize("limit", [29, 30, 31, 59, 60])
@pytest.mark.parametrize("compress", [False, True])
def test_max_batch_bytes_names_the_frame_that_crosses_it(limit: int, compress: bool) -> None:
    # Six 10-byte payloads: the limit is crossed by the 3rd (limit 29), 4th (30), ...
    body = b"".join(j(i + 1, b'{"a":"%02d"}' % i) for i in range(6))
    assert len(body) == 6 * 20
    stream = Window(6).encode() + (Compressed(zlib.compress(body)).encode() if compress else body)
    cfg = {"validate_json": True, "accept_mixed_versions": False, "ack_mode": "last-seq", "max_batch_bytes": limit}
    fast, slow = machines(cfg)
    got = outcome(fast, [stream])
    assert got == outcome(slow, [stream])
    error = got[1]
    crossing = limit // 10 + 1  # the frame whose payload takes the total past the limit
    if crossing > 6:
        assert error is None and got[0][0][2] == 6
    else:
        assert error is not None and error[0] == "RemoteLimitExceeded" and error[3] == "payload"
        assert error[4] == (6 if compress else 6 + 20 * (crossing - 1) + 10)


def test_data_after_a_complete_window_is_refused_at_its_frame() -> None:
    body = b"".join(j(i + 1, b"{}") for i in range(5))
    stream = Window(3).encode() + body
    cfg = {"validate_json": True, "accept_mixed_versions": False, "ack_mode": "last-seq", "max_batch_bytes": 1000}
    fast, slow = machines(cfg)
    got = outcome(fast, [stream])
    assert got == outcome(slow, [stream])
    assert got[1] is not None and got[1][4] == 6 + 3 * 12 + 1  # the type byte of the 4th J
    assert [b[2] for b in got[0]] == [3]


def test_a_batch_reads_its_columns_without_building_frames() -> None:
    conn = ServerConnection(validate_json=True, fast=True)
    conn.receive_data(Window(3).encode() + j(7, b'{"a":1}') + j(8, b'{"b":2}') + j(9, b"{}"), now=0.0)
    batch = conn.next_event()
    assert isinstance(batch, Batch)
    assert batch._events is None  # nothing built yet
    assert len(batch) == 3 and batch.last_seq == 9 and batch.seqs == [7, 8, 9]
    assert batch.payloads == [b'{"a":1}', b'{"b":2}', b"{}"]
    assert batch.docs == [{"a": 1}, {"b": 2}, {}]
    assert batch._events is None
    conn.accept(batch, now=0.0)
    assert conn.data_to_send() == Ack(9).encode()
    assert batch._events is None  # acking reads the columns only
    events = batch.events
    assert events == (JsonFrame(7, b'{"a":1}'), JsonFrame(8, b'{"b":2}'), JsonFrame(9, b"{}"))
    assert [e.data for e in events] == [{"a": 1}, {"b": 2}, {}]
    assert batch.events is events  # built once
    assert batch == Batch(V2, events, 0) and hash(batch) == hash(Batch(V2, events, 0))
    assert repr(batch) == repr(Batch(V2, events, 0))
    assert batch.seqs == [7, 8, 9] and batch.payloads == [b'{"a":1}', b'{"b":2}', b"{}"] and batch.docs[0] == {"a": 1}


def test_a_batch_of_frames_reads_the_same() -> None:
    b = Batch(V1, (DataFrame(4, ((b"k", b"v"),)),), 2)
    assert len(b) == 1 and b.last_seq == 4 and b.seqs == [4] and b.payloads == [] and b.docs == []
    unvalidated = Batch.of_columns(V2, [(V2, [1, 2], [b"{}", b"[]"], None)], 0)
    assert unvalidated.docs == [None, None] and unvalidated.events[1] == JsonFrame(2, b"[]")
    assert unvalidated != "not a batch" and unvalidated != Batch(V2, (), 0)


def test_the_decoder_groups_runs_by_version_and_breaks_them_at_other_frames() -> None:
    dec = FrameDecoder(validate_json=False, strict_versions=False, fast=True)
    dec.feed(j(1, b"a") + j(2, b"b") + j(3, b"c", V1) + Window(1).encode() + j(4, b"d"))
    out = dec.frames(runs=True)
    assert [type(f).__name__ for f in out] == ["JsonRun", "JsonRun", "Window", "JsonRun"]
    assert [(r.version, r.seqs, r.payloads, r.docs) for r in out if isinstance(r, JsonRun)] == [
        (V2, [1, 2], [b"a", b"b"], None),
        (V1, [3], [b"c"], None),
        (V2, [4], [b"d"], None),
    ]
    assert out[0].size() == 22 and [f.seq for f in out[0].frames()] == [1, 2]


def test_a_run_is_kept_across_a_split_only_within_one_call() -> None:
    dec = FrameDecoder(validate_json=True, fast=True)
    stream = j(1, b"{}") + j(2, b'{"x":1}')
    dec.feed(stream[:15])
    first = dec.frames(runs=True)
    dec.feed(stream[15:])
    second = dec.frames(runs=True)
    assert [(r.seqs, r.docs) for r in first + second] == [([1], [{}]), ([2], [{"x": 1}])]


def test_errors_inside_a_run_report_the_frame_and_the_decoded_prefix() -> None:
    stream = Window(2).encode() + j(1, b"{}") + j(2, b"[]")
    fast, slow = machines({"validate_json": True, "accept_mixed_versions": False, "ack_mode": "count", "max_batch_bytes": 100})
    got = outcome(fast, [stream])
    assert got == outcome(slow, [stream])
    assert got[1] is not None and got[1][2] == "J" and got[1][3] == "json" and got[1][4] == 6 + 12 + 10
    with pytest.raises(RemoteProtocolError):
        fast.next_event()


@pytest.mark.parametrize("bad", [0, 1, 3])
@pytest.mark.parametrize("payload", [b"[1]", b"{"])
def test_a_run_checked_at_once_raises_the_frame_by_frame_error(bad: int, payload: bytes) -> None:
    frames = [j(i + 1, b'{"n":%d}' % i) for i in range(4)]
    frames[bad] = j(bad + 1, payload)
    stream = b"".join(frames) + b"2X"  # then an unknown frame type: the bad payload is still the first error
    per_frame = FrameDecoder(validate_json=True, fast=False)
    per_frame.feed(stream)
    good, expected = per_frame.frames_before_error()
    dec = FrameDecoder(validate_json=True, fast=True)
    dec.feed(stream)
    runs, err = dec.frames_before_error(runs=True)
    assert expected is not None and err is not None
    assert (str(err), err.frame, err.field, err.offset) == (str(expected), "J", "json", 17 * bad + 10)
    assert [(f.seq, f.payload, f.data) for r in runs for f in r.frames()] == [(f.seq, f.payload, f.data) for f in good]
    assert len(good) == bad


def test_a_framing_error_after_good_runs_is_raised_with_their_documents() -> None:
    dec = FrameDecoder(validate_json=True, fast=True)
    dec.feed(j(1, b'{"a":1}') + Window(1).encode() + j(2, b"{}") + b"2X")
    runs, err = dec.frames_before_error(runs=True)
    assert err is not None and err.field == "type" and err.offset == 17 + 6 + 12 + 1
    assert [getattr(r, "docs", None) for r in runs] == [[{"a": 1}], None, [{}]]


CFG = {"validate_json": True, "accept_mixed_versions": False, "ack_mode": "last-seq", "max_batch_bytes": 100}


@pytest.mark.parametrize(
    ("stream", "error"),
    [
        (Window(0).encode() + j(1, b"{}"), ("data frame outside a window (no W announced it)", "J", "type", 7)),
        (Window(1, V1).encode() + j(1, b"{}"), ("version byte '2' on a version '1' connection", "J", "version", 6)),
    ],
)
def test_a_json_frame_refused_by_the_machine_is_named_j_frame_by_frame_too(stream: bytes, error: tuple[Any, ...]) -> None:
    for conn in machines(CFG):
        _, err, _ = drain(conn, [stream])
        assert err is not None and (err.reason, err.frame, err.field, err.offset) == error


def test_a_run_starts_empty_at_offset_0_and_builds_frames_of_its_version() -> None:
    run = JsonRun(V1)
    assert (run.version, run.start, run.seqs, run.payloads, run.docs, len(run), run.size()) == (V1, 0, [], [], None, 0, 0)
    run.seqs += [3, 4]
    run.payloads += [b"{}", b"[]"]
    assert [(f.version, f.seq, f.payload, f.data) for f in run.frames()] == [(V1, 3, b"{}", None), (V1, 4, b"[]", None)]


def test_json_frames_needs_a_payload_per_seq() -> None:
    with pytest.raises(ValueError, match="zip"):
        json_frames(V2, [1, 2], [b"{}"], None)
    with pytest.raises(ValueError, match="zip"):
        json_frames(V2, [1], [b"{}", b"{}"], [{}, {}])


def test_inflate_frames_gives_runs_when_asked() -> None:
    payload = zlib.compress(j(1, b"{}") + j(2, b'{"a":1}'))
    (run,) = inflate_frames(payload, runs=True, fast=True)
    assert isinstance(run, JsonRun) and (run.seqs, run.payloads, run.docs) == ([1, 2], [b"{}", b'{"a":1}'], [{}, {"a": 1}])
    assert [type(f) for f in inflate_frames(payload, fast=True)] == [JsonFrame, JsonFrame]
    # the plain path makes no runs: runs=True gives one JsonFrame per frame there
    assert [type(f) for f in inflate_frames(payload, runs=True, fast=False)] == [JsonFrame, JsonFrame]


@pytest.mark.parametrize("runs", [False, True])
def test_the_inflate_budget_counts_every_run_of_a_step(runs: bool) -> None:
    # two runs of 7 payload bytes each, a W between them: 14 bytes held
    payload = zlib.compress(j(1, b'{"a":1}') + Window(1).encode() + j(2, b'{"b":2}'))
    assert len(inflate_frames(payload, budget=14, runs=runs, fast=runs)) == 3
    with pytest.raises(LimitExceeded) as ei:
        inflate_frames(payload, budget=13, runs=runs, offset=5, fast=runs)
    e = ei.value
    assert (e.frame, e.field, e.offset) == ("C", "payload", 5)
    assert e.reason == (
        f"the C frame's events, with the batch's before it, exceed the limit max_batch_bytes={DEFAULT_LIMITS.max_batch_bytes}"
        " (a C frame's events are held together, even when they span windows)"
    )
