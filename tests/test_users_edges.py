"""The edges a person meets with the ``refwire`` commands: TLS
failures that say why, captures that are cut or are not captures, counts in
the right number, ``-vv`` on a server, ``read tank``, and a ``read pravega``
started inside an event."""

from __future__ import annotations

import io
import logging
import re
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.commands import REFWIRE

from refwire.cli import main
from refwire.logs import plural
from refwire.transport import StreamServer, TlsHandshakeError, client_ssl_context, open_stream, server_ssl_context

pytestmark = pytest.mark.timeout(120)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# --------------------------------------------------------------------------- TLS reasons


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import trustme

    d = tmp_path_factory.mktemp("tls")
    ca, other = trustme.CA(), trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    files = {"cert": str(d / "cert.pem"), "ca": str(d / "ca.pem"), "other_ca": str(d / "other.pem")}
    cert.private_key_and_cert_chain_pem.write_to_path(files["cert"])
    ca.cert_pem.write_to_path(files["ca"])
    other.cert_pem.write_to_path(files["other_ca"])
    return files


async def test_tls_failures_say_openssl_reason_on_both_sides(
    tls_files: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="refwire")

    async def handler(stream: trio.abc.Stream) -> None:
        await stream.send_all(b"hello")

    tls_server = StreamServer(handler, ssl_context=server_ssl_context(tls_files["cert"]), name="tls-test")
    plain_server = StreamServer(handler, name="plain-test")
    async with trio.open_nursery() as nursery:
        tls_listeners = await nursery.start(tls_server.serve, await trio.open_tcp_listeners(0, host="127.0.0.1"))
        plain_listeners = await nursery.start(plain_server.serve, await trio.open_tcp_listeners(0, host="127.0.0.1"))
        tls_port = tls_listeners[0].socket.getsockname()[1]
        plain_port = plain_listeners[0].socket.getsockname()[1]
        # the client does not trust the server's certificate
        with pytest.raises(TlsHandshakeError, match=r"TLS handshake with 127\.0\.0\.1:\d+ failed: CERTIFICATE_VERIFY_FAILED: ") as info:
            await open_stream("127.0.0.1", tls_port, ssl_context=client_ssl_context(tls_files["other_ca"]))
        assert isinstance(info.value.__cause__, trio.BrokenResourceError)
        # TLS to a server that speaks plain bytes
        with pytest.raises(TlsHandshakeError, match=r"failed: (WRONG_VERSION_NUMBER|RECORD_LAYER_FAILURE|PACKET_LENGTH_TOO_LONG)"):
            await open_stream("127.0.0.1", plain_port, ssl_context=client_ssl_context(tls_files["ca"]))
        # plain bytes to a TLS server: the server's line says why
        stream = await trio.open_tcp_stream("127.0.0.1", tls_port)
        await stream.send_all(b"not a client hello at all, just words\r\n\r\n")
        with trio.fail_after(10):
            while not any("TLS handshake failed: " in r.getMessage() and "connection from 127.0.0.1:" in r.getMessage() for r in caplog.records):
                await trio.sleep(0.01)
        await stream.aclose()
        await tls_server.shutdown(1)
        await plain_server.shutdown(1)
        nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    # each failure names OpenSSL's reason, never an empty "BrokenResourceError"
    assert lines and all(re.search(r"TLS handshake failed: [A-Z0-9_]{6,}", line) for line in lines), lines


def test_tls_client_failure_is_one_plain_line(tls_files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """``send lumberjack --tls-ca WRONG`` against a TLS server: the reason, not a class name."""

    async def handler(stream: trio.abc.Stream) -> None:
        await trio.sleep(0)

    ready = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        server = StreamServer(handler, ssl_context=server_ssl_context(tls_files["cert"]), name="tls-test")
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(server.serve, await trio.open_tcp_listeners(0, host="127.0.0.1"))
            box["port"] = listeners[0].socket.getsockname()[1]
            box["token"] = trio.lowlevel.current_trio_token()
            box["stop"] = nursery.cancel_scope
            ready.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        status, _, err = _run(
            ["send", "lumberjack", f"127.0.0.1:{box['port']}", "--count", "1", "--tls-ca", tls_files["other_ca"]], capsys
        )
    finally:
        trio.from_thread.run_sync(box["stop"].cancel, trio_token=box["token"])
        thread.join(10)
    assert status == 1 and "CERTIFICATE_VERIFY_FAILED" in err and "BrokenResourceError" not in err, err


# --------------------------------------------------------------------------- decode: captures that are cut or are not captures


def _packet(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int, data: bytes = b"") -> bytes:
    dpkt = pytest.importorskip("dpkt")
    tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=seq, flags=flags, data=data)
    ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=dpkt.ip.IP_PROTO_TCP, data=tcp)
    ip.len = len(bytes(ip))
    return bytes(dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))


def _lumberjack_pcap(path: Path) -> list[int]:
    """A pcap of one Lumberjack connection (two windows, their acks); returns each record's offset."""
    from refwire.lumberjack.codec import V2, encode_ack, encode_event, encode_window

    dpkt = pytest.importorskip("dpkt")
    cli, srv = ("10.0.0.1", 40001), ("10.0.0.2", 5044)
    w1 = encode_window(V2, [1], [encode_event({"a": 1}, V2)])
    w2 = encode_window(V2, [1, 2], [encode_event({"b": 2}, V2), encode_event({"c": 3}, V2)])
    packets = [
        _packet(cli, srv, 99, dpkt.tcp.TH_SYN),
        _packet(srv, cli, 4999, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK),
        _packet(cli, srv, 100, dpkt.tcp.TH_ACK, w1),
        _packet(srv, cli, 5000, dpkt.tcp.TH_ACK, encode_ack(1)),
        _packet(cli, srv, 100 + len(w1), dpkt.tcp.TH_ACK, w2),
    ]
    offsets = []
    with path.open("wb") as f:
        w = dpkt.pcap.Writer(f)
        for i, p in enumerate(packets):
            offsets.append(f.tell())
            w.writepkt(p, ts=1000.0 + i / 1000)
    return offsets


def test_decode_names_the_file_offset_and_fault(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = tmp_path / "whole.pcap"
    offsets = _lumberjack_pcap(whole)
    data = whole.read_bytes()
    status, out, err = _run(["decode", str(whole)], capsys)
    assert status == 0 and out.count(" J ") == 3, out + err

    # cut inside the file header
    head = tmp_path / "head.pcap"
    head.write_bytes(data[:10])
    status, out, err = _run(["decode", str(head)], capsys)
    assert status == 1 and f"refwire: {head}: the pcap file is cut at offset 10, inside its 24-byte file header" in err, err
    assert "internal error" not in err and "NeedData" not in err

    # cut inside the last packet: the whole packets are decoded, then where it is cut
    cut_at = offsets[4] + 16 + 20
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:cut_at])
    status, out, err = _run(["decode", str(cut)], capsys)
    assert status == 1, out + err
    assert out.count(" J ") == 1 and " A " in out  # the first window and its ack
    last = out.rstrip().splitlines()[-1]  # the line that says so comes last
    assert f"error      0 B  the capture {cut} is cut at offset {cut_at}: packet 5 (at offset {offsets[4]})" in last, out

    # cut inside a record header
    cut2 = tmp_path / "cut2.pcap"
    cut2.write_bytes(data[: offsets[4] + 5])
    status, out, err = _run(["decode", str(cut2)], capsys)
    assert status == 1 and f"is cut at offset {offsets[4] + 5}: packet 5's 16-byte record header" in out, out

    # random bytes: what the file is not, in words (no internal function names)
    noise = tmp_path / "noise.bin"
    noise.write_bytes(bytes(range(7, 200)))
    status, out, err = _run(["decode", str(noise)], capsys)
    assert status == 2 and f"{noise}: not a capture: neither a pcap/pcapng file (it starts with 07 08 09 0a" in err, err
    assert "read_pcap" not in err and "write_capture" not in err

    # a pcap header, then damage: the record's length is absurd
    damaged = tmp_path / "damaged.pcap"
    damaged.write_bytes(data[:24] + struct.pack("<IIII", 0, 0, 0xFFFFFF00, 0xFFFFFF00) + b"x" * 40)
    status, out, err = _run(["decode", str(damaged)], capsys)
    assert status == 1 and f"{damaged}: offset 24: packet 1's record says it holds {0xFFFFFF00} bytes" in err, err


# --------------------------------------------------------------------------- plurals


def test_plural() -> None:
    assert [plural(n, "event") for n in (0, 1, 2)] == ["0 events", "1 event", "2 events"]
    assert plural(1, "reply", "replies") == "1 reply" and plural(3, "reply", "replies") == "3 replies"


def test_counts_of_one_are_singular(
    lumberjack_server: Any, pravega_store: Any, tank_broker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = _run(["send", "lumberjack", lumberjack_server.address, "--count", "1"], capsys)
    assert status == 0 and re.search(r"sent 1 event, all acked, .*; 1 window, 0 reconnects\)", err), err
    status, _, err = _run(["send", "pravega", pravega_store.address, "--segment", "p/s/0", "--create", "--count", "1"], capsys)
    assert status == 0 and re.search(r"wrote 1 event, all acked, .*, 0 reconnects\)", err), err
    status, out, err = _run(["read", "pravega", pravega_store.address, "--segment", "p/s/0"], capsys)
    assert status == 0 and out == "event 0\n" and "read 1 event, next offset 15" in err, err
    status, _, err = _run(["send", "tank", tank_broker.address, "create-topic", "one"], capsys)
    assert status == 0, err
    status, _, err = _run(["send", "tank", tank_broker.address, "produce", "one", "m"], capsys)
    assert status == 0 and "produced 1 message\n" in err, err
    status, _, err = _run(["read", "tank", tank_broker.address, "one"], capsys)
    assert status == 0 and "read 1 message, next sequence number 2" in err, err


# --------------------------------------------------------------------------- read tank


def test_read_tank_consumes_from_an_offset(tank_broker: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    addr = tank_broker.address
    assert _run(["send", "tank", addr, "create-topic", "rt", "--partitions", "2"], capsys)[0] == 0
    monkeypatch.setattr(sys, "stdin", io.StringIO("a\nb\nc\nd\n"))
    assert _run(["send", "tank", addr, "produce", "rt", "--partition", "1"], capsys)[0] == 0
    status, out, err = _run(["read", "tank", addr, "rt", "--partition", "1", "--from", "2"], capsys)
    import json

    rows = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and [(r["seq"], r["content"]) for r in rows] == [(2, "b"), (3, "c"), (4, "d")], out + err
    assert "read 3 messages, next sequence number 5" in err
    status, out, err = _run(["read", "tank", addr, "rt", "--partition", "1", "--count", "2"], capsys)
    assert status == 0 and [json.loads(line)["content"] for line in out.splitlines()] == ["a", "b"]
    # --follow long-polls for more, until --count
    status, out, err = _run(["read", "tank", addr, "rt", "--partition", "1", "--from", "4", "--follow", "--count", "1", "--max-wait", "1"], capsys)
    assert status == 0 and [json.loads(line)["content"] for line in out.splitlines()] == ["d"]
    status, _, err = _run(["read", "tank", addr, "nosuch"], capsys)
    assert status == 1 and err.startswith("refwire: ") and "Traceback" not in err, err


# --------------------------------------------------------------------------- read pravega inside an event


def test_read_pravega_from_inside_an_event_says_so(pravega_store: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """Offset 17 is inside the second event's header: the old read waited for
    484726 bytes that never came (and for ever)."""
    addr = pravega_store.address
    assert _run(["send", "pravega", addr, "--segment", "q/s/0", "--create", "--count", "2"], capsys)[0] == 0
    status, out, err = _run(["read", "pravega", addr, "--segment", "q/s/0", "--offset", "17", "--timeout", "5"], capsys)
    assert status == 1 and out == "", out + err
    assert "refwire: the segment ends inside an event: the 13 bytes from offset 17 on are not a whole Event frame " in err, err
    assert "(is --offset 17 the start of an event?)" in err
    # at the tail: nothing to read, at once (no read parked at the tail)
    status, out, err = _run(["read", "pravega", addr, "--segment", "q/s/0", "--offset", "30"], capsys)
    assert status == 0 and "read 0 events, next offset 30" in err, err


# --------------------------------------------------------------------------- -vv on a server


async def test_stream_server_logs_each_connection_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="refwire")

    async def handler(stream: trio.abc.Stream) -> None:
        assert await stream.receive_some(10) == b"hi"

    server = StreamServer(handler, name="debug-test")
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(server.serve, await trio.open_tcp_listeners(0, host="127.0.0.1"))
        stream = await trio.open_tcp_stream("127.0.0.1", listeners[0].socket.getsockname()[1])
        host, port = stream.socket.getsockname()[:2]
        local = f"{host}:{port}"
        await stream.send_all(b"hi")
        assert await stream.receive_some(10) == b""
        await stream.aclose()
        await server.shutdown(1)
        nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert f"debug-test: connection from {local} accepted (1 open)" in lines, lines
    assert f"debug-test: connection from {local} closed: finished" in lines, lines


@pytest.fixture
def pravega_serve_vv() -> Iterator[tuple[subprocess.Popen[str], str]]:
    proc = subprocess.Popen(
        [*REFWIRE, "-vv", "serve", "pravega", "--no-controller", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            found = re.search(r"listening on (\S+:\d+)", line)
            if found:
                yield proc, found.group(1)
                break
        else:
            raise AssertionError("the store did not start")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_vv_logs_connections_and_requests(pravega_serve_vv: tuple[subprocess.Popen[str], str]) -> None:
    proc, addr = pravega_serve_vv
    done = subprocess.run(
        [*REFWIRE, "send", "pravega", addr, "--segment", "v/s/0", "--create", "--count", "3"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    import signal

    proc.send_signal(signal.SIGINT)
    assert proc.stderr is not None
    err = proc.stderr.read()
    assert proc.wait(30) == 130, err
    assert re.search(r"DEBUG pravega: connection from 127\.0\.0\.1:\d+ accepted", err), err
    assert re.search(r"DEBUG pravega: connection from 127\.0\.0\.1:\d+ closed: ", err), err
    assert re.search(r"DEBUG pravega: 127\.0\.0\.1:\d+: CreateSegment \(request \d+\): SegmentCreated", err), err
    assert re.search(r"DEBUG pravega: 127\.0\.0\.1:\d+: append to 'v/s/0': 3 events from writer [0-9a-f-]+: ok", err), err
    assert "served 2 connections, 3 events in 1 append, 0 reads" in err, err
