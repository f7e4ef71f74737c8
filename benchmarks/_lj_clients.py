"""Lumberjack clients under test, sending EVENTS events and waiting for every ack.

    python _lj_clients.py refwire|pylogbeat|pylogbeat-nodelay PORT EVENTS WINDOW [--level 3]

The events are built as dicts before the clock starts; serialisation,
framing, compression, I/O and waiting for the acks are timed, from the connect
to the last ack.  Reports wall and CPU (``time.process_time``) seconds.

* refwire: ``LumberjackClient.connect_tcp`` (connects lazily in the first
  ``send``), ``ClientConfig(window_size=WINDOW, compression_level=--level)``,
  one ``await client.send(events)``.  ``trio.run`` start-up is not timed.
* pylogbeat: ``PyLogBeatClient`` as shipped, one ``send()`` per WINDOW events on
  one connection (its zlib level is fixed at the default, 6; ``--level`` is
  ignored).  It does not set ``TCP_NODELAY`` and writes ``W`` and ``C`` in
  separate ``send()`` calls.
* pylogbeat-nodelay: the same, with ``TCP_NODELAY`` set right after its
  ``connect()`` (a diagnostic, not the package as shipped).
"""

from __future__ import annotations

import argparse
import socket
import time
from typing import Any

from _lj_common import HOST, fail, make_events, report


def run_refwire(port: int, events: list[dict[str, Any]], window: int, level: int) -> dict[str, Any]:
    import trio

    from refwire.lumberjack.client import ClientConfig, LumberjackClient

    out: dict[str, Any] = {}

    async def main() -> None:
        client = LumberjackClient.connect_tcp(
            HOST, port, config=ClientConfig(window_size=window, compression_level=level, max_attempts=1)
        )
        c0, t0 = time.process_time(), time.perf_counter()
        await client.send(events)
        t1, c1 = time.perf_counter(), time.process_time()
        await client.aclose()
        out.update(wall_s=t1 - t0, cpu_s=c1 - c0, events=client.stats["events_acked"], stats=client.stats)

    trio.run(main)
    return out


def run_pylogbeat(port: int, events: list[dict[str, Any]], window: int, nodelay: bool) -> dict[str, Any]:
    from pylogbeat import PyLogBeatClient

    class NoDelayClient(PyLogBeatClient):  # type: ignore[misc]
        def _create_and_connect_socket(self) -> None:
            super()._create_and_connect_socket()
            self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    cls = NoDelayClient if nodelay else PyLogBeatClient
    client = cls(HOST, port, timeout=30)
    n = len(events)
    c0, t0 = time.process_time(), time.perf_counter()
    client.connect()
    for i in range(0, n, window):
        client.send(events[i : i + window])
    t1, c1 = time.perf_counter(), time.process_time()
    acked = client._last_ack
    client.close()
    return {"wall_s": t1 - t0, "cpu_s": c1 - c0, "events": acked if acked == n else -acked}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["refwire", "pylogbeat", "pylogbeat-nodelay"])
    ap.add_argument("port", type=int)
    ap.add_argument("events", type=int)
    ap.add_argument("window", type=int)
    ap.add_argument("--level", type=int, default=3)
    args = ap.parse_args()
    events = make_events(args.events)
    if args.kind == "refwire":
        result = run_refwire(args.port, events, args.window, args.level)
    else:
        result = run_pylogbeat(args.port, events, args.window, args.kind == "pylogbeat-nodelay")
    if result["events"] != args.events:
        fail(f"{args.kind}: {result['events']} of {args.events} events acked")
    report({"client": args.kind, **result})


if __name__ == "__main__":
    main()
