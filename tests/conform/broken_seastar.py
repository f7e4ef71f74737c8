"""Deliberately broken Seastar RPC servers, each with ONE wrong behaviour.

Each is refwire's own :class:`~refwire.seastar_rpc.server.SeastarServer` (demo
and conformance verbs) with one setting changed or its connection machine
(:class:`~refwire.seastar_rpc.connection.ServerConnection`) subclassed to change
one method.  The behaviours are those ``specs/seastar-rpc/README.md`` §2-§6
forbid.  ``test_seastar_kill_matrix.py`` runs every server case against each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from refwire.conform.model import Verdict
from refwire.drivers import parse_hostport
from refwire.seastar_rpc.compression import LZ4Compressor, LZ4FragmentedCompressor
from refwire.seastar_rpc.conform_verbs import add_conformance_verbs
from refwire.seastar_rpc.connection import ServerConnection, State
from refwire.seastar_rpc.demo import demo_registry
from refwire.seastar_rpc.events import OversizedCall, Respond, RespondError
from refwire.seastar_rpc.frames import DEFAULT_LIMITS, Features, Negotiation, UnknownVerb, UserError
from refwire.seastar_rpc.negotiation import Feature
from refwire.seastar_rpc.server import NO_SHARD, SHARD, SeastarServer, ServerConfig, _Session

__all__ = ["BROKEN", "Broken", "broken_seastar"]


class _Reply(ServerConnection):
    """Rewrites the negotiation reply it sends (``fix``)."""

    def fix(self, reply: Features, offer: Features) -> Features:
        return reply

    def _accept(self, connection_id: int | None) -> None:
        before = len(self._out)
        super()._accept(connection_id)
        assert self.reply is not None and self.offer is not None
        self.reply = self.fix(self.reply, self.offer)
        del self._out[before:]
        self._out += self.reply.encode()


class EchoUnknown(_Reply):
    def fix(self, reply: Features, offer: Features) -> Features:
        return attrs.evolve(reply, unknown=offer.unknown)


class NoDuration(_Reply):
    """Leaves HANDLER_DURATION out of the reply (and its replies then carry none)."""

    def fix(self, reply: Features, offer: Features) -> Features:
        return attrs.evolve(reply, handler_duration=False)


class EchoCompressOffer(_Reply):
    """Echoes an offer it chose nothing from (COMPRESS=ZSTD), compressing nothing."""

    def fix(self, reply: Features, offer: Features) -> Features:
        return reply if reply.compress is not None or offer.compress is None else attrs.evolve(reply, compress=offer.compress)


class EchoStreamParent(_Reply):
    """Echoes a stream connection's STREAM_PARENT in its reply."""

    def fix(self, reply: Features, offer: Features) -> Features:
        return reply if offer.stream_parent is None else attrs.evolve(reply, stream_parent=offer.stream_parent)


class ShortStreamParent(ServerConnection):
    """Reads a STREAM_PARENT record shorter than 8 bytes zero-padded (as Seastar does in practice)."""

    def _on_frame(self, frame: object) -> None:
        if isinstance(frame, Negotiation):
            frame = Negotiation(
                tuple(
                    (n, d.ljust(8, b"\0") if n == Feature.STREAM_PARENT and len(d) < 8 else d) for n, d in frame.records
                )
            )
        super()._on_frame(frame)


class CompressLast(ServerConnection):
    """Chooses the LAST accepted name of the client's list."""

    def _accept(self, connection_id: int | None) -> None:
        assert self.offer is not None
        if self.offer.compress:
            self.offer = attrs.evolve(self.offer, compress=",".join(reversed(self.offer.compress.split(","))))
        super()._accept(connection_id)


class _LenientLZ4(LZ4Compressor):
    def decompress(self, payload: bytes, *, limits: Any, offset: int) -> bytes:
        if len(payload) >= 4 and payload[:4] == b"\0\0\0\0":
            return b""
        return super().decompress(payload, limits=limits, offset=offset)


class LZ4ZeroNoop(ServerConnection):
    """Takes an LZ4 envelope declaring size 0 for a no-op."""

    def _accept(self, connection_id: int | None) -> None:
        super()._accept(connection_id)
        if isinstance(self._decoder.compressor, LZ4Compressor):
            self._decoder.compressor = _LenientLZ4()


class _ShortFragmented(LZ4FragmentedCompressor):
    def decompress(self, payload: bytes, *, limits: Any, offset: int) -> bytes:
        out = super().decompress(payload, limits=limits, offset=offset)
        return out[:-1] if out and len(out) % 32768 == 0 else out


class FragmentedBoundary(ServerConnection):
    """Loses the last byte of an LZ4_FRAGMENTED message of exactly k x 32 KiB."""

    def _accept(self, connection_id: int | None) -> None:
        super()._accept(connection_id)
        if isinstance(self._decoder.compressor, LZ4FragmentedCompressor):
            self._decoder.compressor = _ShortFragmented()


class WrongId(ServerConnection):
    """Replies with msg_id one off (exceptions: -(id+1))."""

    def _response(self, msg_id: int, payload: bytes, duration: int) -> None:
        super()._response(msg_id + 1 if msg_id >= 0 else msg_id - 1, payload, duration)


class IgnoreDeadline(ServerConnection):
    """Sends replies past their propagated deadline."""

    def reply_wanted(self, call: Any, *, now: float) -> bool:
        return self.state not in (State.CLOSED, State.ERROR)


class UnknownAsUser(ServerConnection):
    """Answers an unknown verb with a USER exception."""

    def send(self, event: object, *, now: float) -> None:
        if isinstance(event, RespondError) and isinstance(event.error, UnknownVerb):
            event = RespondError(event.call, UserError(b"unknown verb"), event.handler_duration)
        super().send(event, now=now)


class OversizedSilent(ServerConnection):
    """Never answers a request over the memory limit."""

    def send(self, event: object, *, now: float) -> None:
        if isinstance(event, RespondError) and isinstance(event.call, OversizedCall):
            return
        super().send(event, now=now)


class EchoTruncates(ServerConnection):
    """Cuts every reply's data at 32 KiB."""

    def send(self, event: object, *, now: float) -> None:
        if isinstance(event, Respond) and len(event.payload) > 32768:
            event = Respond(event.call, event.payload[:32768], event.handler_duration)
        super().send(event, now=now)


@attrs.frozen(kw_only=True)
class Broken:
    name: str
    wrong: str
    #: The cases that must FAIL against it.
    aimed_at: tuple[str, ...]
    #: Other verdicts it must get: UNSUPPORTED where it lacks a requirement of §11
    #: and shows it, NON-STRICT where it behaves as the real Seastar does.
    expect: tuple[tuple[str, Verdict], ...] = ()
    machine: type[ServerConnection] = ServerConnection
    config: ServerConfig = attrs.field(factory=ServerConfig)
    #: Sends a negotiation reply before closing a connection it refused.
    reply_on_refusal: bool = False


BROKEN: tuple[Broken, ...] = (
    Broken(name="echoes-unknown-feature", wrong="echoes an unknown feature", aimed_at=("ss.S1.2",), machine=EchoUnknown),
    Broken(name="no-handler-duration", wrong="does not echo HANDLER_DURATION", aimed_at=("ss.S1.1",), machine=NoDuration),
    Broken(name="compress-last", wrong="chooses the last accepted compressor", aimed_at=("ss.S1.3",), machine=CompressLast),
    Broken(
        name="echoes-compress-offer",
        wrong="echoes a compressor offer it cannot use",
        aimed_at=("ss.S1.4",),
        machine=EchoCompressOffer,
    ),
    Broken(
        name="replies-when-refusing",
        wrong="sends a negotiation reply before closing a refused connection",
        aimed_at=("ss.S1.5", "ss.S1.6", "ss.S1.7", "ss.S1.8", "ss.S5.2"),
        reply_on_refusal=True,
    ),
    Broken(
        name="wrong-msg-id",
        wrong="replies with msg_id + 1",
        aimed_at=("ss.S2.1", "ss.S2.2", "ss.S2.3", "ss.S3.1", "ss.S3.2"),
        machine=WrongId,
    ),
    Broken(
        name="truncates-at-32k",
        wrong="cuts reply data at 32 KiB",
        aimed_at=("ss.S2.4", "ss.S2.5", "ss.S4.1", "ss.S4.3"),
        machine=EchoTruncates,
    ),
    Broken(name="unknown-verb-as-user", wrong="answers an unknown verb with USER", aimed_at=("ss.S3.1",), machine=UnknownAsUser),
    Broken(name="ignores-deadline", wrong="replies past the propagated deadline", aimed_at=("ss.S3.3",), machine=IgnoreDeadline),
    Broken(
        name="lz4-fragmented-boundary",
        wrong="loses a byte of k x 32 KiB LZ4_FRAGMENTED messages",
        aimed_at=("ss.S4.1",),
        machine=FragmentedBoundary,
    ),
    Broken(name="lz4-zero-is-noop", wrong="takes a declared LZ4 size 0 for a no-op", aimed_at=("ss.S4.2",), machine=LZ4ZeroNoop),
    Broken(
        name="echoes-stream-parent",
        wrong="echoes STREAM_PARENT in a stream connection's reply",
        aimed_at=("ss.S5.1",),
        machine=EchoStreamParent,
    ),
    Broken(
        name="short-stream-parent",
        wrong="(not strict: as Seastar) takes a STREAM_PARENT record of 4 bytes, zero-padded",
        aimed_at=(),
        expect=(("ss.S5.3", Verdict.NON_STRICT),),
        machine=ShortStreamParent,
    ),
    Broken(
        name="no-streaming",
        wrong="(not wrong: lacks a requirement) has no streaming: no CONNECTION_ID, stream connections refused",
        aimed_at=(),
        expect=(("ss.S5.1", Verdict.UNSUPPORTED), ("ss.S5.3", Verdict.UNSUPPORTED)),
        config=ServerConfig(streaming=False),
    ),
    Broken(
        name="memory-above-16m",
        wrong="(not wrong: lacks a requirement) has a memory limit of 64 MiB",
        aimed_at=(),
        expect=(("ss.S6.1", Verdict.UNSUPPORTED),),
        # (a budget of 1 GiB a connection leaves its requests 64 MiB too)
        config=ServerConfig(max_memory=64 << 20, limits=attrs.evolve(DEFAULT_LIMITS, max_connection_memory=1 << 30)),
    ),
    Broken(
        name="oversized-silent",
        wrong="never answers a request over the memory limit",
        aimed_at=("ss.S6.1",),
        machine=OversizedSilent,
    ),
)


class BrokenServer(SeastarServer):
    """refwire's server with the connection machine of ``broken``."""

    def __init__(self, broken: Broken) -> None:
        super().__init__(add_conformance_verbs(demo_registry()), config=broken.config)
        self.broken = broken

    async def handle_stream(self, stream: trio.abc.Stream) -> None:
        cfg = self.config
        self._counter += 1
        conn_id = (self._counter << 16) | (SHARD if cfg.streaming else NO_SHARD)
        conn = ServerConnection(
            limits=cfg.limits,
            compressors=cfg.compressors,
            multi_algo=cfg.multi_algo,
            admit_len=self._admit_len(),
            negotiation_deadline=None,
        )
        conn.__class__ = self.broken.machine  # the subclasses change methods only
        try:
            await _Session(self, conn, stream, conn_id).run()
        finally:
            if self.broken.reply_on_refusal and conn.reply is None:
                with trio.move_on_after(1.0):
                    try:
                        await stream.send_all(Features(timeout=True, handler_duration=True).encode())
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
            await trio.aclose_forcefully(stream)


@asynccontextmanager
async def broken_seastar(broken: Broken | None) -> AsyncIterator[tuple[str, int]]:
    """refwire's server (``None``) or a broken one on 127.0.0.1:0; stopped on exit."""
    server: SeastarServer = BrokenServer(broken) if broken else SeastarServer(add_conformance_verbs(demo_registry()))
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        try:
            yield parse_hostport(addresses[0])
        finally:
            nursery.cancel_scope.cancel()
