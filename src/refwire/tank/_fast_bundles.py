"""The speed path of TANK's bundle and chunk decoding (specs/tank/README.md §4, §5).

The plain path, :mod:`refwire.tank.bundles`, decodes one :class:`Message` at a
time.  This module does the same work in columns: :func:`read_chunk` walks a
chunk with the plain path's walk (``bundles._walk_chunk``: entries, headers,
sequence numbers, truncation, the wanted messages kept by bisection), giving it
this module's :func:`_decode_messages`, which decodes a bundle's messages onto
the ends of four lists (contents, timestamps, keys, seqs) with the hot loop's
names bound to locals, and hands the columns to :meth:`ChunkResult.of_columns`;
:func:`messages_of` builds the :class:`Message` objects only when
``ChunkResult.messages`` is read, through the slots' descriptors.  Every error
is the plain path's: the same class, words, field and offset
(``tests/test_tank_differential.py``).

It registers itself in :data:`refwire.tank.bundles._SPEED` when imported (the
package's ``__init__`` imports it); the plain functions call it unless told
``fast=False`` or ``REFWIRE_REFERENCE=1`` is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from ..errors import LocalProtocolError
from ..wire import Limits, decode_uvarint
from .bundles import (
    _MIN_MESSAGE,
    _MSG_KNOWN,
    _SPEED,
    _U64,
    CODEC_SNAPPY,
    MSG_HAVE_KEY,
    MSG_SEQ_PREV_PLUS_ONE,
    MSG_USE_LAST_TS,
    BundleHeader,
    ChunkResult,
    Message,
    MessageColumns,
    _err,
    _raise_if_truncated,
    _truncated,
    _uvarint,
    _walk_chunk,
    parse_bundle_header,
    snappy_decompress,
)
from .errors import TruncatedBundle

__all__ = ["decode_bundle", "messages_of", "read_chunk"]

_new = object.__new__
_MESSAGE_SETTERS: Final = tuple(Message.__dict__[name].__set__ for name in ("content", "ts", "key", "seq"))
assert [a.name for a in attrs.fields(Message)] == ["content", "ts", "key", "seq"]


def messages_of(columns: tuple[list[bytes], list[int], list[bytes | None], Sequence[int | None]]) -> list[Message]:
    """Build one :class:`Message` per row of ``columns``, in order."""
    new = _new
    set_content, set_ts, set_key, set_seq = _MESSAGE_SETTERS
    out: list[Message] = []
    append = out.append
    for content, ts, key, seq in zip(*columns, strict=True):
        # Trusted construction: every field was decoded and checked (Message has no validators).
        m = new(Message)
        set_content(m, content)
        set_ts(m, ts)
        set_key(m, key)
        set_seq(m, seq)
        append(m)
    return out


def _decode_messages(
    data: bytes | memoryview,
    p: int,
    end: int,
    header: BundleHeader,
    base_seq: int,
    columns: MessageColumns,
    base: int,
    stop_at_truncation: bool,
) -> int:
    """Decode up to ``header.count`` messages from ``data[p:end]`` onto the
    ends of ``columns``.

    Returns the position after the last complete message.  With
    ``stop_at_truncation`` a message that does not fit ends the walk quietly
    (a partial trailing bundle; the complete ones before it are kept);
    otherwise it is an error.  On an error the columns hold a prefix of the
    bundle, which the caller drops with the exception.
    """
    contents, tss, keys, seqs = columns
    add_content = contents.append
    add_ts = tss.append
    add_key = keys.append
    n = header.count
    sparse = header.sparse
    # Non-sparse bundles number their messages base_seq, base_seq + 1, ...: the
    # seqs column is filled once at the end.  Sparse ones carry their own (§4).
    seq = header.first_seq if sparse else base_seq
    assert seq is not None
    seq -= 1  # the first message's number is first_seq (incremented below)
    last_seq = header.last_seq
    unpack_u64 = _U64.unpack_from
    copy = type(data) is not bytes  # slices of a memoryview are copied out to bytes
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
            if sparse:
                if i == 0:
                    seq += 1
                else:
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
        except TruncatedBundle:
            if stop_at_truncation:
                if not sparse:
                    seqs += range(base_seq, base_seq + i)
                return start
            raise
        add_content(bytes(data[q:p]) if copy else data[q:p])  # type: ignore[arg-type]
        add_ts(ts)
        add_key(key)
        if sparse:
            seqs.append(seq)
    if not sparse:
        seqs += range(base_seq, base_seq + n)
    return p


def decode_bundle(
    bundle: bytes | memoryview, base_seq: int | None = None, limits: Limits | None = None, base: int = 0
) -> tuple[BundleHeader, list[Message]]:
    """:func:`refwire.tank.bundles.decode_bundle`, decoding in columns."""
    max_dec = limits.max_decompressed_size if limits else 64 * 1024 * 1024
    header = parse_bundle_header(bundle, 0, len(bundle), base=base)
    p, end, data = header.size, len(bundle), bundle
    dbase = base
    if header.codec == CODEC_SNAPPY:
        data = snappy_decompress(bundle[p:], max_size=max_dec, offset=base + p)
        p, end, dbase = 0, len(data), base + header.size
    if header.count > (end - p) // _MIN_MESSAGE:
        raise _err(f"count {header.count} cannot fit in {end - p} bytes of messages", "count", base)
    columns: MessageColumns = ([], [], [], [])
    q = _decode_messages(data, p, end, header, base_seq or 0, columns, base=dbase, stop_at_truncation=False)
    if q != end:
        raise _err(f"{end - q} bytes after the last of {header.count} messages", "messageSet", dbase + q)
    if base_seq is None and not header.sparse:
        return header, messages_of((columns[0], columns[1], columns[2], [None] * header.count))
    return header, messages_of(columns)


def read_chunk(
    chunk: bytes | memoryview,
    base_seq: int | None,
    hwmark: int,
    requested_seq: int,
    limits: Limits | None = None,
    offset: int = 0,
) -> ChunkResult:
    """:func:`refwire.tank.bundles.read_chunk` in columns: its walk with this
    module's :func:`_decode_messages`; the result builds its :class:`Message`
    objects when asked."""
    walked = _walk_chunk(chunk, base_seq, hwmark, requested_seq, limits, offset, _decode_messages)
    return ChunkResult.of_columns(*walked, fast=True)


_SPEED["read_chunk"] = read_chunk
_SPEED["decode_bundle"] = decode_bundle
_SPEED["messages_of"] = messages_of
