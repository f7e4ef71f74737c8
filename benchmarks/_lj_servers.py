"""Lumberjack servers under test, each counting the events it parsed.

    python _lj_servers.py refwire|timbersnake --expect N [--no-validate] [--profile FILE]

Binds 127.0.0.1 port 0, prints ``PORT <n>``, serves until its stdin is closed
(or ``--max-seconds``), then prints ``RESULT <json>``: events counted, and the
CPU (``time.process_time``) and wall seconds from the first accepted
connection to the moment the ``N``-th event was counted.

* refwire: :class:`refwire.lumberjack.LumberjackServer` with a handler that
  adds ``len(batch)`` (the events stay in the columns they were decoded
  into); ``--events`` adds ``len(batch.events)`` instead, which builds a
  ``JsonFrame`` per event; ``--no-validate`` sets ``validate_json=False``.
* timbersnake: its ``Server`` on asyncio, served exactly as its own
  ``start_and_serve_forever`` does but on port 0.  It has no event callback, so
  the ``J`` parser it dispatches to inside ``C`` frames (``json_frame_str``,
  which ``json.loads`` every event) is wrapped by a closure that counts calls:
  one extra Python call per event.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import sys
import time
from typing import Any

from _lj_common import HOST, announce_port, report


class Counter:
    def __init__(self, expect: int, profile: str | None) -> None:
        self.expect = expect
        self.count = 0
        self.connections = 0
        self.t0_cpu: float | None = None
        self.t0_wall: float | None = None
        self.t1_cpu: float | None = None
        self.t1_wall: float | None = None
        # CPU time (not wall time): idle waits in epoll and preemption by other processes do not count.
        self.profiler = cProfile.Profile(time.process_time) if profile else None
        self.profile_path = profile

    def connected(self) -> None:
        self.connections += 1
        if self.t0_cpu is None:
            self.t0_cpu, self.t0_wall = time.process_time(), time.perf_counter()
            if self.profiler is not None:
                self.profiler.enable()

    def reached(self) -> None:
        """Call when ``count`` reaches ``expect``."""
        if self.t1_cpu is None:
            self.t1_cpu, self.t1_wall = time.process_time(), time.perf_counter()
            if self.profiler is not None:
                self.profiler.disable()

    def result(self, extra: dict[str, Any]) -> dict[str, Any]:
        if self.profiler is not None and self.profile_path:
            self.profiler.disable()
            self.profiler.dump_stats(self.profile_path)
        done = self.t1_cpu is not None and self.t0_cpu is not None
        return {
            "events": self.count,
            "connections": self.connections,
            "cpu_s": (self.t1_cpu - self.t0_cpu) if done else None,  # type: ignore[operator]
            "wall_s": (self.t1_wall - self.t0_wall) if done else None,  # type: ignore[operator]
            **extra,
        }


def run_refwire(args: argparse.Namespace) -> None:
    import trio

    from refwire.lumberjack.server import LumberjackServer, ServerConfig

    st = Counter(args.expect, args.profile)
    expect = args.expect

    frames = args.events

    async def handler(batch: Any, info: Any) -> None:
        st.count += len(batch.events) if frames else len(batch)
        if st.count >= expect:
            st.reached()

    class CountingServer(LumberjackServer):
        async def handle_stream(self, stream: Any) -> None:
            st.connected()
            await super().handle_stream(stream)

    server = CountingServer(handler, config=ServerConfig(validate_json=not args.no_validate))

    async def wait_stdin_eof() -> None:
        fd = sys.stdin.fileno()
        while True:
            await trio.lowlevel.wait_readable(fd)
            if not os.read(fd, 4096):
                return

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            addresses = await nursery.start(server.serve_tcp, HOST, 0)
            announce_port(int(addresses[0].rsplit(":", 1)[1]))
            with trio.move_on_after(args.max_seconds):
                await wait_stdin_eof()
            nursery.cancel_scope.cancel()

    trio.run(main)
    report(st.result({"server": "refwire", "validate_json": not args.no_validate, "stats": server.stats}))


def run_timbersnake(args: argparse.Namespace) -> None:
    import asyncio

    from timbersnake.server import Server

    st = Counter(args.expect, args.profile)
    expect = args.expect

    class CountingServer(Server):
        def __init__(self) -> None:
            with contextlib.redirect_stdout(io.StringIO()):  # its __init__ prints a dict
                super().__init__(HOST, 0)
            parse_j = self.frame_type_funcs_str["J"]

            def counted_json_frame_str(s: bytes, pos: int = 0) -> tuple[int, int]:
                r = parse_j(s, pos)
                st.count += 1
                if st.count >= expect:
                    st.reached()
                return r  # type: ignore[no-any-return]

            self.frame_type_funcs_str["J"] = counted_json_frame_str

        async def handle_client_callback(self, reader: Any, writer: Any) -> None:
            st.connected()
            await super().handle_client_callback(reader, writer)

    server = CountingServer()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        eof = asyncio.Event()
        fd = sys.stdin.fileno()

        def on_stdin() -> None:
            if not os.read(fd, 4096):
                loop.remove_reader(fd)
                eof.set()

        loop.add_reader(fd, on_stdin)
        srv = await asyncio.start_server(server.handle_client_callback, server.endpoint, server.port, ssl=server.ssl)
        async with srv:
            announce_port(srv.sockets[0].getsockname()[1])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(eof.wait(), args.max_seconds)
            srv.close()

    asyncio.run(main())
    report(st.result({"server": "timbersnake"}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["refwire", "timbersnake"])
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--no-validate", action="store_true", help="refwire: validate_json=False")
    ap.add_argument("--events", action="store_true", help="refwire: the handler reads batch.events (builds the frames)")
    ap.add_argument("--profile", metavar="FILE", help="cProfile from the first connection to the last event")
    ap.add_argument("--max-seconds", type=float, default=300.0)
    args = ap.parse_args()
    (run_refwire if args.kind == "refwire" else run_timbersnake)(args)


if __name__ == "__main__":
    main()
