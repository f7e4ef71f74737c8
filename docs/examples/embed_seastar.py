"""A Seastar RPC server with two verbs, and a client calling them over LZ4."""

import struct

import trio

from refwire.seastar_rpc.client import ClientConfig, SeastarClient
from refwire.seastar_rpc.errors import RemoteVerbError
from refwire.seastar_rpc.registry import VerbRegistry
from refwire.seastar_rpc.server import SeastarServer, ServerConfig

registry = VerbRegistry()  # which verbs exist is the application's choice, not the wire's


async def add(ctx, payload):  # ctx: a CallContext (connection, group, stream, ...)
    a, b = struct.unpack("<ii", payload)
    return struct.pack("<i", a + b)  # returning sends the reply


async def fail(ctx, payload):
    raise ValueError("no such thing")  # a USER exception carrying str(exc)


registry.register(1, add, name="add")
registry.register(2, fail)


async def main():
    server = SeastarServer(registry, config=ServerConfig(compressors=("LZ4",)))
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        async with SeastarClient.connect_tcp(host, int(port), config=ClientConfig(compressors=("LZ4",))) as client:
            print("compressor:", client.compressor)  # LZ4, as negotiated
            reply = await client.call(1, struct.pack("<ii", 2, 3), timeout=5)
            print("2 + 3 =", struct.unpack("<i", reply)[0])
            try:
                await client.call(2)
            except RemoteVerbError as err:
                print("verb 2 failed:", err.message)  # b'no such thing'
        await server.shutdown(0.5)


trio.run(main)
