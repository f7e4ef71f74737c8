"""timbersnake's client (PyPI 0.1.0) as a ``refwire conform --client --exec`` testee:
ONE ``Client.send()`` of all EVENTS events, as an application would call it.

    python timbersnake_client.py HOST PORT EVENTS [TLS_CA]

Exit 0 when ``send()`` returned (timbersnake's idea of "acked"), 1 on an
error or after 10 s.  Its documented bugs (specs/lumberjack/README.md §7):
``W 3`` hard-coded inside the ``C``, seqs 0..n-1, one ack of any value read.
"""

from __future__ import annotations

import asyncio
import ssl
import sys

from timbersnake.client import Client


async def run(host: str, port: int, n: int, ca: str) -> None:
    ctx = ssl.create_default_context(cafile=ca) if ca else None
    client = Client(host, port, ssl=ctx)
    events = [{"message": f"conform event {i}", "n": i} for i in range(n)]
    await asyncio.wait_for(client.send(events), 10)


def main() -> int:
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ca = sys.argv[4] if len(sys.argv) > 4 else ""
    try:
        asyncio.run(run(host, port, n, ca))
    except Exception as exc:
        print(f"timbersnake send failed: {exc!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
