"""Send N events to a Lumberjack v2 server with timbersnake's client (PyPI,
0.1.0): one ``Client.send()`` (= one connection) per 3 events.

    python timbersnake_send.py HOST PORT N [--tls-ca PEM] [--timeout S]

Event i is ``{"n": i, "message": "timbersnake event i", "peer": "timbersnake"}``.
Exit 0 when every ``send()`` returned; prints one JSON summary line.

timbersnake client quirks (read in timbersnake/client.py; specs/lumberjack/README.md §7):

* ``send()`` opens a NEW connection, writes ``C( 2W 3, 2J seq 0, 2J seq 1, ... )``:
  the window frame is hard-coded to **3** and placed **inside** the ``C``
  (zlib level -1 = 6); sequence numbers are 0..n-1 per ``send()``;
* it then reads exactly ONE 6-byte ack, of any value, and calls that success,
  and closes.  So only ``send()``s of exactly 3 events are delivered correctly
  by a real server: with more, the server (Logstash, refwire) takes the first 3
  as the window and the rest are lost or rejected while the client still
  "succeeds"; with fewer, the window never completes and the client waits for
  an ack that never comes.  Hence sends of 3 and N a multiple of 3 -- anything
  else is refused here rather than silently losing events;
* ``compression_level=0`` would send ``W3`` + plain ``J``s (not used here);
* the v1 encoder raises ``NotImplementedError``: v2 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time

try:
    from timbersnake.client import Client
except ImportError as exc:  # pragma: no cover - reported to the test
    print(f"timbersnake is not installed: {exc}", file=sys.stderr)
    sys.exit(3)

#: events per send(): the only size that matches timbersnake's hard-coded ``W 3``.
BATCH = 3


async def run(args: argparse.Namespace) -> dict[str, object]:
    ctx = None
    if args.tls_ca:
        ctx = ssl.create_default_context(cafile=args.tls_ca)
    client = Client(args.host, args.port, ssl=ctx)  # version b"2", compression -1
    sends = 0
    for i in range(0, args.count, BATCH):
        events = [{"n": j, "message": f"timbersnake event {j}", "peer": "timbersnake"} for j in range(i, i + BATCH)]
        # send() waits for one ack with no timeout of its own.
        await asyncio.wait_for(client.send(events), args.timeout)
        sends += 1
    return {"sends": sends}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("count", type=int)
    ap.add_argument("--tls-ca", help="PEM of the CA that signed the server certificate; enables TLS")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per send()")
    args = ap.parse_args()
    if args.count % BATCH:
        print(f"timbersnake's client announces W {BATCH} in every send(): N must be a multiple of {BATCH}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    try:
        res = asyncio.run(run(args))
    except Exception as exc:
        print(json.dumps({"ok": False, "error": repr(exc)}))
        return 1
    print(json.dumps({"ok": True, "events": args.count, **res, "seconds": round(time.monotonic() - t0, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
