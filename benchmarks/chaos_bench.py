#!/usr/bin/env python3
# ruff: noqa: RUF001  (the output uses the multiplication sign on purpose)
"""The fault proxy's overhead with no rules, side by side in one run.

    python benchmarks/chaos_bench.py [--events 200000] [--reps 3] [--quick]

refwire's Lumberjack client sends ``--events`` events (windows of 2048, each a
``C`` frame) to refwire's server directly, and through ``refwire chaos
lumberjack`` (every frame decoded, matched against no rule, passed on), and
through it as a plain byte relay (protocol ``tcp``: no framing).  All three run
in one trio process; each is checked to deliver every event.  Prints events/s
and the ratio to the direct run (best of ``--reps``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import trio

from refwire.chaos import open_chaos
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.server import LumberjackServer

EVENTS_PER_WINDOW = 2048


async def _run(n: int, via: str | None) -> float:
    got = 0

    async def handler(batch: Any, info: Any) -> None:
        nonlocal got
        got += len(batch.events)

    server = LumberjackServer(handler)
    events = [{"message": f"event {i} " + "x" * 80} for i in range(n)]
    async with trio.open_nursery() as nursery:
        [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
        host, port = address.rsplit(":", 1)
        if via is None:
            t = await _send(host, int(port), events)
        else:
            async with open_chaos(via, upstream=(host, int(port))) as proxy:
                phost, pport = proxy.addresses[0].rsplit(":", 1)
                t = await _send(phost, int(pport), events)
        await server.shutdown(grace=1.0)
        nursery.cancel_scope.cancel()
    if got != n:
        print(f"FAILED: {got} of {n} events delivered ({via or 'direct'})", file=sys.stderr)
        sys.exit(1)
    return n / t


async def _send(host: str, port: int, events: list[dict[str, Any]]) -> float:
    config = ClientConfig(window_size=EVENTS_PER_WINDOW, compression_level=1)
    t0 = time.perf_counter()
    async with LumberjackClient.connect_tcp(host, port, config=config) as client:
        await client.send(events)
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="a small run that only checks the harness works")
    a = p.parse_args()
    n, reps = (20_000, 1) if a.quick else (a.events, a.reps)
    best: dict[str, float] = {}
    for via in (None, "lumberjack", "tcp"):  # warm up: imports, first connections
        trio.run(_run, 2 * EVENTS_PER_WINDOW, via)
    for _ in range(reps):
        for via in (None, "lumberjack", "tcp"):
            rate = trio.run(_run, n, via)
            key = via or "direct"
            best[key] = max(best.get(key, 0.0), rate)
    print(f"Lumberjack, {n} events in windows of {EVENTS_PER_WINDOW} (C frames), best of {reps}:")
    for key, label in (("direct", "direct"), ("lumberjack", "through refwire chaos (frames decoded)"), ("tcp", "through refwire chaos (byte relay)")):
        print(f"  {label:42s} {best[key]:>10,.0f} events/s   {best[key] / best['direct']:.2f}× direct")
    return 0


if __name__ == "__main__":
    sys.exit(main())
