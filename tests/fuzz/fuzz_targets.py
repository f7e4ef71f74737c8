"""refwire's fuzz targets: every codec and every machine (both roles) of every dialect.

One entry per dialect in :data:`DIALECTS` (keyed by its descriptor's name,
:mod:`refwire.protocols`): its codecs and its machines, each a :class:`Target`
that turns one fuzz input into a session.  :func:`check` is the property every
input must keep, whatever drives it (atheris in ``fuzz_main.py``, a replay of
the corpus, a unit test):

* only :class:`~refwire.errors.ProtocolError` escapes (anything else propagates
  out of :func:`check`: the fuzzer's crash);
* split invariance: the input fed whole, byte by byte (in pieces of 1-7 bytes
  past 256 bytes) and split at random gives the same frames/events (by value),
  the same bytes out and the same error (class, words, frame, field, offset);
* the reference path (``fast=False``) and the speed path (``fast=True``,
  :mod:`refwire.speed`'s per-object flag, as the differential tests use it)
  give the same again.

An input is ``variant byte + stream``: the variant picks a configuration (limits,
a compressor, which side a codec reads, how a machine was set up), so one
target covers them all and the corpus stays one directory per target.  Seeds
are every hex string of ``specs/<spec>/vectors/*.json`` (the descriptor's spec
folder), alone and concatenated per direction, and each side of every
conversation vector, under every variant.
"""

from __future__ import annotations

import json
import random
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from refwire.errors import ProtocolError
from refwire.protocols import descriptor
from refwire.sansio import NEED_DATA
from refwire.wire import Limits

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"

#: Tight limits (variant bit) so that the fuzzer reaches every limit check.
SMALL = Limits(
    max_frame_size=300,
    max_decompressed_size=600,
    max_window=4,
    max_nesting_depth=2,
    max_string_size=64,
    max_buffered=2048,
)


def _limits(variant: int) -> Limits:
    return SMALL if variant & 1 else Limits()


# --------------------------------------------------------------------------- outcomes


def error_key(exc: ProtocolError) -> tuple[Any, ...]:
    """An error as every path and every split must raise it."""
    return ("error", type(exc).__name__, str(exc), exc.frame, exc.field, exc.offset)


def norm(x: Any, depth: int = 0) -> Any:
    """``x`` by value, comparable with ``==``: attrs classes by their fields,
    bytes-likes as bytes, containers as tuples, runs (``frames()``) as their frames."""
    if depth > 20:
        return repr(x)
    d = depth + 1
    if isinstance(x, bytes | bytearray | memoryview):
        return bytes(x)
    if isinstance(x, str | int | float | bool | type(None)):
        return (type(x).__name__, x)
    if isinstance(x, list | tuple):
        return tuple(norm(i, d) for i in x)
    if isinstance(x, dict):
        return tuple(sorted(((repr(norm(k, d)), norm(v, d)) for k, v in x.items()), key=lambda kv: kv[0]))
    if isinstance(x, set | frozenset):
        return tuple(sorted(repr(norm(i, d)) for i in x))
    if isinstance(x, BaseException):
        return (type(x).__name__, str(x))
    if attrs.has(type(x)):
        return (type(x).__name__, tuple(norm(v, d) for v in _public_fields(x)))
    frames = getattr(x, "frames", None)
    if callable(frames):
        return ("run", norm(frames(), d))
    return x


def _public_fields(x: Any) -> Iterator[Any]:
    """An attrs object's fields; a private one (a speed path's columns) by its public
    property when the class has one (``_messages`` as ``messages``), else left out."""
    for a in attrs.fields(type(x)):
        if not a.name.startswith("_"):
            yield getattr(x, a.name)
        elif a.alias not in ("fast",) and isinstance(getattr(type(x), a.alias, None), property):
            yield getattr(x, a.alias)


@attrs.define
class Trace:
    """What one session made of an input: items (frames or events, then the error), bytes out, end state."""

    items: list[Any] = attrs.Factory(list)
    out: bytearray = attrs.Factory(bytearray)
    end: Any = None
    failed: bool = False


class Session:
    """One codec or machine fed one input; subclasses say how."""

    def __init__(self) -> None:
        self.trace = Trace()

    def feed(self, chunk: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """The input ended."""

    def flush(self) -> None:
        """Collect the bytes out still queued (after the end or an error)."""

    def state(self) -> Any:
        return None


def run(session: Session, parts: Iterable[bytes]) -> Trace:
    """Feed ``parts`` then the end; a ProtocolError ends the session (recorded)."""
    t = session.trace
    try:
        for part in parts:
            session.feed(part)
        session.close()
    except ProtocolError as exc:
        t.items.append(error_key(exc))
        t.failed = True
    session.flush()
    # after an error, how much of the input a codec had buffered depends on the split
    t.end = norm(session.state()) if not t.failed else None
    return t


# --------------------------------------------------------------------------- targets


@attrs.frozen
class Target:
    """One fuzz target: ``open(fast, variant, head)`` a session; the input is
    ``variant byte + head (head_len bytes) + stream``."""

    name: str
    protocol: str
    kind: str  #: "codec" or "machine"
    open: Callable[[bool, int, bytes], Session]
    variants: int = 1
    #: whether it has a speed path (else the reference path runs alone)
    fast_path: bool = True
    #: whether the stream may be split (a whole-buffer codec may not)
    streaming: bool = True
    #: a head taken from the stream before it is fed (TANK's client: the requests it sent)
    head: Callable[[bytes], tuple[bytes, bytes]] | None = None
    #: extra seed streams (already with their head), beyond the spec's vectors
    extra_seeds: Callable[[], list[bytes]] | None = None

    def seeds(self, *, spread: bool = False) -> list[bytes]:
        """Every seed input: each vector stream under every variant (``spread``:
        under one, picked by the stream's checksum, for a short run)."""
        streams = list(vector_streams(descriptor(self.protocol).spec))
        if self.head is not None:
            streams = [b"\x00\x00" + s for s in streams]  # an empty head (its u16 length)
        if self.extra_seeds is not None:
            streams += self.extra_seeds()
        out: list[bytes] = []
        seen: set[bytes] = set()
        for s in streams:
            for v in [zlib.crc32(s) % self.variants] if spread else range(self.variants):
                data = bytes([v]) + s
                if data not in seen:
                    seen.add(data)
                    out.append(data)
        return out


def vector_streams(spec: str) -> Iterator[bytes]:
    """Every hex string of the spec's vectors, then each file's streams per direction concatenated."""
    for path in sorted((SPECS / spec / "vectors").glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        by_direction: dict[str, list[bytes]] = {}
        for v in doc.get("vectors", []):
            yield from _conversation(v)
            raw = _hex(v.get("hex"))
            if raw is None:
                continue
            yield raw
            by_direction.setdefault(str(v.get("direction")), []).append(raw)
            for key, value in v.items():
                if key != "hex" and key.endswith("hex") and (extra := _hex(value)) is not None:
                    yield extra
        for raws in by_direction.values():
            if len(raws) > 1:
                yield b"".join(raws)[:2048]


def _conversation(v: dict[str, Any]) -> Iterator[bytes]:
    """A conversation vector's (``steps``: ``{"client": hex}``, ``{"server": hex}``, ...)
    bytes of each side, in order: what the other side's machine reads."""
    sides: dict[str, bytearray] = {}
    for step in v.get("steps", []):
        if isinstance(step, dict):
            for side, value in step.items():
                if (raw := _hex(value)) is not None:
                    sides.setdefault(side, bytearray()).extend(raw)
    for stream in sides.values():
        yield bytes(stream[:4096])


def _hex(value: Any) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return bytes.fromhex(value)
    except ValueError:
        return None


def split_plans(data: bytes, streaming: bool) -> Iterator[list[bytes]]:
    """The splits one input is fed in: whole, byte by byte (1-7-byte pieces past
    256 bytes), and a random split (seeded by the input, so a crash replays)."""
    yield [data]
    if not streaming or len(data) < 2:
        return
    rnd = random.Random(zlib.crc32(data))
    if len(data) <= 256:
        yield [data[i : i + 1] for i in range(len(data))]
    else:
        yield _cut(data, rnd, 1, 7)
    yield _cut(data, rnd, 1, max(2, len(data) // 3))


def _cut(data: bytes, rnd: random.Random, lo: int, hi: int) -> list[bytes]:
    parts, i = [], 0
    while i < len(data):
        n = rnd.randint(lo, hi)
        parts.append(data[i : i + n])
        i += n
    return parts


def parse(target: Target, data: bytes) -> tuple[int, bytes, bytes]:
    """(variant, head, stream) of a fuzz input."""
    if not data:
        return 0, b"", b""
    variant, rest = data[0] % target.variants, data[1:]
    head = b""
    if target.head is not None:
        head, rest = target.head(rest)
    return variant, head, rest


def check(target: Target, data: bytes) -> Trace:
    """The properties (module docstring) for one input; an AssertionError names the one broken."""
    variant, head, stream = parse(target, data)
    want: Trace | None = None
    paths = (False, True) if target.fast_path else (False,)
    for fast in paths:
        for i, parts in enumerate(split_plans(stream, target.streaming)):
            if fast and i == 1 and len(stream) > 64:
                continue  # the speed path's byte-by-byte run is the costliest and adds least
            got = run(target.open(fast, variant, head), parts)
            if want is None:
                want = got
                continue
            if got != want:
                raise AssertionError(
                    f"{target.name}: {'speed' if fast else 'reference'} path, split {[len(p) for p in parts][:40]} "
                    f"differs from the reference path whole:\n  want {_short(want)}\n  got  {_short(got)}"
                )
    assert want is not None
    return want


def _short(t: Trace) -> str:
    text = repr(attrs.astuple(t, recurse=False))
    return text if len(text) < 3000 else text[:1500] + " ... " + text[-1500:]


# --------------------------------------------------------------------------- drivers


class MachineSession(Session):
    """A sans-io machine (refwire.sansio) fed its peer's bytes: ``receive_data``
    (``now`` fixed), every event drained (``react`` answers those that wait on the
    application), ``data_to_send`` collected; EOF at the end."""

    def __init__(self, machine: Any, react: Callable[[Any, Any], None] | None = None) -> None:
        super().__init__()
        self.m = machine
        self.react = react
        self.trace.out += machine.data_to_send()

    def _drain(self) -> None:
        for _ in range(100_000):
            ev = self.m.next_event()
            if ev is NEED_DATA:
                break
            self.trace.items.append(norm(ev))
            if self.react is not None:
                self.react(self.m, ev)
        else:  # pragma: no cover - a machine that never says NEED_DATA
            raise AssertionError("next_event never returned NEED_DATA")
        self.trace.out += self.m.data_to_send()

    def feed(self, chunk: bytes) -> None:
        self.m.receive_data(chunk, now=0.0)
        self._drain()

    def close(self) -> None:
        self.m.receive_data(b"", now=0.0)
        self._drain()
        self._drain()  # a closed machine stays quiet

    def flush(self) -> None:
        self.trace.out += self.m.data_to_send()

    def state(self) -> Any:
        return self.m.state


class StreamCodecSession(Session):
    """A streaming decoder: ``feed`` then ``pull()`` every complete frame and the
    error that ends them; ``eof()`` the error of an input that ends inside a frame,
    if the codec has one."""

    def __init__(
        self,
        feed: Callable[[bytes], None],
        pull: Callable[[], tuple[list[Any], ProtocolError | None]],
        state: Callable[[], Any],
        eof: Callable[[], ProtocolError | None] | None = None,
    ) -> None:
        super().__init__()
        self._feed, self._pull, self._state, self._eof = feed, pull, state, eof

    def feed(self, chunk: bytes) -> None:
        self._feed(chunk)
        frames, err = self._pull()
        self.trace.items.extend(norm(f) for f in frames)
        if err is not None:
            raise err

    def close(self) -> None:
        if self._eof is not None and (err := self._eof()) is not None:
            raise err

    def state(self) -> Any:
        return self._state()


def pulling(step: Callable[[], list[Any] | None]) -> Callable[[], tuple[list[Any], ProtocolError | None]]:
    """``pull`` from ``step`` (the next frame or run of frames as a list, None when
    no whole frame is left): every frame up to the first error, and the error."""

    def pull() -> tuple[list[Any], ProtocolError | None]:
        got: list[Any] = []
        try:
            while (more := step()) is not None:
                got.extend(more)
        except ProtocolError as exc:
            return got, exc
        return got, None

    return pull


class WholeSession(Session):
    """A codec of whole buffers: one call on everything fed."""

    def __init__(self, decode: Callable[[bytes], Any]) -> None:
        super().__init__()
        self._decode = decode
        self._data = bytearray()

    def feed(self, chunk: bytes) -> None:
        self._data += chunk

    def close(self) -> None:
        self.trace.items.append(norm(self._decode(bytes(self._data))))


# --------------------------------------------------------------------------- Lumberjack


def _lumberjack_frames(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.lumberjack import FrameDecoder

    dec = FrameDecoder(_limits(variant), validate_json=not variant & 2, fast=fast)

    def pull() -> tuple[list[Any], ProtocolError | None]:
        frames, err = dec.frames_before_error(runs=fast)
        out: list[Any] = []
        for f in frames:
            out.extend(f.frames() if callable(getattr(f, "frames", None)) else [f])
        return out, err

    return StreamCodecSession(dec.feed, pull, lambda: (dec.offset, dec.buffered, dec.pending_frame_name()))


def _lumberjack_server(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.lumberjack import Batch, ServerConnection

    def react(m: Any, ev: Any) -> None:
        if isinstance(ev, Batch):
            m.accept(ev, now=0.0)

    return MachineSession(
        ServerConnection(limits=_limits(variant), keepalive_interval=None, ack_mode="count" if variant & 2 else "last-seq", fast=fast),
        react,
    )


def _lumberjack_client(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.lumberjack import V1, V2, ClientConnection

    c = ClientConnection(version=V1 if variant & 2 else V2, limits=_limits(variant), ack_timeout=None, fast=fast)
    c.send_window([{"a": i} for i in range(3)], now=0.0)
    return MachineSession(c)


# --------------------------------------------------------------------------- Pravega and its 2017 draft


def _pravega_decoder(dialect_name: str) -> Callable[[bool, int, bytes], Session]:
    def open_(fast: bool, variant: int, head: bytes) -> Session:
        from refwire.pravega.commands import CURRENT
        from refwire.pravega.draft2017.frames import DRAFT
        from refwire.pravega.frames_codec import CommandDecoder

        dialect = DRAFT if dialect_name == "draft" else CURRENT
        dec = CommandDecoder(_limits(variant), allow_inner=bool(variant & 2), dialect=dialect, fast=fast)

        def step() -> list[Any] | None:
            if fast:
                run_ = dec.block_ends(7)
                if run_ is not None:
                    dec.consume(sum(run_.frame_sizes))
                    return list(run_.commands())
            cmd = dec.next_command()
            return None if cmd is None else [cmd]

        return StreamCodecSession(dec.feed, pulling(step), lambda: (dec.offset, dec.buffered, dec.pending_frame_name()))

    return open_


def _pravega_server(fast: bool, variant: int, head: bytes) -> Session:
    """Every SetupAppend answered (AppendSetup at 0) and every Append stored, or
    refused when its event number is a multiple of 3 (variant bit 2), as the
    application would (tests/test_pravega_differential.py's ``serve``)."""
    from refwire.pravega import ServerConnection
    from refwire.pravega.events import Append, RequestReceived
    from refwire.pravega.frames import AppendSetup, SegmentIsSealed, SetupAppend

    length = 0

    def react(m: Any, ev: Any) -> None:
        nonlocal length
        if isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend):
            cmd = ev.command
            m.send(AppendSetup(request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=0), now=0.0)
        elif isinstance(ev, Append):
            if variant & 2 and ev.event_number % 3 == 0:
                m.append_failed(ev, SegmentIsSealed(request_id=ev.request_id, segment=ev.segment), now=0.0)
            else:
                length += len(ev.data)
                m.append_stored(ev, length, now=0.0)

    return MachineSession(ServerConnection(_limits(variant), frame_timeout=None, fast=fast), react)


def _pravega_client(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.pravega import ClientConnection

    c = ClientConnection(_limits(variant), fast=fast)
    c.initiate(now=0.0)
    return MachineSession(c)


def _draft_server(fast: bool, variant: int, head: bytes) -> Session:
    """Every SetupAppend answered (AppendSetup at level 0), every block stored."""
    from refwire.pravega.draft2017.connection import ServerConnection
    from refwire.pravega.draft2017.events import BlockAppend, RequestReceived
    from refwire.pravega.draft2017.frames import AppendSetup, SetupAppend

    def react(m: Any, ev: Any) -> None:
        if isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend):
            cmd = ev.command
            m.send(AppendSetup(segment=cmd.segment, connection_id=cmd.connection_id, connection_offset_ack_level=0), now=0.0)
        elif isinstance(ev, BlockAppend):
            m.block_stored(ev, now=0.0)

    return MachineSession(ServerConnection(_limits(variant), reply_part_size=1 + 7 * (variant & 2)), react)


def _draft_client(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.pravega.draft2017.connection import ClientConnection

    return MachineSession(ClientConnection(_limits(variant)))


# --------------------------------------------------------------------------- TANK


def _tank_frames(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.tank.frames import REQUEST_IDS, RESPONSE_IDS, FrameDecoder, decode_request
    from refwire.tank.responses import decode_response

    broker_side = not variant & 2
    dec = FrameDecoder(REQUEST_IDS if broker_side else RESPONSE_IDS, _limits(variant))
    decode = decode_request if broker_side else decode_response

    def step() -> list[Any] | None:
        got = dec.next_frame()
        if got is None:
            return None
        msg_id, payload, off = got
        return [decode(msg_id, payload, offset=off, limits=dec.limits)]

    return StreamCodecSession(dec.feed, pulling(step), lambda: (dec.at_boundary, len(dec.buffer)))


def _tank_bundles(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.tank import bundles

    def decode(data: bytes) -> Any:
        if variant & 2:
            return bundles.decode_bundle(data, base_seq=None if variant & 4 else 100, limits=_limits(variant), fast=fast)
        r = bundles.read_chunk(
            data, base_seq=None if variant & 4 else 1, hwmark=1 << 20, requested_seq=3 if variant & 8 else 0,
            limits=_limits(variant), fast=fast,
        )
        return (r.messages if hasattr(r, "messages") else None, r)

    return WholeSession(decode)


def _tank_client_head(rest: bytes) -> tuple[bytes, bytes]:
    n = int.from_bytes(rest[:2], "little") if len(rest) >= 2 else 0
    return rest[2 : 2 + n], rest[2 + n :]


def _tank_requests(head: bytes) -> list[Any]:
    """The requests a TANK client sent before the fuzzed responses: the head's frames that decode."""
    from refwire.tank.frames import REQUEST_IDS, FrameDecoder, decode_request

    dec = FrameDecoder(REQUEST_IDS)
    out: list[Any] = []
    try:
        dec.feed(head)
        while (got := dec.next_frame()) is not None:
            out.append(decode_request(*got[:2], offset=got[2]))
    except ProtocolError:
        pass
    return out


def _tank_client(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.tank import ClientConnection

    c = ClientConnection(now=0.0, limits=_limits(variant), ping_interval=None, fast=fast)
    for r in _tank_requests(head):
        try:
            c.send(r, now=0.0)
        except ProtocolError:
            pass  # a repeated request id
    return MachineSession(c)


def _tank_broker(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.tank import BrokerConnection

    return MachineSession(BrokerConnection(now=0.0, limits=_limits(variant), idle_timeout=None))


def _tank_client_seeds() -> list[bytes]:
    doc = json.loads((SPECS / "tank" / "vectors" / "frames.json").read_text(encoding="utf-8"))
    requests: dict[Any, bytes] = {}
    for v in doc["vectors"]:
        if v["direction"] == "c2b":
            requests.setdefault(v["fields"].get("request_id"), bytes.fromhex(v["hex"]))
    out = []
    for v in doc["vectors"]:
        if v["direction"] == "b2c":
            req = requests.get(v["fields"].get("request_id"), b"")
            out.append(struct.pack("<H", len(req)) + req + bytes.fromhex(v["hex"]))
    return out


# --------------------------------------------------------------------------- Seastar RPC

_SEASTAR_COMPRESSORS: tuple[str | None, ...] = (None, "LZ4", "LZ4_FRAGMENTED", None)


def _seastar_frames(fast: bool, variant: int, head: bytes) -> Session:
    from refwire.seastar_rpc import FrameDecoder, make_compressor

    kind = "response" if variant & 1 else "request"
    comp = _SEASTAR_COMPRESSORS[(variant >> 1) & 3]
    negotiation = (variant >> 1) & 3 == 3
    limits = SMALL if variant & 8 else Limits()
    dec = FrameDecoder(kind, limits=limits, negotiation=negotiation, fast=fast)  # type: ignore[arg-type]
    if not negotiation:
        dec.configure(timeout=bool(variant & 16), duration=bool(variant & 16), compressor=make_compressor(comp) if comp else None)
    def step() -> list[Any] | None:
        if fast and kind == "response":
            run_ = dec.next_responses()
            if run_ is not None:
                return list(run_.frames())
        f = dec.next_frame()
        return None if f is None else [f]

    return StreamCodecSession(
        dec.feed, pulling(step), lambda: (dec.offset, dec.buffered, dec.in_frame, dec.frame_name()), dec.eof_error
    )


def _seastar_pair(fast: bool, variant: int, *, client_side: bool) -> Any:
    from refwire.seastar_rpc import ClientConnection, ServerConnection

    comp = _SEASTAR_COMPRESSORS[(variant >> 1) & 3]
    limits = _limits(variant)
    client = ClientConnection(limits=limits, compressors=(comp,) if comp else (), fast=fast if client_side else None)
    server = ServerConnection(limits=limits, fast=fast if not client_side else None)
    client.initiate(now=0.0)
    if (variant >> 1) & 3 == 3:  # fresh: the fuzzed stream starts with the negotiation
        return client if client_side else server
    server.receive_data(client.data_to_send(), now=0.0)
    while server.next_event() is not NEED_DATA:
        pass
    server.accept(connection_id=0x10000, now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    while client.next_event() is not NEED_DATA:
        pass
    server.data_to_send()
    return client if client_side else server


def _seastar_react(m: Any, ev: Any) -> None:
    from refwire.seastar_rpc import NegotiationRequested

    if isinstance(ev, NegotiationRequested):
        m.accept(connection_id=0x10000, now=0.0)


def _seastar_client(fast: bool, variant: int, head: bytes) -> Session:
    return MachineSession(_seastar_pair(fast, variant, client_side=True))


def _seastar_server(fast: bool, variant: int, head: bytes) -> Session:
    return MachineSession(_seastar_pair(fast, variant, client_side=False), _seastar_react)


def _seastar_negotiated_seeds(direction: str) -> Callable[[], list[bytes]]:
    """Fresh machines (variant 6/7): the peer's negotiation frame, then each frame vector."""

    def seeds() -> list[bytes]:
        neg = json.loads((SPECS / "seastar-rpc" / "vectors" / "negotiation.json").read_text(encoding="utf-8"))["vectors"]
        frames = json.loads((SPECS / "seastar-rpc" / "vectors" / "frames.json").read_text(encoding="utf-8"))["vectors"]
        firsts = [bytes.fromhex(v["hex"]) for v in neg if v["direction"] == direction][:2]
        rest = [bytes.fromhex(v["hex"]) for v in frames if v["direction"] in (direction, "both")]
        return [f + r for f in firsts for r in rest] + firsts

    return seeds


# --------------------------------------------------------------------------- the registry


@attrs.frozen
class Dialect:
    """One protocol's fuzz targets (``codecs``; ``machines`` by the role names its descriptor uses)."""

    codecs: tuple[Target, ...]
    machines: dict[str, Target]

    def targets(self) -> tuple[Target, ...]:
        return (*self.codecs, *self.machines.values())


def _dialect(protocol: str, codecs: dict[str, dict[str, Any]], machines: dict[str, dict[str, Any]]) -> Dialect:
    def make(name: str, kind: str, kw: dict[str, Any]) -> Target:
        return Target(name=f"{protocol}.{name}", protocol=protocol, kind=kind, **kw)

    return Dialect(
        codecs=tuple(make(n, "codec", kw) for n, kw in codecs.items()),
        machines={role: make(role, "machine", kw) for role, kw in machines.items()},
    )


#: descriptor name -> its targets: a sixth protocol is fuzzed by adding one entry
#: (tests/fuzz/test_fuzz.py fails until every descriptor and every machine it names has one).
DIALECTS: dict[str, Dialect] = {
    "lumberjack": _dialect(
        "lumberjack",
        {"frames": {"open": _lumberjack_frames, "variants": 4}},
        {"client": {"open": _lumberjack_client, "variants": 4}, "server": {"open": _lumberjack_server, "variants": 4}},
    ),
    "pravega": _dialect(
        "pravega",
        {"commands": {"open": _pravega_decoder("current"), "variants": 4}},
        {"client": {"open": _pravega_client, "variants": 2}, "server": {"open": _pravega_server, "variants": 2}},
    ),
    "pravega-draft-2017": _dialect(
        "pravega-draft-2017",
        {"commands": {"open": _pravega_decoder("draft"), "variants": 4, "fast_path": False}},
        {
            "client": {"open": _draft_client, "variants": 2, "fast_path": False},
            "server": {"open": _draft_server, "variants": 4, "fast_path": False},
        },
    ),
    "tank": _dialect(
        "tank",
        {
            "frames": {"open": _tank_frames, "variants": 4, "fast_path": False},
            "bundles": {"open": _tank_bundles, "variants": 16, "streaming": False},
        },
        {
            "client": {"open": _tank_client, "variants": 2, "head": _tank_client_head, "extra_seeds": _tank_client_seeds},
            "broker": {"open": _tank_broker, "variants": 2},
        },
    ),
    "seastar-rpc": _dialect(
        "seastar-rpc",
        {"frames": {"open": _seastar_frames, "variants": 32}},
        {
            "client": {"open": _seastar_client, "variants": 8, "extra_seeds": _seastar_negotiated_seeds("server->client")},
            "server": {"open": _seastar_server, "variants": 8, "extra_seeds": _seastar_negotiated_seeds("client->server")},
        },
    ),
}


def targets() -> dict[str, Target]:
    """Every target by name, in registry order."""
    return {t.name: t for d in DIALECTS.values() for t in d.targets()}
