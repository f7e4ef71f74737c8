"""The columns path of ``read_chunk`` against the per-message path it replaced.

``read_chunk`` decodes a chunk's messages into columns (contents, timestamps,
keys, seqs) and builds :class:`Message` objects only when ``messages`` is read.
The reference below is the walk as it was before, one ``Message`` per message,
kept here verbatim as the oracle: on valid, truncated and corrupted chunks both
must give the same messages, ``next_seq``, ``min_fetch_size``, ``partial`` and
``drained``, or the same error (class, words, field and offset).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refwire.errors import LocalProtocolError
from refwire.tank.bundles import (
    _MESSAGE_SETTERS,
    _MIN_MESSAGE,
    _MSG_KNOWN,
    _U64,
    CODEC_SNAPPY,
    MSG_HAVE_KEY,
    MSG_SEQ_PREV_PLUS_ONE,
    MSG_USE_LAST_TS,
    U64_MAX,
    BundleHeader,
    ChunkResult,
    Message,
    _err,
    _raise_if_truncated,
    _truncated,
    _uvarint,
    decode_bundle,
    encode_bundle,
    encode_entry,
    parse_bundle_header,
    read_chunk,
    snappy_decompress,
)
from refwire.tank.errors import TruncatedBundle
from refwire.wire import Limits, decode_uvarint

_new = object.__new__


def _ref_decode_messages(
    data: bytes | memoryview,
    p: int,
    end: int,
    header: BundleHeader,
    base_seq: int,
    *,
    base: int,
    stop_at_truncation: bool,
) -> tuple[list[Message], int]:
    """Decode up to ``header.count`` messages from ``data[p:end]``.

    Returns the messages and the position after the last complete one.  With
    ``stop_at_truncation`` a message that does not fit ends the walk quietly
    (a partial trailing bundle); otherwise it is an error.
    """
    out: list[Message] = []
    append = out.append
    n = header.count
    sparse = header.sparse
    seq = header.first_seq if sparse else base_seq
    assert seq is not None
    seq -= 1  # the first message's number is first_seq / base_seq (incremented below)
    last_seq = header.last_seq
    unpack_u64 = _U64.unpack_from
    copy = type(data) is not bytes  # slices of a memoryview are copied out to bytes
    new = _new
    set_content, set_ts, set_key, set_seq = _MESSAGE_SETTERS
    ts = 0
    for i in range(n):
        start = p
        try:
            if p >= end:
                raise _truncated(f"truncated: message {i} of {n}", "messageFlags", base + p)
            mflags = data[p]
            p += 1
            if mflags & ~_MSG_KNOWN & 0xFF:
                raise _err(f"message {i}: unknown flags {mflags:#04x}", "messageFlags", base + p - 1)
            if sparse and i > 0:
                assert last_seq is not None
                if mflags & MSG_SEQ_PREV_PLUS_ONE:
                    seq += 1
                elif i == n - 1:
                    seq = last_seq
                else:
                    delta, p = _uvarint(data, p, end, field="seqDelta", base=base)
                    seq += 1 + delta
                # the last message takes lastSeq, so a middle one must stay below it (no repeated seq)
                if seq >= last_seq if i < n - 1 else seq != last_seq:
                    raise _err(f"message {i}: seq {seq} disagrees with lastSeq {last_seq}", "seqDelta", base + start)
            else:
                seq += 1
            if not mflags & MSG_USE_LAST_TS:
                if end - p < 8:
                    raise _truncated("truncated: ts needs 8 bytes", "ts", base + p)
                (ts,) = unpack_u64(data, p)
                p += 8
            key = None
            if mflags & MSG_HAVE_KEY:
                if p >= end:
                    raise _truncated("truncated: keyLen", "keyLen", base + p)
                klen = data[p]
                p += 1
                if end - p < klen:
                    raise _truncated(f"truncated: key needs {klen} bytes", "key", base + p)
                key = bytes(data[p : p + klen])
                p += klen
            if p < end and data[p] < 0x80:  # a content length under 128: one varint byte (§4)
                clen = data[p]
                q = p + 1
            else:
                try:
                    clen, q = decode_uvarint(data, p, end, field="contentLen", base=base)
                except LocalProtocolError as exc:
                    _raise_if_truncated(exc, data, p, end)
                    raise
            p = q + clen
            if p > end:
                raise _truncated(f"truncated: content needs {clen} bytes, {end - q} left", "content", base + q)
            content = data[q:p]
        except TruncatedBundle:
            if stop_at_truncation:
                return out, start
            raise
        # Trusted construction: every field was read above (Message has no validators).
        m = new(Message)
        set_content(m, bytes(content) if copy else content)
        set_ts(m, ts)
        set_key(m, key)
        set_seq(m, seq)
        append(m)
    return out, p


def _ref_read_chunk(
    chunk: bytes | memoryview,
    *,
    base_seq: int | None,
    hwmark: int,
    requested_seq: int,
    limits: Limits | None = None,
    offset: int = 0,
) -> ChunkResult:
    """Walk a consume chunk as ``TankClient::process_consume`` does (§5).

    ``base_seq`` is the response's baseSeqNum (``None`` for err 0xfe: the first
    bundle is sparse and carries its own).  Complete messages of a partial
    uncompressed bundle are delivered; a partial compressed bundle is skipped
    and ``min_fetch_size`` names the size that reaches its end.  Malformed
    complete bundles raise :class:`LocalProtocolError`.
    """
    max_dec = limits.max_decompressed_size if limits else 64 * 1024 * 1024
    end = len(chunk)
    tail = requested_seq == U64_MAX
    out: list[Message] = []
    p = 0
    seq = base_seq
    min_fetch = 0
    partial = False
    stop = False
    while p < end and not stop:
        entry_start = p
        try:
            blen, p = _uvarint(chunk, p, end, field="bundleLen", base=offset)
        except TruncatedBundle:
            partial, min_fetch = True, (end - entry_start) + 1024
            break
        bundle_end = p + blen
        if blen == 0:
            raise _err("empty bundle (bundleLen 0)", "bundleLen", offset + entry_start)
        whole = bundle_end <= end
        try:
            header = parse_bundle_header(chunk, p, min(bundle_end, end), base=offset)
        except TruncatedBundle:
            if whole:
                raise
            partial, min_fetch = True, bundle_end - entry_start
            break
        if header.sparse:
            assert header.first_seq is not None and header.last_seq is not None
            if seq is not None and header.first_seq < seq and entry_start > 0:
                raise _err(f"sparse firstSeq {header.first_seq} below the running seq {seq}", "firstSeq", offset + p + 1)
            first, after = header.first_seq, header.last_seq + 1
        else:
            if seq is None:
                raise _err("err 0xfe but the first bundle is not sparse", "flags", offset + p)
            first, after = seq, seq + header.count
        if not tail and requested_seq >= after:
            seq = after  # fast skip (§5): no need to look inside
            if not whole:
                partial, min_fetch = True, bundle_end - entry_start
            p = bundle_end
            continue
        ms = p + header.size
        if header.codec == CODEC_SNAPPY:
            if not whole:
                partial, min_fetch = True, bundle_end - entry_start
                break
            data: bytes | memoryview = snappy_decompress(chunk[ms:bundle_end], max_size=max_dec, offset=offset + ms)
            dstart, dend, dbase = 0, len(data), offset + ms
        else:
            data, dstart, dend, dbase = chunk, ms, min(bundle_end, end), offset
        if header.count > (dend - dstart) // _MIN_MESSAGE and whole:
            raise _err(f"count {header.count} cannot fit in {dend - dstart} bytes", "count", offset + p)
        msgs, q = _ref_decode_messages(data, dstart, dend, header, first, base=dbase, stop_at_truncation=not whole)
        if whole and q != dend:
            raise _err(f"{dend - q} bytes after the last of {header.count} messages", "messageSet", dbase + q)
        if msgs and msgs[-1].seq <= hwmark and (tail or msgs[0].seq >= requested_seq):  # type: ignore[operator]
            out.extend(msgs)  # the whole bundle is wanted (seq rises through a bundle)
        else:
            for m in msgs:
                assert m.seq is not None
                if m.seq > hwmark:
                    stop = True
                    break
                if tail or m.seq >= requested_seq:
                    out.append(m)
        if not whole:
            partial, min_fetch = True, bundle_end - entry_start
            break
        seq = after
        p = bundle_end
    if out:
        last = out[-1].seq
        assert last is not None
        next_seq = last + 1 if tail else max(requested_seq, last + 1)
    else:
        next_seq = hwmark + 1 if tail else requested_seq
    return ChunkResult(tuple(out), next_seq, min_fetch, partial, end == 0)


def _ref_decode_bundle(
    bundle: bytes | memoryview,
    *,
    base_seq: int | None = None,
    limits: Limits | None = None,
    base: int = 0,
) -> tuple[BundleHeader, list[Message]]:
    """Decode one complete bundle.  Non-sparse bundles number their messages
    from ``base_seq`` (``seq`` stays ``None`` without one).  Trailing bytes
    after the last message are an error (the declared sizes lie)."""
    max_dec = limits.max_decompressed_size if limits else 64 * 1024 * 1024
    header = parse_bundle_header(bundle, 0, len(bundle), base=base)
    p, end, data = header.size, len(bundle), bundle
    dbase = base
    if header.codec == CODEC_SNAPPY:
        data = snappy_decompress(bundle[p:], max_size=max_dec, offset=base + p)
        p, end, dbase = 0, len(data), base + header.size
    if header.count > (end - p) // _MIN_MESSAGE:
        raise _err(f"count {header.count} cannot fit in {end - p} bytes of messages", "count", base)
    msgs, q = _ref_decode_messages(data, p, end, header, base_seq or 0, base=dbase, stop_at_truncation=False)
    if q != end:
        raise _err(f"{end - q} bytes after the last of {header.count} messages", "messageSet", dbase + q)
    if base_seq is None and not header.sparse:
        msgs = [attrs.evolve(m, seq=None) for m in msgs]
    return header, msgs


# --------------------------------------------------------------------------- the comparison


def _outcome(fn: object, *args: object, **kw: object) -> tuple[object, ...]:
    try:
        r = fn(*args, **kw)  # type: ignore[operator]
    except LocalProtocolError as exc:
        return ("error", type(exc), str(exc), exc.frame, exc.field, exc.offset)
    if isinstance(r, ChunkResult):
        return ("chunk", r.messages, r.next_seq, r.min_fetch_size, r.partial, r.drained)
    return ("bundle", r)


def _check_columns(r: ChunkResult) -> None:
    """The columns and the messages built from them agree, read in either order."""
    n = r.count
    columns = (r.contents, r.timestamps, r.keys, r.seqs)
    msgs = r.messages
    assert n == len(msgs) and r.count == n
    assert columns == (
        [m.content for m in msgs],
        [m.ts for m in msgs],
        [m.key for m in msgs],
        [m.seq for m in msgs],
    )
    assert (r.contents, r.timestamps, r.keys, r.seqs) == columns  # the same once the messages are built
    assert all(type(c) is bytes for c in r.contents)
    assert r.messages is msgs  # built once


contents_st = st.one_of(st.binary(max_size=24), st.binary(min_size=126, max_size=200))
message_st = st.builds(
    Message,
    contents_st,
    st.sampled_from([0, 0, 7, 1_700_000_000_000, U64_MAX]),
    st.none() | st.none() | st.binary(max_size=4),
)


@st.composite
def chunks(draw: st.DrawFn) -> tuple[bytes, int | None]:
    """A chunk of 1-5 entries, plain or Snappy, dense or sparse, then maybe cut and corrupted."""
    base_seq = draw(st.none() | st.integers(1, 50))
    running = base_seq if base_seq is not None else draw(st.integers(1, 50))
    entries: list[bytes] = []
    for i in range(draw(st.integers(1, 5))):
        msgs = draw(st.lists(message_st, min_size=1, max_size=12))
        sparse = draw(st.booleans()) or (i == 0 and base_seq is None)
        compress = draw(st.booleans())
        if sparse:
            seq = running + draw(st.integers(0, 3))
            numbered = []
            for m in msgs:
                numbered.append(attrs.evolve(m, seq=seq))
                seq += 1 + draw(st.integers(0, 2))
            msgs = numbered
            running = seq
        else:
            running += len(msgs)
        entries.append(encode_entry(encode_bundle(msgs, compress=compress, sparse=sparse)))
    chunk = bytearray(b"".join(entries))
    if draw(st.booleans()):
        del chunk[draw(st.integers(0, len(chunk))) :]
    for _ in range(draw(st.integers(0, 3))):
        if chunk:
            chunk[draw(st.integers(0, len(chunk) - 1))] ^= draw(st.integers(1, 255))
    return bytes(chunk), base_seq


@given(
    chunks(),
    st.integers(0, 80) | st.just(U64_MAX),
    st.integers(0, 90),
    st.sampled_from([None, Limits(max_decompressed_size=64)]),
    st.booleans(),
)
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_read_chunk_matches_the_per_message_walk(
    chunk_base: tuple[bytes, int | None], requested: int, hwmark: int, limits: Limits | None, view: bool
) -> None:
    chunk, base_seq = chunk_base
    data = memoryview(chunk) if view else chunk
    kw = {"base_seq": base_seq, "hwmark": hwmark, "requested_seq": requested, "limits": limits, "offset": 9}
    got = _outcome(read_chunk, data, **kw)
    assert got == _outcome(_ref_read_chunk, data, **kw)
    if got[0] == "chunk":
        _check_columns(read_chunk(data, **kw))  # type: ignore[arg-type]


@given(chunks(), st.none() | st.integers(1, 2**40), st.booleans())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_decode_bundle_matches_the_per_message_walk(
    chunk_base: tuple[bytes, int | None], base_seq: int | None, view: bool
) -> None:
    chunk = chunk_base[0]
    try:
        blen, p = decode_uvarint(chunk, 0, len(chunk), field="bundleLen")
    except LocalProtocolError:
        return
    bundle = chunk[p : p + blen]
    data = memoryview(bundle) if view else bundle
    assert _outcome(decode_bundle, data, base_seq=base_seq, base=p) == _outcome(
        _ref_decode_bundle, data, base_seq=base_seq, base=p
    )


def test_filtering_cuts_inside_bundles() -> None:
    """requested_seq and hwmark land inside bundles: the kept slice, in both paths."""
    dense = encode_entry(encode_bundle([Message(bytes([i]), i) for i in range(10)], compress=False))
    sparse = encode_entry(encode_bundle([Message(b"s", 1, None, s) for s in (30, 32, 35, 36)], sparse=True, compress=False))
    chunk = dense + dense + sparse
    for requested in (0, 1, 5, 10, 11, 15, 20, 21, 31, 33, 36, 37):
        for hwmark in (0, 4, 10, 14, 20, 29, 31, 35, 36, 99):
            kw = {"base_seq": 1, "hwmark": hwmark, "requested_seq": requested}
            assert _outcome(read_chunk, chunk, **kw) == _outcome(_ref_read_chunk, chunk, **kw), kw
    r = read_chunk(chunk, base_seq=1, hwmark=35, requested_seq=5)
    assert r.seqs == [*range(5, 21), 30, 32, 35] and r.next_seq == 36
    _check_columns(r)
    tail = read_chunk(chunk, base_seq=1, hwmark=31, requested_seq=U64_MAX)
    assert tail.seqs == [*range(1, 21), 30] and tail.next_seq == 31


def test_result_equality_hash_and_repr_are_the_messages() -> None:
    msgs = (Message(b"a", 1, None, 1), Message(b"b", 2, b"k", 2))
    built = ChunkResult(msgs, 3)
    columns = ChunkResult.of_columns(([b"a", b"b"], [1, 2], [None, b"k"], [1, 2]), 3)
    assert built == columns and hash(built) == hash(columns) and repr(built) == repr(columns)
    assert repr(built) == f"ChunkResult(messages={msgs!r}, next_seq=3, min_fetch_size=0, partial=False, drained=False)"
    assert columns != ChunkResult.of_columns(([b"a", b"b"], [1, 2], [None, b"k"], [1, 2]), 4)
    assert columns != ChunkResult.of_columns(([b"a", b"c"], [1, 2], [None, b"k"], [1, 2]), 3)
    assert (
        columns != ChunkResult(msgs, 3, partial=True)
        and columns != ChunkResult(msgs, 3, 1)
        and columns != ChunkResult(msgs, 3, drained=True)
    )
    assert (columns == object()) is False
    assert built.count == 2 and built.seqs == [1, 2] and built.contents == [b"a", b"b"]
    assert built.keys == [None, b"k"] and built.timestamps == [1, 2]
    _check_columns(columns)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        columns.next_seq = 9  # type: ignore[misc]


def test_columns_are_copies() -> None:
    """What the accessors return can be changed without changing the result."""
    r = read_chunk(encode_entry(encode_bundle([Message(b"x", 5)], compress=False)), base_seq=7, hwmark=9, requested_seq=0)
    r.seqs.append(99)
    r.contents.clear()
    assert r.seqs == [7] and r.contents == [b"x"] and r.messages == (Message(b"x", 5, None, 7),)


def test_a_corrupt_middle_message_names_its_field_in_both_paths() -> None:
    msgs = [Message(b"abc", 1), Message(b"def", 1), Message(b"ghi", 1)]
    bundle = bytearray(encode_bundle(msgs, compress=False))
    bundle[-5] = 0xF8  # the third message's flags: unknown bits
    chunk = encode_entry(bytes(bundle))
    got = _outcome(read_chunk, chunk, base_seq=1, hwmark=9, requested_seq=0)
    assert got == _outcome(_ref_read_chunk, chunk, base_seq=1, hwmark=9, requested_seq=0)
    assert got[0] == "error" and got[4] == "messageFlags" and got[5] == len(chunk) - 5


def test_ragged_columns_are_refused_not_cut() -> None:
    """Columns of unequal lengths are a caller's bug: the result refuses them
    when it is made, so its count, columns and messages always agree."""
    with pytest.raises(
        ValueError, match=r"^ChunkResult: columns of unequal lengths \[2, 2, 1, 2\] \(contents, timestamps, keys, seqs\)$"
    ):
        ChunkResult.of_columns(([b"a", b"b"], [1, 2], [None], [1, 2]), 3)
    with pytest.raises(
        ValueError, match=r"^ChunkResult: columns of unequal lengths \[2, 2, 2, 1\] \(contents, timestamps, keys, seqs\)$"
    ):
        ChunkResult(None, 2, columns=([b"a", b"b"], [1, 2], [None, None], [1]))
    with pytest.raises(ValueError, match=r"^ChunkResult needs messages or columns$"):
        ChunkResult(None, 2)
    assert ChunkResult.of_columns(([], [], [], []), 0, drained=True).count == 0
    assert ChunkResult((), 0).count == 0
    # The result takes its lists over; one changed afterwards is still refused, not cut.
    for i in range(4):
        columns: Any = ([b"a"], [1], [None], [1])
        taken = ChunkResult.of_columns(columns, 2)
        columns[i].append(columns[i][0])
        with pytest.raises(ValueError):
            taken.messages  # noqa: B018


def test_results_that_differ_hash_apart() -> None:
    """The hash spreads over everything equality compares (the messages and the
    four other fields), so results used as set members or dict keys do not share a bucket."""
    cols = ([b"a"], [1], [None], [5])
    results = [
        ChunkResult.of_columns(cols, 6),
        ChunkResult.of_columns(([b"b"], [1], [None], [5]), 6),
        ChunkResult.of_columns(([b"a"], [1], [None], [7]), 6),
        ChunkResult.of_columns(cols, 7),
        ChunkResult.of_columns(cols, 6, 100),
        ChunkResult.of_columns(cols, 6, partial=True),
        ChunkResult.of_columns(cols, 6, drained=True),
        ChunkResult((), 6),
    ]
    assert len({hash(r) for r in results}) == len(results)
    assert len(set(results)) == len(results)
    assert hash(ChunkResult.of_columns(([b"a"], [1], [None], [5]), 6)) == hash(ChunkResult((Message(b"a", 1, None, 5),), 6))
