"""Plain-socket peers in a thread, for tests of what a command does against a
peer that is not what it expects (one that never answers, one that speaks HTTP)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def socket_peer(on_connection: Callable[[socket.socket], None]) -> Iterator[str]:
    """Listen on 127.0.0.1 and call ``on_connection(conn)`` for each connection
    accepted, in one thread; yields ``HOST:PORT``.  A connection stays open until
    the peer ends, unless ``on_connection`` closes it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    sock.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            held.append(conn)
            on_connection(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        sock.close()
