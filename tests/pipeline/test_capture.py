"""Recording (the tap), pcap and tcpflow inputs, and ``refwire decode``, without Spark."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import trio

from refwire.cli import main
from refwire.lumberjack import Batch
from refwire.lumberjack.client import ClientConfig, LumberjackClient
from refwire.lumberjack.frames import JsonFrame, Window
from refwire.lumberjack.server import ConnectionInfo, LumberjackServer
from refwire.pipeline.capture import decode_capture, list_streams, read_pcap, write_capture
from refwire.pipeline.dialects.lumberjack import lumberjack_connection, write_lumberjack_capture
from refwire.tap import open_tap

dpkt = pytest.importorskip("dpkt")


async def record_refwire_session(out: Path, *, events: int = 60, window: int = 16, compression: int = 3) -> int:
    """refwire's Lumberjack client -> tap -> refwire's server; returns events the server got."""
    got: list[Any] = []

    async def handler(batch: Batch, info: ConnectionInfo) -> None:
        got.extend(batch.events)

    server = LumberjackServer(handler)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(server.serve, listeners)
            port = listeners[0].socket.getsockname()[1]
            async with open_tap(("127.0.0.1", 0), ("127.0.0.1", port), out) as tap:
                host, tport = tap.addresses[0].rsplit(":", 1)
                client = LumberjackClient.connect_tcp(host, int(tport), config=ClientConfig(window_size=window, compression_level=compression))
                await client.send([{"i": i, "message": f"event {i}"} for i in range(events)])
                await client.aclose()
                await tap.wait_finished(1)
            await server.shutdown(1.0)
            nursery.cancel_scope.cancel()
    return len(got)


async def test_tap_records_a_refwire_session_that_decodes_cleanly(tmp_path: Path) -> None:
    assert await record_refwire_session(tmp_path, events=60, window=16) == 60
    streams = list_streams(tmp_path)
    assert [(s.conn, s.direction) for s in streams] == [("conn00001", "c2s"), ("conn00001", "s2c")]
    meta = json.loads((tmp_path / "conn00001.json").read_text())
    assert meta["times"]["c2s"][0][0] == 0 and meta["client"].startswith("127.0.0.1:")
    rows = list(decode_capture("lumberjack", tmp_path))
    assert not [r for r in rows if r["type"] == "error"]
    assert sum(r["type"] == "J" for r in rows) == 60
    assert [r["seq"] for r in rows if r["type"] == "A" and r["seq"]] == [16, 16, 16, 12]
    assert all(r["ts"] is not None and r["ts"] >= meta["started"] for r in rows)


def _pcap(path: Path, conns: list[tuple[bytes, bytes, int]], *, shuffle: bool) -> None:
    """Write a pcap of whole TCP connections (SYN, data in 7-byte segments, a retransmission)."""

    def pkt(src: tuple[str, int], dst: tuple[str, int], seq: int, flags: int, data: bytes = b"") -> bytes:
        tcp = dpkt.tcp.TCP(sport=src[1], dport=dst[1], seq=seq, flags=flags, data=data)
        ip = dpkt.ip.IP(src=socket.inet_aton(src[0]), dst=socket.inet_aton(dst[0]), p=dpkt.ip.IP_PROTO_TCP, data=tcp)
        ip.len = len(bytes(ip))
        return bytes(dpkt.ethernet.Ethernet(src=b"\x00" * 6, dst=b"\x00" * 6, type=dpkt.ethernet.ETH_TYPE_IP, data=ip))

    with path.open("wb") as f:
        w = dpkt.pcap.Writer(f)
        t = 1000.0
        for c2s, s2c, cport in conns:
            cli, srv = ("10.0.0.1", cport), ("10.0.0.2", 5044)
            packets = [pkt(cli, srv, 99, dpkt.tcp.TH_SYN), pkt(srv, cli, 4999, dpkt.tcp.TH_SYN | dpkt.tcp.TH_ACK)]
            for src, dst, isn, data in ((cli, srv, 100, c2s), (srv, cli, 5000, s2c)):
                segs = [pkt(src, dst, isn + i, dpkt.tcp.TH_ACK, data[i : i + 7]) for i in range(0, len(data), 7)]
                if shuffle and len(segs) > 3:
                    segs[1], segs[2] = segs[2], segs[1]
                    segs.insert(3, segs[0])  # a retransmission
                packets += segs
            for p in packets:
                t += 0.001
                w.writepkt(p, ts=t)


@pytest.mark.parametrize("shuffle", [False, True])
def test_pcap_reassembly(tmp_path: Path, shuffle: bool) -> None:
    a = lumberjack_connection(3, 4)
    b = lumberjack_connection(2, 5, fault="garbage")
    pcap = tmp_path / "x.pcap"
    _pcap(pcap, [(a[0], a[1], 40001), (b[0], b[1], 40002)], shuffle=shuffle)
    conns = read_pcap(pcap)
    assert [(c.client, c.server) for c in conns] == [(("10.0.0.1", 40001), ("10.0.0.2", 5044)), (("10.0.0.1", 40002), ("10.0.0.2", 5044))]
    assert [(bytes(c.data["c2s"]), bytes(c.data["s2c"])) for c in conns] == [a, b]
    assert not any(c.gaps for c in conns)
    write_capture(conns, tmp_path / "cap")
    rows = list(decode_capture("lumberjack", tmp_path / "cap"))
    assert [r["conn"] for r in rows if r["type"] == "error"] == ["conn00002"]


def test_tcpflow_directory(tmp_path: Path) -> None:
    c2s, s2c = lumberjack_connection(2, 3)
    (tmp_path / "010.000.000.001.40001-010.000.000.002.05044").write_bytes(c2s)
    (tmp_path / "010.000.000.002.05044-010.000.000.001.40001").write_bytes(s2c)
    streams = list_streams(tmp_path)
    assert [(s.conn, s.direction) for s in streams] == [("10.0.0.1.40001-10.0.0.2.5044", "c2s"), ("10.0.0.1.40001-10.0.0.2.5044", "s2c")]
    assert len(list(decode_capture("lumberjack", tmp_path))) == 2 + 6 + 1 + 3


def test_decode_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_lumberjack_capture(tmp_path, ["", "garbage"], windows=2, window_size=3)
    assert main(["decode", str(tmp_path / "conn00001.c2s")]) == 0
    out = capsys.readouterr().out
    assert "conn00001 (lumberjack; c2s 274 bytes)" in out and " W " in out and '"seq":1001' in out
    assert main(["decode", str(tmp_path), "--json", "--protocol", "lumberjack"]) == 1  # the garbage is an error
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    errors = [r for r in rows if r["type"] == "error"]
    assert len(errors) == 1 and errors[0]["conn"] == "conn00002"
    assert main(["decode", str(tmp_path / "missing")]) == 2


async def test_tap_logs_an_upstream_that_is_down(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with trio.fail_after(10):
        async with open_tap(("127.0.0.1", 0), ("127.0.0.1", 1), tmp_path) as tap:
            host, port = tap.addresses[0].rsplit(":", 1)
            stream = await trio.open_tcp_stream(host, int(port))
            assert await stream.receive_some(10) == b""  # the client's connection is closed at once
            await stream.aclose()
            await tap.wait_finished(1)
    meta = json.loads((tmp_path / "conn00001.json").read_text())
    assert meta["error"].startswith("cannot connect upstream")
    (record,) = [r for r in caplog.records if r.name == "refwire.record"]
    assert record.levelname == "WARNING" and "cannot connect to the upstream 127.0.0.1:1" in record.getMessage()


async def test_decode_interleaves_both_directions_in_arrival_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded session prints like tshark: each window, then its ack, with
    the time since the connection's first frame, never decreasing."""
    assert await record_refwire_session(tmp_path, events=30, window=10, compression=0) == 30
    assert main(["decode", str(tmp_path)]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("   ")]
    arrows = "".join("<" if " <- " in ln else ">" for ln in lines)
    # W + 10 J per window, then its A (a keepalive A 0 may come first): never all c2s before all s2c
    assert arrows.startswith(">" * 11 + "<") and arrows.count("<") >= 3 and not arrows.endswith(">" * 11), arrows
    times = [float(ln.split()[0]) for ln in lines]
    assert times[0] == 0.0 and times == sorted(times)


def test_decode_says_when_it_cuts_a_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conn00001.c2s").write_bytes(Window(1).encode() + JsonFrame(1, b'{"m":"' + b"x" * 500 + b'"}').encode())
    assert main(["decode", str(tmp_path), "--protocol", "lumberjack"]) == 0
    out = capsys.readouterr().out
    assert "more characters; --full shows them" in out and "x" * 500 not in out
    assert main(["decode", str(tmp_path), "--protocol", "lumberjack", "--full"]) == 0
    out = capsys.readouterr().out
    assert "x" * 500 in out and "more characters" not in out


@pytest.mark.parametrize("cut", [1, 5, 11])
def test_a_capture_that_starts_inside_a_frame_is_guessed_and_decoded_from_the_first_good_frame(tmp_path: Path, cut: int) -> None:
    """The recording began mid-connection: the first ``cut`` bytes of the client's
    stream are missing, so its first bytes are the middle of a frame.  The
    protocol is still guessed (from the first good frame on), the stream is
    decoded from there, and the skipped bytes are one Resync error row."""
    from refwire.pipeline.capture import TcpConnection, connection_protocols

    c2s, s2c = lumberjack_connection(2, 3)
    conn = TcpConnection(("10.0.0.1", 40001), ("10.0.0.2", 5044))
    conn.data["c2s"] += c2s[cut:]
    conn.data["s2c"] += s2c
    write_capture([conn], tmp_path / "cap")
    assert connection_protocols(tmp_path / "cap") == {"conn00001": "lumberjack"}
    rows = [r for r in decode_capture(None, tmp_path / "cap") if r["direction"] == "c2s"]
    whole = [r for r in decode_capture("lumberjack", _whole(tmp_path, c2s, s2c)) if r["direction"] == "c2s"]
    assert rows[0]["type"] == "error" and rows[0]["offset"] == 0 and '"kind": "Resync"' in rows[0]["fields_json"]
    skipped = int(rows[0]["error"].split()[0])
    # every frame after the skip is a frame of the whole stream, at the same place (shifted by the cut)
    tail = [(r["type"], r["offset"] + cut) for r in rows[1:] if r["type"] != "error" and r["parent_offset"] is None]
    assert tail and set(tail) <= {(r["type"], r["offset"]) for r in whole if r["parent_offset"] is None}
    inner = [(r["type"], r["offset"], r["parent_offset"] + cut) for r in rows if r["parent_offset"] is not None]
    assert inner and set(inner) <= {(r["type"], r["offset"], r["parent_offset"]) for r in whole if r["parent_offset"] is not None}
    assert min(off for _, off in tail) == skipped + cut


def _whole(tmp_path: Path, c2s: bytes, s2c: bytes) -> Path:
    from refwire.pipeline.capture import TcpConnection

    conn = TcpConnection(("10.0.0.1", 40001), ("10.0.0.2", 5044))
    conn.data["c2s"] += c2s
    conn.data["s2c"] += s2c
    write_capture([conn], tmp_path / "whole")
    return tmp_path / "whole"


def test_a_stream_of_garbage_is_not_guessed(tmp_path: Path) -> None:
    from refwire.pipeline.capture import TcpConnection, connection_protocols

    conn = TcpConnection(("10.0.0.1", 40001), ("10.0.0.2", 5044))
    conn.data["c2s"] += bytes(range(256)) * 4
    write_capture([conn], tmp_path / "cap")
    assert connection_protocols(tmp_path / "cap") == {"conn00001": None}
