"""The frame intake both machines of the 2017 draft dialect share
(specs/pravega-draft-2017/README.md §1-§3, §5, §6.7), below
:mod:`.connection`'s server and client.

The draft's machines read the stream themselves (there is no separate stream
decoder, because whether a frame may come depends on the machine's state): a
frame's type is checked as soon as its 4 bytes are in (§3: known, sent in this
direction), its length as soon as the header is in (§1: not negative, the whole
frame within ``limits.max_frame_size``; the server adds the block's wire
length, §6.3), the payload decoded strictly (§2, D11: trailing bytes are an
error) and only then checked against the state (§3, §5 rule 3).  Partial
messages start with a Begin (§5 rule 2) and decode once reassembled, errors
reported on the part that revealed them (§5 rule 5).  Input ending inside a
frame or a partial message is an error (§6.7).

:class:`State` is the machines' state; the transition tables, what each side
accepts, and the machines themselves are in :mod:`.connection`.
"""

from __future__ import annotations

import enum

from ...errors import ProtocolError
from ...sansio import NEED_DATA, FrameMachine, NeedData, closed_inside
from ...wire import Limits, ReceiveBuffer
from ..budget import check_share
from ..frames import HEADER, Command, decode_command
from .events import ConnectionClosed
from .frames import DRAFT, PROTOCOL, Part, PartialMessage
from .partial import Reassembly, command_name, error, wrap_inner

__all__ = ["State"]


class State(enum.Enum):
    OPEN = "open"
    IN_BLOCK = "in-block"  #: between BeginAppendBlock and EndAppendBlock
    TRAILER = "trailer"  #: EndAppendBlock seen; a partial message begun in the block is still arriving
    CLOSED = "closed"
    ERROR = "error"


class _Base(FrameMachine):
    """What both machines share: frames in, checked as their bytes arrive (§1-§3),
    partial messages started and decoded (§5), the end of input (§6.7).  Each side
    says what it takes (``_INPUT``, :meth:`_allowed`) and what a frame does to it
    (:meth:`_on_frame`)."""

    PROTOCOL = PROTOCOL
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED
    _INPUT: dict[int, str]

    def __init__(self, limits: Limits, bound: frozenset[str] = frozenset()) -> None:
        """``bound``: the Limits fields a server's budget made tighter (:func:`..budget.capped`):
        their errors name ``max_connection_memory`` (§11)."""
        super().__init__(State.OPEN)
        self.limits = limits
        self._bound = bound
        self._buf = ReceiveBuffer()
        self._offset = 0  #: stream offset of the next undecoded frame
        self._code: int | None = None  #: type of the frame being received, once checked
        self._length: int | None = None  #: its payload length, once checked
        self._partial = Reassembly(
            limits.max_decompressed_size,
            budget=limits.max_connection_memory if "max_decompressed_size" in bound else None,
        )

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf.feed(data)

    def _receive_progress(self) -> tuple[int, int]:
        return len(self._buf), self._buf.consumed

    def _pending_frame_name(self) -> str | None:
        return self._pending_frame()

    # -- header checks (§1, §3, §5 rule 3) ----------------------------------------------------
    def _allowed(self, inp: str) -> bool:
        raise NotImplementedError

    def _check_type(self, code: int, offset: int) -> None:
        cls = DRAFT.commands.get(code)
        if cls is None:
            raise error(f"unknown type code {code}", None, "type", offset)
        if code not in self._INPUT:
            raise error(f"{cls.NAME} is not sent in this direction", cls.NAME, "type", offset)

    def _check_state(self, code: int, offset: int) -> None:
        """§3, §5 rule 3, §6.3 rule 2: made once the frame is decoded (a malformed
        frame is reported on its field first, vector ``end-append-block-missing-block-length``)."""
        cls = DRAFT.commands[code]
        if not self._allowed(self._INPUT[code]):
            pending = " while a partial message is incomplete" if self._partial.active else ""
            raise error(f"{cls.NAME} is not allowed in state {self.state.value}{pending}", cls.NAME, "type", offset)

    def _check_length(self, code: int, n: int, offset: int) -> None:
        name = command_name(code)
        if n < 0:
            raise error(f"negative frame length {n}", name, "length", offset + 4)
        check_share(
            HEADER + n,
            self.limits,
            "max_frame_size",
            self._bound,
            name="max_frame_size",
            field="length",
            frame=name,
            offset=offset + 4,
            protocol=PROTOCOL,
        )

    def _pump(self) -> None:
        buf = self._buf
        while not self._events:
            avail = len(buf)
            if avail < 4:
                return
            data, pos, off = buf.data, buf.pos, self._offset
            if self._code is None:
                code = int.from_bytes(data[pos : pos + 4], "big", signed=True)
                self._check_type(code, off)
                self._code = code
            if avail < HEADER:
                return
            if self._length is None:
                n = int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True)
                self._check_length(self._code, n, off)
                self._length = n
            size = HEADER + self._length
            if avail < size:
                return
            cmd = decode_command(
                self._code, data, start=pos + HEADER, end=pos + size, base=off + HEADER, allow_inner=True, dialect=DRAFT
            )
            self._check_state(self._code, off)
            buf.advance_to(pos + size)
            self._offset = off + size
            self._code = self._length = None
            self._on_frame(cmd, off, size)

    def _on_frame(self, cmd: Command, offset: int, size: int) -> None:
        raise NotImplementedError

    def _start_part(self, cmd: PartialMessage, offset: int, *, in_block: bool) -> None:
        """§5 rule 2: one partial message at a time, Begin first."""
        part, pm = cmd.part, self._partial
        if part == Part.BEGIN:
            if pm.active:
                raise error(
                    f"a partial message begins while the one begun at offset {pm.started_at} is incomplete",
                    "PartialMessage",
                    "part",
                    offset + HEADER,
                )
            pm.begin(offset, in_block=in_block)
        elif part in (Part.MIDDLE, Part.END):
            if not pm.active:
                raise error(f"{Part(part).name.title()} part without a Begin", "PartialMessage", "part", offset + HEADER)
        else:
            raise error(f"part must be 0 (Begin), 1 (Middle) or 2 (End), got {part}", "PartialMessage", "part", offset + HEADER)

    def _decode_reassembled(self, frame: bytes, data_at: int) -> Command:
        code = int.from_bytes(frame[:4], "big", signed=True)
        try:
            return decode_command(code, frame, start=HEADER, base=HEADER, allow_inner=True, dialect=DRAFT)
        except ProtocolError as exc:
            raise wrap_inner(exc, data_at) from None

    def _pending_frame(self) -> str | None:
        return command_name(self._code) if self._code is not None and len(self._buf) >= HEADER else None

    def _eof_errors(self) -> None:
        if self._buf:
            raise closed_inside(
                "a frame",
                protocol=PROTOCOL,
                frame=self._pending_frame(),
                offset=self._offset,
                detail=f"{len(self._buf)} bytes of it received",
            )
        if self._partial.active:
            raise closed_inside("a partial message", protocol=PROTOCOL, frame="PartialMessage", offset=self._partial.started_at)

    def _at_eof(self) -> None:
        if self._reset:
            self._transition("reset")
            self._events.append(ConnectionClosed(clean=False, reason="reset"))
            return
        self._eof_errors()
        self._transition("eof", offset=self._offset)
        self._events.append(ConnectionClosed())

    def _idle_event(self) -> NeedData | None:
        return NEED_DATA if self.state is State.CLOSED else None  # the closing event went out once

    # A machine closed by an EOF answers a further end of input with its closing
    # event again (once per call: a pump reads NEED_DATA after it); after a reset
    # (or a failed write) the connection is over and nothing more comes.
    def receive_data(self, data: bytes | bytearray | memoryview, *, now: float) -> None:
        if not data and self.state is State.CLOSED:
            if not self._reset:
                self._closed_again(now)
            return
        super().receive_data(data, now=now)

    def connection_lost(self, *, now: float) -> None:
        if self.state is State.CLOSED:
            if not self._reset:
                self._reset = True
                self._closed_again(now)
            return
        super().connection_lost(now=now)

    def _closed_again(self, now: float) -> None:
        self._now = now
        self._events.append(ConnectionClosed(clean=not self._reset, reason="reset" if self._reset else ""))
