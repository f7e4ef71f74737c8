"""The Lumberjack writer: the client's Sans-IO machine (specs/lumberjack/README.md §3).

The client (the *writer*, §1) sends a window -- ``W n`` and ``n`` data frames,
optionally inside one ``C`` (§3.1, §3.6) -- and reads the server's ``A`` frames
(§2.5) until the whole window is acknowledged (§3.3, §3.7), re-arming its ack
timeout on every ack and keepalive (§3.4, §3.9).  One window is outstanding at a
time; what is not acked stays for the driver to resend on a new connection.

It follows :mod:`refwire.sansio`'s contract on
:class:`~refwire.sansio.FrameMachine` (see :mod:`refwire.lumberjack.connection`,
which also holds the server and re-exports everything here).  No I/O, no clock,
no randomness: time comes in as ``now``.

:class:`State` names the states of both machines (the same names serve both
roles); the client's table is :data:`CLIENT_TRANSITIONS`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, closed_inside
from ..speed import use_fast
from ..wire import Limits
from .events import AckReceived, AckTimeout, ConnectionClosed, KeepAlive, SendWindow
from .frames import (
    ACK_SCANNERS,
    DEFAULT_LIMITS,
    EVENT_ENCODERS,
    MAX_U32,
    PROTOCOL,
    V1,
    V2,
    EncodedWindow,
    encode_data,
    next_seq,
    window_bytes,
)

__all__ = ["CLIENT_TRANSITIONS", "ClientConnection", "ClientInput", "State"]


class State(enum.Enum):
    """Connection states (the same names serve both roles)."""

    AWAIT_WINDOW = "await-window"  #: server: between batches
    IN_BATCH = "in-batch"  #: server: a W announced events still to come
    IDLE = "idle"  #: client: nothing outstanding
    AWAITING_ACK = "awaiting-ack"  #: client: a window is sent and not fully acked
    CLOSED = "closed"  #: the byte stream ended (EOF, reset, or an ack timeout)
    ERROR = "error"  #: a protocol error; nothing more can be received


# Inputs of the client's state table.  Anything not listed for a state is a
# protocol error (the machine moves to ERROR).  Tests walk every (state, input) pair.
ClientInput = Literal["send", "ack-partial", "ack-last", "keepalive", "ack-bad", "eof", "reset", "timeout"]

CLIENT_TRANSITIONS: Final[dict[tuple[State, str], frozenset[State]]] = {
    (State.IDLE, "send"): frozenset({State.AWAITING_ACK}),
    (State.IDLE, "keepalive"): frozenset({State.IDLE}),
    (State.IDLE, "eof"): frozenset({State.CLOSED}),
    (State.IDLE, "reset"): frozenset({State.CLOSED}),
    (State.AWAITING_ACK, "ack-partial"): frozenset({State.AWAITING_ACK}),
    (State.AWAITING_ACK, "ack-last"): frozenset({State.IDLE}),
    (State.AWAITING_ACK, "keepalive"): frozenset({State.AWAITING_ACK}),
    (State.AWAITING_ACK, "eof"): frozenset({State.CLOSED}),
    (State.AWAITING_ACK, "reset"): frozenset({State.CLOSED}),
    (State.AWAITING_ACK, "timeout"): frozenset({State.CLOSED}),
}


@attrs.define
class _OutstandingWindow:
    events: list[Any]  # the application's objects, in order
    seqs: list[int]
    encoded: EncodedWindow  # their frames, for a resend of the unacked tail
    acked: int = 0
    index: dict[int, int] | None = None  # seq -> count acked when seq is acked (running seqs)


class ClientConnection(FrameMachine):
    """The writer side of one connection: one window outstanding at a time.

    Args:
        version: ``V1`` (``D`` frames) or ``V2`` (``J`` frames).
        compression_level: zlib level for the one ``C`` frame that carries a
            window's events (0 = plain frames).  Beats uses 3.
        sequence: ``"window"`` numbers every window's events 1..n (Beats; every
            server acks that correctly); ``"running"`` continues a u32 counter
            across windows from ``first_seq``, wrapping past 2**32 - 1 to 1.
        ack_timeout: seconds without an ack or keepalive before
            :class:`AckTimeout` (Beats: 30 s).
        ack_interpretation: ``"seq"`` (an ack names the last acked sequence
            number; Logstash) or ``"count"`` (an ack counts events; go-lumber).
        fast: encode windows and read acks on the speed path
            (:mod:`refwire.lumberjack._fast_frames`), on the plain one
            (``False``), or as the process-wide switch says (``None``,
            :mod:`refwire.speed`); decided once, here.

    ``next_event()`` gives :class:`AckReceived`, :class:`KeepAlive`, and once,
    :class:`ConnectionClosed` or :class:`AckTimeout` (a closed machine then
    answers :data:`NEED_DATA`).  After a reset, a failed write
    (``send_failed``) or an ack timeout the window's unacked events stay in
    :meth:`unacked`, for the driver to resend on a new connection.
    """

    role: Final = "client"
    PROTOCOL = PROTOCOL
    TRANSITIONS = CLIENT_TRANSITIONS
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(
        self,
        *,
        version: int = V2,
        compression_level: int = 3,
        limits: Limits = DEFAULT_LIMITS,
        sequence: Literal["window", "running"] = "window",
        first_seq: int = 1,
        ack_timeout: float | None = 30.0,
        ack_interpretation: Literal["seq", "count"] = "seq",
        fast: bool | None = None,
    ) -> None:
        if version not in (V1, V2):
            raise ValueError("version must be V1 (0x31) or V2 (0x32)")
        if not 0 <= compression_level <= 9:
            raise ValueError("compression_level must be 0..9")
        if not 1 <= first_seq <= MAX_U32:
            raise ValueError("first_seq must be 1..2**32-1 (0 is reserved for keepalives)")
        super().__init__(State.IDLE)
        self.version = version
        self.compression_level = compression_level
        self.limits = limits
        self.sequence = sequence
        self.ack_timeout = ack_timeout
        self.ack_interpretation = ack_interpretation
        #: the sequence number the next event will get (running mode).
        self.next_seq = first_seq
        self._win: _OutstandingWindow | None = None
        self._buf = bytearray()
        self._consumed = 0  # stream offset of _buf[0]
        self._last_activity = 0.0
        self._write_failed = False
        #: True when this machine takes the speed paths.
        self.fast = use_fast(fast)
        self._encode_events = EVENT_ENCODERS[self.fast]
        self._scan_acks = ACK_SCANNERS[self.fast]

    def _transition(self, inp: str, new: State | None = None, *, offset: int | None = None, frame: str | None = None) -> None:
        allowed = CLIENT_TRANSITIONS.get((self.state, inp))
        if allowed is None:
            raise LocalProtocolError(f"{inp!r} is not allowed in state {self.state.value}", protocol=PROTOCOL, frame="A")
        target = new if new is not None else next(iter(allowed))
        assert target in allowed
        self.transitions_seen.add((self.state.value, inp, target.value))
        self.state = target

    # -- sending -----------------------------------------------------------
    def send(self, event: object, *, now: float) -> None:
        """``SendWindow(events, encoded)``: queue ``W n`` followed by the ``n``
        events (in one ``C`` when compressing), one chunk in ``data_to_send()``
        so no Nagle stall splits them.

        ``encoded`` may give the events already prepared: an
        :class:`~refwire.lumberjack.frames.EncodedWindow` (from
        :func:`~refwire.lumberjack.frames.encode_events`, or
        :meth:`unacked_encoded` for a resend; renumbered in place for this
        window), or one :func:`encode_event` result per event.  The trio client
        encodes each window once, so a resend does not encode twice.
        """
        if not isinstance(event, SendWindow):
            raise TypeError(f"a Lumberjack client sends SendWindow events, not {type(event).__name__}")
        events, encoded = event.events, event.encoded
        n = len(events)
        if n == 0:
            raise LocalProtocolError("a window needs at least one event", protocol=PROTOCOL, frame="W")
        if n > self.limits.max_window:
            raise LimitExceeded(
                f"window of {n} events exceeds the limit max_window={self.limits.max_window}",
                protocol=PROTOCOL,
                frame="W",
                field="count",
            )
        if self.state is not State.IDLE:
            raise LocalProtocolError(f"cannot send a window in state {self.state.value}", protocol=PROTOCOL, frame="W")
        version = self.version
        if isinstance(encoded, EncodedWindow) and (len(encoded) != n or encoded.version != version):
            raise LocalProtocolError(
                f"the encoded window holds {len(encoded)} version {chr(encoded.version)!r} events, "
                f"not {n} version {chr(version)!r} ones",
                protocol=PROTOCOL,
                frame="W",
            )
        self._now = now
        following = self.next_seq
        if self.sequence == "window":
            seqs = list(range(1, n + 1))
            index = None
        else:
            seqs = []
            for _ in range(n):
                seqs.append(following)
                following = next_seq(following)
            index = {seq: i + 1 for i, seq in enumerate(seqs)}
        if isinstance(encoded, EncodedWindow):
            prepared = encoded
            prepared.renumber(seqs)
        elif encoded is not None:
            prepared = EncodedWindow(version, bytearray(), [], seqs)
            body, mark = prepared.body, prepared.starts.append
            for seq, payload in zip(seqs, encoded, strict=True):
                mark(len(body))
                body += encode_data(version, seq, payload)
        else:
            prepared = self._encode_events(version, events, seqs)
        self._out += window_bytes(version, n, prepared.body, self.compression_level)
        self.next_seq = following  # (an event that cannot be encoded raised above: nothing is sent)
        self._transition("send")
        self._win = _OutstandingWindow(list(events), seqs, prepared, 0, index)
        self._last_activity = now

    def send_window(self, events: Sequence[Any], *, now: float, encoded: Sequence[Any] | None = None) -> None:
        """``send(SendWindow(events, encoded), now=now)``."""
        self.send(SendWindow(events, encoded), now=now)

    def unacked(self) -> list[Any]:
        """The application's events of the current window not acked yet."""
        w = self._win
        return [] if w is None else w.events[w.acked :]

    def unacked_encoded(self) -> EncodedWindow:
        """The frames of :meth:`unacked`'s events, to resend them as sent
        (``SendWindow(unacked, encoded)`` renumbers them for the new window)."""
        w = self._win
        if w is None:
            return EncodedWindow(self.version, bytearray(), [], [])
        return w.encoded.tail(len(w.events) - w.acked)

    @property
    def acked(self) -> int:
        """Events of the current (or just completed) window acked so far."""
        return 0 if self._win is None else self._win.acked

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: the connection is over; the window stays
        unacked (:meth:`unacked`) for the driver to resend on a new connection."""
        self._write_failed = True
        super().send_failed(now=now)

    # -- receiving ---------------------------------------------------------
    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    def _input_ended(self) -> None:
        if self._reset and self.state in (State.IDLE, State.AWAITING_ACK):
            self._transition("reset")
            reason = "write failed" if self._write_failed else "reset"
            self._events.append(ConnectionClosed(clean=False, reason=reason))

    def _idle_event(self) -> NeedData | None:
        return NEED_DATA if self.state is State.CLOSED else None

    def _pump(self) -> None:
        buf = self._buf
        pos = 0
        try:
            for ver, seq, at in self._scan_acks(buf, self._consumed):
                pos = at + 6
                self._on_ack(ver, seq, self._consumed + at)
        finally:
            del buf[:pos]
            self._consumed += pos

    def _at_eof(self) -> None:
        if self.state not in (State.IDLE, State.AWAITING_ACK):
            return
        if self._buf:
            raise closed_inside(
                "an A frame",
                protocol=PROTOCOL,
                frame="A",
                offset=self._consumed,
                detail=f"{len(self._buf)} bytes of it",
            )
        self._transition("eof")
        self._events.append(ConnectionClosed(clean=not self._win or self._win.acked == len(self._win.events)))

    def _on_ack(self, ver: int, seq: int, offset: int) -> None:
        self._last_activity = self._now
        w = self._win
        if seq == 0 and (w is None or self.ack_interpretation == "count" or w.index is None or 0 not in w.index):
            self._transition("keepalive")
            self._events.append(KeepAlive(ver))
            return
        if ver != self.version:
            raise LocalProtocolError(
                f"ack with version byte {chr(ver)!r} on a version {chr(self.version)!r} connection",
                protocol=PROTOCOL,
                frame="A",
                field="version",
                offset=offset,
            )
        if w is None or self.state is not State.AWAITING_ACK:
            raise LocalProtocolError(
                f"ack {seq} with no window outstanding", protocol=PROTOCOL, frame="A", field="seq", offset=offset + 2
            )
        n = len(w.events)
        if self.ack_interpretation == "count":
            count = seq if seq <= n else -1
        elif w.index is None:
            count = seq if 1 <= seq <= n else -1
        else:
            count = w.index.get(seq, -1)
        if count < 0:
            raise LocalProtocolError(
                f"ack {seq} names no event of the outstanding window ({w.seqs[0]}..{w.seqs[-1]})",
                protocol=PROTOCOL,
                frame="A",
                field="seq",
                offset=offset + 2,
            )
        if count < w.acked:
            raise LocalProtocolError(
                f"ack {seq} goes backwards ({count} < {w.acked} events already acked)",
                protocol=PROTOCOL,
                frame="A",
                field="seq",
                offset=offset + 2,
            )
        newly = count - w.acked
        w.acked = count
        complete = count == n
        self._transition("ack-last" if complete else "ack-partial")
        self._events.append(AckReceived(seq, newly, count, complete))

    # -- timers ------------------------------------------------------------
    def next_deadline(self) -> float | None:
        """When the ack timeout expires (only while a window is outstanding)."""
        if self.state is not State.AWAITING_ACK or self.ack_timeout is None:
            return None
        return self._last_activity + self.ack_timeout

    def handle_timer(self, *, now: float) -> None:
        """Queue :class:`AckTimeout` (the connection is done) if no ack or
        keepalive arrived within ``ack_timeout``."""
        self._now = now
        deadline = self.next_deadline()
        if deadline is not None and now >= deadline:
            self._transition("timeout")
            self._events.append(AckTimeout(now - self._last_activity))
