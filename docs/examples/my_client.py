"""A Lumberjack client as a ``refwire conform --client`` testee.

Usage: my_client.py HOST PORT EVENTS.  It sends EVENTS distinct events and exits
0 only once it believes every one was acked, 1 when it gave up (the contract is
specs/lumberjack/README.md §9).  Here the client is refwire's own; yours takes
its place.
"""

import sys

import trio

from refwire.lumberjack.client import ClientConfig, LumberjackClient


async def main(host, port, count):
    config = ClientConfig(ack_timeout=5.0, max_attempts=3, backoff_initial=0.05)
    async with LumberjackClient.connect_tcp(host, port, config=config) as client:
        await client.send([{"message": f"event {i}"} for i in range(count)])


try:
    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
except Exception as exc:
    print("gave up:", exc, file=sys.stderr)
    sys.exit(1)
