"""The conformance verb set (specs/seastar-rpc/README.md §11).

A server under ``refwire conform seastar-rpc --server`` registers these four
verbs; their numbers (100-103) do not collide with refwire's demo verbs (1-7).
``refwire serve seastar-rpc`` serves them alongside the demo verbs.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .registry import VerbRegistry
    from .server import CallContext

__all__ = ["CONFORM_VERBS", "add_conformance_verbs"]

#: name -> verb number (specs/seastar-rpc/README.md §11).
CONFORM_VERBS: Final = {"echo": 100, "sleep_ms": 101, "raise": 102, "size": 103}

_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")


def add_conformance_verbs(reg: VerbRegistry) -> VerbRegistry:
    """Register echo, sleep_ms, raise and size on ``reg`` (returned)."""
    import trio

    from .errors import BadArguments

    async def echo(ctx: CallContext, payload: bytes) -> bytes:
        return payload

    async def sleep_ms(ctx: CallContext, payload: bytes) -> bytes:
        if len(payload) != 4:
            raise BadArguments(f"sleep_ms takes a u32, got {len(payload)} bytes")
        await trio.sleep(_U32.unpack(payload)[0] / 1000)
        return payload

    async def raise_(ctx: CallContext, payload: bytes) -> bytes:
        raise RuntimeError(payload.decode("utf-8", "replace"))

    async def size(ctx: CallContext, payload: bytes) -> bytes:
        return _U64.pack(len(payload))

    reg.register(CONFORM_VERBS["echo"], echo, name="conform.echo")
    reg.register(CONFORM_VERBS["sleep_ms"], sleep_ms, name="conform.sleep_ms")
    reg.register(CONFORM_VERBS["raise"], raise_, name="conform.raise")
    reg.register(CONFORM_VERBS["size"], size, name="conform.size")
    return reg
