"""The proxy's memory stays bounded: a direction holds at most one incomplete
frame (``max_frame_size``), the frame a ``delay`` or ``latency`` is holding, and
``RELAY_QUEUE`` chunks read ahead; past that it stops reading and TCP pushes
back on the sender (measured with tracemalloc, not RSS)."""

from __future__ import annotations

import gc
import io
import tracemalloc
from typing import Any

import pytest
import trio

from refwire.chaos import open_chaos
from refwire.chaos.proxy import RELAY_QUEUE
from refwire.chaos.rules import parse_schedule

pytestmark = pytest.mark.timeout(60)

FRAME = 60 * 1024  # TANK frames of 60 KiB: the observer cuts them by their header (specs/tank/README.md §2)
LIMIT = 1 << 20  # --max-frame-size for these runs


def _frame() -> bytes:
    return bytes([0x01]) + (FRAME - 5).to_bytes(4, "little") + b"\x00" * (FRAME - 5)


async def _flood(schedule: Any, seconds: float) -> tuple[int, int]:
    """A sender that writes TANK frames as fast as it can for ``seconds`` through the
    proxy to an upstream that accepts and never reads; (bytes the sender got out,
    bytes the process held at the end, after a GC)."""
    sent = 0
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        accepted: list[trio.SocketStream] = []

        async def never_read(stream: trio.SocketStream) -> None:
            accepted.append(stream)
            await trio.sleep_forever()

        nursery.start_soon(trio.serve_listeners, never_read, listeners)
        upstream = ("127.0.0.1", listeners[0].socket.getsockname()[1])
        async with open_chaos("tank", upstream=upstream, schedule=schedule, record=io.StringIO(), max_frame_size=LIMIT) as proxy:
            host, port = proxy.addresses[0].rsplit(":", 1)
            client = await trio.open_tcp_stream(host, int(port))
            data = _frame() * 16
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                with trio.move_on_after(seconds):
                    while True:
                        await client.send_all(data)
                        sent += len(data)
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            await trio.aclose_forcefully(client)
        nursery.cancel_scope.cancel()
    return sent, held


@pytest.mark.parametrize(
    "toxic",
    [None, {"type": "latency", "stream": "upstream", "attributes": {"latency": 300}}],
    ids=["upstream-never-reads", "latency-300ms"],
)
async def test_a_sender_faster_than_the_upstream_is_pushed_back(toxic: dict[str, Any] | None) -> None:
    schedule = parse_schedule({"seed": 1, "toxic": [toxic] if toxic else []}, "tank")
    with trio.fail_after(30):
        sent, held = await _flood(schedule, 2.0)
    bound = LIMIT + (RELAY_QUEUE + 2) * 65536 + 2 * FRAME * 16
    print(
        f"sent {sent >> 20} MiB towards an upstream that never reads; the proxy held {held / 1024:.0f} KiB (bound {bound >> 10} KiB)"
    )
    assert held < bound, f"{held >> 10} KiB held after {sent >> 20} MiB were sent"
    assert sent < 64 << 20  # the sender was stopped: only kernel buffers and the bound got through
