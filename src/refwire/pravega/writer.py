"""A writer's append session, Sans-IO (specs/pravega/README.md §5.1, §5.2, §5.5).

Event numbers start at 1 per (segment, writer) and never go back, across
reconnects.  After every (re)connect the writer sends SetupAppend; the
server's AppendSetup carries the last event number it stored for this writer,
so the session drops everything up to it and resends the rest with their
original numbers: each event is stored exactly once and in order.

Two encodings of the same appends, both accepted by real Pravega:

* ``"rust"`` -- one bare ``AppendBlockEnd`` per batch, data = whole Event frames
  (the Rust/Python client);
* ``"java"`` -- ``AppendBlock`` + whole events + a ``PartialEvent`` (the head of
  the event that did not fit) or ``Padding``, then ``AppendBlockEnd`` with the
  partial event's tail (the Java client's streamed blocks).
"""

from __future__ import annotations

import itertools
import struct
import uuid
from collections import deque
from typing import Final, Literal

import attrs

from ..errors import LocalProtocolError
from .frames import (
    MAX_WIRECOMMAND_SIZE,
    NULL_VALUE,
    PROTOCOL,
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    DataAppended,
    Padding,
    PartialEvent,
    SetupAppend,
    encode_event,
)

__all__ = ["MAX_EVENT_SIZE", "PendingEvent", "WriterSession"]

#: ``Serializer.MAX_EVENT_SIZE`` (§5.1)
MAX_EVENT_SIZE: Final = 8 * 1024 * 1024
#: the Java client's cap on a block (``MAX_BATCH_SIZE``)
MAX_BLOCK: Final = 2 * 256 * 1024 - 1024

_ABE_HEAD: Final = struct.Struct(">ii16sii")  # type, length, writerId, sizeOfWholeEvents, data length
_ABE_TAIL: Final = struct.Struct(">iqq")  # numEvents, lastEventNumber, requestId
_ABE_FIXED: Final = _ABE_HEAD.size + _ABE_TAIL.size  # an AppendBlockEnd's bytes besides its data

Style = Literal["rust", "java"]


@attrs.frozen
class PendingEvent:
    number: int
    frame: bytes  #: the Event frame: header + payload


_new: Final = object.__new__
#: PendingEvent's slots, filled directly by WriterSession.add (a frozen attrs
#: __init__ sets each field through object.__setattr__: 0.7 us an event
#: against 0.3 us, the larger part of a batched write's own work)
_SET_NUMBER: Final = PendingEvent.__dict__["number"].__set__
_SET_FRAME: Final = PendingEvent.__dict__["frame"].__set__


class WriterSession:
    """Appends of one writer to one segment.

    Usage: :meth:`add` events; after connecting send :meth:`setup`, feed the
    reply to :meth:`on_append_setup`; then send :meth:`take` whenever it has
    bytes; feed each DataAppended to :meth:`on_data_appended`; on a broken
    connection call :meth:`connection_lost` and start again with setup.

    ``writer_id`` is an input like any other (no hidden randomness): the
    driver draws it (``uuid.uuid4()``), the simulator from its seed (§5.5:
    the id must stay the same across reconnects for the store to dedupe).
    """

    def __init__(
        self,
        segment: str,
        writer_id: uuid.UUID,
        *,
        style: Style = "rust",
        token: str = "",
        max_batch_bytes: int = MAX_BLOCK,
        max_batch_events: int = 499,
    ) -> None:
        self.segment = segment
        self.writer_id = writer_id
        self.style = style
        self.token = token
        if max_batch_events < 1:
            raise ValueError(f"max_batch_events must be at least 1, not {max_batch_events}")
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_events = max_batch_events
        self.next_number = 1
        self.pending: deque[PendingEvent] = deque()  #: unacked, in order
        self._unsent = 0  #: index in ``pending`` of the first event not sent on this connection
        self.ready = False  #: AppendSetup received on the current connection
        self.last_acked = NULL_VALUE
        self.request_id = 0
        #: block sizes to use in "java" style (one per block, cycled); None = the batch size
        self.java_block_sizes: list[int] | None = None
        self._block_turn = 0

    # -- events ---------------------------------------------------------------------
    def add(self, payload: bytes) -> int:
        """Queue one event; returns its event number."""
        if len(payload) > MAX_EVENT_SIZE:
            raise LocalProtocolError(
                f"event of {len(payload)} bytes is larger than {MAX_EVENT_SIZE}", protocol=PROTOCOL, frame="Event", field="data"
            )
        n = self.next_number
        self.next_number = n + 1
        event = _new(PendingEvent)
        _SET_NUMBER(event, n)
        _SET_FRAME(event, encode_event(payload))
        self.pending.append(event)
        return n

    @property
    def unacked(self) -> int:
        return len(self.pending)

    # -- connection lifecycle -----------------------------------------------------
    def setup(self, request_id: int) -> SetupAppend:
        self.request_id = request_id
        self.ready = False
        self._unsent = 0
        return SetupAppend(request_id=request_id, writer_id=self.writer_id, segment=self.segment, delegation_token=self.token)

    def on_append_setup(self, cmd: AppendSetup) -> None:
        """Drop what the server already stored; resend the rest (§5.5)."""
        if cmd.writer_id != self.writer_id or cmd.segment != self.segment:
            raise LocalProtocolError(
                "AppendSetup for another writer or segment", protocol=PROTOCOL, frame="AppendSetup", field="writer_id"
            )
        last = cmd.last_event_number
        if last >= self.next_number:
            raise LocalProtocolError(
                f"server says event {last} is stored, but only {self.next_number - 1} were written",
                protocol=PROTOCOL,
                frame="AppendSetup",
                field="last_event_number",
            )
        self._ack_up_to(last)
        self.last_acked = max(self.last_acked, last) if last != NULL_VALUE else self.last_acked
        self.ready = True
        self._unsent = 0

    def connection_lost(self) -> None:
        self.ready = False
        self._unsent = 0

    def _ack_up_to(self, number: int) -> list[int]:
        pending = self.pending
        done = []
        while pending and pending[0].number <= number:
            done.append(pending.popleft().number)
        self._unsent = max(0, self._unsent - len(done))
        return done

    def on_data_appended(self, cmd: DataAppended) -> list[int]:
        """The event numbers this ack completes; checks the chain as the Java client does."""
        prev, num = cmd.previous_event_number, cmd.event_number
        lowest = self.pending[0].number if self.pending else None
        if not prev < num or (lowest is not None and not lowest > prev) or num >= self.next_number:
            raise LocalProtocolError(
                f"bad ack: event {num} after {prev} (lowest in flight {lowest}, last written {self.next_number - 1})",
                protocol=PROTOCOL,
                frame="DataAppended",
                field="event_number",
            )
        self.last_acked = num
        return self._ack_up_to(num)

    # -- encoding -------------------------------------------------------------------
    def take(self) -> bytes:
        """Bytes for every event not yet sent on this connection (empty until ready)."""
        if not self.ready:
            return b""
        pending = self.pending
        total = len(pending)
        if self._unsent >= total:
            return b""
        events = list(itertools.islice(pending, self._unsent, None))
        encode = self._encode_rust if self.style == "rust" else self._encode_java
        max_events, max_bytes = self.max_batch_events, self.max_batch_bytes
        out = []
        i, n = 0, len(events)
        while i < n:
            # a batch: up to max_events events, and past the first only while they fit in max_bytes
            j = i + 1
            size = len(events[i].frame)
            stop = min(n, i + max_events)
            while j < stop and size + (f := len(events[j].frame)) <= max_bytes:
                size += f
                j += 1
            out.append(encode(events[i:j]))
            i = j
        self._unsent = total
        return out[0] if len(out) == 1 else b"".join(out)

    def _encode_rust(self, batch: list[PendingEvent]) -> bytes:
        data = batch[0].frame if len(batch) == 1 else b"".join(e.frame for e in batch)
        n = len(data)
        if n + _ABE_FIXED <= MAX_WIRECOMMAND_SIZE:
            # AppendBlockEnd (§5.1) packed at once: header, writerId, sizeOfWholeEvents,
            # data, numEvents, lastEventNumber, requestId (the generic encoder's bytes)
            return (
                _ABE_HEAD.pack(AppendBlockEnd.TYPE, n + _ABE_FIXED - 8, self.writer_id.bytes, n, n)
                + data
                + _ABE_TAIL.pack(len(batch), batch[-1].number, self.request_id)
            )
        return AppendBlockEnd(  # refused past the frame limit, by the generic encoder
            writer_id=self.writer_id,
            size_of_whole_events=len(data),
            data=data,
            num_events=len(batch),
            last_event_number=batch[-1].number,
            request_id=self.request_id,
        ).encode()

    def _next_block_size(self, default: int) -> int:
        sizes = self.java_block_sizes
        if not sizes:
            return default
        size = sizes[self._block_turn % len(sizes)]
        self._block_turn += 1
        return size

    def _encode_java(self, batch: list[PendingEvent]) -> bytes:
        """Java's ``CommandEncoder`` blocks (§5.1): a block of ``B`` bytes holds
        whole events while they fit, then the head of the next event as a
        PartialEvent (its tail rides in the AppendBlockEnd) or Padding."""
        out = bytearray()
        wid = self.writer_id
        i = 0
        while i < len(batch):
            first = batch[i].frame
            block = self._next_block_size(sum(len(e.frame) for e in batch[i:]))
            if block <= len(first):  # unbatched: exactly one event, no trailer
                out += AppendBlock(writer_id=wid, data=first).encode()
                out += AppendBlockEnd(
                    writer_id=wid,
                    size_of_whole_events=len(first),
                    data=b"",
                    num_events=1,
                    last_event_number=batch[i].number,
                    request_id=self.request_id,
                ).encode()
                i += 1
                continue
            left = block
            body = bytearray()
            count = 0
            while i < len(batch) and left > len(batch[i].frame):
                body += batch[i].frame
                left -= len(batch[i].frame)
                count += 1
                i += 1
            tail = b""
            if i < len(batch):  # the next event does not fit: split it
                frame = batch[i].frame
                body += PartialEvent(data=frame[:left]).encode()
                tail = frame[left:]
                count += 1
                i += 1
            else:
                body += Padding(length=left).encode()
            out += AppendBlock(writer_id=wid, data=bytes(body)).encode()
            out += AppendBlockEnd(
                writer_id=wid,
                size_of_whole_events=block - left,
                data=tail,
                num_events=count,
                last_event_number=batch[i - 1].number,
                request_id=self.request_id,
            ).encode()
        return bytes(out)
