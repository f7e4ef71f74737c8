"""The columns path of ``read_chunk`` (the speed path) against the per-message walk.

``read_chunk(..., fast=True)`` (:mod:`refwire.tank._fast_bundles`) decodes a
chunk's messages into columns (contents, timestamps, keys, seqs) and builds
:class:`Message` objects only when ``messages`` is read.  The oracle is the
plain path, ``fast=False`` (:mod:`refwire.tank.bundles`): the walk the columns
replaced, one ``Message`` per message, written from the spec.  On valid,
truncated and corrupted chunks both must give the same messages, ``next_seq``,
``min_fetch_size``, ``partial`` and ``drained``, or the same error (class,
words, field and offset).  Every test here names its path, so it checks the
same thing with ``REFWIRE_REFERENCE=1``.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.tank_strategies import chunks

from refwire.errors import LocalProtocolError
from refwire.tank import bundles
from refwire.tank.bundles import U64_MAX, ChunkResult, Message, encode_bundle, encode_entry
from refwire.wire import Limits, decode_uvarint

#: the path under test (the speed path), and the oracle (the plain path)
read_chunk = functools.partial(bundles.read_chunk, fast=True)
_ref_read_chunk = functools.partial(bundles.read_chunk, fast=False)
decode_bundle = functools.partial(bundles.decode_bundle, fast=True)
_ref_decode_bundle = functools.partial(bundles.decode_bundle, fast=False)


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


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
def test_result_equality_hash_and_repr_are_the_messages(fast: bool) -> None:
    """A result made of columns builds its messages the speed path's way or the plain one's (``fast``)."""
    msgs = (Message(b"a", 1, None, 1), Message(b"b", 2, b"k", 2))
    built = ChunkResult(msgs, 3)
    columns = ChunkResult.of_columns(([b"a", b"b"], [1, 2], [None, b"k"], [1, 2]), 3, fast=fast)
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


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
def test_ragged_columns_are_refused_not_cut(fast: bool) -> None:
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
        taken = ChunkResult.of_columns(columns, 2, fast=fast)
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
