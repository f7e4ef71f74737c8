"""``refwire serve tank``, ``refwire send tank HOST:PORT {create-topic,produce,consume,status,discover}`` and
``refwire read tank HOST:PORT TOPIC`` (consume; specs/tank/README.md)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TYPE_CHECKING

import attrs
import trio

from ..cliutil import (
    Commands,
    UsageError,
    add_connection_memory,
    add_frame_timeout,
    frame_timeout,
    hostport,
    max_connections,
    nonneg_float,
    open_listeners,
    positive_float,
    positive_int,
    stop_on_signal,
)
from ..drivers import listener_address
from ..logs import plural
from .frames import DEFAULT_MAX_REQUEST, broker_limits

if TYPE_CHECKING:
    from .client import TankClient

__all__ = ["register"]


def register(cmds: Commands) -> None:
    """Add the TANK subcommands."""
    s = cmds.serve.add_parser("tank", help="TANK broker (standalone)")
    s.add_argument(
        "--listen",
        type=hostport,
        default=("127.0.0.1", 11011),
        metavar="HOST:PORT",
        help="address to listen on (port 0 = any free port; default 127.0.0.1:11011)",
    )
    s.add_argument(
        "--data-dir",
        metavar="DIR",
        help="keep topics in DIR/<topic>/<partition>/data.log (survives a restart); default: in memory",
    )
    s.add_argument("--fsync", action="store_true", help="fsync every append before acknowledging it (with --data-dir)")
    s.add_argument(
        "--repair",
        action="store_true",
        help="start even when a data.log is damaged in its middle: move the damaged entries aside "
        "(data.log.damaged-OFFSET, never deleted), continue without them and log what was lost",
    )
    s.add_argument("--read-only", action="store_true", help="refuse produces (0xfe) and topic creation, as 'tank -r'")
    s.add_argument(
        "--idle-timeout",
        type=nonneg_float,
        default=16.0,
        metavar="S",
        help="close connections idle for S seconds (0 = never; default 16, as the real broker)",
    )
    s.add_argument(
        "--max-long-polls",
        type=positive_int,
        default=1000,
        metavar="N",
        help="long polls one connection may have parked; one more answers its oldest at once (default 1000)",
    )
    s.add_argument(
        "--max-request-size",
        type=positive_int,
        default=DEFAULT_MAX_REQUEST,
        metavar="BYTES",
        help="largest request frame (header included) a client may send; a larger one closes its connection "
        f"from the header alone (default {DEFAULT_MAX_REQUEST >> 20} MiB)",
    )
    add_connection_memory(s, ": a request may take a third of it and one answer's chunks a third (each byte costs about 3x), its parked long polls a quarter, its unread answers a sixteenth; past it a request closes the connection, a long poll is answered early")
    s.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:PARTITIONS]",
        help="create this topic at start if missing (repeatable)",
    )
    add_frame_timeout(s)
    s.add_argument(
        "--max-connections",
        type=int,
        default=1024,
        metavar="N",
        help="connections served at once; one more is closed at once (default 1024; 0 = no limit)",
    )
    s.set_defaults(func=_serve)

    c = cmds.send.add_parser("tank", help="talk to a TANK broker")
    c.add_argument("address", type=hostport, metavar="HOST:PORT", help="the broker")
    sub = c.add_subparsers(dest="tank_command", metavar="COMMAND", required=True)
    ct = sub.add_parser("create-topic", help="create a topic")
    ct.add_argument("topic", help="the topic to create")
    ct.add_argument("--partitions", type=positive_int, default=1, metavar="N", help="its partitions (default 1)")
    pr = sub.add_parser("produce", help="publish messages (arguments, or lines on stdin)")
    pr.add_argument("topic", help="the topic to produce to")
    pr.add_argument("messages", nargs="*", help="message contents; KEY=VALUE with --keys")
    pr.add_argument("--partition", type=int, default=0, metavar="N", help="partition (default 0)")
    pr.add_argument("--keys", action="store_true", help="split each message at the first '=' into key and content")
    pr.add_argument("--ts", type=int, metavar="MS", help="timestamp of every message (default: now)")
    pr.add_argument(
        "--compress",
        choices=("auto", "snappy", "none"),
        default="auto",
        help="Snappy the bundle (auto: as the C++ client, above 512 messages or 1 KiB)",
    )
    pr.add_argument("--sparse-base", type=int, metavar="SEQ", help="ProduceWithSeqnum: number the messages SEQ, SEQ+step, ...")
    pr.add_argument("--step", type=positive_int, default=1, help="sequence step with --sparse-base")
    pr.add_argument("--bundle-size", type=positive_int, default=1000, metavar="N", help="messages per bundle (default 1000)")
    co = sub.add_parser("consume", help="print messages as JSON lines")
    co.add_argument("topic", help="the topic to consume from")
    co.add_argument("--partition", type=int, default=0, metavar="N", help="partition (default 0)")
    co.add_argument(
        "--from",
        dest="seq",
        default="0",
        metavar="SEQ",
        help="first sequence number: 0 = first available (default), 'end' = only new messages",
    )
    co.add_argument("--tail", action="store_true", help="keep waiting for new messages (until Ctrl-C or --count)")
    co.add_argument("--max-wait", type=nonneg_float, default=5.0, metavar="S", help="long-poll wait with --tail (default 5)")
    co.add_argument("--min-bytes", type=int, default=0, metavar="N", help="long-poll minimum bytes with --tail")
    co.add_argument("--fetch-size", type=positive_int, default=1024 * 1024, metavar="N", help="bytes per fetch (default 1 MiB)")
    co.add_argument("--count", type=positive_int, metavar="N", help="stop after N messages")
    st = sub.add_parser("status", help="broker status")
    di = sub.add_parser("discover", help="topics, or one topic's partitions (first available, high water mark)")
    di.add_argument("topic", nargs="?", help="the topic whose partitions to list (default: every topic)")
    for each in (ct, pr, co, st, di):
        _add_timeout(each)
    c.set_defaults(func=_send)

    if cmds.read is not None:
        r = cmds.read.add_parser(
            "tank",
            help="consume messages from a topic's partition",
            description="Consume a TANK partition from a sequence number on and print each message as a JSON line "
            "(seq, ts, key, content); the summary goes to stderr.",
        )
        r.add_argument("address", type=hostport, metavar="HOST:PORT", help="the broker")
        r.add_argument("topic", help="the topic to read")
        r.add_argument("--partition", type=int, default=0, metavar="N", help="partition (default 0)")
        r.add_argument(
            "--from",
            dest="seq",
            default="0",
            metavar="SEQ",
            help="first sequence number: 0 = first available (default), 'end' = only new messages",
        )
        r.add_argument(
            "--follow", action="store_true", help="keep waiting for new messages (long polls; until Ctrl-C or --count)"
        )
        r.add_argument("--max-wait", type=nonneg_float, default=5.0, metavar="S", help="long-poll wait with --follow (default 5)")
        r.add_argument("--fetch-size", type=positive_int, default=1024 * 1024, metavar="N", help="bytes per fetch (default 1 MiB)")
        r.add_argument("--count", type=positive_int, metavar="N", help="stop after N messages")
        _add_timeout(r)
        r.set_defaults(func=_read)


def _add_timeout(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=10.0,
        metavar="S",
        help="give up after S seconds without an answer: connecting, and each request "
        "(on top of a long poll's own --max-wait) (default 10)",
    )



def _client(args: argparse.Namespace) -> TankClient:
    """The client of ``args.address``: connecting and every answer bounded by ``--timeout``."""
    from .client import ClientConfig, TankClient

    host, port = args.address
    return TankClient.connect_tcp(host, port, config=ClientConfig(request_timeout=args.timeout), timeout=args.timeout)


def _sequence(text: str) -> int:
    from .bundles import U64_MAX

    if text == "end":
        return U64_MAX
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--from {text!r} is neither a sequence number nor 'end'") from None
    if not 0 <= value < U64_MAX:
        raise UsageError(f"--from {value} is out of range")
    return value


async def _consume(
    client: TankClient, args: argparse.Namespace, *, follow: bool, max_wait: float, min_bytes: int = 0
) -> tuple[int, int]:
    """Consume ``args.topic``/``args.partition`` from ``--from`` on, one JSON line
    a message on stdout (specs/tank/README.md, Consume); returns the number of
    messages and the next sequence number.  Without ``follow`` it ends at the
    high water mark; with it, it long-polls for more until ``--count``."""
    seq = _sequence(args.seq)
    seen = 0
    while True:
        pd = await client.consume(
            args.topic,
            args.partition,
            seq,
            max_wait=max_wait if follow else 0.0,
            min_bytes=min_bytes,
            fetch_size=args.fetch_size,
        )
        assert pd.chunk is not None
        for m in pd.chunk.messages:
            print(
                json.dumps(
                    {
                        "seq": m.seq,
                        "ts": m.ts,
                        "key": None if m.key is None else m.key.decode("utf-8", "replace"),
                        "content": m.content.decode("utf-8", "replace"),
                    }
                ),
                flush=True,
            )
            seen += 1
            if args.count and seen >= args.count:
                return seen, seq if m.seq is None else m.seq + 1
        seq = pd.chunk.next_seq
        if not follow and (not pd.chunk.messages or seq > pd.hwmark):
            return seen, seq


async def _read(args: argparse.Namespace) -> int:
    """``refwire read tank``: :func:`_consume` with a summary line on stderr."""
    async with _client(args) as client:
        seen, next_seq = await _consume(client, args, follow=args.follow, max_wait=args.max_wait)
    print(f"read {plural(seen, 'message')}, next sequence number {next_seq}", file=sys.stderr)
    return 0


async def _serve(args: argparse.Namespace) -> int:
    from .disk import DirectoryStorage
    from .server import TankBroker
    from .service import BrokerConfig, is_valid_topic_name
    from .storage import MemoryStorage, Storage

    if args.repair and not args.data_dir:
        raise UsageError("--repair needs --data-dir")
    storage: Storage = (
        DirectoryStorage(args.data_dir, fsync=args.fsync, repair=args.repair) if args.data_dir else MemoryStorage()
    )
    for spec in args.topic:
        name, _, n = spec.partition(":")
        if not is_valid_topic_name(name) or (n and not n.isdigit()):
            raise UsageError(f"bad --topic {spec!r} (NAME[:PARTITIONS])")
        if name not in storage.topics:
            storage.create_topic(name, int(n or 1))
    config = BrokerConfig(
        read_only=args.read_only,
        idle_timeout=args.idle_timeout or None,
        startup_ts=int(time.time()),
        max_long_polls=args.max_long_polls,
        frame_timeout=frame_timeout(args),
        limits=attrs.evolve(broker_limits(args.max_request_size), max_connection_memory=args.connection_memory, max_server_memory=args.server_memory),
    )
    broker = TankBroker(storage, config, max_connections=max_connections(args))
    host, port = args.listen
    listeners = await open_listeners(host, port)
    done = trio.Event()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(stop_on_signal, done)
            await nursery.start(broker.serve, listeners)
            for lst in listeners:
                print(f"listening on {listener_address(lst)}", file=sys.stderr, flush=True)
            logging.getLogger("refwire").info("%s", broker.budget.describe())  # --server-memory, -v shows it
            await done.wait()
            await broker.shutdown(grace=1.0)
            nursery.cancel_scope.cancel()
    finally:
        storage.close()
    st = broker.service.stats
    print(
        f"stored {plural(st['produced_messages'], 'message')} in {plural(st['produced_bundles'], 'bundle')}; "
        f"{plural(broker.stats['connections'], 'connection')}",
        file=sys.stderr,
    )
    return 0


async def _send(args: argparse.Namespace) -> int:
    from .bundles import Message

    async with _client(args) as client:
        cmd = args.tank_command
        if cmd == "create-topic":
            err = await client.create_topic(args.topic, args.partitions)
            meaning = {
                0: "created",
                1: "already exists",
                2: "system error",
                4: "invalid config",
                5: "broker is read-only",
                10: "invalid name or partition count",
            }
            print(f"{args.topic}: {meaning.get(err, f'error {err}')}", file=sys.stderr)
            return 0 if err == 0 else 1
        if cmd == "produce":
            if args.messages:
                lines = args.messages
            else:  # (Ctrl-C ends the wait for stdin at once)
                from ..transport import stdin_lines

                lines = [text for raw in [line async for line in stdin_lines()] if (text := raw.decode("utf-8", "replace")).strip()]
            if not lines:
                print("nothing to send", file=sys.stderr)
                return 0
            ts = args.ts if args.ts is not None else int(time.time() * 1000)
            msgs = []
            for i, text in enumerate(lines):
                key = None
                if args.keys:
                    if "=" not in text:
                        raise UsageError(f"message {text!r} has no KEY=VALUE form (--keys)")
                    k, text = text.split("=", 1)
                    key = k.encode()
                seq = args.sparse_base + i * args.step if args.sparse_base is not None else None
                msgs.append(Message(text.encode(), ts, key, seq))
            compress = {"auto": None, "snappy": True, "none": False}[args.compress]
            for i in range(0, len(msgs), args.bundle_size):
                part = msgs[i : i + args.bundle_size]
                if args.sparse_base is not None:
                    res = await client.produce_sparse(args.topic, args.partition, part, compress=compress)
                else:
                    res = await client.produce(args.topic, args.partition, part, compress=compress)
                if res.error:
                    names = {
                        0x01: "unknown partition",
                        0x02: "I/O error",
                        0x0A: "invalid sequence numbers",
                        0xFE: "broker is read-only",
                        0xFF: "unknown topic",
                    }
                    print(f"refwire: produce failed: {names.get(res.error, f'error {res.error:#04x}')}", file=sys.stderr)
                    return 1
            print(f"produced {plural(len(msgs), 'message')}", file=sys.stderr)
            return 0
        if cmd == "consume":
            await _consume(client, args, follow=args.tail, max_wait=args.max_wait, min_bytes=args.min_bytes)
            return 0
        if cmd == "status":
            st = await client.status()
            print(
                json.dumps({"topics": st.topics, "partitions": st.partitions, "version": st.version, "startup_ts": st.startup_ts})
            )
            return 0
        if args.topic:
            infos = await client.discover_partitions(args.topic)
            if not infos:
                print(f"refwire: unknown topic {args.topic!r}", file=sys.stderr)
                return 1
            for i, p in enumerate(infos):
                print(json.dumps({"partition": i, "first_available": p.first_avail, "high_water_mark": p.hwmark}))
            return 0
        for t in (await client.discover_topics()).topics:
            print(json.dumps({"topic": t.name, "partitions": t.partitions}))
        return 0
