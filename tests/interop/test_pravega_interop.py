"""The real Pravega client (PyPI ``pravega==0.3.8``: Rust core, wire v15) against
refwire's segment store and minimal controller, on loopback.

The client retries forever when something is wrong, so it runs in a
subprocess under a hard deadline and is killed on the way out.  A missing
client fails these tests when ``CI`` is set and skips them otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from support.pravega_peer import run_peer

from refwire.pravega.client import parse_events
from refwire.pravega.controller import PravegaController
from refwire.pravega.server import SegmentStoreServer

pytestmark = pytest.mark.interop



@asynccontextmanager
async def pravega(tmp: Path | None = None) -> AsyncIterator[tuple[SegmentStoreServer, PravegaController, str]]:
    server = SegmentStoreServer.open_dir(tmp) if tmp else SegmentStoreServer()
    async with trio.open_nursery() as nursery:
        store_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
        ctl_l = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(server.serve, store_l)
        ctl = PravegaController(server.admin, ("127.0.0.1", store_l[0].socket.getsockname()[1]))
        await nursery.start(ctl.serve, ctl_l)
        try:
            yield server, ctl, f"tcp://127.0.0.1:{ctl_l[0].socket.getsockname()[1]}"
        finally:
            with trio.move_on_after(5):
                await ctl.shutdown(grace=1)
                await server.shutdown(grace=1)
            nursery.cancel_scope.cancel()


@pytest.mark.usefixtures("pravega_client")
async def test_real_client_writes_1000_events_and_reads_them_back_in_order() -> None:
    async with pravega() as (server, ctl, uri):
        steps = {r["step"]: r for r in await run_peer(uri, "events", 1000)}
        seg = server.store.segments["sc/st/0.#epoch.0"]
        stored, used = parse_events(bytes(seg.data))
    assert steps["scope"] == {"step": "scope", "created": True, "again": False}
    assert steps["stream"]["created"] is True
    assert steps["read"]["n"] == 1000 and steps["read"]["in_order"] is True, steps["read"]
    # exactly once, in order, in the segment itself
    assert used == len(seg.data)
    assert [p for _, p in stored] == [f"event {i}".encode() for i in range(1000)]
    # the reader group lives in a table segment the client created through the wire
    assert "sc/rg1_kvtable/0.#epoch.0" in server.store.segments
    assert {"createScope", "createStream", "getCurrentSegments", "getURI"} <= set(ctl.calls)


@pytest.mark.usefixtures("pravega_client")
async def test_real_client_routing_keys_over_three_segments() -> None:
    async with pravega() as (server, _ctl, uri):
        steps = {r["step"]: r for r in await run_peer(uri, "keyed", 300)}
        counts = [len(parse_events(bytes(server.store.segments[f"sc/keyed/{i}.#epoch.0"].data))[0]) for i in range(3)]
    assert steps["read"] == {"step": "read", "n": 300, "distinct": 300, "keys": 5, "per_key_in_order": True}
    assert sum(counts) == 300


@pytest.mark.usefixtures("pravega_client")
async def test_real_client_byte_stream(tmp_path: Path) -> None:
    async with pravega(tmp_path) as (server, _ctl, uri):
        steps = {r["step"]: r for r in await run_peer(uri, "bytes")}
        seg = server.store.segments["sc/bst/0.#epoch.0"]
        assert bytes(seg.data) == bytes(range(256)) * 400  # raw bytes, no Event framing
    assert steps["bytes"] == {"step": "bytes", "tail": 102400, "equal": True, "seek_ok": True}
    # the directory-backed store keeps what it acked
    again = SegmentStoreServer.open_dir(tmp_path)
    assert again.store.segments["sc/bst/0.#epoch.0"].length == 102400
