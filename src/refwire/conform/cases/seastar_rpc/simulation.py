"""The §12 contract client (refwire's own client as a client-case testee) and
refwire's own server, the testees of ``refwire conform seastar-rpc --sim``.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from ._common import ECHO


def contract_payloads(values: Mapping[str, str]) -> list[bytes]:
    """The payloads of the §12 contract: ``{events}`` payloads of 1-64 bytes
    drawn from ``random.Random({seed})``."""
    rng = random.Random(int(values["seed"]))
    return [rng.randbytes(rng.randrange(1, 65)) for _ in range(int(values["events"]))]


async def contract_client(
    connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str], *, fault: str = ""
) -> int:
    """refwire's own client as a client-case testee (``specs/seastar-rpc/README.md §12``):
    every echo call in flight at once, 5 s each; 0 when every reply matched its
    payload, 1 otherwise.  ``fault`` makes it a deliberately broken client (tests)."""
    from ....seastar_rpc.client import ClientConfig, SeastarClient

    payloads = contract_payloads(values)
    got: list[bytes | None] = [None] * len(payloads)
    arrivals: list[bytes] = []
    timeout = 0.05 if fault == "short-timeout" else 5.0
    client = SeastarClient(connect, config=ClientConfig(connect_timeout=5.0, negotiation_timeout=5.0))

    async def one(i: int, p: bytes) -> None:
        try:
            got[i] = await client.call(ECHO, p, timeout=timeout)
            arrivals.append(got[i] or b"")
        except Exception as exc:
            if fault == "exception-is-success" and type(exc).__name__ == "RemoteVerbError":
                got[i] = p
            elif fault == "exit0-on-close" and type(exc).__name__ != "RemoteVerbError":
                got[i] = p

    try:
        async with client:
            async with trio.open_nursery() as nursery:
                for i, p in enumerate(payloads):
                    nursery.start_soon(one, i, p)
    except Exception:
        return 0 if fault == "exit0-on-close" else 1
    if fault == "in-order":
        return 0 if arrivals == payloads else 1
    if fault == "no-compare":
        return 0 if all(g is not None for g in got) else 1
    return 0 if got == payloads else 1


async def serve_for_simulation(listener: Any, sink: str, run_id: str = "") -> None:
    """refwire's own server (demo + conformance verbs) on ``listener`` (``--sim``)."""
    from ....seastar_rpc.conform_verbs import add_conformance_verbs
    from ....seastar_rpc.demo import demo_registry
    from ....seastar_rpc.server import SeastarServer

    await SeastarServer(add_conformance_verbs(demo_registry())).serve([listener])


async def client_for_simulation(connect: Callable[[], Awaitable[trio.abc.Stream]], values: Mapping[str, str]) -> int:
    """The §12 contract client for ``--client --sim``."""
    return await contract_client(connect, values)
