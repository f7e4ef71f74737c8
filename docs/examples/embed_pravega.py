"""A Pravega segment store kept in a directory, the exactly-once EventWriter,
and a reader -- across a restart of the store."""

import tempfile

import trio

from refwire.pravega.client import EventWriter, PravegaConnection, SegmentReader, create_segment
from refwire.pravega.server import SegmentStoreServer

SEGMENT = "sc/st/0.#epoch.0"  # scope/stream/segment, as the controller names it


async def run_store(data_dir, work):
    """Start a store on ``data_dir``, run ``work(port)``, stop the store."""
    store = SegmentStoreServer.open_dir(data_dir)  # SegmentStoreServer() keeps everything in memory
    async with trio.open_nursery() as nursery:
        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        await nursery.start(store.serve, [listener])
        await work(listener.socket.getsockname()[1])
        await store.shutdown()


async def write(port):
    await create_segment("127.0.0.1", port, SEGMENT)
    async with EventWriter("127.0.0.1", port, SEGMENT) as writer:  # reconnects and resends as needed
        await writer.write([f"event {i}".encode() for i in range(100)])  # returns once durable


async def read(port):
    conn = await PravegaConnection.connect("127.0.0.1", port)
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)  # the connection's pump
        events = [payload async for _offset, payload in SegmentReader(conn, SEGMENT).events(until_tail=True)]
        nursery.cancel_scope.cancel()
    print(len(events), "events after the restart; the last:", events[-1])
    assert events == [f"event {i}".encode() for i in range(100)]


async def main():
    with tempfile.TemporaryDirectory() as data_dir:
        await run_store(data_dir, write)
        await run_store(data_dir, read)  # a new store process would read the same log


trio.run(main)
