"""A handler-less Lumberjack server: the application pulls batches when it is ready."""

import trio

from refwire.lumberjack.client import LumberjackClient
from refwire.lumberjack.server import LumberjackServer


async def main():
    server = LumberjackServer()  # no handler: batches wait, unacked (with keepalives), for batches()
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)

        async def ship():
            async with LumberjackClient.connect_tcp(host, int(port)) as client:
                await client.send([{"n": i} for i in range(10)])

        nursery.start_soon(ship)
        total = 0
        async with server.batches() as batches:
            async for batch, info in batches:  # a batch is acked once taken from here
                print("batch of", len(batch.events), "from connection", info.id)
                total += len(batch.events)
                if total == 10:
                    break
        print("pulled", total, "events")
        await server.shutdown(grace=5.0)


trio.run(main)
