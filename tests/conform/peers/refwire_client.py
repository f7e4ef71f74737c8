"""A client testee for ``refwire conform lumberjack --client --exec``: refwire's
own Lumberjack client, or a deliberately broken one (specs/lumberjack/README.md §9).

    python refwire_client.py HOST PORT EVENTS [--mode good|no-acks|resend-acked|plaintext|unsupported]
        [--tls-ca PEM] [--window N] [--ack-timeout S] [--sequence window|running] [--v1]

good: ``LumberjackClient`` (windows of ``--window``, at most 5 attempts per
window); exit 0 once every event is acked, 1 when it gave up.
no-acks: writes one window and exits 0 without reading any ack.
resend-acked: like good, but on a fresh connection afterwards sends every
event again (acked ones included) and exits 0.
plaintext: like good, but ignores ``--tls-ca`` and speaks plaintext (a
client whose TLS settings are not wired up).
unsupported: exits 127 at once.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import sys

import orjson
import trio

from refwire.lumberjack.client import ClientConfig, LumberjackClient, SendFailed
from refwire.lumberjack.frames import V1, V2, Compressed, JsonFrame, Window


def events(n: int) -> list[dict[str, object]]:
    return [{"message": f"conform event {i}", "n": i} for i in range(n)]


def raw_window(host: str, port: int, n: int) -> None:
    evs = events(n)
    data = (
        Window(n).encode() + Compressed.wrap(b"".join(JsonFrame(i + 1, orjson.dumps(evs[i])).encode() for i in range(n))).encode()
    )
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(data)


async def good(args: argparse.Namespace) -> int:
    ctx = None
    if args.tls_ca and args.mode != "plaintext":
        ctx = ssl.create_default_context(cafile=args.tls_ca)
    cfg = ClientConfig(
        window_size=args.window,
        ack_timeout=args.ack_timeout,
        max_attempts=5,
        backoff_initial=0.05,
        backoff_max=0.5,
        sequence=args.sequence,
        version=V1 if args.v1 else V2,
    )
    client = LumberjackClient.connect_tcp(args.host, args.port, ssl_context=ctx, config=cfg)
    try:
        async with client:
            await client.send(events(args.events))
    except SendFailed as exc:
        print(f"gave up: {exc}", file=sys.stderr)
        return 1
    print(f"all {args.events} acked; stats {client.stats}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("events", type=int)
    ap.add_argument("--mode", default="good", choices=("good", "no-acks", "resend-acked", "plaintext", "unsupported"))
    ap.add_argument("--tls-ca", default="")
    ap.add_argument("--window", type=int, default=3)
    ap.add_argument("--ack-timeout", type=float, default=30.0)
    ap.add_argument("--sequence", default="window", choices=("window", "running"))
    ap.add_argument("--v1", action="store_true", help="protocol version 1 (D frames)")
    args = ap.parse_args()
    if args.mode == "unsupported":
        return 127
    if args.mode == "no-acks":
        raw_window(args.host, args.port, args.events)
        return 0
    status = trio.run(good, args)
    if args.mode == "resend-acked" and status == 0:
        try:
            raw_window(args.host, args.port, args.events)
        except OSError:
            pass
    return status


if __name__ == "__main__":
    sys.exit(main())
