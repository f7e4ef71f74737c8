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
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from ..errors import LimitExceeded, LocalProtocolError
from ..sansio import NEED_DATA, FrameMachine, NeedData, closed_inside, earliest
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
    MAX_U32,
    PROTOCOL,
    V1,
    V2,
    Compressed,
    DataFrame,
    EncodedWindow,
    FrameDecoder,
    JsonFrame,
    JsonRun,
    Window,
    encode_ack,
    encode_data,
    encode_events,
    frame_size,
    held_bytes,
    inflate_frames,
    next_seq,
    scan_acks,
    window_bytes,
)

__all__ = [
    "CLIENT_TRANSITIONS",
    "NEED_DATA",
    "SERVER_TRANSITIONS",
    "Accept",
    "AckReceived",
    "AckTimeout",
    "Batch",
    "BatchTimeout",
    "ClientConnection",
    "ConnectionClosed",
    "EmptyWindow",
    "IdleAtShutdown",
    "IdleTimeout",
    "KeepAlive",
    "SendWindow",
    "ServerConnection",
    "State",
]


class State(enum.Enum):
    """Connection states (the same names serve both roles)."""

    AWAIT_WINDOW = "await-window"  #: server: between batches
    IN_BATCH = "in-batch"  #: server: a W announced events still to come
    IDLE = "idle"  #: client: nothing outstanding
    AWAITING_ACK = "awaiting-ack"  #: client: a window is sent and not fully acked
    CLOSED = "closed"  #: the byte stream ended (EOF, reset, or an ack timeout)
    ERROR = "error"  #: a protocol error; nothing more can be received


# Inputs of the state tables.  Anything not listed for a state is a protocol
# error (the machine moves to ERROR).  Tests walk every (state, input) pair.
ServerInput = Literal["W", "W0", "data", "C", "A", "eof", "reset"]
ClientInput = Literal["send", "ack-partial", "ack-last", "keepalive", "ack-bad", "eof", "reset", "timeout"]

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
    #: decode J frames in :class:`JsonRun` columns (the fast path); off, one
    #: :class:`JsonFrame` each (the tests compare the two)
    _runs = True
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
        self._decoder = FrameDecoder(limits, validate_json=validate_json, strict_versions=not accept_mixed_versions)
        self._batch_version = V2
        self._cur: list[Event] = []  # the batch's D frames (v1)
        self._cur_cols: list[JsonColumns] = []  # its J frames (v2), in columns
        self._cur_n = 0  # events received for the batch
        self._cur_count = 0
        #: bytes of events held for the batch being received (``max_batch_bytes``, §4)
        self._cur_bytes = 0
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
            self._process(frames, 0, None, start)
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

    def _process(self, frames: list[Any], depth: int, c_offset: int | None, base: int = 0) -> None:
        """Run decoded frames (and :class:`JsonRun` columns) through the machine.

        Errors name the offending field at its stream offset; for frames inside
        a ``C`` the frame is named ``C>X`` and the offset is the ``C``'s (the
        inflated bytes have no stream offset).  Offsets of plain frames are
        computed only when an error happens.
        """
        mixed = self.accept_mixed_versions
        in_batch = State.IN_BATCH
        for i, f in enumerate(frames):
            t = type(f)
            if t is JsonRun:
                self._take_run(f, frames, i, base, c_offset)
            elif t is JsonFrame or t is DataFrame:
                if self.state is not in_batch:
                    name = "J" if t is JsonFrame else "D"
                    raise self._error_at(
                        "data frame outside a window (no W announced it)", frames, i, base, c_offset, name, "type", 1
                    )
                if mixed:
                    # Logstash's rule (§3.10): the batch's W decides what it holds --
                    # J frames in a '2' batch, D frames in a '1' one -- whatever the
                    # frame's own version byte (the decoder checked it is '1' or '2').
                    if (t is JsonFrame) != (self._batch_version == V2):
                        name = "J" if t is JsonFrame else "D"
                        raise self._error_at(
                            f"{name} frame in a version {chr(self._batch_version)!r} batch",
                            frames,
                            i,
                            base,
                            c_offset,
                            name,
                            "type",
                            1,
                        )
                elif f.version != self._batch_version:
                    name = "J" if t is JsonFrame else "D"
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
                if t is JsonFrame:
                    assert isinstance(f, JsonFrame)
                    self._cur_cols.append((f.version, [f.seq], [f.payload], None if f.data is None else [f.data]))
                else:
                    self._cur.append(f)
                self._cur_bytes += held_bytes(f)
                if self._cur_bytes > self.limits.max_batch_bytes:
                    raise self._error_at(
                        f"the batch's events exceed the limit max_batch_bytes={self.limits.max_batch_bytes}",
                        frames,
                        i,
                        base,
                        c_offset,
                        "J" if t is JsonFrame else "D",
                        "payload",
                        10 if t is JsonFrame else 6,
                        limit=True,
                    )
                self._cur_n += 1
                n = self._cur_n
                if n == self._cur_count:
                    self._finish_batch()
                elif n == 1:
                    # in-batch -> in-batch, recorded once per batch rather than per frame (hot path)
                    self.transitions_seen.add(_IN_BATCH_DATA)
            elif t is Window:
                assert isinstance(f, Window)
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
            elif t is Compressed:
                assert isinstance(f, Compressed)
                self._check_version(f.version, frames, i, base, c_offset, "C")
                self._inflate_and_process(f, depth, c_offset if c_offset is not None else _offset_of(frames, i, base))
            else:  # Ack
                raise self._error_at(
                    "the client sent an A frame (acks flow from server to client)", frames, i, base, c_offset, "A", "type", 1
                )

    def _take_run(self, run: JsonRun, frames: list[Any], i: int, base: int, c_offset: int | None) -> None:
        """The ``J`` frames of ``run`` (``frames[i]``), a window's worth at a
        time: the same checks, in the same order, as one ``J`` frame after
        another in :meth:`_process`, and the same error at the same frame."""
        seqs, payloads, docs = run.seqs, run.payloads, run.docs
        n = len(seqs)
        limit = self.limits.max_batch_bytes
        j = 0
        while j < n:
            if self.state is not State.IN_BATCH:
                raise self._error_at(
                    "data frame outside a window (no W announced it)", frames, i, base, c_offset, "J", "type", 1, within=j
                )
            if self.accept_mixed_versions:
                if self._batch_version != V2:  # §3.10: a '1' batch holds D frames
                    raise self._error_at(
                        f"J frame in a version {chr(self._batch_version)!r} batch", frames, i, base, c_offset, "J", "type", 1, within=j
                    )
            elif run.version != self._batch_version:
                raise self._error_at(
                    f"version byte {chr(run.version)!r} on a version {chr(self._batch_version)!r} connection",
                    frames,
                    i,
                    base,
                    c_offset,
                    "J",
                    "version",
                    0,
                    within=j,
                )
            before = self._cur_n
            k = min(self._cur_count - before, n - j)
            whole = j == 0 and k == n
            part = payloads if whole else payloads[j : j + k]
            held = self._cur_bytes + sum(map(len, part))
            if held > limit:
                over = self._cur_bytes
                for m, p in enumerate(part):  # the frame that went past the limit
                    over += len(p)
                    if over > limit:
                        if before == 0 and m > 0 and self._cur_count > 1:
                            self.transitions_seen.add(_IN_BATCH_DATA)  # as the frames before it did
                        raise self._error_at(
                            f"the batch's events exceed the limit max_batch_bytes={limit}",
                            frames,
                            i,
                            base,
                            c_offset,
                            "J",
                            "payload",
                            10,
                            limit=True,
                            within=j + m,
                        )
            self._cur_bytes = held
            if whole:
                self._cur_cols.append((run.version, seqs, payloads, docs))
            else:
                self._cur_cols.append((run.version, seqs[j : j + k], part, None if docs is None else docs[j : j + k]))
            self._cur_n = before + k
            if before == 0 and self._cur_count > 1:
                # in-batch -> in-batch, recorded once per batch rather than per frame (hot path)
                self.transitions_seen.add(_IN_BATCH_DATA)
            if self._cur_n == self._cur_count:
                self._finish_batch()
            j += k

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
        within: int = 0,
    ) -> LocalProtocolError:
        """The error at ``frames[i]`` (at its ``within``-th frame if it is a
        :class:`JsonRun`), field ``rel`` bytes into that frame."""
        cls = LimitExceeded if limit else LocalProtocolError
        if c_offset is not None:
            return cls(reason, protocol=PROTOCOL, frame=f"C>{frame}", field=field, offset=c_offset)
        at = _offset_of(frames, i, base)
        if within:
            run = frames[i]
            assert isinstance(run, JsonRun)
            at += 10 * within + sum(map(len, run.payloads[:within]))
        return cls(reason, protocol=PROTOCOL, frame=frame, field=field, offset=at + rel)

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
            limits,
            validate_json=self._decoder.validate_json,
            strict_versions=self._decoder.strict_versions,
            offset=offset,
            budget=limits.max_batch_bytes - self._cur_bytes,
            runs=self._runs,
        )
        state_before = self.state
        self._process(frames, depth + 1, offset)
        self.transitions_seen.add((state_before.value, "C", self.state.value))

    def _finish_batch(self) -> None:
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
        if not self._pending or self.keepalive_interval is None:
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


# --------------------------------------------------------------------------- client


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
            prepared = encode_events(version, events, seqs)
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
            for ver, seq, at in scan_acks(buf, base=self._consumed):
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
