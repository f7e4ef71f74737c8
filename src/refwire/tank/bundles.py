"""TANK bundles and consume chunks (specs/tank/README.md §4 and §5): the plain path.

A bundle is ``flags:u8 [count:varint] [firstSeq:u64 [lastSeq-firstSeq-1:varint]]``
followed by a message set (raw-Snappy compressed as a whole when ``flags & 3 == 1``).
Each message is ``flags:u8 [seqDelta:varint] [ts:u64] [keyLen:u8 key] contentLen:varint content``.

On the wire and in storage a bundle travels as ``bundleLen:varint bundle`` (an
*entry*).  A consume chunk is a run of entries; the last one may be partial
(TANK 1 brokers clipped chunks at the fetch size), so :func:`read_chunk`
delivers every complete message and says how to make progress (§5).

Everything here is pure: bytes in, values out, a typed error naming the field
and offset for anything malformed, never more memory than a limit allows.

The code here follows the spec one message at a time, one :class:`Message`
each.  The speed path, :mod:`refwire.tank._fast_bundles`, walks a chunk with the
same :func:`_walk_chunk` but decodes each bundle's messages with its own decoder
and builds no :class:`Message` until one is asked for; :func:`read_chunk`,
:func:`decode_bundle` and :class:`ChunkResult` take it unless ``fast=False`` or
``REFWIRE_REFERENCE=1`` (:mod:`refwire.speed`) says otherwise, and
``tests/test_tank_differential.py`` holds the two to the same results.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import Any, Final, TypedDict

import attrs
import cramjam

from ..errors import LimitExceeded, LocalProtocolError
from ..speed import use_fast
from ..wire import Limits, decode_uvarint, encode_uvarint
from .errors import TruncatedBundle
from .frames import REQUEST_COST

__all__ = [
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "MSG_HAVE_KEY",
    "MSG_SEQ_PREV_PLUS_ONE",
    "MSG_USE_LAST_TS",
    "SPARSE",
    "U64_MAX",
    "BundleHeader",
    "ChunkResult",
    "Message",
    "MessageColumns",
    "choose_compression",
    "decode_bundle",
    "encode_bundle",
    "encode_entry",
    "parse_bundle_header",
    "read_chunk",
    "snappy_decompress",
]

PROTOCOL: Final = "tank"
CODEC_NONE: Final = 0
CODEC_SNAPPY: Final = 1
SPARSE: Final = 0x40
_RESERVED: Final = 0x80
MSG_HAVE_KEY: Final = 1
MSG_USE_LAST_TS: Final = 2
MSG_SEQ_PREV_PLUS_ONE: Final = 4
_MSG_KNOWN: Final = MSG_HAVE_KEY | MSG_USE_LAST_TS | MSG_SEQ_PREV_PLUS_ONE
U64_MAX: Final = 0xFFFF_FFFF_FFFF_FFFF
U32_MAX: Final = 0xFFFF_FFFF
_U64: Final = struct.Struct("<Q")
#: every message takes at least ``flags`` + ``contentLen`` (2 bytes): a count larger
#: than half the bytes present is a lie and is refused before decoding anything.
_MIN_MESSAGE: Final = 2
_VARINT_MAX: Final = 5  #: decode_uvarint's default max_bytes, the longest u32 varint


@attrs.frozen
class Message:
    """One message: ``content``, ``ts`` (ms since the epoch, opaque u64), an
    optional ``key`` (at most 255 bytes) and, once decoded or for sparse
    bundles, its sequence number ``seq``."""

    content: bytes
    ts: int = 0
    key: bytes | None = None
    seq: int | None = None


@attrs.frozen
class BundleHeader:
    """The uncompressed head of a bundle (§4).  ``size`` is the header's byte length."""

    flags: int
    count: int
    first_seq: int | None
    last_seq: int | None
    size: int

    @property
    def codec(self) -> int:
        return self.flags & 3

    @property
    def sparse(self) -> bool:
        return bool(self.flags & SPARSE)


def _err(reason: str, field: str, offset: int, frame: str = "bundle") -> LocalProtocolError:
    return LocalProtocolError(reason, protocol=PROTOCOL, frame=frame, field=field, offset=offset)


def _truncated(reason: str, field: str, offset: int) -> TruncatedBundle:
    return TruncatedBundle(reason, protocol=PROTOCOL, frame="bundle", field=field, offset=offset)


def _uvarint(data: bytes | memoryview, p: int, end: int, *, field: str, base: int) -> tuple[int, int]:
    """:func:`~refwire.wire.decode_uvarint`; a varint that runs past ``end`` raises
    :class:`~refwire.tank.errors.TruncatedBundle` (same reason, field and offset)."""
    try:
        return decode_uvarint(data, p, end, field=field, base=base)
    except LocalProtocolError as exc:
        _raise_if_truncated(exc, data, p, end)
        raise


def _raise_if_truncated(exc: LocalProtocolError, data: bytes | memoryview, p: int, end: int) -> None:
    """Name the protocol and frame on ``exc`` (from decode_uvarint, for the varint
    at ``p``: it knows neither), and raise it as a
    :class:`~refwire.tank.errors.TruncatedBundle` if the varint ran past ``end``."""
    exc.located(protocol=PROTOCOL, frame="bundle")
    # decode_uvarint reaches ``end`` before its 5-byte cap only when every byte left continues the varint.
    if end - p <= _VARINT_MAX and all(b & 0x80 for b in data[p:end]):
        raise TruncatedBundle(exc.reason, protocol=exc.protocol, frame=exc.frame, field=exc.field, offset=exc.offset) from None


# --------------------------------------------------------------------------- encoding


def choose_compression(messages: Sequence[Message]) -> bool:
    """The C++ client's policy (§4): Snappy above 512 messages or 1024 bytes of keys+contents."""
    return len(messages) > 512 or sum(len(m.content) + len(m.key or b"") for m in messages) > 1024


def encode_bundle(messages: Sequence[Message], *, compress: bool | None = None, sparse: bool = False) -> bytes:
    """Encode a bundle as the C++ client does (§4): count in the flags when
    1..15, else a varint; UseLastSpecifiedTS when a timestamp repeats the
    previous one; for ``sparse`` bundles the messages' ``seq`` fields (strictly
    increasing) give firstSeq/lastSeq and per-message deltas, SeqNumPrevPlusOne
    marking a middle message whose delta is 0.  ``compress=None`` applies
    :func:`choose_compression`."""
    n = len(messages)
    if n == 0:
        raise _err("a bundle needs at least one message (count 0 crashes the real broker)", "count", 0)
    if n > U32_MAX:
        raise _err("too many messages for one bundle", "count", 0)
    if compress is None:
        compress = choose_compression(messages)
    flags = (CODEC_SNAPPY if compress else CODEC_NONE) | (SPARSE if sparse else 0)
    head = bytearray()
    if n <= 15:
        flags |= n << 2
        head.append(flags)
    else:
        head.append(flags)
        head += encode_uvarint(n)
    seqs: list[int] = []
    if sparse:
        for i, m in enumerate(messages):
            if m.seq is None or not 1 <= m.seq < U64_MAX:
                raise _err(f"sparse bundle message {i} needs a sequence number 1..2**64-2", "seq", 0)
            if seqs and m.seq <= seqs[-1]:
                raise _err(f"sparse bundle message {i}: seq {m.seq} not above {seqs[-1]}", "seq", 0)
            seqs.append(m.seq)
        head += _U64.pack(seqs[0])
        if n != 1:
            head += encode_uvarint(_check_u32(seqs[-1] - seqs[0] - 1, "lastSeq"))
    body = bytearray()
    last_ts: int | None = None
    for i, m in enumerate(messages):
        mflags = 0
        if m.key is not None:
            if len(m.key) > 255:
                raise _err(f"message {i}: key of {len(m.key)} bytes (at most 255)", "key", 0)
            mflags |= MSG_HAVE_KEY
        if i > 0 and m.ts == last_ts:
            mflags |= MSG_USE_LAST_TS
        middle = sparse and 0 < i < n - 1
        delta = seqs[i] - seqs[i - 1] - 1 if middle else 0
        if middle and delta == 0:
            mflags |= MSG_SEQ_PREV_PLUS_ONE
        body.append(mflags)
        if middle and delta:
            body += encode_uvarint(_check_u32(delta, "seqDelta"))
        if not mflags & MSG_USE_LAST_TS:
            if not 0 <= m.ts <= U64_MAX:
                raise _err(f"message {i}: timestamp {m.ts} is not a u64", "ts", 0)
            body += _U64.pack(m.ts)
            last_ts = m.ts
        if m.key is not None:
            body.append(len(m.key))
            body += m.key
        body += encode_uvarint(_check_u32(len(m.content), "contentLen"))
        body += m.content
    if compress:
        return bytes(head) + bytes(cramjam.snappy.compress_raw(bytes(body)))
    return bytes(head + body)


def encode_entry(bundle: bytes) -> bytes:
    """``bundleLen:varint bundle`` -- the unit of produce bodies, chunks and logs."""
    return encode_uvarint(len(bundle)) + bundle


def _check_u32(v: int, field: str) -> int:
    if not 0 <= v <= U32_MAX:
        raise _err(f"{field} {v} does not fit in a u32 varint", field, 0)
    return v


# --------------------------------------------------------------------------- decoding


def parse_bundle_header(data: bytes | memoryview, start: int = 0, end: int | None = None, *, base: int = 0) -> BundleHeader:
    """Parse the header of the bundle at ``data[start:end]`` (§4).

    Raises :class:`~refwire.tank.errors.TruncatedBundle` (a :class:`LocalProtocolError`)
    for a truncated header, :class:`LocalProtocolError` for count 0, the
    unimplemented bit 7, or an undefined codec.  Offsets are ``base + index``.
    """
    if end is None:
        end = len(data)
    p = start
    if p >= end:
        raise _truncated("truncated: empty bundle", "flags", base + p)
    flags = data[p]
    p += 1
    if flags & _RESERVED:
        raise _err(f"bundle flags {flags:#04x}: bit 7 (extra flags) is not implemented by TANK", "flags", base + p - 1)
    if flags & 3 > CODEC_SNAPPY:
        raise _err(f"bundle codec {flags & 3} is undefined (0 none, 1 Snappy)", "flags", base + p - 1)
    count = (flags >> 2) & 0x0F
    if count == 0:
        count, p = _uvarint(data, p, end, field="count", base=base)
        if count == 0:
            raise _err("bundle message count is 0", "count", base + p - 1)
    first = last = None
    if flags & SPARSE:
        if end - p < 8:
            raise _truncated("truncated: firstSeq needs 8 bytes", "firstSeq", base + p)
        (first,) = _U64.unpack_from(data, p)
        p += 8
        if count == 1:
            last = first
        else:
            gap, p = _uvarint(data, p, end, field="lastSeq", base=base)
            last = first + gap + 1
        if first == 0 or last >= U64_MAX:
            raise _err(f"sparse sequence numbers {first}..{last} out of range", "firstSeq", base + start + 1)
        if last - first + 1 < count:
            raise _err(f"sparse range {first}..{last} cannot hold {count} messages", "lastSeq", base + p - 1)
    return BundleHeader(flags=flags, count=count, first_seq=first, last_seq=last, size=p - start)


def snappy_decompress(payload: bytes | memoryview, *, max_size: int, offset: int = 0) -> bytes:
    """Raw Snappy (§4): the declared uncompressed length is read and checked
    against ``max_size`` *before* anything is inflated; corrupt input raises."""
    try:
        n, _ = decode_uvarint(payload, 0, len(payload), field="snappyLength", base=offset)
    except LocalProtocolError as exc:
        raise exc.located(protocol=PROTOCOL, frame="bundle") from None
    if n > max_size:
        raise LimitExceeded(
            f"Snappy length {n} exceeds the limit max_decompressed_size={max_size}",
            protocol=PROTOCOL,
            frame="bundle",
            field="snappyLength",
            offset=offset,
        )
    try:
        out = bytes(cramjam.snappy.decompress_raw(bytes(payload)))
    except Exception as exc:  # cramjam.DecompressionError and friends
        raise _err(f"corrupt Snappy data: {exc}", "messageSet", offset) from None
    if len(out) != n:  # pragma: no cover - cramjam checks this itself
        raise _err(f"Snappy produced {len(out)} bytes, header said {n}", "messageSet", offset)
    return out


# --------------------------------------------------------------------------- messages (§4)


#: A bundle's or chunk's messages in columns (contents, timestamps, keys, seqs):
#: what the messages are decoded onto, one list per field, without a :class:`Message` each.
MessageColumns = tuple[list[bytes], list[int], list[bytes | None], list[int]]
#: What :func:`_decode_messages` decodes onto: :data:`MessageColumns`, or seqs ``None`` without a base (:func:`decode_bundle`).
_Columns = tuple[list[bytes], list[int], list[bytes | None], list[Any]]
#: A bundle's message decoder for :func:`_walk_chunk` (:func:`_decode_messages`'s arguments): the plain one or the speed path's.
_MessagesDecoder = Callable[[bytes | memoryview, int, int, BundleHeader, int, MessageColumns, int, bool], int]


def _messages_of(columns: tuple[list[bytes], list[int], list[bytes | None], Sequence[int | None]]) -> list[Message]:
    """One :class:`Message` per row of ``columns``, in order."""
    return [Message(content, ts, key, seq) for content, ts, key, seq in zip(*columns, strict=True)]


def _decode_messages(
    data: bytes | memoryview,
    p: int,
    end: int,
    header: BundleHeader,
    base_seq: int | None,
    columns: _Columns,
    base: int,
    stop_at_truncation: bool,
) -> int:
    """Decode the ``header.count`` messages of a bundle's message set at ``data[p:end]``
    (§4) onto the ends of ``columns``; returns the position after the last complete one.

    A message is ``flags:u8 [seqDelta:varint] [ts:u64] [keyLen:u8 key] contentLen:varint content``, read in that order:

    * ``flags``: 1 HaveKey, 2 UseLastSpecifiedTS, 4 SeqNumPrevPlusOne; any other bit is refused;
    * the sequence number: for the first message a sparse bundle's own
      ``firstSeq``, any other's ``base_seq`` (``None``: the messages keep no
      number), then the previous one + 1; in a sparse bundle a middle message
      without SeqNumPrevPlusOne carries ``seqDelta`` (its number is the
      previous one + 1 + seqDelta) and the last message takes ``lastSeq``,
      which the middle ones must stay below;
    * ``ts``, unless UseLastSpecifiedTS repeats the previous message's (0 for the first);
    * ``keyLen key`` with HaveKey;
    * ``contentLen content``.

    A message cut short raises :class:`~refwire.tank.errors.TruncatedBundle`, or with ``stop_at_truncation``
    ends the walk quietly (a partial trailing bundle of a chunk, §5: the complete ones before it are kept).
    """
    contents, timestamps, keys, seqs = columns
    n = header.count
    seq = header.first_seq if header.sparse else base_seq
    ts = 0
    for i in range(n):
        start = p
        try:
            if p >= end:
                raise _truncated(f"truncated: message {i} of {n}", "messageFlags", base + p)
            flags = data[p]
            p += 1
            if flags & ~_MSG_KNOWN & 0xFF:
                raise _err(f"message {i}: unknown flags {flags:#04x}", "messageFlags", base + p - 1)
            # its sequence number (the first message's is the bundle's first, set above)
            if i > 0 and not header.sparse:
                seq = None if seq is None else seq + 1
            elif i > 0:
                assert seq is not None and header.last_seq is not None
                last_seq = header.last_seq
                if flags & MSG_SEQ_PREV_PLUS_ONE:
                    seq += 1
                elif i == n - 1:
                    seq = last_seq
                else:
                    delta, p = _uvarint(data, p, end, field="seqDelta", base=base)
                    seq += 1 + delta
                middle = i < n - 1
                if (middle and seq >= last_seq) or (not middle and seq != last_seq):
                    raise _err(f"message {i}: seq {seq} disagrees with lastSeq {last_seq}", "seqDelta", base + start)

            if not flags & MSG_USE_LAST_TS:
                if end - p < 8:
                    raise _truncated("truncated: ts needs 8 bytes", "ts", base + p)
                (ts,) = _U64.unpack_from(data, p)
                p += 8

            key = None
            if flags & MSG_HAVE_KEY:
                if p >= end:
                    raise _truncated("truncated: keyLen", "keyLen", base + p)
                key_len = data[p]
                p += 1
                if end - p < key_len:
                    raise _truncated(f"truncated: key needs {key_len} bytes", "key", base + p)
                key = bytes(data[p : p + key_len])
                p += key_len

            content_len, q = _uvarint(data, p, end, field="contentLen", base=base)
            p = q + content_len
            if p > end:
                raise _truncated(f"truncated: content needs {content_len} bytes, {end - q} left", "content", base + q)
        except TruncatedBundle:
            if stop_at_truncation:
                return start
            raise
        contents.append(bytes(data[q:p]))
        timestamps.append(ts)
        keys.append(key)
        seqs.append(seq)
    return p


#: What one decoded message is held as while a bundle is checked, whatever its size
#: (its objects and column slots; measured about 110 bytes for a 2-byte message).
MESSAGE_HELD: Final = 128


def _check_held(bundle: bytes | memoryview, limits: Limits, base: int) -> None:
    """A bundle whose messages would be held as more than a request's share of
    ``max_connection_memory`` (a third, :data:`~refwire.tank.frames.REQUEST_COST`;
    each message :data:`MESSAGE_HELD` bytes at least) is refused from its header,
    before anything is inflated or decoded (§4, §6).  A header that does not parse
    is left to the decoder, which reports it."""
    try:
        header = parse_bundle_header(bundle, 0, len(bundle), base=base)
    except LocalProtocolError:
        return
    share = limits.max_connection_memory // REQUEST_COST
    if header.count * MESSAGE_HELD > share:
        raise LimitExceeded(
            f"bundle of {header.count} messages: each is held as {MESSAGE_HELD} bytes or more, over the {share} bytes "
            f"the limit max_connection_memory={limits.max_connection_memory} allows a request",
            protocol=PROTOCOL,
            frame="bundle",
            field="count",
            offset=base,
        )


def decode_bundle(
    bundle: bytes | memoryview,
    *,
    base_seq: int | None = None,
    limits: Limits | None = None,
    base: int = 0,
    fast: bool | None = None,
) -> tuple[BundleHeader, list[Message]]:
    """Decode one complete bundle (§4): its header, then its message set,
    inflated first when it is Snappy-compressed.

    Non-sparse bundles number their messages from ``base_seq`` (``seq`` stays
    ``None`` without one).  A count larger than half the message bytes is
    refused before decoding anything; trailing bytes after the last message are
    an error (the declared sizes lie).  ``fast`` chooses the path
    (:func:`refwire.speed.use_fast`): the speed path decodes in columns.
    """
    if limits is not None:
        _check_held(bundle, limits, base)
    if use_fast(fast):
        return _SPEED["decode_bundle"](bundle, base_seq, limits, base)
    max_decompressed = limits.max_decompressed_size if limits else 64 * 1024 * 1024
    header = parse_bundle_header(bundle, 0, len(bundle), base=base)
    data, p, end, data_base = bundle, header.size, len(bundle), base
    if header.codec == CODEC_SNAPPY:
        data = snappy_decompress(bundle[p:], max_size=max_decompressed, offset=base + p)
        p, end, data_base = 0, len(data), base + header.size
    if header.count > (end - p) // _MIN_MESSAGE:
        raise _err(f"count {header.count} cannot fit in {end - p} bytes of messages", "count", base)
    columns: tuple[list[bytes], list[int], list[bytes | None], list[int | None]] = ([], [], [], [])
    q = _decode_messages(data, p, end, header, base_seq, columns, base=data_base, stop_at_truncation=False)
    if q != end:
        raise _err(f"{end - q} bytes after the last of {header.count} messages", "messageSet", data_base + q)
    return header, _messages_of(columns)


# --------------------------------------------------------------------------- chunks (§5)


@attrs.frozen(eq=False)
class ChunkResult:
    """What one partition's chunk yielded (§5).

    * ``messages`` -- every complete message with ``requested <= seq <= hwmark``, in order;
    * ``next_seq`` -- the sequence number to request next;
    * ``min_fetch_size`` -- a fetch size that makes progress past a bundle
      that did not fit (0 when the chunk ended cleanly);
    * ``partial`` -- the chunk ended inside a bundle;
    * ``drained`` -- the chunk was empty (the consumer is at the end).

    A result holds its messages or, made with :meth:`of_columns` (as the speed
    path of :func:`read_chunk` makes it), their columns; ``messages`` then
    builds their :class:`Message` objects the first time it is read (and keeps
    them), the speed path's way when ``fast`` (:func:`refwire.speed.use_fast`).
    :attr:`count`, :attr:`seqs`, :attr:`contents`, :attr:`timestamps` and
    :attr:`keys` read the columns and build nothing: the cheap way through a
    large chunk.  Equality, hash and repr are those of the messages.
    """

    _messages: tuple[Message, ...] | None = attrs.field(alias="messages")
    next_seq: int
    min_fetch_size: int = 0
    partial: bool = False
    drained: bool = False
    _columns: MessageColumns | None = attrs.field(default=None, alias="columns", kw_only=True, repr=False)
    _fast: bool = attrs.field(default=None, converter=use_fast, alias="fast", kw_only=True, repr=False)

    def __attrs_post_init__(self) -> None:
        columns = self._columns
        if columns is not None:
            lengths = [len(column) for column in columns]
            if len(set(lengths)) != 1:
                raise ValueError(f"ChunkResult: columns of unequal lengths {lengths} (contents, timestamps, keys, seqs)")
        elif self._messages is None:
            raise ValueError("ChunkResult needs messages or columns")

    @classmethod
    def of_columns(
        cls,
        columns: MessageColumns,
        next_seq: int,
        min_fetch_size: int = 0,
        partial: bool = False,
        drained: bool = False,
        *,
        fast: bool | None = None,
    ) -> ChunkResult:
        """A result whose messages are ``columns`` (contents, timestamps, keys,
        seqs: equal lengths, which the result takes over)."""
        return cls(None, next_seq, min_fetch_size, partial, drained, columns=columns, fast=fast)

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages, in order."""
        messages = self._messages
        if messages is None:
            assert self._columns is not None
            build = _SPEED["messages_of"] if self._fast else _messages_of
            messages = tuple(build(self._columns))
            object.__setattr__(self, "_messages", messages)
        return messages

    def _column(self, i: int) -> list[Any]:
        if self._columns is not None:
            return list(self._columns[i])
        name = ("content", "ts", "key", "seq")[i]
        return [getattr(m, name) for m in self.messages]

    @property
    def count(self) -> int:
        """How many messages the chunk yielded."""
        return len(self._columns[0]) if self._columns is not None else len(self.messages)

    @property
    def contents(self) -> list[bytes]:
        """The messages' contents, in order."""
        return self._column(0)

    @property
    def timestamps(self) -> list[int]:
        """The messages' ``ts``, in order."""
        return self._column(1)

    @property
    def keys(self) -> list[bytes | None]:
        """The messages' keys (``None`` for a message without one), in order."""
        return self._column(2)

    @property
    def seqs(self) -> list[int | None]:
        """The messages' sequence numbers, in order."""
        return self._column(3)

    def _key(self) -> tuple[object, ...]:
        return (self.messages, self.next_seq, self.min_fetch_size, self.partial, self.drained)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChunkResult):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"ChunkResult(messages={self.messages!r}, next_seq={self.next_seq!r}, min_fetch_size={self.min_fetch_size!r},"
            f" partial={self.partial!r}, drained={self.drained!r})"
        )


def read_chunk(
    chunk: bytes | memoryview,
    *,
    base_seq: int | None,
    hwmark: int,
    requested_seq: int,
    limits: Limits | None = None,
    offset: int = 0,
    fast: bool | None = None,
) -> ChunkResult:
    """Walk a consume chunk's ``bundleLen:varint bundle`` entries as
    ``TankClient::process_consume`` does (§5): :func:`_walk_chunk`.

    * Non-sparse bundles number their messages from ``base_seq`` (the
      response's baseSeqNum), then from where the previous bundle ended;
      sparse ones from their own header.  ``base_seq`` is ``None`` for err
      0xfe: the first bundle is sparse and carries its own.
    * A bundle wholly below ``requested_seq`` is skipped without looking inside.
    * A partial uncompressed bundle still delivers every complete message; a
      partial Snappy bundle delivers nothing.  ``min_fetch_size`` is then the
      whole size of that entry (bytes present + 1024 when even its length
      varint is cut).
    * Messages above ``hwmark`` are dropped and end the walk.
    * ``next_seq`` is ``max(requested_seq, last + 1)``, or ``requested_seq``
      when nothing was delivered (``hwmark + 1`` for a tail request,
      ``requested_seq`` = 2**64-1).

    Malformed complete bundles raise :class:`LocalProtocolError`.  ``fast`` chooses the path
    (:func:`refwire.speed.use_fast`): the speed path walks the same way with its own message
    decoder and builds no :class:`Message` until ``messages`` is read; this one builds one each.
    """
    if use_fast(fast):
        return _SPEED["read_chunk"](chunk, base_seq, hwmark, requested_seq, limits, offset)
    columns, next_seq, min_fetch, partial, drained = _walk_chunk(
        chunk, base_seq, hwmark, requested_seq, limits, offset, _decode_messages
    )
    return ChunkResult(tuple(_messages_of(columns)), next_seq, min_fetch, partial, drained)


def _walk_chunk(
    chunk: bytes | memoryview,
    base_seq: int | None,
    hwmark: int,
    requested_seq: int,
    limits: Limits | None,
    offset: int,
    decode_messages: _MessagesDecoder,
) -> tuple[MessageColumns, int, int, bool, bool]:
    """:func:`read_chunk`'s walk, both paths': the kept messages' columns, next_seq, min_fetch_size, partial, drained."""
    max_decompressed = limits.max_decompressed_size if limits else 64 * 1024 * 1024
    end = len(chunk)
    tail = requested_seq == U64_MAX
    columns: MessageColumns = ([], [], [], [])
    seqs = columns[3]
    seq = base_seq  # the number of the next non-sparse bundle's first message
    p = 0
    min_fetch = 0
    partial = False
    stop = False
    while p < end and not stop:
        entry_start = p
        try:
            bundle_len, p = _uvarint(chunk, p, end, field="bundleLen", base=offset)
        except TruncatedBundle:
            partial, min_fetch = True, (end - entry_start) + 1024
            break
        if bundle_len == 0:
            raise _err("empty bundle (bundleLen 0)", "bundleLen", offset + entry_start)
        bundle_end = p + bundle_len
        whole = bundle_end <= end
        try:
            header = parse_bundle_header(chunk, p, min(bundle_end, end), base=offset)
        except TruncatedBundle:
            if whole:
                raise
            partial, min_fetch = True, bundle_end - entry_start
            break

        # The numbers this bundle's messages take: first .. after - 1.
        if header.sparse:
            assert header.first_seq is not None and header.last_seq is not None
            if seq is not None and header.first_seq < seq and entry_start > 0:
                raise _err(f"sparse firstSeq {header.first_seq} below the running seq {seq}", "firstSeq", offset + p + 1)
            first, after = header.first_seq, header.last_seq + 1
        else:
            if seq is None:
                raise _err("err 0xfe but the first bundle is not sparse", "flags", offset + p)
            first, after = seq, seq + header.count

        if not tail and requested_seq >= after:  # wholly below the requested number: skipped
            seq = after
            if not whole:
                partial, min_fetch = True, bundle_end - entry_start
            p = bundle_end
            continue

        message_set = p + header.size
        if header.codec == CODEC_SNAPPY:
            if not whole:
                partial, min_fetch = True, bundle_end - entry_start
                break
            data: bytes | memoryview = snappy_decompress(
                chunk[message_set:bundle_end], max_size=max_decompressed, offset=offset + message_set
            )
            data_start, data_end, data_base = 0, len(data), offset + message_set
        else:
            data, data_start, data_end, data_base = chunk, message_set, min(bundle_end, end), offset
        if whole and header.count > (data_end - data_start) // _MIN_MESSAGE:
            raise _err(f"count {header.count} cannot fit in {data_end - data_start} bytes", "count", offset + p)
        k = len(seqs)  # the bundle's messages are rows k.. of the columns
        stop_at_truncation = not whole  # a partial bundle delivers its complete messages
        q = decode_messages(data, data_start, data_end, header, first, columns, data_base, stop_at_truncation)
        if whole and q != data_end:
            raise _err(f"{data_end - q} bytes after the last of {header.count} messages", "messageSet", data_base + q)
        # Keep the bundle's messages with requested_seq <= seq <= hwmark: seqs rise strictly
        # through a bundle (§4), so they are one slice of it, cut by bisection.
        if len(seqs) > k:
            if seqs[-1] > hwmark:  # one above hwmark ends the walk
                stop = True
                cut = bisect_right(seqs, hwmark, k)
                for column in columns:
                    del column[cut:]
            if not tail and len(seqs) > k and seqs[k] < requested_seq:
                cut = bisect_left(seqs, requested_seq, k)
                for column in columns:
                    del column[k:cut]
        if not whole:
            partial, min_fetch = True, bundle_end - entry_start
            break
        seq = after
        p = bundle_end

    if seqs:
        last = seqs[-1]
        next_seq = last + 1 if tail else max(requested_seq, last + 1)
    else:
        next_seq = hwmark + 1 if tail else requested_seq
    return columns, next_seq, min_fetch, partial, end == 0


# --------------------------------------------------------------------------- the speed path's hook


class _SpeedPath(TypedDict, total=False):
    """The speed path's functions (positional arguments, as the plain ones name them)."""

    read_chunk: Callable[[bytes | memoryview, int | None, int, int, Limits | None, int], ChunkResult]
    decode_bundle: Callable[[bytes | memoryview, int | None, Limits | None, int], tuple[BundleHeader, list[Message]]]
    messages_of: Callable[[MessageColumns], list[Message]]


#: Filled by :mod:`refwire.tank._fast_bundles` when it is imported (the package's
#: ``__init__`` imports it, so before any use); read only by a call or result that
#: takes the speed path.  This module never imports the speed path itself.
_SPEED: Final[_SpeedPath] = {}
