"""Faults between refwire's Lumberjack client and server, from Python: the proxy
of ``refwire chaos`` in a trio app, a rule for one block, and the decisions it took."""

import trio

from refwire.chaos.proxy import open_chaos
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.server import LumberjackServer


async def main():
    received = []

    async def handler(batch, info):
        received.extend(event.fields()["n"] for event in batch.events)

    server = LumberjackServer(handler)
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        async with open_chaos("lumberjack", upstream=(host, int(port)), check=True) as proxy:
            proxy_host, proxy_port = proxy.addresses[0].rsplit(":", 1)
            config = ClientConfig(window_size=10, ack_timeout=0.5, backoff_initial=0.05)
            # while the block runs: drop the second ack, once (count=1)
            async with proxy.rule(name="drop-an-ack", type="A", direction="s2c", nth=2, count=1, action="drop"):
                async with LumberjackClient.connect_tcp(proxy_host, int(proxy_port), config=config) as client:
                    await client.send([{"n": i} for i in range(30)])
            for d in proxy.decisions:
                if d["event"] == "action":
                    print(f"connection {d['conn']} {d['dir']} frame {d['frame']}: {d['rule']} {d['action']}s {d['type']} {d['fields']}")
            print("reconnects:", client.stats["reconnects"], "violations:", proxy.finish())
        print("delivered at least once:", sorted(set(received)) == list(range(30)), f"({len(received)} events for 30)")
        await server.shutdown(grace=1.0)


trio.run(main)
