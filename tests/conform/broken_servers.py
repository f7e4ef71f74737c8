"""Deliberately broken Lumberjack servers, each with ONE wrong behaviour.

The kill matrix (``test_kill_matrix.py``) runs every server case against each
of them: a case that no broken server makes FAIL would pass a server that gets
its requirement wrong, so it proves nothing.

Most are refwire's own :class:`~refwire.lumberjack.server.LumberjackServer`
with one setting changed, or with its connection machine
(:class:`~refwire.lumberjack.connection.ServerConnection`) subclassed to change
one method.  Three faults live below refwire's decoder (it refuses bad version
bytes and unknown frame types before the machine sees them), so they are a
small raw-bytes server (:class:`RawServer`) whose fault-free form passes the
cases those faults are aimed at (``RAW_BASELINE_PASSES``).

The behaviours are those ``specs/lumberjack/README.md`` §3-§4 forbid.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from refwire.drivers import parse_hostport
from refwire.errors import ProtocolError
from refwire.lumberjack.connection import FRAME_LOOPS, ServerConnection, State
from refwire.lumberjack.events import ConnectionClosed
from refwire.lumberjack.frames import DEFAULT_LIMITS, DataFrame, encode_ack
from refwire.lumberjack.server import LumberjackServer, ServerConfig

__all__ = ["BROKEN", "RAW_BASELINE", "RAW_BASELINE_PASSES", "Broken", "broken_server"]


# --------------------------------------------------------------------------- machine subclasses


@attrs.frozen(kw_only=True)
class FaultyConfig(ServerConfig):
    """refwire's server settings, with the connection machine swapped for a subclass."""

    machine_class: type[ServerConnection] = ServerConnection

    def machine(self, *, now: float) -> ServerConnection:
        conn = super().machine(now=now)
        conn.__class__ = self.machine_class  # the subclasses change methods only
        return conn


class _AckRewrite(ServerConnection):
    """Rewrites the acks it emits (keepalives ``A 0`` stay as they are)."""

    def rewrite(self, version: int, seq: int) -> tuple[int, int]:
        raise NotImplementedError

    def _emit(self, data: bytes) -> None:
        if len(data) == 6 and data[1:2] == b"A":
            version, seq = data[0], struct.unpack(">I", data[2:])[0]
            if seq != 0:
                version, seq = self.rewrite(version, seq)
                data = bytes([version]) + b"A" + struct.pack(">I", seq)
        super()._emit(data)


class AckOffByOne(_AckRewrite):
    """Acks one more than the batch's last sequence number."""

    def rewrite(self, version: int, seq: int) -> tuple[int, int]:
        return version, (seq + 1) & 0xFFFFFFFF


class NoAckOfZero(ServerConnection):
    """Never writes an ``A 0``, taking every one for a keepalive it may skip: a
    batch whose last seq is 0 is never acked."""

    def _emit(self, data: bytes) -> None:
        if data[1:] != b"A" + bytes(4):
            super()._emit(data)


class AckV2OnV1(_AckRewrite):
    """Acks a v1 batch with a v2 ack (``2A``)."""

    def rewrite(self, version: int, seq: int) -> tuple[int, int]:
        return ord("2"), seq


class AckSigned31(_AckRewrite):
    """No rollover handling: the ack is the seq kept in a signed 32-bit int, masked to 31 bits."""

    def rewrite(self, version: int, seq: int) -> tuple[int, int]:
        return version, seq % (1 << 31)


class AckPipelinedOutOfOrder(ServerConnection):
    """While another decoded batch waits, holds an ack back and sends it after the next one."""

    _held_ack: bytes | None = None

    def _emit(self, data: bytes) -> None:
        if len(data) == 6 and data[1:2] == b"A" and data[2:] != bytes(4):
            if self._held_ack is None and self._pending:
                self._held_ack = data
                return
            super()._emit(data)
            if self._held_ack is not None:
                held, self._held_ack = self._held_ack, None
                super()._emit(held)
            return
        super()._emit(data)


class NeverClosesOnGarbage(ServerConnection):
    """A protocol error is ignored: the server stops reading and waits for more."""

    _garbage = False

    def _feed(self, data: bytes | bytearray | memoryview) -> None:
        if not self._garbage:
            super()._feed(data)

    def _pump(self) -> None:
        if self._garbage:
            return
        try:
            super()._pump()
        except ProtocolError:
            self._garbage = True

    def _at_eof(self) -> None:  # closes only when the client does
        if self.state is State.AWAIT_WINDOW:
            self._transition("eof")
        self._events.append(ConnectionClosed(clean=True))


class ResetsOnSplitV1Data(ServerConnection):
    """A v1 ``D`` frame must arrive in one read: one cut short by the end of a
    read is an error (Logstash's v1 decoder)."""

    def _pump(self) -> None:
        super()._pump()
        if self._decoder.pending_frame_name() == "D":
            raise ProtocolError("D frame split across reads", frame="D", offset=self._decoder.offset)


class RefusesEmptyData(ServerConnection):
    """A ``D`` frame with no key/value pairs is refused as malformed."""

    def _pump(self) -> None:
        # the plain path: every event goes through _take_event
        self._runs, self._take_frames = False, FRAME_LOOPS[False]
        super()._pump()

    def _take_event(self, f: Any, frames: list[Any], i: int, base: int, c_offset: int | None) -> None:
        if isinstance(f, DataFrame) and not f.pairs:
            raise ProtocolError("D frame with no pairs", frame="D", field="pairs")
        super()._take_event(f, frames, i, base, c_offset)


class AcksPartialBatchOnEof(ServerConnection):
    """At EOF inside a batch, acks the events received so far instead of nothing."""

    def _at_eof(self) -> None:
        if self.state is State.IN_BATCH and self._cur_n:
            self._finish_batch()
        self._transition("eof")
        self._events.append(ConnectionClosed(clean=True))


# --------------------------------------------------------------------------- raw-bytes server


@attrs.frozen(kw_only=True)
class RawFaults:
    #: any version byte is taken as '2' instead of closing.
    any_version: bool = False
    #: an unknown frame type is skipped (its header read like a J's: seq, length) instead of closing.
    skip_unknown: bool = False
    #: a C frame whose zlib stream is cut short ends the batch: the events it held are acked.
    trust_truncated_zlib: bool = False
    #: events are kept by seq, so a second event with the same seq replaces the first
    #: and does not count towards the window.
    events_by_seq: bool = False
    #: that a J's JSON is an object is checked when the batch is delivered, after its ack.
    check_objects_after_ack: bool = False


class _Close(Exception):
    pass


class _AckThenClose(_Close):
    """The ack is written, then the connection is reset."""

    def __init__(self, ack: bytes) -> None:
        super().__init__()
        self.ack = ack


class RawServer:
    """A small lenient v2 Lumberjack server on raw bytes: W, J and C frames,
    acks with the last seq once a window is complete, closes on anything else."""

    def __init__(self, faults: RawFaults, sink: Path | None) -> None:
        self.faults = faults
        self.sink = sink

    async def handle(self, stream: trio.abc.Stream) -> None:
        state: dict[str, Any] = {"left": 0, "events": []}
        buf = b""
        try:
            async with stream:
                while True:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                    try:
                        used, out = self._parse(buf, state, top=True)
                    except _AckThenClose as exc:
                        await stream.send_all(exc.ack)
                        raise
                    buf = buf[used:]
                    if out:
                        await stream.send_all(out)
        except (_Close, trio.BrokenResourceError, trio.ClosedResourceError):
            return

    def _deliver(self, events: list[dict[str, Any]]) -> None:
        if self.sink is not None:
            with self.sink.open("ab") as f:
                for ev in events:
                    f.write(orjson.dumps(ev) + b"\n")

    def _parse(self, buf: bytes, st: dict[str, Any], *, top: bool) -> tuple[int, bytes]:
        pos, out = 0, b""
        while len(buf) - pos >= 2:
            ver, typ = buf[pos], buf[pos + 1 : pos + 2]
            if ver != ord("2") and not self.faults.any_version:
                raise _Close
            if typ == b"W":
                if len(buf) - pos < 6:
                    break
                (count,) = struct.unpack_from(">I", buf, pos + 2)
                pos += 6
                if st["left"] or count > DEFAULT_LIMITS.max_window:
                    raise _Close
                if count == 0:
                    out += encode_ack(0)
                st["left"], st["seq"] = count, 0
            elif typ == b"J":
                if len(buf) - pos < 10:
                    break
                seq, ln = struct.unpack_from(">II", buf, pos + 2)
                if len(buf) - pos < 10 + ln:
                    break
                try:
                    doc = orjson.loads(buf[pos + 10 : pos + 10 + ln])
                except orjson.JSONDecodeError:
                    raise _Close from None
                pos += 10 + ln
                if not st["left"] or not (isinstance(doc, dict) or self.faults.check_objects_after_ack):
                    raise _Close
                st["seq"] = seq
                seqs = st.setdefault("seqs", set())
                if self.faults.events_by_seq and seq in seqs:
                    continue  # replaces the event of that seq: the window is no nearer its end
                seqs.add(seq)
                st["events"].append(doc)
                st["left"] -= 1
                if not st["left"]:
                    out += self._ack(st)
            elif typ == b"C":
                if len(buf) - pos < 6:
                    break
                (ln,) = struct.unpack_from(">I", buf, pos + 2)
                if len(buf) - pos < 6 + ln:
                    break
                payload = buf[pos + 6 : pos + 6 + ln]
                pos += 6 + ln
                z = zlib.decompressobj()
                try:
                    inner = z.decompress(payload, DEFAULT_LIMITS.max_decompressed_size)
                except zlib.error:
                    raise _Close from None
                if not z.eof and not self.faults.trust_truncated_zlib:
                    raise _Close
                used, more = self._parse(inner, st, top=False)
                out += more
                if used != len(inner) or not z.eof:
                    if not self.faults.trust_truncated_zlib:
                        raise _Close
                    if st["events"]:
                        out += self._ack(st)  # the short C ended the batch
                    elif not more:
                        raise _Close
            elif self.faults.skip_unknown and typ not in (b"A", b"D"):
                if len(buf) - pos < 10:
                    break
                (ln,) = struct.unpack_from(">I", buf, pos + 6)
                if len(buf) - pos < 10 + ln:
                    break
                pos += 10 + ln
            else:
                raise _Close
        return pos, out

    def _ack(self, st: dict[str, Any]) -> bytes:
        events = st["events"]
        seq = st["seq"]
        st["events"], st["left"], st["seqs"] = [], 0, set()
        if self.faults.check_objects_after_ack and not all(isinstance(e, dict) for e in events):
            raise _AckThenClose(encode_ack(seq))
        self._deliver(events)
        return encode_ack(seq)


# --------------------------------------------------------------------------- the list


@attrs.frozen(kw_only=True)
class Broken:
    """One broken server: what is wrong, and how to build it."""

    name: str
    wrong: str
    config: ServerConfig | None = None
    raw: RawFaults | None = None
    #: the handler delivers to the sink only this long after the ack.
    late_delivery: float = 0.0
    #: the cases written to catch this fault (each must not PASS against it).
    aimed_at: tuple[str, ...] = ()


def _machine(cls: type[ServerConnection]) -> ServerConfig:
    return FaultyConfig(machine_class=cls)


BROKEN: tuple[Broken, ...] = (
    Broken(
        name="ack-before-delivery",
        aimed_at=("lj.S5.3",),
        wrong="acks a batch, then writes it to the sink 0.5 s later",
        late_delivery=0.5,
    ),
    Broken(
        name="no-ack-of-zero",
        aimed_at=("lj.S3.6",),
        wrong="never sends A 0 (not for a batch whose last seq is 0 either)",
        config=_machine(NoAckOfZero),
    ),
    Broken(name="ack-off-by-one", aimed_at=("lj.S3.1", "lj.S3.5"), wrong="acks the last seq + 1", config=_machine(AckOffByOne)),
    Broken(name="v2-ack-on-v1", aimed_at=("lj.S1.2",), wrong="acks v1 batches with a v2 ack (2A)", config=_machine(AckV2OnV1)),
    Broken(
        name="ack-mod-2^31",
        aimed_at=("lj.S3.3", "lj.S3.4"),
        wrong="no rollover handling: acks the seq modulo 2^31",
        config=_machine(AckSigned31),
    ),
    Broken(
        name="accepts-bad-version", aimed_at=("lj.S6.1",), wrong="takes any version byte as '2'", raw=RawFaults(any_version=True)
    ),
    Broken(
        name="skips-unknown-frames",
        aimed_at=("lj.S6.2",),
        wrong="skips a frame of unknown type",
        raw=RawFaults(skip_unknown=True),
    ),
    Broken(
        name="events-by-seq",
        aimed_at=("lj.S3.7",),
        wrong="keeps a window's events by seq: a repeated seq replaces an event, and the window never completes",
        raw=RawFaults(events_by_seq=True),
    ),
    Broken(
        name="acks-before-checking-events",
        aimed_at=("lj.S6.11",),
        wrong="acks a batch, then finds an event that is no JSON object and closes: acked events are lost",
        raw=RawFaults(check_objects_after_ack=True),
    ),
    Broken(
        name="resets-on-split-v1-data",
        aimed_at=("lj.S6.12",),
        wrong="needs a v1 D frame whole in one read (Logstash's v1 decoder)",
        config=_machine(ResetsOnSplitV1Data),
    ),
    Broken(
        name="refuses-empty-data",
        aimed_at=("lj.S6.13",),
        wrong="refuses a v1 D frame with no key/value pairs",
        config=_machine(RefusesEmptyData),
    ),
    Broken(
        name="trusts-truncated-zlib",
        aimed_at=("lj.S4.5", "lj.S4.7"),
        wrong="a C whose zlib stream is cut short ends the batch and is acked",
        raw=RawFaults(trust_truncated_zlib=True),
    ),
    Broken(
        name="no-bomb-limit",
        aimed_at=("lj.S4.4",),
        wrong="inflates a C without a size cap",
        config=ServerConfig(
            # (and no memory budget around it: the budget alone would cap the inflation)
            limits=attrs.evolve(
                DEFAULT_LIMITS,
                max_decompressed_size=1 << 30,
                max_frame_size=1 << 30,
                max_buffered=1 << 30,
                max_connection_memory=1 << 36,
            )
        ),
    ),
    Broken(
        name="never-closes-on-garbage",
        aimed_at=("lj.S6.4", "lj.S6.7", "lj.S6.8", "lj.S6.9"),
        wrong="ignores protocol errors and waits",
        config=_machine(NeverClosesOnGarbage),
    ),
    Broken(
        name="acks-partial-batch-on-eof",
        aimed_at=("lj.S6.5",),
        wrong="acks the events received when EOF cuts a batch",
        config=_machine(AcksPartialBatchOnEof),
    ),
    Broken(
        name="acks-pipelined-out-of-order",
        aimed_at=("lj.S2.2",),
        wrong="acks the second of two pipelined windows first",
        config=_machine(AckPipelinedOutOfOrder),
    ),
    Broken(
        name="no-window-limit",
        aimed_at=("lj.S6.10",),
        wrong="accepts a window of any size (Logstash's behaviour: NON-STRICT, not FAIL)",
        config=ServerConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_window=2**32 - 1)),
    ),
    Broken(
        name="window-limit-too-low",
        aimed_at=("lj.S6.10",),
        wrong="refuses a window of exactly 10 000 events (limit checked with >=)",
        config=ServerConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_window=9_999)),
    ),
    Broken(
        name="no-json-validation",
        aimed_at=("lj.S6.3", "lj.S6.4"),
        wrong="accepts J payloads that are not JSON",
        config=ServerConfig(validate_json=False),
    ),
    Broken(
        name="refuses-nested-compression",
        aimed_at=("lj.S4.2",),
        wrong="refuses a C inside a C",
        config=ServerConfig(limits=attrs.evolve(DEFAULT_LIMITS, max_nesting_depth=1)),
    ),
)

#: The raw server without a fault: it passes the cases its faults are aimed at.
RAW_BASELINE = Broken(name="raw-baseline", wrong="nothing (the raw server as written)", raw=RawFaults())
#: The cases the raw server, with no fault, passes (its faults are aimed at them).
RAW_BASELINE_PASSES = ("lj.S1.1", "lj.S3.7", "lj.S4.1", "lj.S4.5", "lj.S4.7", "lj.S6.1", "lj.S6.2", "lj.S6.11")


def _sink_writer(sink: Path | None) -> Callable[[list[dict[str, Any]]], None]:
    return RawServer(RawFaults(), sink)._deliver


def _fields(ev: Any) -> Any:
    try:
        return ev.fields()
    except ValueError:  # a payload that is not JSON (validate_json off): delivered as it came
        return {"payload": bytes(ev.payload).decode("utf-8", "replace")}


@asynccontextmanager
async def broken_server(broken: Broken | None, sink: Path | None = None) -> AsyncIterator[tuple[str, int]]:
    """Serve ``broken`` (None: refwire's own server; ``RawFaults()``: the raw
    baseline) on 127.0.0.1:0; yields (host, port); stopped on exit."""
    write = _sink_writer(sink)
    async with trio.open_nursery() as nursery:
        if broken is not None and broken.raw is not None:
            raw = RawServer(broken.raw, sink)
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]  # type: ignore[attr-defined]
            nursery.start_soon(trio.serve_listeners, raw.handle, listeners)
            address: tuple[str, int] = ("127.0.0.1", port)
        else:
            late = broken.late_delivery if broken is not None else 0.0

            async def later(events: list[dict[str, Any]]) -> None:
                await trio.sleep(late)
                write(events)

            async def handler(batch: Any, info: Any) -> None:
                events = [_fields(ev) for ev in batch.events]
                if late:
                    nursery.start_soon(later, events)
                else:
                    write(events)

            config = broken.config if broken is not None and broken.config is not None else ServerConfig()
            server = LumberjackServer(handler, config=config)
            addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            address = parse_hostport(addresses[0])
        try:
            yield address
        finally:
            nursery.cancel_scope.cancel()
