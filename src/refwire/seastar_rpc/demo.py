"""The demo verbs ``refwire serve seastar-rpc`` registers (specs/seastar-rpc/README.md).

The verb numbers and which of them are one-way are plain data here, so the
capture rules can use them without importing the trio server; the handlers
themselves (:func:`demo_registry`) are a :class:`~refwire.seastar_rpc.registry.VerbRegistry`
for :mod:`refwire.seastar_rpc.server`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from ..reference import RunningServer
    from .registry import VerbRegistry
    from .server import CallContext, ServerConfig

__all__ = ["DEMO_ONE_WAY", "DEMO_VERBS", "demo_registry", "serve_reference"]


_I32: Final = struct.Struct("<i")
_U64: Final = struct.Struct("<Q")

#: The demo verbs ``refwire serve seastar-rpc`` registers; their numbers follow the
#: captured Seastar sessions (1 = sum, 3 = throws "boom", 4 = one-way, 5 = sleep,
#: 6 = stream echo), so a Seastar client running that script sees the same replies.
DEMO_VERBS: Final = {"sum": 1, "echo": 2, "boom": 3, "note": 4, "sleep": 5, "stream_echo": 6, "conn_id": 7}

#: The demo verbs that expect no reply (one-way is the application's choice, not on the wire).
DEMO_ONE_WAY: Final = frozenset({DEMO_VERBS["note"]})


def demo_registry(notes: list[int] | None = None) -> VerbRegistry:
    """Built-in demo verbs (int32 = 4 bytes LE, as the rpc_demo serializer)."""
    import trio

    from .errors import BadArguments, StreamClosedError
    from .registry import VerbRegistry

    reg = VerbRegistry()
    kept = notes if notes is not None else []

    def ints(payload: bytes, n: int) -> tuple[int, ...]:
        if len(payload) < 4 * n:
            raise BadArguments(f"expected {n} int32, got {len(payload)} bytes")
        return struct.unpack_from(f"<{n}i", payload)

    async def sum_(ctx: CallContext, payload: bytes) -> bytes:
        a, b = ints(payload, 2)
        return _I32.pack(((a + b + 2**31) % 2**32) - 2**31)

    async def echo(ctx: CallContext, payload: bytes) -> bytes:
        return payload

    async def boom(ctx: CallContext, payload: bytes) -> bytes:
        raise RuntimeError("boom")

    async def note(ctx: CallContext, payload: bytes) -> None:
        kept.append(ints(payload, 1)[0])

    async def sleep(ctx: CallContext, payload: bytes) -> bytes:
        (ms,) = ints(payload, 1)
        await trio.sleep(max(0, ms) / 1000)
        return payload[:4]

    async def stream_echo(ctx: CallContext, payload: bytes) -> bytes:
        if len(payload) < 8:
            raise BadArguments("expected a u64 sink id")
        sid = _U64.unpack_from(payload, len(payload) - 8)[0]
        s = ctx.stream(sid)

        async def pump() -> None:
            try:
                async for msg in s:
                    await s.send(msg)
                await s.close()
            except StreamClosedError:
                pass

        ctx.server.spawn(pump)
        return _U64.pack(sid)

    async def conn_id(ctx: CallContext, payload: bytes) -> bytes:
        return _U64.pack(ctx.connection_id)

    reg.register(1, sum_, name="sum")
    reg.register(2, echo, name="echo")
    reg.register(3, boom, name="boom")
    reg.register(4, note, one_way=4 in DEMO_ONE_WAY, name="note")
    reg.register(5, sleep, name="sleep")
    reg.register(6, stream_echo, name="stream_echo")
    reg.register(7, conn_id, name="conn_id")
    return reg


async def serve_reference(nursery: trio.Nursery, config: ServerConfig | None, workdir: Path) -> RunningServer:
    """refwire's Seastar RPC server with the demo verbs and the conformance verbs of
    specs/seastar-rpc/README.md §11 on 127.0.0.1 (a free port), started in ``nursery`` (the pytest
    fixture ``seastar_server``; :mod:`refwire.reference`): ``.server`` (stats); ``.sink`` is an empty
    file and ``.events`` stays empty (RPC calls are no events)."""
    from ..drivers import parse_hostport
    from ..reference import RunningServer
    from .conform_verbs import add_conformance_verbs
    from .server import SeastarServer

    sink = workdir / "unused.jsonl"
    sink.touch()
    registry = add_conformance_verbs(demo_registry())
    server = SeastarServer(registry) if config is None else SeastarServer(registry, config=config)
    addresses = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    running = RunningServer(*parse_hostport(addresses[0]), sink)
    running.server = server
    return running
