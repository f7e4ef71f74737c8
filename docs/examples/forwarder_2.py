"""Step 2 of the embedding tutorial: the app forwards each Lumberjack batch to a
TANK topic and acks the batch only once the broker has stored it."""

import orjson
import trio

from refwire.lumberjack.client import LumberjackClient
from refwire.lumberjack.server import LumberjackServer
from refwire.tank import Message
from refwire.tank.client import TankClient
from refwire.tank.server import TankBroker


async def main():
    broker = TankBroker()  # here in the same process; in production, any TANK broker
    [tank_listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
    tank_port = tank_listener.socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve, [tank_listener])
        async with TankClient.connect_tcp("127.0.0.1", tank_port) as tank:
            await tank.create_topic("logs", partitions=1)

            async def forward(batch, info):
                messages = [Message(orjson.dumps(doc), ts=0) for doc in batch.docs]
                result = await tank.produce("logs", 0, messages)
                if result.error:  # raising refuses the batch: the client resends it
                    raise RuntimeError(f"TANK refused the batch: error {result.error}")

            server = LumberjackServer(forward)
            [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
            host, port = address.rsplit(":", 1)
            async with LumberjackClient.connect_tcp(host, int(port)) as client:
                await client.send([{"message": f"event {i}"} for i in range(1000)])
            await server.shutdown(grace=1.0)

            data = await tank.consume("logs", 0, seq=1, fetch_size=1 << 20)
            print(len(data.messages), "messages in TANK; the last:", data.messages[-1].content)
        await broker.shutdown(0.5)


trio.run(main)
