"""A TANK broker and a client: create a topic, produce, and a long-polling consume."""

import trio

from refwire.tank import Message
from refwire.tank.client import TankClient
from refwire.tank.server import TankBroker


async def main():
    broker = TankBroker()  # in memory; TankBroker(DirectoryStorage(path)) keeps a log on disk
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve, listeners)
        async with TankClient.connect_tcp("127.0.0.1", port) as client:
            assert await client.create_topic("events", partitions=1) == 0  # 0: created
            result = await client.produce("events", 0, [Message(b"hello", ts=1), Message(b"world", ts=2)])
            assert result.error == 0
            data = await client.consume("events", 0, seq=1)
            print([(m.seq, m.content) for m in data.messages])  # [(1, b'hello'), (2, b'world')]

            async def produce_later():
                await trio.sleep(0.2)
                await client.produce("events", 0, [Message(b"late", ts=3)])

            nursery.start_soon(produce_later)
            data = await client.consume("events", 0, seq=3, max_wait=5)  # parks until a message arrives
            print([(m.seq, m.content) for m in data.messages])  # [(3, b'late')]
        await broker.shutdown(0.5)


trio.run(main)
