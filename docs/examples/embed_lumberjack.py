"""A Lumberjack server with a handler, and a client, in one trio program."""

import trio

from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.server import LumberjackServer, ServerConfig


async def main():
    received = []

    async def handler(batch, info):
        # The batch is acked only after this returns: store it first.
        for event in batch.events:  # JsonFrame (v2) or DataFrame (v1)
            received.append(event.fields())
        print(f"connection {info.id} from {info.ip_address}: {len(batch.events)} events")

    server = LumberjackServer(handler, config=ServerConfig(keepalive_interval=5.0, ack_mode="last-seq"))
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)  # port 0: any free port
        host, port = address.rsplit(":", 1)
        config = ClientConfig(window_size=100, compression_level=3)
        async with LumberjackClient.connect_tcp(host, int(port), config=config) as client:
            await client.send([{"message": f"line {i}"} for i in range(250)])  # returns once all are acked
        await server.shutdown(grace=5.0)  # stops listening, lets open batches finish

    assert len(received) == 250 and received[-1] == {"message": "line 249"}
    print("acked and received:", len(received))


trio.run(main)
