"""A client testee for ``refwire conform seastar-rpc --client --exec``: refwire's
own Seastar client following the testee contract (specs/seastar-rpc/README.md §12),
or a deliberately broken one.

    python seastar_client.py HOST PORT EVENTS SEED [--fault NAME | --unsupported]
"""

from __future__ import annotations

import argparse
import sys

import trio

from refwire.conform.cases.seastar_rpc import contract_client


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("events")
    p.add_argument("seed")
    p.add_argument("--fault", default="")
    p.add_argument("--unsupported", action="store_true")
    a = p.parse_args()
    if a.unsupported:
        return 127

    async def connect() -> trio.abc.Stream:
        return await trio.open_tcp_stream(a.host, a.port)

    return trio.run(lambda: contract_client(connect, {"events": a.events, "seed": a.seed}, fault=a.fault))


if __name__ == "__main__":
    sys.exit(main())
