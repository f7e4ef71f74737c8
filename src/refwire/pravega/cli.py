"""``refwire serve pravega``, ``refwire send pravega`` and ``refwire read pravega``."""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from pathlib import Path

import trio

from ..cliutil import (
    Commands,
    UsageError,
    add_connection_memory,
    add_frame_timeout,
    add_idle_timeout,
    frame_timeout,
    hostport,
    idle_timeout,
    max_connections,
    nonneg_float,
    open_listeners,
    positive_float,
    positive_int,
    stop_on_signal,
)
from ..drivers import listener_address
from ..logs import plural

__all__ = ["register"]

#: ``--timeout``'s default: seconds to wait for a connection, the Hello, a reply
#: (as :data:`refwire.pravega.client.DEFAULT_TIMEOUT`; not imported here, the
#: client modules load only when a command runs).
DEFAULT_TIMEOUT = 10.0


def register(cmds: Commands) -> None:
    """Add the Pravega subcommands."""
    s = cmds.serve.add_parser("pravega", help="Pravega segment store (+ a minimal controller for the real client)")
    s.add_argument(
        "--listen",
        type=hostport,
        default=("127.0.0.1", 6000),
        metavar="HOST:PORT",
        help="segment store address (default 127.0.0.1:6000; port 0 = any)",
    )
    s.add_argument(
        "--controller",
        type=hostport,
        default=("127.0.0.1", 9090),
        metavar="HOST:PORT",
        help="controller (gRPC) address (default 127.0.0.1:9090; port 0 = any)",
    )
    s.add_argument("--no-controller", action="store_true", help="serve the segment store only")
    s.add_argument(
        "--advertise",
        type=hostport,
        metavar="HOST:PORT",
        help="the segment-store address the controller gives clients (default: --listen's); e.g. a refwire chaos "
        "proxy in front of the store, so a real client's segment traffic goes through it",
    )
    s.add_argument(
        "--draft-listen",
        type=hostport,
        metavar="HOST:PORT",
        help="also serve the 2017 draft dialect on this address (same store)",
    )
    s.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep segments (and the controller's state) in DIR; survives restarts (default: in memory)",
    )
    s.add_argument(
        "--repair",
        action="store_true",
        help="start even when the log in --data-dir is damaged in its middle: move each damaged part aside "
        "(segments.log.damaged-OFFSET, never deleted), continue without it and log what was lost",
    )
    s.add_argument(
        "--tail-wait",
        type=nonneg_float,
        default=10.0,
        metavar="S",
        help="answer a read parked at the tail with an empty atTail read after S seconds (0 = wait forever, as Java; default 10)",
    )
    s.add_argument(
        "--max-parked-reads",
        type=positive_int,
        default=1000,
        metavar="N",
        help="reads one connection may have parked at the tail; one more answers its oldest at once (default 1000)",
    )
    add_connection_memory(s, " (both dialects): a frame (and the draft's block and partial message) may take an eighth of it, replies owed to the client a quarter (at most 16 MiB), reads parked at the tail an eighth (a held byte costs about 3x; data the store accepted is not counted)")
    s.add_argument("--stack-traces", action="store_true", help="fill serverStackTrace in error replies")
    add_frame_timeout(s, "; idle connections between frames stay open, as with the real server")
    add_idle_timeout(s, ", as the real server; both dialects")
    s.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        metavar="N",
        help="connections served at once; one more is closed at once (default 1024; 0 = no limit)",
    )
    s.set_defaults(func=_serve)

    w = cmds.send.add_parser("pravega", help="write events to a segment")
    w.add_argument("address", type=hostport, metavar="HOST:PORT", help="the segment store")
    w.add_argument("--segment", required=True, metavar="NAME", help="fully qualified segment, e.g. scope/stream/0.#epoch.0")
    w.add_argument("--create", action="store_true", help="create the segment first (no error if it exists)")
    w.add_argument("--count", type=positive_int, metavar="N", help="write N generated events instead of lines from stdin")
    w.add_argument(
        "--style",
        choices=("rust", "java"),
        default="rust",
        help="bare AppendBlockEnd (Rust client, default) or streamed AppendBlock blocks (Java client)",
    )
    w.add_argument(
        "--max-attempts",
        type=positive_int,
        default=10,
        metavar="N",
        help="give up after N failed connections in a row (default 10)",
    )
    w.add_argument(
        "--dialect",
        choices=("current", "draft-2017"),
        default="current",
        help="wire dialect (draft-2017: connection-offset blocks; the server needs --draft-listen)",
    )
    _add_timeout(w, "connecting, the server's Hello and (with --create) its reply; an append's ack gets --ack-timeout")
    w.add_argument(
        "--ack-timeout",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="reconnect when nothing is acked for S seconds while events are unacked (default 30)",
    )
    w.set_defaults(func=_send)

    if cmds.read is not None:
        r = cmds.read.add_parser("pravega", help="read events from a segment")
        r.add_argument("address", type=hostport, metavar="HOST:PORT", help="the segment store")
        r.add_argument("--segment", required=True, metavar="NAME", help="fully qualified segment, e.g. scope/stream/0.#epoch.0")
        r.add_argument("--offset", type=int, default=0, metavar="N", help="start at this byte offset (default 0)")
        r.add_argument(
            "--follow", action="store_true", help="keep waiting at the tail for new events (until interrupted or sealed)"
        )
        r.add_argument("--raw", action="store_true", help="print the bytes as they are instead of splitting Event frames")
        r.add_argument("--dialect", choices=("current", "draft-2017"), default="current", help="wire dialect")
        _add_timeout(r, "connecting, the server's Hello and each reply (with --follow a read waiting at the tail waits on)")
        r.set_defaults(func=_read)



def _add_timeout(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"give up after S seconds without an answer: {what} (default {DEFAULT_TIMEOUT:g})",
    )


async def _serve(args: argparse.Namespace) -> int:
    import attrs

    from .controller import PravegaController
    from .frames import DEFAULT_LIMITS
    from .server import SegmentStoreServer, ServerConfig

    config = ServerConfig(
        limits=attrs.evolve(DEFAULT_LIMITS, max_connection_memory=args.connection_memory, max_server_memory=args.server_memory),
        tail_wait=args.tail_wait or None,
        max_parked_reads=args.max_parked_reads,
        stack_traces=args.stack_traces,
        max_connections=max_connections(args),
        frame_timeout=frame_timeout(args),
        idle_timeout=idle_timeout(args),
    )
    data_dir = Path(args.data_dir) if args.data_dir else None
    if args.repair and not data_dir:
        raise UsageError("--repair needs --data-dir")
    server = (
        SegmentStoreServer.open_dir(data_dir, config=config, repair=args.repair) if data_dir else SegmentStoreServer(config=config)
    )
    host, port = args.listen
    listeners = await open_listeners(host, port)
    ctl_listeners = [] if args.no_controller else await open_listeners(*args.controller)
    draft_listeners = await open_listeners(*args.draft_listen) if args.draft_listen else []
    store_addr = args.advertise or listeners[0].socket.getsockname()[:2]
    controller = None
    if not args.no_controller:
        controller = PravegaController(
            server.admin, (str(store_addr[0]), int(store_addr[1])), state_path=data_dir / "controller.json" if data_dir else None
        )
    done = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(stop_on_signal, done)
        await nursery.start(server.serve, listeners)
        for lst in listeners:
            print(f"listening on {listener_address(lst)} (segment store)", file=sys.stderr, flush=True)
        logging.getLogger("refwire").info("%s", server.budget.describe())  # --server-memory, -v shows it
        draft = None
        if draft_listeners:
            from .draft2017.connection import DEFAULT_LIMITS as DRAFT_LIMITS
            from .draft2017.server import DraftConfig, DraftFrontend

            draft_config = DraftConfig(
                limits=attrs.evolve(DRAFT_LIMITS, max_connection_memory=args.connection_memory, max_server_memory=args.server_memory),
                tail_wait=args.tail_wait or None,
                max_parked_reads=args.max_parked_reads,
                max_connections=max_connections(args),
                frame_timeout=frame_timeout(args),
                idle_timeout=idle_timeout(args),
            )
            draft = DraftFrontend(server, config=draft_config)
            await nursery.start(draft.serve, draft_listeners)
            for lst in draft_listeners:
                print(f"listening on {listener_address(lst)} (segment store, draft-2017 dialect)", file=sys.stderr, flush=True)
        if controller is not None:
            await nursery.start(controller.serve, ctl_listeners)
            for lst in ctl_listeners:
                print(f"listening on {listener_address(lst)} (controller)", file=sys.stderr, flush=True)
        await done.wait()
        if draft is not None:
            await draft.shutdown(grace=2.0)
        if controller is not None:
            await controller.shutdown(grace=2.0)
        await server.shutdown(grace=5.0)
        nursery.cancel_scope.cancel()
    st = server.stats
    print(
        f"served {plural(st['connections'], 'connection')}, {plural(st['events'], 'event')} in "
        f"{plural(st['appends'], 'append')}, {plural(st['reads'], 'read')}",
        file=sys.stderr,
    )
    return 0


async def _send(args: argparse.Namespace) -> int:
    from .client import EventWriter, WriterConfig, create_segment
    from .errors import WriteFailed

    host, port = args.address
    if args.count:
        payloads = [f"event {i}".encode() for i in range(args.count)]
    else:
        from ..transport import stdin_lines

        payloads = [line async for line in stdin_lines()]  # (Ctrl-C ends the wait for stdin at once)
    if args.dialect == "draft-2017":
        return await _send_draft(args, payloads)
    if args.create:
        await create_segment(host, port, args.segment, timeout=args.timeout)
    config = WriterConfig(
        style=args.style,
        max_attempts=args.max_attempts,
        retry_protocol_errors=False,
        connect_timeout=args.timeout,
        ack_timeout=args.ack_timeout,
    )
    writer = EventWriter(host, port, args.segment, config=config)
    t0 = time.perf_counter()
    try:
        await writer.write(payloads)
    except WriteFailed as exc:
        print(f"refwire: {exc} ({plural(len(exc.unacked), 'event')} not acked)", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    print(
        f"wrote {plural(len(payloads), 'event')}, all acked, in {dt:.3f}s ({len(payloads) / max(dt, 1e-9):.0f} events/s; "
        f"writer {writer.writer_id}, {plural(writer.stats['reconnects'], 'reconnect')})",
        file=sys.stderr,
    )
    return 0


async def _send_draft(args: argparse.Namespace, payloads: list[bytes]) -> int:
    from .draft2017.client import DraftWriter, DraftWriterConfig
    from .draft2017.errors import DraftWriteFailed

    if args.create:
        raise UsageError(
            "--create is not available in the draft-2017 dialect (it has no CreateSegment); create it with the current dialect"
        )
    host, port = args.address
    config = DraftWriterConfig(
        max_attempts=args.max_attempts,
        retry_protocol_errors=False,
        connect_timeout=args.timeout,
        ack_timeout=args.ack_timeout,
    )
    writer = DraftWriter(host, port, args.segment, config=config)
    t0 = time.perf_counter()
    try:
        level = await writer.write(payloads)
    except DraftWriteFailed as exc:
        print(f"refwire: {exc} (ack level {exc.acked})", file=sys.stderr)
        return 1
    dt = time.perf_counter() - t0
    print(
        f"wrote {plural(len(payloads), 'event')}, ack level {level}, in {dt:.3f}s (ConnectionId "
        f"{writer.session.connection_id}, {plural(writer.stats['reconnects'], 'reconnect')})",
        file=sys.stderr,
    )
    return 0


async def _read_draft(args: argparse.Namespace) -> int:
    from ..drivers import open_stream
    from .client import parse_events
    from .draft2017.client import DraftConnection, DraftReader

    host, port = args.address
    conn = DraftConnection(await open_stream(host, port, timeout=args.timeout))
    out = sys.stdout.buffer
    count = 0
    carry = b""
    # (the draft dialect has no Hello: the first reply is the first answer; a read
    # waiting at the tail of a followed segment waits on)
    reply_timeout = math.inf if args.follow else args.timeout
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)
        reader = DraftReader(conn, args.segment, offset=args.offset)
        try:
            while not reader.end_of_segment:
                r = await reader.read(timeout=reply_timeout)
                if args.raw:
                    out.write(r.data)
                else:
                    evs, used = parse_events(carry + r.data)
                    carry = (carry + r.data)[used:]
                    for _off, payload in evs:
                        out.write(payload + b"\n")
                        count += 1
                out.flush()
                if r.at_tail and not args.follow:
                    break
            if carry and not args.follow:
                print(f"refwire: {_inside_an_event(args.offset, reader.offset - len(carry), len(carry))}", file=sys.stderr)
                return 1
        except trio.BrokenResourceError:
            # The draft dialect has no error replies: the store closes the connection instead.
            print(
                f"refwire: the server closed the connection (no such segment {args.segment!r}, or a bad offset?)", file=sys.stderr
            )
            return 1
        finally:
            nursery.cancel_scope.cancel()
    _print_read(count, reader.offset, reader.end_of_segment)
    return 0


def _inside_an_event(first: int, at: int, size: int) -> str:
    return (
        f"the segment ends inside an event: the {plural(size, 'byte')} from offset {at} on are not a whole Event frame "
        f"(is --offset {first} the start of an event?)"
    )


def _print_read(count: int, offset: int, end: bool) -> None:
    print(f"read {plural(count, 'event')}, next offset {offset}{' (end of segment)' if end else ''}", file=sys.stderr)


async def _read(args: argparse.Namespace) -> int:
    from ..errors import LocalProtocolError
    from .client import PravegaConnection, SegmentReader, segment_info
    from .errors import RequestFailed

    host, port = args.address
    if args.offset < 0:
        raise UsageError("--offset must not be negative")
    if args.dialect == "draft-2017":
        return await _read_draft(args)
    conn = await PravegaConnection.connect(host, port, timeout=args.timeout, hello_timeout=args.timeout)
    count = 0
    out = sys.stdout.buffer
    # a read at the tail of a followed segment waits (in the store) until there is more
    reply_timeout = None if args.follow else args.timeout
    async with trio.open_nursery() as nursery:
        await nursery.start(conn.run)  # within --timeout, or "no Pravega Hello from ..."
        reader = SegmentReader(conn, args.segment, offset=args.offset)
        try:
            if not args.follow:
                # not a read parked at the tail (a store waits there for more data)
                info = await segment_info(conn, args.segment, timeout=args.timeout)
                if info.exists and args.offset == info.write_offset:
                    reader.end_of_segment = info.is_sealed
                    _print_read(0, args.offset, info.is_sealed)
                    return 0
            if args.raw:
                while not reader.end_of_segment:
                    r = await reader.read(timeout=reply_timeout)
                    out.write(r.data)
                    out.flush()
                    if r.at_tail and not args.follow:
                        break
            else:
                async for _offset, payload in reader.events(until_tail=not args.follow, timeout=reply_timeout):
                    out.write(payload + b"\n")
                    out.flush()
                    count += 1
        except RequestFailed as exc:
            print(f"refwire: {exc}", file=sys.stderr)
            return 1
        except LocalProtocolError as exc:  # (what parse_events says of bytes that are not Event frames)
            if exc.frame != "Event" or exc.offset is None:
                raise
            if "ends inside an event" in exc.reason:
                why = _inside_an_event(args.offset, exc.offset, reader.offset - exc.offset)
            else:
                why = (
                    f"the bytes at offset {exc.offset} are not an Event frame ({exc.reason}; "
                    f"is --offset {args.offset} the start of an event?)"
                )
            print(f"refwire: {why}", file=sys.stderr)
            return 1
        finally:
            nursery.cancel_scope.cancel()
    _print_read(count, reader.offset, reader.end_of_segment)
    return 0
