"""Run a connection machine over a trio stream with refwire.drivers.Pump, as
every refwire client and server does (here Lumberjack's server machine over a
memory stream)."""

import trio
import trio.testing

from refwire.drivers import Pump
from refwire.lumberjack import Accept, Batch, ClientConnection, ServerConnection


async def main():
    client_end, server_end = trio.testing.memory_stream_pair()   # or a TCP/TLS stream

    async def on_event(event):                                  # Batch, EmptyWindow, ConnectionClosed, ...
        if isinstance(event, Batch):
            print("got", len(event.events), "events")
            pump.send(Accept(event))                            # conn.send(Accept(event), now=...) + wake the writer

    pump = Pump(server_end, ServerConnection(), on_event)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump.run)                            # returns "eof", "reset", "stopped", ...
        client = ClientConnection()
        client.send_window([{"a": 1}, {"b": 2}], now=trio.current_time())
        await client_end.send_all(client.data_to_send())
        client.receive_data(await client_end.receive_some(), now=trio.current_time())
        print(client.next_event())                              # AckReceived(seq=2, newly=2, total=2, complete=True)
        await client_end.aclose()

trio.run(main)
