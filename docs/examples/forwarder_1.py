"""Step 1 of the embedding tutorial: a trio app that receives Lumberjack events,
and a client that sends it some, in one program."""

import trio

from refwire.lumberjack.client import LumberjackClient
from refwire.lumberjack.server import LumberjackServer


async def handler(batch, info):
    # Called once per window; the client gets its ack when this returns.
    print(f"{info.peer}: {len(batch)} events, seqs {batch.seqs[0]}..{batch.seqs[-1]}")
    for doc in batch.docs:  # the parsed JSON objects
        print("  ", doc)


async def main():
    server = LumberjackServer(handler)
    async with trio.open_nursery() as nursery:
        # start() returns once the server listens; port 0 picks a free port
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        async with LumberjackClient.connect_tcp(host, int(port)) as client:
            await client.send([{"message": f"event {i}"} for i in range(3)])  # returns when acked
        await server.shutdown(grace=1.0)  # stop listening, let open batches finish; serve_tcp returns


trio.run(main)
