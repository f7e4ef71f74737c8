"""Run timbersnake's Lumberjack server (PyPI, 0.1.0; v1 or v2) on 127.0.0.1 and
report every event it receives.

    python timbersnake_recv.py --version {1,2} [--port 0] [--tls-cert PEM --tls-key PEM] [--count-only]

stdout, one JSON object per line, flushed:

* first ``{"listening": "127.0.0.1:PORT"}``;
* per event ``{"seq": S, "event": {...}}`` (unless ``--count-only``);
* ``{"error": "..."}`` when timbersnake's connection handler crashes;
* at the end ``{"count": N, "connections": C, "errors": E}``.

It stops (exit 0) when its stdin reaches EOF or on SIGTERM.

timbersnake has no event callback: this script subclasses its ``Server`` and
wraps the frame-handling methods, so timbersnake's own parsing and acking run
unchanged and the wrapper only records what each call consumed:

* v2, ``J`` inside a ``C`` -> ``json_frame_str`` (a pure function over the
  inflated payload) is wrapped;
* v1, plain ``D`` -> ``data_frame`` is called with a reader proxy that keeps a
  copy of the bytes timbersnake read for that frame.

Quirks of the timbersnake server (read in timbersnake/server.py; specs/lumberjack/README.md §7):

* ``Server.__init__`` prints its frame table to stdout (redirected to stderr
  here so stdout stays JSON lines);
* ``start_and_serve_forever`` hides the listening socket, so a random port
  cannot be learned: this script calls ``asyncio.start_server`` with timbersnake's
  own ``handle_client_callback`` instead;
* ``W`` is read and ignored; acks are not per window: one ack per ``C`` (the seq
  of the last frame in it) and one per plain ``D``/``J`` frame; the ack's
  version byte is the server's configured version; version bytes of incoming
  frames are never checked;
* plain v2 ``J`` frames crash the connection (``json.parse`` does not exist),
  so a v2 client must compress -- not patched here, no test sends plain ``J``;
* inside a ``C`` the v1 ``D`` parser advances by the key length instead of the
  value length, so compressed ``D`` frames are mis-parsed and never acked --
  a v1 client must send plain ``D`` frames;
* nested ``C`` frames are not supported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import ssl
import struct
import sys
import threading
from typing import Any

try:
    from timbersnake.server import Server
except ImportError as exc:  # pragma: no cover - reported to the test
    print(f"timbersnake is not installed: {exc}", file=sys.stderr)
    sys.exit(3)

HOST = "127.0.0.1"


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _TeeReader:
    """Stands in for the ``asyncio.StreamReader`` and keeps what was read."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self.data = bytearray()

    async def readexactly(self, n: int) -> bytes:
        chunk = await self._reader.readexactly(n)
        self.data += chunk
        return chunk


def _decode_d_body(body: bytes) -> tuple[int, dict[str, str]]:
    """The ``D`` frame body (after ``'1D'``) that timbersnake's ``data_frame`` read."""
    seq, pairs = struct.unpack_from("!II", body, 0)
    pos = 8
    event: dict[str, str] = {}
    for _ in range(pairs):
        (klen,) = struct.unpack_from("!I", body, pos)
        key = body[pos + 4 : pos + 4 + klen].decode()
        pos += 4 + klen
        (vlen,) = struct.unpack_from("!I", body, pos)
        event[key] = body[pos + 4 : pos + 4 + vlen].decode()
        pos += 4 + vlen
    return seq, event


class ObservedServer(Server):  # type: ignore[misc]
    def __init__(self, *args: Any, count_only: bool = False, **kwargs: Any) -> None:
        with contextlib.redirect_stdout(sys.stderr):  # timbersnake prints its frame table
            super().__init__(*args, **kwargs)
        self.count_only = count_only
        self.count = 0
        self.connections = 0
        self.errors = 0

    def _record(self, seq: int, event: Any) -> None:
        self.count += 1
        if not self.count_only:
            emit({"seq": seq, "event": event})

    # v2: every J frame of a C payload goes through this pure parser.
    def json_frame_str(self, s: bytes, pos: int = 0) -> tuple[int, int]:
        end, seq = super().json_frame_str(s, pos)
        self._record(seq, json.loads(s[pos + 8 : end]))
        return end, seq

    # v1: a plain D frame, read from the stream (and acked) by timbersnake.
    async def data_frame(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tee = _TeeReader(reader)
        await super().data_frame(tee, writer)
        self._record(*_decode_d_body(bytes(tee.data)))

    async def handle_client_callback(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await super().handle_client_callback(reader, writer)
        except Exception as exc:  # timbersnake only catches IncompleteReadError
            self.errors += 1
            emit({"error": f"connection handler crashed: {exc!r}"})


async def main_async(args: argparse.Namespace) -> int:
    ctx = None
    if args.tls_cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
    version = b"1" if args.version == 1 else b"2"
    server = ObservedServer(HOST, args.port, ssl=ctx, version=version, count_only=args.count_only)
    # What Server.start_and_serve_forever does, minus hiding the bound port.
    srv = await asyncio.start_server(server.handle_client_callback, HOST, args.port, ssl=ctx)
    port = srv.sockets[0].getsockname()[1]
    emit({"listening": f"{HOST}:{port}"})

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    def _wait_stdin_eof() -> None:  # a daemon thread: never holds up the exit
        sys.stdin.buffer.read()
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=_wait_stdin_eof, daemon=True).start()
    async with srv:
        await stop.wait()
    emit({"count": server.count, "connections": server.connections, "errors": server.errors})
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", type=int, choices=(1, 2), default=2)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--tls-cert", help="PEM certificate chain; enables TLS")
    ap.add_argument("--tls-key", help="PEM private key for --tls-cert")
    ap.add_argument("--count-only", action="store_true", help="no line per event, only the final count")
    args = ap.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        ap.error("--tls-cert and --tls-key go together")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
