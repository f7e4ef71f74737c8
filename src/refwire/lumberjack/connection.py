"""Lumberjack Sans-IO connections: the server (reader) and the client (writer).

Both follow :mod:`refwire.sansio`'s contract on :class:`~refwire.sansio.FrameMachine`:
``receive_data(data, now=...)`` (``b""`` is EOF), ``connection_lost(now=...)``
(reset), ``next_event()`` returning an event (:mod:`~refwire.lumberjack.events`) or
:data:`NEED_DATA`, ``send(event, now=...)`` (:class:`~refwire.lumberjack.events.Accept`,
:class:`~refwire.lumberjack.events.SendWindow`) with the bytes in ``data_to_send()``, and
``next_deadline()`` / ``handle_timer(now=...)`` for keepalives and timeouts.
No I/O, no clock, no randomness: time comes in as ``now``.

Semantics (specs/lumberjack/README.md §3): ``W n`` is a batch header -- exactly
``n`` data events follow; the server acks a whole batch with the sequence
number of its last event (Logstash) or, switched, with the count (go-lumber);
``W 0`` is answered with ``A 0``; ``A 0`` is a keepalive sent while a batch
waits for the application.  Sequence numbers are u32 and wrap at 2**32.

The server (:class:`ServerConnection`) is here; the client
(:class:`~refwire.lumberjack.writer.ClientConnection`) and the states both
share (:class:`~refwire.lumberjack.writer.State`) are in
:mod:`refwire.lumberjack.writer` and re-exported here.

**Plain path and speed path.**  The server takes its frames one at a time
(:meth:`ServerConnection._take_frame`), as §3 reads.  Its speed path
(:mod:`refwire.lumberjack._fast_connection`, registered in :data:`FRAME_LOOPS`
when the package is imported) takes a window's ``J`` frames as
:class:`~refwire.lumberjack.codec.JsonRun` columns decoded by the decoder's
speed path; which one runs is decided once per machine (``fast=``, else
:mod:`refwire.speed`'s ``REFWIRE_REFERENCE`` switch).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final, Literal

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, closed_inside, earliest
from ..speed import use_fast
from ..wire import Limits
from .events import (
    Accept,
    AckReceived,
    AckTimeout,
    Batch,
    BatchTimeout,
    ConnectionClosed,
    EmptyWindow,
    Event,
    IdleAtShutdown,
    IdleTimeout,
    JsonColumns,
    KeepAlive,
    SendWindow,
)
from .frames import (
    DEFAULT_LIMITS,
    PROTOCOL,
    V2,
    Compressed,
    DataFrame,
    FrameDecoder,
    JsonFrame,
    Window,
    encode_ack,
    frame_size,
    held_bytes,
    inflate_frames,
)
from .writer import CLIENT_TRANSITIONS, ClientConnection, ClientInput, State

__all__ = [
    "CLIENT_TRANSITIONS",
    "FRAME_LOOPS",
    "NEED_DATA",
    "SERVER_TRANSITIONS",
    "Accept",
    "AckReceived",
    "AckTimeout",
    "Batch",
    "BatchTimeout",
    "ClientConnection",
    "ClientInput",
    "ConnectionClosed",
    "EmptyWindow",
    "IdleAtShutdown",
    "IdleTimeout",
    "KeepAlive",
    "SendWindow",
    "ServerConnection",
    "ServerInput",
    "State",
]


# Inputs of the server's state table.  Anything not listed for a state is a
# protocol error (the machine moves to ERROR).  Tests walk every (state, input) pair.
ServerInput = Literal["W", "W0", "data", "C", "A", "eof", "reset"]

SERVER_TRANSITIONS: Final[dict[tuple[State, str], frozenset[State]]] = {
    (State.AWAIT_WINDOW, "W"): frozenset({State.IN_BATCH}),
    (State.AWAIT_WINDOW, "W0"): frozenset({State.AWAIT_WINDOW}),
    (State.AWAIT_WINDOW, "C"): frozenset({State.AWAIT_WINDOW, State.IN_BATCH}),
    (State.AWAIT_WINDOW, "eof"): frozenset({State.CLOSED}),
    (State.AWAIT_WINDOW, "reset"): frozenset({State.CLOSED}),
    (State.IN_BATCH, "data"): frozenset({State.IN_BATCH, State.AWAIT_WINDOW}),
    (State.IN_BATCH, "C"): frozenset({State.IN_BATCH, State.AWAIT_WINDOW}),
    (State.IN_BATCH, "reset"): frozenset({State.CLOSED}),
}

_IN_BATCH_DATA: Final = (State.IN_BATCH.value, "data", State.IN_BATCH.value)

#: What a held event costs against ``max_connection_memory``, in bytes of its
#: payload (§4): the received frame it is cut from (or its inflated bytes), the
#: payload itself, the JSON check's parse and the line the application writes
#: are each about as large, and live at once.
EVENT_COST: Final = 4


def memory_caps(limits: Limits) -> tuple[Limits, str]:
    """The decoder's limits under ``max_connection_memory`` (§4): a frame may
    be at most a quarter of it (:data:`EVENT_COST`), and the name of the limit
    that bounds frames (``max_frame_size`` unless the budget is the tighter)."""
    room = limits.max_connection_memory // EVENT_COST
    if room < limits.max_frame_size:
        return attrs.evolve(limits, max_frame_size=room), "max_connection_memory"
    return limits, "max_frame_size"

# --------------------------------------------------------------------------- helpers


def _offset_of(frames: list[Any], i: int, base: int) -> int:
    return base + sum(frame_size(f) for f in frames[:i])


# --------------------------------------------------------------------------- server


class ServerConnection(FrameMachine):
    """The reader side of one connection.

    Args:
        limits: ceilings for window, frame, inflated size and ``C`` nesting.
        validate_json: parse every ``J`` payload and require a JSON object
            (Logstash); off, payloads are handed over unparsed.
        ack_mode: ``"last-seq"`` acks a batch with its last event's sequence
            number (Logstash, the default); ``"count"`` with the number of
            events in it (go-lumber).
        keepalive_interval: send ``A 0`` this often while a batch waits for the
            application (``None``: never).  Logstash uses 5 s, go-lumber 3 s.
        keepalive_version: ``"connection"`` (the connection's own version
            byte) or ``"v2"`` (always ``'2A'``, as Logstash does even on v1).
        accept_mixed_versions: Logstash's rule: a frame's version byte need not
            match the connection's; a batch takes the version of its ``W`` and
            holds ``J`` frames if that is 2, ``D`` frames if 1, whatever their
            own version bytes.  Off (default), every frame must carry the
            connection's version byte (go-lumber).
        answer_empty_window: answer ``W 0`` with ``A 0`` (Logstash >= 6.7);
            off, ignore it (go-lumber).  Acks leave in window order: an ``A 0``
            for a ``W 0`` that arrives while batches wait for :meth:`accept` is
            sent right after the ack of the last of them.
        idle_timeout: while nothing is pending, this many seconds since the
            last byte received or the last ack sent queue :class:`IdleTimeout`
            (Logstash ``client_inactivity_timeout`` is 60 s); ``None``: never.
        batch_timeout: while a batch (or a frame) is incomplete, this many
            seconds since the last byte received queue :class:`BatchTimeout`
            (go-lumber allows 30 s for a whole batch); ``None``: never.
        pipeline_depth: batches the driver decodes ahead of the application.
            While more than that (at least 1) wait for :meth:`accept`, the
            driver reads nothing, so neither receive timeout runs.
        now: when the connection started (the receive timeouts count from it
            until the first byte); required with either timeout.
        fast: take the speed path (a window's ``J`` frames decoded and taken in
            columns, :mod:`refwire.lumberjack._fast_connection`), the plain one
            (``False``), or as the process-wide switch says (``None``,
            :mod:`refwire.speed`); decided once, here.

    ``next_event()`` gives :class:`Batch`, :class:`EmptyWindow`,
    :class:`ConnectionClosed` (once; a closed machine then answers
    :data:`NEED_DATA`) and, from the timer, :class:`IdleTimeout`,
    :class:`BatchTimeout` or :class:`IdleAtShutdown`; it raises
    :class:`~refwire.errors.RemoteProtocolError` once every event decoded
    before the bad byte has been returned.

    Neither receive timeout runs while a batch waits for the application with
    nothing half-received; keepalives run then.  After :meth:`close_when_idle`
    the timer queues :class:`IdleAtShutdown` as soon as nothing is pending or
    half-received.
    """

    role: Final = "server"
    PROTOCOL = PROTOCOL
    TRANSITIONS = SERVER_TRANSITIONS
    ERROR_STATE = State.ERROR
    CLOSED_STATE = State.CLOSED

    def __init__(
        self,
        *,
        limits: Limits = DEFAULT_LIMITS,
        validate_json: bool = True,
        ack_mode: Literal["last-seq", "count"] = "last-seq",
        keepalive_interval: float | None = 5.0,
        keepalive_version: Literal["connection", "v2"] = "connection",
        accept_mixed_versions: bool = False,
        answer_empty_window: bool = True,
        idle_timeout: float | None = None,
        batch_timeout: float | None = None,
        pipeline_depth: int = 2,
        now: float | None = None,
        frame_timeout: float | None = None,
        fast: bool | None = None,
    ) -> None:
        if ack_mode not in ("last-seq", "count"):
            raise ValueError(f"ack_mode must be 'last-seq' or 'count', not {ack_mode!r}")
        if now is None and (idle_timeout is not None or batch_timeout is not None):
            raise ValueError("idle_timeout and batch_timeout count from the connection's start: pass now=")
        super().__init__(State.AWAIT_WINDOW)
        self.frame_timeout = frame_timeout
        self.limits = limits
        self.ack_mode = ack_mode
        self.keepalive_interval = keepalive_interval
        self.keepalive_version = keepalive_version
        self.accept_mixed_versions = accept_mixed_versions
        self.answer_empty_window = answer_empty_window
        self.idle_timeout = idle_timeout
        self.batch_timeout = batch_timeout
        self.pipeline_depth = pipeline_depth
        #: the connection's version byte, fixed by its first frame.
        self.version: int | None = None
        #: True when this machine takes the speed path.
        self.fast = use_fast(fast)
        # the speed path asks the decoder for JsonRun columns and takes them whole
        self._runs = self.fast
        self._take_frames = FRAME_LOOPS[self.fast]
        # A frame, and a batch's events, may take at most what the connection's
        # memory budget leaves (§4): the decoder sees the tighter of the limits.
        self._frame_limits, frame_limit = memory_caps(limits)
        self._frame_limit = frame_limit
        self._decoder = FrameDecoder(
            self._frame_limits,
            validate_json=validate_json,
            strict_versions=not accept_mixed_versions,
            fast=self.fast,
            frame_limit=frame_limit,
        )
        self._batch_version = V2
        self._cur: list[Event] = []  # the batch's events, as frames
        self._cur_cols: list[JsonColumns] = []  # the speed path's: its J frames, in columns
        self._cur_n = 0  # events received for the batch
        self._cur_count = 0
        #: bytes of events held for the batch being received (``max_batch_bytes``, §4)
        self._cur_bytes = 0
        #: what the batch being received may hold, and the limit that says so
        #: (fixed when its ``W`` arrives: see :meth:`_batch_cap`)
        self._cap = limits.max_batch_bytes
        self._cap_name = "max_batch_bytes"
        #: bytes of events of the batches delivered and not yet acked, each
        self._pending_bytes: deque[int] = deque()
        self._held_bytes = 0
        self._batches = 0
        self._pending: deque[Batch] = deque()  # delivered, not yet acked
        # A 0 answers to W 0 frames that came after a pending batch: (that batch's
        # number, the bytes), sent right after that batch's ack.
        self._held: deque[tuple[int, bytes]] = deque()
        self._now = 0.0 if now is None else now
        self._last_output = 0.0
        self._pending_since = 0.0
        self._last_rx = self._now  # the last byte received
        self._last_activity = self._now  # the last byte received or ack sent
        self._shutdown_at: float | None = None  # close_when_idle was called then
        self._receive_timer_fired = False
        self._write_failed = False

    # -- input -------------------------------------------------------------
    def _receive_progress(self) -> tuple[int, int]:
        return self._decoder.buffered, self._decoder.offset

    def _pending_frame_name(self) -> str | None:
        return self._decoder.pending_frame_name()

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        self._last_rx = self._last_activity = self._now
        self._decoder.feed(data)

    def _input_ended(self) -> None:
        # A reset ends the connection at once (what is buffered is dropped);
        # unacked batches stay unacked.  EOF is handled after the buffered input.
        if self._reset and self.state in (State.AWAIT_WINDOW, State.IN_BATCH):
            self._transition("reset")
            reason = "write failed" if self._write_failed else "reset"
            self._events.append(ConnectionClosed(clean=False, reason=reason))

    def send_failed(self, *, now: float) -> None:
        """The driver could not write: the connection is over; batches not yet
        acked are not acked (the client resends them)."""
        self._write_failed = True
        super().send_failed(now=now)

    # -- events (next_event() is FrameMachine's) -----------------------------
    def _idle_event(self) -> NeedData | None:
        return NEED_DATA if self.state is State.CLOSED else None

    def _pump(self) -> None:
        start = self._decoder.offset
        frames, err = self._decoder.frames_before_error(runs=self._runs)
        if frames:
            self._take_frames(self, frames, 0, None, start)
        if err is not None:
            raise err

    def _at_eof(self) -> None:
        if self._decoder.buffered:
            raise closed_inside(
                "a frame",
                protocol=PROTOCOL,
                frame=self._decoder.pending_frame_name(),
                offset=self._decoder.offset,
                detail=f"{self._decoder.buffered} bytes of it received",
            )
        if self.state is State.IN_BATCH:
            raise closed_inside(
                "a batch",
                protocol=PROTOCOL,
                frame="W",
                offset=self._decoder.offset,
                detail=f"{self._cur_n} of {self._cur_count} events received",
            )
        self._transition("eof")
        self._events.append(ConnectionClosed(clean=True))

    def _transition(self, inp: str, new: State | None = None, *, offset: int | None = None, frame: str | None = None) -> None:
        allowed = SERVER_TRANSITIONS.get((self.state, inp))
        if allowed is None:
            raise LocalProtocolError(f"{inp!r} is not allowed in state {self.state.value}", protocol=PROTOCOL, field="type")
        target = new if new is not None else next(iter(allowed))
        assert target in allowed, (self.state, inp, target)
        self.transitions_seen.add((self.state.value, inp, target.value))
        self.state = target

    # -- frames (§3) --------------------------------------------------------
    def _take_frame(self, f: Any, frames: list[Any], i: int, depth: int, base: int, c_offset: int | None) -> None:
        """One decoded frame, ``frames[i]``, through the machine: a ``J`` or ``D``
        is the next event of the batch (§3.1), a ``W`` begins one (§2.1, §3.5), a
        ``C``'s inflated frames are taken in its place (§3.6), and an ``A`` flows
        only from server to client (§2.5).

        ``frames`` came from the stream at offset ``base``, or from inside the
        ``C`` at ``c_offset`` (then ``depth`` ``C`` frames deep).  Errors name
        the offending field at its stream offset; for frames inside a ``C`` the
        frame is named ``C>X`` and the offset is the ``C``'s (the inflated bytes
        have no stream offset).  Offsets of plain frames are computed only when
        an error happens.
        """
        t = type(f)
        if t is JsonFrame or t is DataFrame:
            self._take_event(f, frames, i, base, c_offset)
        elif t is Window:
            self._take_window(f, frames, i, base, c_offset)
        elif t is Compressed:
            self._check_version(f.version, frames, i, base, c_offset, "C")
            self._inflate_and_process(f, depth, c_offset if c_offset is not None else _offset_of(frames, i, base))
        else:  # Ack
            raise self._error_at(
                "the client sent an A frame (acks flow from server to client)", frames, i, base, c_offset, "A", "type", 1
            )

    def _take_event(self, f: JsonFrame | DataFrame, frames: list[Any], i: int, base: int, c_offset: int | None) -> None:
        """A data frame: the next event of the batch a ``W`` announced (§3.1),
        of the batch's version (§3.10), within ``max_batch_bytes`` (§4)."""
        name = "J" if type(f) is JsonFrame else "D"
        if self.state is not State.IN_BATCH:
            raise self._error_at("data frame outside a window (no W announced it)", frames, i, base, c_offset, name, "type", 1)
        if self.accept_mixed_versions:
            # Logstash's rule (§3.10): the batch's W decides what it holds --
            # J frames in a '2' batch, D frames in a '1' one -- whatever the
            # frame's own version byte (the decoder checked it is '1' or '2').
            if (name == "J") != (self._batch_version == V2):
                raise self._error_at(
                    f"{name} frame in a version {chr(self._batch_version)!r} batch", frames, i, base, c_offset, name, "type", 1
                )
        elif f.version != self._batch_version:
            raise self._error_at(
                f"version byte {chr(f.version)!r} on a version {chr(self._batch_version)!r} connection",
                frames,
                i,
                base,
                c_offset,
                name,
                "version",
                0,
            )
        self._cur.append(f)
        self._cur_bytes += held_bytes(f)
        if self._cur_bytes > self._cap:
            raise self._error_at(
                self._over_cap(),
                frames,
                i,
                base,
                c_offset,
                name,
                "payload",
                10 if name == "J" else 6,
                limit=True,
            )
        self._cur_n += 1
        if self._cur_n == self._cur_count:
            self._finish_batch()
        else:
            self._transition("data", State.IN_BATCH)

    def _take_window(self, f: Window, frames: list[Any], i: int, base: int, c_offset: int | None) -> None:
        """``W count``: a batch of ``count`` events begins (§2.1, §3.1), never
        inside an unfinished one; ``W 0`` is an empty window, answered with
        ``A 0`` in window order (§3.5)."""
        self._check_version(f.version, frames, i, base, c_offset, "W")
        if self.state is State.IN_BATCH:
            raise self._error_at(
                f"W while the previous window still expects {self._cur_count - self._cur_n} events",
                frames,
                i,
                base,
                c_offset,
                "W",
                "type",
                1,
            )
        if f.count > self.limits.max_window:
            raise self._error_at(
                f"count {f.count} exceeds the limit max_window={self.limits.max_window}",
                frames,
                i,
                base,
                c_offset,
                "W",
                "count",
                2,
                limit=True,
            )
        if f.count == 0:
            self._transition("W0")
            if self.answer_empty_window:
                # Acks leave in window order: while earlier batches wait for
                # the application, this A 0 waits behind the last one's ack.
                if self._pending:
                    self._held.append((self._pending[-1].number, encode_ack(0, f.version)))
                else:
                    self._emit(encode_ack(0, f.version))
            self._events.append(EmptyWindow(f.version))
        else:
            self._transition("W")
            self._cur_count = f.count
            self._batch_version = f.version
            self._batch_cap()

    def _batch_cap(self) -> None:
        """What the batch a ``W`` begins may hold (§4): ``max_batch_bytes``, or
        less when the connection's memory budget leaves less -- a quarter of it
        (:data:`EVENT_COST`) less the events of the batches awaiting their ack."""
        limits = self.limits
        room = limits.max_connection_memory // EVENT_COST - self._held_bytes
        if room < limits.max_batch_bytes:
            self._cap, self._cap_name = max(room, 0), "max_connection_memory"
        else:
            self._cap, self._cap_name = limits.max_batch_bytes, "max_batch_bytes"

    def _over_cap(self) -> str:
        """Why the batch's events were refused (the limit :meth:`_batch_cap` chose)."""
        if self._cap_name == "max_batch_bytes":
            return f"the batch's events exceed the limit max_batch_bytes={self._cap}"
        return (
            f"the batch's events exceed the {self._cap} bytes the limit "
            f"max_connection_memory={self.limits.max_connection_memory} leaves them "
            f"(each byte counts {EVENT_COST}x; {self._held_bytes} bytes of events await their ack)"
        )

    def _error_at(
        self,
        reason: str,
        frames: list[Any],
        i: int,
        base: int,
        c_offset: int | None,
        frame: str,
        field: str,
        rel: int,
        *,
        limit: bool = False,
    ) -> LocalProtocolError:
        """The error at ``frames[i]``, field ``rel`` bytes into that frame (§4)."""
        cls = LimitExceeded if limit else LocalProtocolError
        if c_offset is not None:
            return cls(reason, protocol=PROTOCOL, frame=f"C>{frame}", field=field, offset=c_offset)
        return cls(reason, protocol=PROTOCOL, frame=frame, field=field, offset=_offset_of(frames, i, base) + rel)

    def _check_version(self, version: int, frames: list[Any], i: int, base: int, c_offset: int | None, frame: str) -> None:
        if self.version is None:
            self.version = version
        elif version != self.version and not self.accept_mixed_versions:
            raise self._error_at(
                f"version byte {chr(version)!r} on a version {chr(self.version)!r} connection",
                frames,
                i,
                base,
                c_offset,
                frame,
                "version",
                0,
            )

    def _inflate_and_process(self, f: Compressed, depth: int, offset: int) -> None:
        """A ``C`` frame at stream ``offset``: its payload inflated (within
        ``max_nesting_depth``, ``max_decompressed_size`` and what the batch may
        still hold) and its frames taken in its place (§3.6, §4)."""
        limits = self.limits
        if depth >= limits.max_nesting_depth:
            raise LimitExceeded(
                f"C frames nested deeper than the limit max_nesting_depth={limits.max_nesting_depth}",
                protocol=PROTOCOL,
                frame="C",
                field="payload",
                offset=offset,
            )
        frames = inflate_frames(
            f.payload,
            self._frame_limits,
            validate_json=self._decoder.validate_json,
            strict_versions=self._decoder.strict_versions,
            offset=offset,
            budget=self._cap - self._cur_bytes,
            budget_reason=None if self._cap_name == "max_batch_bytes" else self._over_cap(),
            frame_limit=self._frame_limit,
            runs=self._runs,
            fast=self.fast,
        )
        state_before = self.state
        self._take_frames(self, frames, depth + 1, offset, 0)
        self.transitions_seen.add((state_before.value, "C", self.state.value))

    def _finish_batch(self) -> None:
        """The batch's last event arrived: deliver it (its ack waits for :meth:`accept`, §3.3)."""
        if self._cur_cols:
            assert not self._cur  # a batch holds J frames or D frames (§3.10), never both
            batch = Batch.of_columns(self._batch_version, self._cur_cols, self._batches)
            self._cur_cols = []
        else:
            batch = Batch(self._batch_version, tuple(self._cur), self._batches)
            self._cur = []
        self._batches += 1
        self._cur_n = 0
        self._cur_count = 0
        self._pending_bytes.append(self._cur_bytes)
        self._held_bytes += self._cur_bytes
        self._cur_bytes = 0
        self._transition("data", State.AWAIT_WINDOW)
        if not self._pending:
            self._pending_since = self._now
        self._pending.append(batch)
        self._events.append(batch)

    # -- output ------------------------------------------------------------
    def _emit(self, data: bytes) -> None:
        self._out += data
        self._last_output = self._now

    def send(self, event: object, *, now: float) -> None:
        """``Accept(batch)``: the application holds ``batch``; queue the ``A``
        frame acking it.  Batches are acked in the order they were delivered."""
        if not isinstance(event, Accept):
            raise TypeError(f"a Lumberjack server sends Accept events, not {type(event).__name__}")
        self._accept(event.batch, now)

    def accept(self, batch: Batch, *, now: float) -> None:
        """The application holds ``batch``: ``send(Accept(batch), now=now)`` (the
        same code, without building the event: this runs once per batch)."""
        self._accept(batch, now)

    def _accept(self, batch: Batch, now: float) -> None:
        if not self._pending or self._pending[0] is not batch:
            raise LocalProtocolError("batches must be accepted in the order they were delivered", protocol=PROTOCOL, frame="A")
        self._now = now
        self._pending.popleft()
        self._held_bytes -= self._pending_bytes.popleft()
        self._pending_since = now
        seq = batch.last_seq if self.ack_mode == "last-seq" else len(batch)
        self._last_activity = now
        self._emit(encode_ack(seq, batch.version))
        held = self._held
        while held and held[0][0] <= batch.number:
            self._emit(held.popleft()[1])

    def close_when_idle(self, *, now: float) -> None:
        """The server is shutting down: queue :class:`IdleAtShutdown` (from the
        timer) once nothing is pending or half-received -- at once if idle now."""
        self._now = now
        if self._shutdown_at is None:
            self._shutdown_at = now

    @property
    def mid_batch(self) -> bool:
        """A batch or a frame has started arriving and is not complete."""
        return self.state is State.IN_BATCH or self._decoder.buffered > 0

    @property
    def pending_batches(self) -> int:
        """Batches delivered to the application and not yet acked."""
        return len(self._pending)

    @property
    def lost(self) -> bool:
        """The transport broke (a reset or a failed write): nothing more gets through."""
        return self._reset

    # -- timers ------------------------------------------------------------
    def _keepalive_deadline(self) -> float | None:
        # (while a batch is held and the write side is open: after the peer's EOF
        # too, since the batch is still acked then; never once the transport is gone)
        if not self._pending or self.keepalive_interval is None or self._reset:
            return None
        return max(self._pending_since, self._last_output) + self.keepalive_interval

    def _receive_deadline(self) -> float | None:
        """When the receive side gives up: the batch timeout while something is
        half-received, else (nothing pending) the shutdown or the idle timeout."""
        if self._eof or self._receive_timer_fired or self.state not in (State.AWAIT_WINDOW, State.IN_BATCH):
            return None
        pending = len(self._pending)
        if pending > max(1, self.pipeline_depth):
            return None  # the driver is not reading: it waits for the application
        if self.state is State.IN_BATCH or self._decoder.buffered > 0:
            return None if self.batch_timeout is None else self._last_rx + self.batch_timeout
        if pending:
            return None
        if self._shutdown_at is not None:
            return self._shutdown_at
        return None if self.idle_timeout is None else self._last_activity + self.idle_timeout

    def next_deadline(self) -> float | None:
        """When :meth:`handle_timer` must be called next: a keepalive is due, or
        a receive timeout (see the class documentation)."""
        if self.state is State.ERROR:
            return None
        return earliest(self._keepalive_deadline(), self._receive_deadline(), self._frame_deadline())

    def handle_timer(self, *, now: float) -> None:
        """Queue a keepalive ``A 0`` if one is due at ``now``, and the receive
        timeout's event if it is due; past the frame timeout (a frame begun
        ``frame_timeout`` s ago and still incomplete) the connection fails."""
        self._now = now
        if self.state is State.ERROR:
            return
        self._frame_timer(now)
        if self._error is not None:
            return
        keepalive = self._keepalive_deadline()
        if keepalive is not None and now >= keepalive:
            version = V2 if self.keepalive_version == "v2" else (self.version or V2)
            self._emit(encode_ack(0, version))
        receive = self._receive_deadline()
        if receive is not None and now >= receive:
            self._receive_timer_fired = True
            if self.mid_batch:
                self._events.append(BatchTimeout(now - self._last_rx))
            elif self._shutdown_at is not None:
                self._events.append(IdleAtShutdown())
            else:
                self._events.append(IdleTimeout(now - self._last_activity))


# --------------------------------------------------------------------------- the frame loop

#: ``loop(server, frames, depth, c_offset, base)`` runs decoded frames through
#: ``server`` (the arguments of :meth:`ServerConnection._take_frame`).
FrameLoop = Callable[[ServerConnection, list[Any], int, "int | None", int], None]


def take_frames(conn: ServerConnection, frames: list[Any], depth: int, c_offset: int | None, base: int = 0) -> None:
    """The plain frame loop: every decoded frame, in order, through
    :meth:`ServerConnection._take_frame`."""
    for i, frame in enumerate(frames):
        conn._take_frame(frame, frames, i, depth, base, c_offset)


#: The server's frame loops by ``fast``: the plain :func:`take_frames`; ``True``
#: is registered by :mod:`refwire.lumberjack._fast_connection`.
FRAME_LOOPS: Final[dict[bool, FrameLoop]] = {False: take_frames}
