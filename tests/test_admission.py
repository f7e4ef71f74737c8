"""The server-wide memory budget (``--server-memory``, :mod:`refwire.admission`), in virtual time.

* :class:`MemoryPool` gives bytes first come first served: a request that does not fit
  holds back every request behind it, and a cancelled waiter takes nothing.
* :func:`fit_connection_memory` lowers the per-connection budget so that one connection's
  charge fits, at the line and one past it.
* Through a real :class:`~refwire.lumberjack.LumberjackServer` over in-memory streams: a
  connection that finds the pool spent waits with its bytes unread by the machine (nothing
  is decoded, its reads pause), is not timed out meanwhile (batch, frame and idle timeouts
  do not count the pause), and is served once the holder gives its charge back; a holder
  that stalls gives it back at its own frame timeout.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from refwire.admission import MemoryPool, ServerBudget, connection_charge, fit_connection_memory
from refwire.lumberjack.events import Batch
from refwire.lumberjack.frames import DEFAULT_LIMITS, Ack, JsonFrame, Window
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer, ServerConfig

MiB = 1 << 20


# -- the pool ---------------------------------------------------------------------------------
async def test_the_pool_serves_first_come_first_served() -> None:
    pool = MemoryPool(10)
    order: list[str] = []
    await pool.acquire(6)

    async def take(name: str, n: int) -> None:
        await pool.acquire(n)
        order.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "big", 6)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, "small", 1)  # 4 bytes are free, but it came after "big"
        await trio.testing.wait_all_tasks_blocked()
        assert order == [] and pool.waiting == 2 and pool.in_use == 6
        pool.release(2)  # 6 free: the head fits, and takes them all
        await trio.testing.wait_all_tasks_blocked()
        assert order == ["big"] and pool.waiting == 1 and pool.in_use == 10
        pool.release(4)
    assert order == ["big", "small"]
    assert pool.in_use == 7 and pool.waiting == 0 and pool.waited == 2


async def test_a_cancelled_waiter_takes_nothing_and_lets_the_next_through() -> None:
    pool = MemoryPool(10)
    await pool.acquire(8)
    got: list[int] = []
    head = trio.CancelScope()

    async def take(n: int, scope: trio.CancelScope | None = None) -> None:
        with scope or trio.CancelScope():
            await pool.acquire(n)
            got.append(n)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, 5, head)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and pool.waiting == 2  # 2 fits, but waits behind 5
        head.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert got == [2]
    assert pool.in_use == 10 and pool.waiting == 0


async def test_a_request_larger_than_the_pool_is_an_error_not_a_wait() -> None:
    pool = MemoryPool(10)
    await pool.acquire(10)
    pool.release(10)
    with pytest.raises(ValueError, match="11 bytes can never fit in a pool of 10"):
        await pool.acquire(11)
    with pytest.raises(ValueError, match="giving back 1 bytes but only 0 are taken"):
        pool.release(1)
    with pytest.raises(ValueError, match="positive capacity"):
        MemoryPool(0)


def test_the_connection_budget_is_lowered_to_fit_the_server_budget() -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, max_connection_memory=16 * MiB)
    assert connection_charge(limits) == 24 * MiB
    at_line = fit_connection_memory(attrs.evolve(limits, max_server_memory=24 * MiB))
    assert at_line.max_connection_memory == 16 * MiB and at_line.max_server_memory == 24 * MiB
    one_below = fit_connection_memory(attrs.evolve(limits, max_server_memory=24 * MiB - 1))
    assert one_below.max_connection_memory == (24 * MiB - 1) * 2 // 3 < 16 * MiB
    assert connection_charge(one_below) <= 24 * MiB - 1
    default = fit_connection_memory(limits)  # 0: half of physical memory
    assert default.max_server_memory > 0 and default.max_connection_memory == 16 * MiB


def test_a_server_budget_below_one_connection_refuses_frames_by_the_connection_limit() -> None:
    """A budget smaller than one connection's charge lowers ``max_connection_memory``: a frame
    above its quarter is refused at its length field, naming ``max_connection_memory``."""
    from refwire.errors import RemoteLimitExceeded
    from refwire.lumberjack import ServerConnection

    budget = ServerBudget(attrs.evolve(DEFAULT_LIMITS, max_server_memory=6 * MiB))
    assert budget.limits.max_connection_memory == 4 * MiB and budget.charge == 6 * MiB
    conn = ServerConnection(limits=budget.limits, now=0.0)
    conn.receive_data(Window(1).encode() + JsonFrame(1, b"{}").encode()[:6] + (MiB + 1).to_bytes(4, "big"), now=0.0)
    with pytest.raises(RemoteLimitExceeded, match="max_connection_memory") as info:
        for _ in range(3):
            conn.next_event()
    assert info.value.field == "len" and info.value.offset == 12


# -- through the Lumberjack server, in virtual time -----------------------------------------------
def _window(first: int, n: int) -> bytes:
    return Window(n).encode() + b"".join(JsonFrame(first + i, b'{"m":"%d"}' % (first + i)).encode() for i in range(n))


class _Peer:
    """One client connection to the server, over an in-memory stream pair."""

    def __init__(self, server: LumberjackServer, nursery: trio.Nursery) -> None:
        self.client, server_side = trio.testing.memory_stream_pair()
        nursery.start_soon(server.handle_stream, server_side)
        self.got = b""

    async def read_for(self, seconds: float) -> bytes:
        with trio.move_on_after(seconds):
            while True:
                data = await self.client.receive_some(65536)
                if not data:
                    break
                self.got += data
        return self.got


def _server(batches: list[tuple[int, list[int]]], *, server_memory: int) -> LumberjackServer:
    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        batches.append((info.id, list(batch.seqs)))

    limits = attrs.evolve(DEFAULT_LIMITS, max_connection_memory=16 * MiB, max_server_memory=server_memory)
    config = ServerConfig(limits=limits, batch_timeout=30.0, frame_timeout=30.0, idle_timeout=20.0, keepalive_interval=None)
    return LumberjackServer(handler, config=config)


async def test_a_paused_connection_is_not_timed_out_and_is_served_once_the_holder_is_done(
    autojump_clock: trio.testing.MockClock,
) -> None:
    batches: list[tuple[int, list[int]]] = []
    server = _server(batches, server_memory=24 * MiB)  # one connection's charge: one busy at a time
    assert server.budget.pool.capacity == 24 * MiB
    async with trio.open_nursery() as nursery:
        holder = _Peer(server, nursery)
        await holder.client.send_all(_window(1, 3)[:-5])  # W 3, two events and most of the third
        await trio.testing.wait_all_tasks_blocked()
        assert server.budget.pool.in_use == 24 * MiB

        waiter = _Peer(server, nursery)
        await waiter.client.send_all(_window(1, 2))
        await trio.sleep(25)  # less than the holder's frame timeout, more than the idle timeout (20 s): the waiter waits
        assert server.budget.pool.waiting == 1 and batches == []
        await holder.client.send_all(_window(1, 3)[-5:])  # the holder finishes its window
        assert Ack(3).encode() in await holder.read_for(1)
        # the holder's batch is acked and it holds nothing: the waiter is admitted
        assert Ack(2).encode() in await waiter.read_for(1)
        assert batches == [(1, [1, 2, 3]), (2, [1, 2])]

        # now the waiter holds nothing and the holder waits a long time with a window that
        # the other connection blocks: 100 s, more than every timeout of the waiting one
        await waiter.client.send_all(_window(3, 2)[:-3])
        await trio.testing.wait_all_tasks_blocked()
        await holder.client.send_all(_window(4, 1))
        await trio.sleep(100)  # the frame timeout of the connection that holds (30 s) passes
        # the stalled holder was closed at its frame timeout, and gave its charge back
        assert await waiter.read_for(1) == Ack(2).encode()  # closed: nothing more but EOF
        assert Ack(4).encode() in await holder.read_for(1)  # served, not timed out
        assert batches[-1] == (1, [4])
        nursery.cancel_scope.cancel()
    assert server.budget.pool.in_use == 0 and server.budget.pool.waiting == 0
    assert server.budget.pool.longest_wait >= 29


async def test_connections_that_hold_nothing_hold_no_budget(autojump_clock: trio.testing.MockClock) -> None:
    """Idle connections between windows do not keep a charge: three connections take turns
    through a pool that has room for one, each served in turn."""
    batches: list[tuple[int, list[int]]] = []
    server = _server(batches, server_memory=24 * MiB)
    async with trio.open_nursery() as nursery:
        peers = [_Peer(server, nursery) for _ in range(3)]
        for round_ in range(3):
            for peer in peers:
                await peer.client.send_all(_window(round_ + 1, 1))
            for peer in peers:
                assert Ack(round_ + 1).encode() in await peer.read_for(1)
        assert server.budget.pool.in_use == 0
        nursery.cancel_scope.cancel()
    assert len(batches) == 9
