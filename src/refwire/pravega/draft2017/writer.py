"""A draft-dialect writer session, Sans-IO (specs/pravega-draft-2017/README.md §5).

Offsets count segment bytes (the stored Event frames) per (ConnectionId,
segment) and continue across connections: after every (re)connect the
AppendSetup's ack level says what is stored, the session drops that and
retransmits only the bytes above it, so every byte is stored exactly once.

How blocks are shaped is a :class:`Planner`'s choice: how many events per
block, where to cut an event into partial messages, whether the last event's
partial message straddles the EndAppendBlock, and KeepAlive padding.  The
default sends whole events; the simulator plans at random.
"""

from __future__ import annotations

import uuid
from collections import deque
from typing import Protocol

import attrs

from ...errors import LocalProtocolError
from ..frames import encode_event
from .connection import split_message
from .frames import PROTOCOL, AppendSetup, BeginAppendBlock, DataAppended, EndAppendBlock, KeepAlive, SetupAppend

__all__ = ["DraftWriterSession", "Planner", "WholeEvents"]


class Planner(Protocol):
    def block_events(self) -> int:
        """Events in the next block (at least 1)."""
        ...

    def cuts(self, frame_len: int) -> list[int]:
        """Where to cut an Event frame into partial messages ([] = send it whole)."""
        ...

    def straddle(self) -> bool:
        """Let the block's last event (if cut) end after the EndAppendBlock."""
        ...

    def padding(self) -> bytes | None:
        """KeepAlive data to pad the block with, or None."""
        ...


class WholeEvents:
    """The default plan: whole events, up to ``per_block`` per block, no padding."""

    def __init__(self, per_block: int = 500) -> None:
        self.per_block = per_block

    def block_events(self) -> int:
        return self.per_block

    def cuts(self, frame_len: int) -> list[int]:
        return []

    def straddle(self) -> bool:
        return False

    def padding(self) -> bytes | None:
        return None


@attrs.frozen
class _Pending:
    end: int  #: connection offset after this event
    frame: bytes


class DraftWriterSession:
    """One writer's (ConnectionId, segment) session.  ``connection_id`` is the
    driver's choice (a random UUID drawn by the driver; the simulator draws it
    from its seed): the session itself has no hidden inputs."""

    def __init__(self, segment: str, connection_id: uuid.UUID, *, planner: Planner | None = None) -> None:
        self.segment = segment
        self.connection_id = connection_id
        self.planner: Planner = planner or WholeEvents()
        self.pending: deque[_Pending] = deque()  #: not yet acked
        self.next_offset = 0  #: connection offset after the last event added
        self.acked = 0  #: the highest ack level seen
        self._sent = 0  #: connection offset up to which events went out on this connection
        self.ready = False

    def add(self, payload: bytes) -> int:
        """Queue one event; returns the connection offset after it."""
        frame = encode_event(payload)
        self.next_offset += len(frame)
        self.pending.append(_Pending(self.next_offset, frame))
        return self.next_offset

    def setup(self) -> SetupAppend:
        self.ready = False
        return SetupAppend(connection_id=self.connection_id, segment=self.segment)

    def _drop_to(self, level: int, frame: str) -> None:
        if level > self.next_offset:
            raise LocalProtocolError(
                f"ack level {level} is beyond the {self.next_offset} bytes written", protocol=PROTOCOL, frame=frame, field="level"
            )
        while self.pending and self.pending[0].end <= level:
            self.pending.popleft()
        start = self.pending[0].end - len(self.pending[0].frame) if self.pending else self.next_offset
        if self.pending and level > start:
            raise LocalProtocolError(
                f"ack level {level} falls inside an event ({start}..{self.pending[0].end})",
                protocol=PROTOCOL,
                frame=frame,
                field="level",
            )

    def on_append_setup(self, cmd: AppendSetup) -> None:
        """Resume from the stored level: retransmit only what is above it."""
        if cmd.connection_id != self.connection_id or cmd.segment != self.segment:
            raise LocalProtocolError(
                "AppendSetup for another ConnectionId or segment", protocol=PROTOCOL, frame="AppendSetup", field="connection_id"
            )
        level = cmd.connection_offset_ack_level
        if level < self.acked:
            raise LocalProtocolError(
                f"ack level went back from {self.acked} to {level}",
                protocol=PROTOCOL,
                frame="AppendSetup",
                field="connection_offset_ack_level",
            )
        self._drop_to(level, "AppendSetup")
        self.acked = level
        self._sent = level
        self.ready = True

    def on_data_appended(self, cmd: DataAppended) -> None:
        if cmd.connection_id != self.connection_id:
            raise LocalProtocolError(
                "DataAppended for another ConnectionId", protocol=PROTOCOL, frame="DataAppended", field="connection_id"
            )
        if cmd.ack_level < self.acked or cmd.ack_level > self._sent:
            raise LocalProtocolError(
                f"ack level {cmd.ack_level} outside {self.acked}..{self._sent} (backwards, or beyond what was sent)",
                protocol=PROTOCOL,
                frame="DataAppended",
                field="ack_level",
            )
        self._drop_to(cmd.ack_level, "DataAppended")
        self.acked = cmd.ack_level

    def connection_lost(self) -> None:
        self.ready = False

    def take(self) -> bytes:
        """Blocks for every event not yet sent on this connection."""
        if not self.ready:
            return b""
        todo = [p for p in self.pending if p.end > self._sent]
        out = bytearray()
        i = 0
        plan = self.planner
        while i < len(todo):
            n = max(1, plan.block_events())
            block = todo[i : i + n]
            i += len(block)
            begin = block[0].end - len(block[0].frame)
            inner = bytearray()
            trailer = b""
            for j, ev in enumerate(block):
                cuts = plan.cuts(len(ev.frame))
                if not cuts:
                    inner += ev.frame
                    continue
                parts = split_message(ev.frame, cuts)
                if j == len(block) - 1 and plan.straddle():
                    # Begin (and Middles) inside the block, the End part after EndAppendBlock.
                    inner += b"".join(parts[:-1])
                    trailer = parts[-1]
                else:
                    inner += b"".join(parts)
            pad = plan.padding()
            if pad is not None:
                inner += KeepAlive(data=pad).encode()
            blen = block[-1].end - begin
            out += BeginAppendBlock(connection_id=self.connection_id, connection_offset=begin, length=len(inner)).encode()
            out += inner
            out += EndAppendBlock(connection_id=self.connection_id, connection_offset=begin + blen, block_length=blen).encode()
            out += trailer
        if todo:
            self._sent = todo[-1].end
        return bytes(out)
