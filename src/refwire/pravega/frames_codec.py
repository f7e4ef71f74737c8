"""Pravega frame codec (specs/pravega/README.md §1-§4): the stream decoder, over
the layout interpreter of :mod:`.commands` (re-exported here).

:mod:`.frames` holds today's command table, re-exports this module and is the
one to import.  The layout interpreter (field kinds, one encoder and decoder for
every command layout, the dialects) is :mod:`.commands`; this module adds
:class:`CommandDecoder`, which cuts a byte stream into frames (§1) and decodes
each by its layout.  Both are shared with the 2017 draft dialect's command table
(``refwire.pravega.draft2017.frames``).

This is the plain path, the one to read beside the spec.  The speed path,
:mod:`._fast_frames`, registers into the hooks declared here and in
:mod:`.commands` (``_SPEED``, ``_FAST``): hand-written decoders of the hot
commands, and the subclass of :class:`CommandDecoder` that has them inline in its
``commands`` and decodes runs of AppendBlockEnds in columns in its
``block_ends``.  A decoder (and :func:`decode_command`) takes it unless built
with ``fast=False`` or run under ``REFWIRE_REFERENCE=1`` (:mod:`refwire.speed`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any, Final

from .._mypyc import mypyc_attr
from ..errors import LimitExceeded, LocalProtocolError
from ..speed import use_fast
from ..wire import Limits, ReceiveBuffer, check_limit
from .commands import _FAST as _FAST
from .commands import _HDR as _HDR
from .commands import _NO_DEFAULT as _NO_DEFAULT
from .commands import (
    BLOB32,
    BOOL,
    CLIENT_LIMITS,
    COMMANDS,
    CURRENT,
    DEFAULT_LIMITS,
    ENTRIES,
    EVENT,
    HEADER,
    I32,
    I64,
    I64_ANY,
    KEYS,
    LONGS,
    MAX_WIRECOMMAND_SIZE,
    NO_VERSION,
    NOT_EXISTS,
    NULL_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    OPT_BLOB32,
    PROTOCOL,
    REST,
    U8,
    UTF,
    UUID,
    WIRE_VERSION,
    Command,
    Dialect,
    TableEntry,
    TableKey,
    command,
    decode_command,
    encode_command,
    encode_event,
    f,
    uuid_of,
)

__all__ = [
    # the layout interpreter (from .commands)
    "BLOB32",
    "BOOL",
    "CLIENT_LIMITS",
    "COMMANDS",
    "CURRENT",
    "DEFAULT_LIMITS",
    "ENTRIES",
    "EVENT",
    "HEADER",
    "I32",
    "I64",
    "I64_ANY",
    "KEYS",
    "LONGS",
    "MAX_WIRECOMMAND_SIZE",
    "NO_VERSION",
    "NOT_EXISTS",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "OPT_BLOB32",
    "PROTOCOL",
    "REST",
    "U8",
    "UTF",
    "UUID",
    "WIRE_VERSION",
    "Command",
    "Dialect",
    "TableEntry",
    "TableKey",
    "command",
    "decode_command",
    "encode_command",
    "encode_event",
    "f",
    "uuid_of",
    # the stream decoder
    "BLOCK_END_CODE",
    "MAX_RUN",
    "MAX_RUN_BYTES",
    "BlockEndRun",
    "CommandDecoder",
    "split_frames",
]

#: AppendBlockEnd's type code (§5.1): :meth:`CommandDecoder.block_ends` decodes runs of it
BLOCK_END_CODE: Final = 4
#: the most AppendBlockEnds one :meth:`CommandDecoder.block_ends` run holds (each run
#: copies its data out while the frames stay buffered until they are consumed)
MAX_RUN: Final = 256
#: the most data bytes one run holds: its copies of the frames' data exist beside the
#: frames themselves until they are consumed, so this bounds that doubling per connection
MAX_RUN_BYTES: Final = 1 << 20
#: ``_HDR.unpack_from``, bound once: CPython 3.11 calls a method of an imported name
#: without its method-call fast path, making a bound method object per frame
_unpack_header: Final = _HDR.unpack_from


# --------------------------------------------------------------------------- stream decoder


# The speed path's decoder is a subclass (compiled or not, in the optional mypyc build).
@mypyc_attr(allow_interpreted_subclasses=True)
class CommandDecoder:
    """Incremental frame decoder over a :class:`ReceiveBuffer` (§1).

    ``feed(data)`` then iterate :meth:`commands`; a malformed frame raises
    :class:`LocalProtocolError` *after* every complete frame before it was
    delivered.  The length field is checked against ``limits.max_frame_size``
    before the payload is waited for, so a lying length never allocates.

    ``fast``: take the speed path of :mod:`._fast_frames` (hand-written
    decoders of the hot commands, :meth:`block_ends` runs); None follows
    :mod:`refwire.speed`.  Decided once, here: :attr:`fast` says which.
    """

    __slots__ = (
        "_buf",
        "_fast",
        "_max_payload",
        "allow_inner",
        "dialect",
        "fast",
        "frame_limit",
        "limits",
        "offset",
    )

    def __new__(
        cls,
        limits: Limits = DEFAULT_LIMITS,
        *,
        allow_inner: bool = False,
        dialect: Dialect = CURRENT,
        fast: bool | None = None,
        frame_limit: str = "max_frame_size",
    ) -> CommandDecoder:
        # ``CommandDecoder(...)`` is this class, the plain path, or the speed path's
        # subclass (:class:`._fast_frames.FastCommandDecoder`); a subclass of this
        # class takes the plain path
        if cls is CommandDecoder and use_fast(fast) and _SPEED:
            speed = _SPEED[0]
            return speed.__new__(speed, limits, allow_inner=allow_inner, dialect=dialect, fast=fast, frame_limit=frame_limit)
        return super().__new__(cls)

    def __getnewargs_ex__(self) -> tuple[tuple[()], dict[str, Any]]:
        # (``copy`` and ``pickle`` recreate a decoder on its own path)
        return (), {"fast": self.fast}

    def __init__(
        self,
        limits: Limits = DEFAULT_LIMITS,
        *,
        allow_inner: bool = False,
        dialect: Dialect = CURRENT,
        fast: bool | None = None,
        frame_limit: str = "max_frame_size",
    ) -> None:
        """``frame_limit``: the limit that bounds frames, named in the error: ``max_frame_size``,
        or ``max_connection_memory`` when a server's budget made ``limits.max_frame_size``
        its share (specs/pravega/README.md §11)."""
        self.dialect = dialect
        self.frame_limit = frame_limit
        #: whether this decoder takes the speed path (:mod:`._fast_frames`)
        self.fast = bool(_SPEED) and type(self) is _SPEED[0]
        #: the speed path's hand-written decoders of top-level commands (none on the
        #: plain path): taken without decode_command's checks, which they always pass
        self._fast: dict[int, Any] = (
            {
                code: fn
                for code, fn in dialect.fast.items()
                if code in dialect.commands and dialect.commands[code].DIRECTION != "inner"
            }
            if self.fast
            else {}
        )
        self.limits = limits
        self._max_payload = limits.max_frame_size - HEADER
        self._buf = ReceiveBuffer()
        self.offset = 0  #: stream offset of the next undecoded byte
        self.allow_inner = allow_inner

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.feed(data)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_frame_name(self) -> str | None:
        """The command name of the incomplete frame buffered, once its whole header arrived."""
        head = self._buf.peek(HEADER)
        if len(head) < HEADER:
            return None
        cls = self.dialect.commands.get(int.from_bytes(head[:4], "big", signed=True))
        return None if cls is None else cls.NAME

    def next_command(self) -> Command | None:
        """The next complete command, or None if more bytes are needed.

        §1: ``i32 type, i32 length``, then ``length`` payload bytes; a negative
        length, or one past ``max_frame_size`` (§1.1, header included), is refused
        as soon as the header is in.  The payload is decoded by its layout
        (:func:`decode_command`, §2-§4), or by the speed path's hand-written
        decoder of the command when it has one and the frame is regular.
        """
        buf = self._buf
        data = buf.data
        pos = buf.pos
        if len(data) - pos < HEADER:
            return None
        code, n = _unpack_header(data, pos)
        if n < 0 or n > self._max_payload:
            known = self.dialect.commands
            protocol = self.dialect.protocol
            frame = known[code].NAME if code in known else f"type {code}"
            if n < 0:
                raise LocalProtocolError(
                    f"negative frame length {n}", protocol=protocol, frame=frame, field="length", offset=self.offset + 4
                )
            if self.frame_limit == "max_connection_memory":
                raise LimitExceeded(
                    f"{frame} frame of {HEADER + n} bytes exceeds the {self.limits.max_frame_size} bytes the limit "
                    f"max_connection_memory={self.limits.max_connection_memory} allows a frame",
                    protocol=protocol,
                    frame=frame,
                    field="length",
                    offset=self.offset + 4,
                )
            check_limit(
                n,
                self._max_payload,
                name="max_frame_size-8",
                field="length",
                frame=frame,
                offset=self.offset + 4,
                protocol=protocol,
            )
        end = pos + HEADER + n
        if len(data) < end:
            return None
        start = self.offset
        fast = self._fast.get(code)
        cmd: Command | None = None if fast is None else fast(data, pos + HEADER, end)
        if cmd is None:
            cmd = decode_command(
                code,
                data,
                start=pos + HEADER,
                end=end,
                base=start + HEADER,
                allow_inner=self.allow_inner,
                dialect=self.dialect,
                fast=False,  # (the hand-written decoder, if any, was just tried)
            )
        buf.advance_to(end)
        self.offset = start + HEADER + n
        return cmd

    def commands(self) -> Iterator[Command]:
        """Every complete command, as :meth:`next_command` gives them one by one."""
        while (cmd := self.next_command()) is not None:
            yield cmd

    def peek_frame(self, *, skip: int = 0) -> tuple[int, bytes | bytearray, int, int] | None:
        """``(type code, buffer, payload start, payload end)`` of the next frame if it
        is complete and its length is within the limits, without consuming it;
        None otherwise (then :meth:`next_command` waits, decodes or reports).  The
        buffer is only valid until the next :meth:`feed` or :meth:`consume_frame`.
        ``skip``: the frame that starts this many bytes further (after frames
        already peeked)."""
        buf = self._buf
        data = buf.data
        pos = buf.pos + skip
        if len(data) - pos < HEADER:
            return None
        code, n = _unpack_header(data, pos)
        end = pos + HEADER + n
        if n < 0 or n > self._max_payload or len(data) < end:
            return None
        return code, data, pos + HEADER, end

    def block_ends(self, max_frames: int = MAX_RUN) -> BlockEndRun | None:
        """The complete regular AppendBlockEnd frames at the head of the buffer, up
        to ``max_frames`` and :data:`MAX_RUN_BYTES` of data, in columns (§5.1),
        without consuming them; None when
        fewer than two frames make one -- the next frame is not one (incomplete,
        over a limit, another command, an irregular AppendBlockEnd), or it is
        one with no other behind it (a lone frame costs less as
        :meth:`next_command`'s command than as a run): :meth:`next_command`
        then decodes it, with its errors at its offsets.

        A frame joins the run exactly when :meth:`next_command` would decode it
        on its fast path, to the same fields: the run's commands equal the
        commands :meth:`next_command` gives for the same frames.  Runs are the
        speed path's (:meth:`._fast_frames.FastCommandDecoder.block_ends`), in the
        current dialect only: on the plain path this is always None, and
        :meth:`next_command` decodes every frame.
        """
        if max_frames < 2:
            raise ValueError(f"a run holds at least 2 frames: max_frames={max_frames}")
        return None

    def consume(self, n: int) -> None:
        """Consume the next ``n`` buffered bytes: whole frames a :meth:`block_ends`
        run holds (its ``frame_sizes``)."""
        buf = self._buf
        if n > len(buf.data) - buf.pos:
            raise ValueError("consume() past the end of the buffer")
        self.offset += n
        buf.advance_to(buf.pos + n)

    def consume_frame(self, end: int) -> None:
        """Consume the frames up to and including the one :meth:`peek_frame` returned
        (``end`` is its payload end)."""
        buf = self._buf
        self.offset += end - buf.pos
        buf.advance_to(end)


class BlockEndRun:
    """Consecutive complete regular AppendBlockEnd frames (§5.1, §5.3), decoded in
    columns instead of one command object each: what
    :meth:`CommandDecoder.block_ends` returns, the server's hot path for the
    Rust client's bare AppendBlockEnds.  ``writer_ids`` holds the ids' 16 raw
    bytes; ``frame_sizes`` each frame's length with its header.  The frames stay
    in the decoder's buffer until :meth:`CommandDecoder.consume` takes them."""

    __slots__ = ("data", "frame_sizes", "last_event_numbers", "num_events", "request_ids", "sizes", "writer_ids")

    def __init__(
        self,
        writer_ids: list[bytes],
        sizes: list[int],
        data: list[bytes],
        num_events: list[int],
        last_event_numbers: list[int],
        request_ids: list[int],
        frame_sizes: list[int],
    ) -> None:
        if not (
            len(writer_ids)
            == len(sizes)
            == len(data)
            == len(num_events)
            == len(last_event_numbers)
            == len(request_ids)
            == len(frame_sizes)
        ):
            raise ValueError("a BlockEndRun's columns must have one entry per frame")
        self.writer_ids = writer_ids
        self.sizes = sizes
        self.data = data
        self.num_events = num_events
        self.last_event_numbers = last_event_numbers
        self.request_ids = request_ids
        self.frame_sizes = frame_sizes

    def __len__(self) -> int:
        return len(self.writer_ids)

    def __repr__(self) -> str:
        return f"BlockEndRun({len(self.writer_ids)} AppendBlockEnds, {sum(self.frame_sizes)} bytes)"

    def commands(self) -> list[Command]:
        """The frames as ``AppendBlockEnd`` commands."""
        cls: Any = CURRENT.commands[BLOCK_END_CODE]
        return [
            cls(writer_id=uuid.UUID(bytes=w), size_of_whole_events=s, data=d, num_events=n, last_event_number=e, request_id=r)
            for w, s, d, n, e, r in zip(
                self.writer_ids, self.sizes, self.data, self.num_events, self.last_event_numbers, self.request_ids, strict=True
            )
        ]


#: The speed path of the stream decoder, registered by :mod:`._fast_frames`
#: (which ``refwire.pravega`` imports): the subclass :class:`CommandDecoder`
#: builds unless the speed path is off, with the hand-written decoders inline in
#: :meth:`~CommandDecoder.commands` and runs in :meth:`~CommandDecoder.block_ends`.
_SPEED: list[type[CommandDecoder]] = []


def split_frames(data: bytes, *, base: int = 0, allow_inner: bool = True, fast: bool | None = None) -> Sequence[Command]:
    """Decode a buffer holding whole frames only (an append block's content)."""
    # (through a class object: a compiled build's direct construction would skip __new__'s choice)
    cls: type[CommandDecoder] = CommandDecoder
    dec = cls(allow_inner=allow_inner, fast=fast)
    dec.offset = base
    dec.feed(data)
    out = list(dec.commands())
    if dec.buffered:
        raise LocalProtocolError("truncated frame at the end of the buffer", protocol=PROTOCOL, offset=dec.offset)
    return out
