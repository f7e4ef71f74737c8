"""One scripted connection with a testee, and its wire log.

A :class:`Conversation` wraps a trio stream.  A case's procedure writes with
:meth:`~Conversation.send` (whole, split at seeded or named offsets, or one
byte at a time, with gaps), sleeps, closes with FIN or RST, and waits for what
the testee does (:meth:`~Conversation.wait_for`).  A reader task decodes the
testee's bytes with the protocol's :class:`Observer` as they arrive and turns
them into tokens (``"A 2"``); it notices how the connection ends (FIN, RST).

Everything goes into the wire log, in order: every chunk as hex (``tx``/``rx``)
next to what the runner did (``action``: sent, split at offset, slept, closed)
and the frames decoded (``frame``).

Keepalives: an observer marks a frame ``"keepalive": True`` (Lumberjack's
``A 0``).  Its token is kept as any other (cases ignore it or not), and it is
also recorded in :attr:`Conversation.keepalives` with its version byte and the
time since the batch it covers was sent (the oldest write sent with
``answers=`` still unanswered, else the last write).  A wait for an answer
(``wait_for(..., answer=True)``, :meth:`~Conversation.wait_tokens`) lasts its
timeout plus the hold the user declared (``--holds-batches``) and restarts on
each keepalive; the case's budget stays the hard cap.  Memory is bounded: the testee's bytes are
read up to ``max_rx_bytes`` per case (past it the case records ``flood`` and
stops reading), and the hex of a chunk is kept up to ``max_hex_bytes``.
"""

from __future__ import annotations

import math
import random
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import trio

from ..errors import ProtocolError
from ..logs import plural
from ..sansio import NEED_DATA

__all__ = ["Conversation", "MachineObserver", "Observer", "Split", "Token"]

#: How :meth:`Conversation.send` cuts its bytes: "seeded" (1 to 3 writes at
#: offsets drawn from the case seed), "whole", "bytes" (one byte per write), or
#: explicit offsets.
Split = str | Sequence[int]


class Observer(Protocol):
    """Turns the testee's bytes into tokens (one per frame, plus ``invalid ...``).

    A frame dict carrying ``"keepalive": True`` is a keepalive (see the module
    docstring); its ``"version"``, if any, is recorded with it."""

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        """Tokens and decoded frames (as JSON-able dicts) for the bytes so far."""
        ...

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        """Tokens for what was left undecoded when the stream ended."""
        ...


Token = tuple[str, dict[str, Any]]


class MachineObserver:
    """An :class:`Observer` that decodes with one of refwire's Sans-IO machines:
    each event becomes tokens (:meth:`tokens`, which may also keep what the
    cases compare); the first protocol error is one ``invalid <field>`` token,
    and nothing after it is decoded.  At the end of the stream the machine is
    told (``eof="eof"``: an EOF, ``"lost"``: a reset) and its tokens but
    ``closed`` kept, or not told at all (``None``)."""

    def __init__(self, machine: Any, *, eof: str | None = None) -> None:
        self.machine = machine
        self.broken = False
        self._eof = eof

    def feed(self, data: bytes) -> list[Token]:
        if self.broken:
            return []
        self.machine.receive_data(data, now=0.0)
        return self._drain()

    def eof(self) -> list[Token]:
        if self.broken or self._eof is None:
            return []
        if self._eof == "lost":
            self.machine.connection_lost(now=0.0)
        else:
            self.machine.receive_data(b"", now=0.0)
        return [t for t in self._drain() if t[0] != "closed"]

    def tokens(self, event: Any) -> list[Token] | None:
        """The tokens for one event; None: stop decoding (the connection is over)."""
        raise NotImplementedError

    def _drain(self) -> list[Token]:
        out: list[Token] = []
        while True:
            try:
                ev = self.machine.next_event()
            except ProtocolError as err:
                self.broken = True
                invalid = {"type": "invalid", "frame": err.frame, "field": err.field, "offset": err.offset, "reason": err.reason}
                out.append((f"invalid {err.field or 'frame'}", invalid))
                return out
            if ev is NEED_DATA:
                return out
            found = self.tokens(ev)
            if found is None:
                return out
            out.extend(found)


class Conversation:
    """See the module docstring."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        observer: Observer,
        *,
        rng: random.Random,
        time_scale: float = 1.0,
        deadline: float = math.inf,
        max_rx_bytes: int = 16 << 20,
        max_hex_bytes: int = 4096,
        max_log_entries: int = 20000,
        receive_size: int = 65536,
        max_frames: int = 256,
    ) -> None:
        self.stream = stream
        self.observer = observer
        self.rng = rng
        self.time_scale = time_scale
        #: trio time at which the case's budget ends (``inf``: ``--timeout none``).
        self.deadline = deadline
        self.max_rx_bytes = max_rx_bytes
        self.max_hex_bytes = max_hex_bytes
        self.max_log_entries = max_log_entries
        #: Most frames decoded per case (no case expects more than a few): a
        #: testee sending more floods, like one past ``max_rx_bytes``.
        self.max_frames = max_frames
        self.log_dropped = 0
        #: The testee sent more than the limits allow; reading stopped.
        self.flooded = False
        self.receive_size = receive_size
        self.tokens: list[str] = []
        self.facts: list[str] = []
        self.frames: list[dict[str, Any]] = []
        self.log: list[dict[str, Any]] = []
        #: "FIN"/"RST" once the testee ended the connection; None while open.
        self.closed_by_testee: str | None = None
        #: "FIN"/"RST" once the runner closed it.
        self.closed_by_runner: str | None = None
        self.rx_bytes = 0
        self.tx_bytes = 0
        #: Where the testee writes what its application received (``--sink``), if anywhere.
        self.sink: str | None = None
        #: Opens another connection to the same testee (TCP, TLS or the simulator's),
        #: for cases that need two; set by the runner (None: not available).
        self.open_another: Callable[[], Awaitable[trio.abc.Stream]] | None = None
        #: Seconds the testee's application holds each batch (``--holds-batches``); None: not declared.
        self.holds_batches: float | None = None
        #: The run id (:mod:`refwire.conform.ids`): every name and marker the case
        #: leaves on the testee carries it, so runs against one testee stay apart.
        self.run_id = ""
        #: The id of the case being run (set by the runner).
        self.case_id = ""
        #: Called with each chunk the testee sends, before it is decoded (the
        #: runner's check that the testee speaks the protocol); None: nothing.
        self.on_rx: Callable[[bytes], None] | None = None
        #: Every keepalive the testee sent: ``t``, ``token``, ``version``, ``since_batch_s``, ``covers``.
        self.keepalives: list[dict[str, Any]] = []
        #: (time, label) of each write still owed an answer (``send(..., answers=n)``), oldest first.
        self._pending: list[tuple[float, str]] = []
        self._last_tx: tuple[float, str] | None = None
        self._t0 = trio.current_time()
        self._changed = trio.Event()
        self._reader_done = trio.Event()
        self._keepalive_at = self._t0

    def name(self, base: str) -> str:
        """``base`` marked with the run id: what a case calls the things it
        leaves on the testee (topics, segments, markers), so that a second run
        against the same testee finds none of the first one's."""
        return f"{base}-{self.run_id}" if self.run_id else base

    # ----------------------------------------------------------------- log

    def now(self) -> float:
        """Seconds since the conversation started."""
        return trio.current_time() - self._t0

    def _log(self, entry: dict[str, Any]) -> None:
        """Append to the wire log, keeping at most ``max_log_entries`` (a testee
        trickling one byte per packet must not grow the record without bound)."""
        if len(self.log) < self.max_log_entries:
            self.log.append(entry)
            return
        if not self.log_dropped:
            self.log.append(
                {
                    "t": entry.get("t", 0.0),
                    "kind": "action",
                    "text": f"wire log full ({self.max_log_entries} entries): later entries are counted, not kept",
                }
            )
        self.log_dropped += 1

    def action(self, text: str, **extra: Any) -> None:
        self._log({"t": round(self.now(), 6), "kind": "action", "text": text, **extra})

    def _chunk(self, kind: str, data: bytes) -> None:
        shown = data[: self.max_hex_bytes].hex()
        entry: dict[str, Any] = {"t": round(self.now(), 6), "kind": kind, "len": len(data), "hex": shown}
        if len(data) > self.max_hex_bytes:
            entry["truncated"] = True
        self._log(entry)

    def note(self, fact: str) -> None:
        """Record a fact the case checks (part of the observation)."""
        self.facts.append(fact)
        self.action(f"fact: {fact}")
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ----------------------------------------------------------------- reading

    async def reader(self) -> None:
        """Read the testee until it closes, floods, or the case ends (cancelled)."""
        try:
            while True:
                try:
                    data = bytes(await self.stream.receive_some(self.receive_size))
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if self.closed_by_runner is None and isinstance(exc, trio.BrokenResourceError):
                        self.closed_by_testee = "RST"
                        self._log({"t": round(self.now(), 6), "kind": "rx-close", "how": "RST"})
                        self._add(self.observer.eof())
                    return
                if not data:
                    self.closed_by_testee = "FIN"
                    self._log({"t": round(self.now(), 6), "kind": "rx-close", "how": "FIN"})
                    self._add(self.observer.eof())
                    return
                self._chunk("rx", data)
                self.rx_bytes += len(data)
                if self.on_rx is not None:
                    self.on_rx(data)
                if self.rx_bytes > self.max_rx_bytes:
                    self._flood(f"more than {self.max_rx_bytes} bytes from the testee")
                    return
                self._add(self.observer.feed(data))
                if self.flooded:
                    return
        finally:
            self._reader_done.set()
            self._wake()

    def _flood(self, why: str) -> None:
        """Stop reading a testee that sends without end (the case records ``flood``)."""
        self.flooded = True
        self.tokens.append("flood")
        self.note(f"flood: {why}")

    def _add(self, found: list[tuple[str, dict[str, Any]]]) -> None:
        if not found:
            return
        for token, frame in found:
            if len(self.frames) >= self.max_frames:
                self._flood(f"more than {self.max_frames} frames from the testee")
                return
            self.tokens.append(token)
            entry = {"t": round(self.now(), 6), "dir": "rx", "token": token, **frame}
            if frame.get("keepalive"):
                entry.update(self._keepalive(entry))
            elif self._pending:
                self._pending.pop(0)
            self.frames.append(entry)
            self._log({"kind": "frame", **entry})
        self._wake()

    def _keepalive(self, entry: dict[str, Any]) -> dict[str, Any]:
        """Record the keepalive ``entry``; returns what the frame's log entry gains."""
        now = self.now()
        since, covers = self._pending[0] if self._pending else (self._last_tx or (0.0, "the start of the connection"))
        record = {
            "t": entry["t"],
            "token": entry["token"],
            "version": entry.get("version"),
            "since_batch_s": round(now - since, 6),
            "covers": covers,
        }
        self.keepalives.append(record)
        self._keepalive_at = trio.current_time()
        return {"since_batch_s": record["since_batch_s"]}

    async def wait_for(
        self, predicate: Callable[[Conversation], bool], timeout: float, *, label: str = "", answer: bool = False
    ) -> bool:
        """Wait until ``predicate(self)`` holds, the testee closes, or ``timeout``
        seconds pass (scaled by ``--time-scale``, capped by the case budget).
        ``answer``: a wait for the testee's answer to a batch (an ack): it also
        lasts the declared ``--holds-batches``, and restarts (``timeout`` again)
        on each keepalive.  Returns whether the predicate held."""
        hold = (self.holds_batches or 0.0) if answer else 0.0
        span = (timeout + hold) * self.time_scale
        end = min(trio.current_time() + span, self.deadline)
        if label:
            self.action(f"wait up to {span:g}s for {label}" + (" (restarted by keepalives)" if answer else ""))
        seen = len(self.keepalives)
        while True:
            if predicate(self):
                return True
            if self._reader_done.is_set():
                return predicate(self)
            changed = self._changed
            with trio.move_on_at(end):
                await changed.wait()
            if answer and len(self.keepalives) > seen:
                seen = len(self.keepalives)
                restart = min(self._keepalive_at + timeout * self.time_scale, self.deadline)
                if restart > end:
                    end = restart
                    self.action(f"keepalive: the wait restarts ({timeout * self.time_scale:g}s)")
            if trio.current_time() >= end:
                return predicate(self)

    async def wait_tokens(self, n: int, timeout: float, *, settle: float = 0.3, ignore: Sequence[str] = ()) -> bool:
        """Wait for ``n`` tokens (not counting ``ignore``): the testee's answers,
        so the wait is an ``answer`` wait (see :meth:`wait_for`); then ``settle``
        more seconds for anything extra the testee sends."""
        ok = await self.wait_for(
            lambda c: len([t for t in c.tokens if t not in ignore]) >= n, timeout, label=plural(n, "frame"), answer=True
        )
        if ok and settle > 0 and not self._reader_done.is_set():
            await self.quiet(settle)
        return ok

    async def wait_close(self, timeout: float) -> bool:
        """Wait for the testee to end the connection."""
        return await self.wait_for(
            lambda c: c.closed_by_testee is not None or "flood" in c.tokens, timeout, label="the testee to close"
        )

    async def quiet(self, seconds: float) -> None:
        """Listen for ``seconds`` (scaled), returning early if the testee closes."""
        await self.wait_for(lambda c: False, seconds)

    # ----------------------------------------------------------------- writing

    async def send(
        self, data: bytes, *, label: str = "", split: Split = "seeded", gap: float | None = None, answers: int = 0
    ) -> bool:
        """Write ``data``; False (and nothing raised) when the testee is gone.
        ``answers``: how many answers (acks) the bytes ask for; a keepalive
        arriving before them is timed from the end of this write."""
        cuts = self._cuts(data, split)
        if label:
            self.action(f"send {label} ({len(data)} bytes" + (f", split at {', '.join(map(str, cuts))}" if cuts else "") + ")")
        start = 0
        for i, end in enumerate([*cuts, len(data)]):
            if i and (gap or 0) > 0:
                await self.sleep(gap or 0, quiet=True)
            elif i and split == "seeded":
                await self.sleep(self.rng.uniform(0.0, 0.005), quiet=True)
            piece = data[start:end]
            start = end
            if not await self._write(piece):
                return False
        sent = (self.now(), label or f"{len(data)} bytes")
        self._last_tx = sent
        self._pending.extend([sent] * answers)
        return True

    def _cuts(self, data: bytes, split: Split) -> list[int]:
        n = len(data)
        if isinstance(split, str):
            if split == "whole" or n < 2:
                return []
            if split == "bytes":
                return list(range(1, n))
            if split == "seeded":
                k = self.rng.choice((0, 0, 1, 2))
                return sorted(self.rng.sample(range(1, n), min(k, n - 1)))
            raise ValueError(f"unknown split {split!r}")
        return sorted({c for c in split if 0 < c < n})

    async def _write(self, data: bytes) -> bool:
        if self.closed_by_runner is not None:
            return False
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.action(f"write failed: {type(exc).__name__}")
            return False
        self._chunk("tx", data)
        self.tx_bytes += len(data)
        return True

    async def sleep(self, seconds: float, *, quiet: bool = False) -> None:
        """Pause the script (scaled by ``--time-scale``, capped by the budget)."""
        scaled = seconds * self.time_scale
        if not quiet:
            self.action(f"sleep {scaled:g}s")
        end = min(trio.current_time() + scaled, self.deadline)
        await trio.sleep_until(end)

    async def close(self, how: str = "FIN") -> None:
        """End the connection from the runner's side: "FIN" or "RST"."""
        if self.closed_by_runner is not None:
            return
        self.closed_by_runner = how
        self.action(f"close {how}")
        if how == "RST":
            reset = getattr(self.stream, "reset", None)  # the simulator's streams
            sock = getattr(self.stream, "socket", None)
            if callable(reset):
                reset()
            elif sock is not None:
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                except OSError:
                    pass
        with trio.move_on_after(1.0) as scope:
            scope.shield = True
            await self.stream.aclose()

    async def half_close(self) -> None:
        """Send FIN but keep reading (``send_eof``), where the stream allows it."""
        self.action("send FIN (half-close)")
        send_eof = getattr(self.stream, "send_eof", None)
        if send_eof is not None:
            try:
                await send_eof()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
