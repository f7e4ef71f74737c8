"""``--pcap FILE``: the pcapng writer (:mod:`refwire.pcap`) and the three commands
that use it (``record``, ``chaos``, ``sim``), read back with refwire's own pcap
reader and ``refwire decode``.  No Wireshark here: the TCP checks below are the
ones its analysis makes (sequence and acknowledgement numbers, packet sizes)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.lumberjack_chaos import EVENTS, send_all

from refwire.cli import build_parser, main
from refwire.lumberjack.server import LumberjackServer
from refwire.pcap import MAX_SEGMENT, PcapPathError, PcapWriter, numbered_path, synthetic_ipv4
from refwire.pipeline.capture import read_pcap

dpkt = pytest.importorskip("dpkt")

pytestmark = pytest.mark.timeout(30)


def packets(path: Path) -> Iterator[tuple[float, Any, Any]]:
    """(timestamp, IPv4 packet, TCP segment) of every packet of a pcapng file."""
    with path.open("rb") as f:
        for ts, buf in dpkt.pcapng.Reader(f):
            eth = dpkt.ethernet.Ethernet(buf)
            assert eth.type == dpkt.ethernet.ETH_TYPE_IP
            yield ts, eth.data, eth.data.data


def check_tcp(path: Path) -> dict[str, int]:
    """Assert what Wireshark's TCP analysis checks: each conversation starts with
    SYN, SYN-ACK, ACK; every segment's seq is the previous one's plus its length
    (a SYN or FIN counts one); every ack is exactly what the other side sent so
    far; nothing follows an RST; every IPv4 packet fits its length field.
    Returns counts of SYNs, FINs, RSTs and data segments."""
    seen = {"syn": 0, "fin": 0, "rst": 0, "data": 0}
    nxt: dict[tuple[Any, ...], int] = {}
    dead: set[frozenset[Any]] = set()
    last_ts = 0.0
    for ts, ip, tcp in packets(path):
        assert ts >= last_ts
        last_ts = ts
        assert ip.len == len(bytes(ip)) and len(tcp.data) <= MAX_SEGMENT
        conv = frozenset(((ip.src, tcp.sport), (ip.dst, tcp.dport)))
        me, peer = (conv, ip.src, tcp.sport), (conv, ip.dst, tcp.dport)
        assert conv not in dead, "a packet after an RST"
        if tcp.flags & dpkt.tcp.TH_SYN:
            seen["syn"] += 1
            nxt[me] = tcp.seq + 1
            if tcp.flags & dpkt.tcp.TH_ACK:
                assert tcp.ack == nxt[peer]
            continue
        assert tcp.seq == nxt[me], "a gap or an overlap in the sequence numbers"
        assert tcp.flags & dpkt.tcp.TH_ACK and tcp.ack == nxt[peer], "an ack of what the peer never sent (or less)"
        nxt[me] = (nxt[me] + len(tcp.data) + (1 if tcp.flags & dpkt.tcp.TH_FIN else 0)) % (1 << 32)
        seen["data"] += bool(tcp.data)
        seen["fin"] += bool(tcp.flags & dpkt.tcp.TH_FIN)
        if tcp.flags & dpkt.tcp.TH_RST:
            seen["rst"] += 1
            dead.add(conv)
    return seen


def decode(path: Path, capsys: pytest.CaptureFixture[str], *, status: tuple[int, ...] = (0,)) -> str:
    """``refwire decode PATH``'s output (its exit status one of ``status``)."""
    capsys.readouterr()
    assert main(["decode", str(path)]) in status
    return capsys.readouterr().out


# --------------------------------------------------------------------------- the writer


def test_round_trip_gives_back_each_directions_bytes(tmp_path: Path) -> None:
    big = bytes(range(256)) * 800  # 204800 bytes: three full segments and a part
    path = tmp_path / "t.pcapng"
    with PcapWriter(path) as w:
        a = w.connection(("127.0.0.1", 40001), ("127.0.0.1", 5044), 100.0)
        b = w.connection(None, ("some-server", 7000), 100.5)
        a.send("c2s", b"hello ", 101.0)
        b.send("c2s", big, 101.1)
        a.send("c2s", b"world", 101.2)
        a.send("s2c", b"ok", 101.3)
        a.fin("c2s", 102.0)
        a.send("s2c", b" and bye", 102.1)  # a half-closed connection still answers
        a.fin("s2c", 102.2)
        b.send("s2c", big[:70000], 103.0)
        b.reset("s2c", 104.0)
        b.send("c2s", b"after the reset: dropped", 105.0)
    first, second = read_pcap(path)
    assert (first.client, first.server) == (("127.0.0.1", 40001), ("127.0.0.1", 5044))
    assert first.data == {"c2s": bytearray(b"hello world"), "s2c": bytearray(b"ok and bye")}
    assert first.times["c2s"] == [(0, 101.0), (6, 101.2)] and not first.gaps
    assert second.server == (synthetic_ipv4("some-server"), 7000) and second.client[0] == "127.0.0.1"
    assert second.data == {"c2s": bytearray(big), "s2c": bytearray(big[:70000])} and not second.gaps
    assert [o for o, _ in second.times["c2s"]] == [0, MAX_SEGMENT, 2 * MAX_SEGMENT, 3 * MAX_SEGMENT]
    assert check_tcp(path) == {"syn": 4, "fin": 2, "rst": 1, "data": 2 + 2 + 4 + 2}


def test_every_block_is_on_disk_as_soon_as_it_is_written(tmp_path: Path) -> None:
    path = tmp_path / "live.pcapng"
    w = PcapWriter(path)
    conv = w.connection(("10.0.0.1", 1234), ("10.0.0.2", 80), 1.0)
    conv.send("c2s", b"GET", 2.0)
    (c,) = read_pcap(path)  # not closed yet: a reader sees every packet so far
    assert bytes(c.data["c2s"]) == b"GET" and w.packets == 4
    w.close()
    conv.send("c2s", b"ignored", 3.0)
    assert w.closed and path.stat().st_size == len(path.read_bytes())


def test_a_direction_is_acknowledged_before_the_window_fills(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import refwire.pcap

    monkeypatch.setattr(refwire.pcap, "_ACK_EVERY", 100_000)
    path = tmp_path / "acks.pcapng"
    with PcapWriter(path) as w:
        conv = w.connection(None, None, 0.0)
        for i in range(3):
            conv.send("c2s", b"x" * 60_000, float(i))
    acks = [tcp for _, _, tcp in packets(path) if tcp.sport == 1 and not tcp.data and not tcp.flags & dpkt.tcp.TH_SYN]
    assert len(acks) == 1
    check_tcp(path)


def test_numbered_path_and_an_unwritable_path(tmp_path: Path) -> None:
    assert numbered_path("run.pcapng", 7) == Path("run-7.pcapng")
    assert numbered_path("a/run.pcapng", "tank", 3) == Path("a/run-tank-3.pcapng")
    assert numbered_path("run", 1) == Path("run-1") and numbered_path("run.pcapng") == Path("run.pcapng")
    for bad in (tmp_path / "no" / "such" / "dir.pcapng", tmp_path):
        with pytest.raises(PcapPathError, match="cannot write the pcap file"):
            PcapWriter(bad)


# --------------------------------------------------------------------------- the commands


@pytest.mark.parametrize(
    "argv",
    [
        ["record", "--upstream", "127.0.0.1:9", "--out", "{tmp}/cap"],
        ["chaos", "lumberjack", "--upstream", "127.0.0.1:9"],
        ["sim", "lumberjack", "--seed", "1"],
    ],
)
def test_an_unwritable_pcap_path_is_one_line_and_exit_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "missing" / "x.pcapng"
    assert main([*(a.format(tmp=tmp_path) for a in argv), "--pcap", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"refwire: --pcap: cannot write the pcap file {bad}: No such file or directory", err


async def stderr_line(capsys: pytest.CaptureFixture[str], needle: str) -> str:
    """Wait for the line of a command's stderr that holds ``needle``."""
    seen = ""
    while True:
        seen += capsys.readouterr().err
        for line in seen.splitlines():
            if needle in line:
                return line
        await trio.sleep(0.01)


async def lumberjack_server(nursery: trio.Nursery, got: list[int]) -> tuple[LumberjackServer, str]:
    async def handler(batch: Any, info: Any) -> None:
        got.extend(ev.fields()["i"] for ev in batch.events)

    server = LumberjackServer(handler)
    [address] = await nursery.start(server.serve_tcp, "127.0.0.1", 0)
    return server, address


async def test_record_pcap_decodes_as_the_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcap = tmp_path / "record.pcapng"
    got: list[int] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server, address = await lumberjack_server(nursery, got)
            args = build_parser().parse_args(
                ["record", "--upstream", address, "--out", str(tmp_path / "cap"), "--exit-after", "1", "--pcap", str(pcap)]
            )
            status: list[int] = []

            async def record() -> None:
                status.append(await args.func(args))

            nursery.start_soon(record)
            line = await stderr_line(capsys, "listening on ")
            host, port = line.split("listening on ", 1)[1].rsplit(":", 1)
            await send_all(host, int(port))
            while not status:
                await trio.sleep(0.01)
            await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()
    assert status == [0] and sorted(got) == [e["i"] for e in EVENTS]
    (conn,) = read_pcap(pcap)
    assert conn.server == ("127.0.0.1", int(address.rsplit(":", 1)[1])) and conn.client[0] == "127.0.0.1"
    assert bytes(conn.data["c2s"]) == (tmp_path / "cap" / "conn00001.c2s").read_bytes()
    assert bytes(conn.data["s2c"]) == (tmp_path / "cap" / "conn00001.s2c").read_bytes()
    assert check_tcp(pcap)["fin"] == 2
    out = decode(pcap, capsys)
    assert "(lumberjack; c2s" in out and " W " in out and " A " in out and "error" not in out


async def test_chaos_pcap_has_both_sides_of_the_proxy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcap = tmp_path / "chaos.pcapng"
    schedule = tmp_path / "s.toml"
    schedule.write_text('[[rule]]\nname = "drop-first-ack"\ndirection = "s2c"\ntype = "A"\nnth = 1\nconnection = 1\naction = "drop"\n')
    got: list[int] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            server, address = await lumberjack_server(nursery, got)
            args = build_parser().parse_args(
                ["chaos", "lumberjack", "--upstream", address, "--schedule", str(schedule), "--seed", "1", "--pcap", str(pcap)]
            )
            async with trio.open_nursery() as chaos:
                chaos.start_soon(args.func, args)
                line = await stderr_line(capsys, "listening on ")
                host, port = line.split("listening on ", 1)[1].split(",")[0].rsplit(":", 1)
                await send_all(host, int(port), ack_timeout=0.2)
                chaos.cancel_scope.cancel()  # (as Ctrl-C stops it; the file is closed on the way out)
            await server.shutdown(grace=0.5)
            nursery.cancel_scope.cancel()
    assert set(got) == set(range(len(EVENTS)))
    conns = read_pcap(pcap)
    upstream = ("127.0.0.1", int(address.rsplit(":", 1)[1]))
    to_proxy = [c for c in conns if c.server == (host, int(port))]
    to_server = [c for c in conns if c.server == upstream]
    assert len(to_proxy) == len(to_server) >= 2 and len(conns) == len(to_proxy) + len(to_server)  # the dropped ack: a reconnect
    first_client, first_server = to_proxy[0], to_server[0]
    assert first_client.data["c2s"] == first_server.data["c2s"]  # no rule on c2s: passed on as sent
    assert len(first_client.data["s2c"]) < len(first_server.data["s2c"])  # the server's first ack never reached the client
    check_tcp(pcap)
    out = decode(pcap, capsys)
    assert out.count("(lumberjack; c2s") == len(conns) and " A " in out and " W " in out


def test_sim_pcap_is_the_seeds_and_the_same_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one, two = tmp_path / "one.pcapng", tmp_path / "two.pcapng"
    for path in (one, two):
        assert main(["sim", "lumberjack", "--seed", "3", "--pcap", str(path)]) == 0
    assert one.read_bytes() == two.read_bytes()
    counts = check_tcp(one)
    assert counts["syn"] >= 2 and counts["data"] > 0
    conns = read_pcap(one)
    assert {c.server for c in conns} == {(synthetic_ipv4("lumberjack-server"), 5044)}
    assert all(not c.gaps for c in conns)
    out = decode(one, capsys, status=(0, 1))  # (1: the seed's faults cut a frame short, decode says so)
    assert "(lumberjack; c2s" in out and " J " in out and " A " in out


def test_sim_pcap_with_several_seeds_writes_one_file_per_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.pcapng"
    assert main(["sim", "tank", "--seeds", "2", "--pcap", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run-0.pcapng", "run-1.pcapng"]
    assert "pcapng one file per run" in capsys.readouterr().err
    for p in tmp_path.iterdir():
        check_tcp(p)  # (seed 0 resets connections: an RST ends them)


def test_ctrl_c_on_record_is_130_and_the_pcap_holds_the_live_connection(tmp_path: Path) -> None:
    """A connection still open when Ctrl-C stops ``refwire record --pcap``: exit
    130, and the file ends with it closed (the tap's FIN each way)."""
    import signal
    import socket
    import subprocess
    import sys

    pcap = tmp_path / "live.pcapng"
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        port = upstream.getsockname()[1]
        cmd = [sys.executable, "-m", "refwire.cli", "record", "--upstream", f"127.0.0.1:{port}", "--out", str(tmp_path / "cap")]
        proc = subprocess.Popen([*cmd, "--pcap", str(pcap)], stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            assert "listening on " in line, line
            host, tport = line.split("listening on ", 1)[1].strip().rsplit(":", 1)
            with socket.create_connection((host, int(tport)), timeout=10) as client:
                client.sendall(b"hello")
                server, _ = upstream.accept()
                with server:
                    server.settimeout(10)
                    assert server.recv(16) == b"hello"
                    proc.send_signal(signal.SIGINT)
                    _, err = proc.communicate(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert f"into {tmp_path / 'cap'} and {pcap}" in err, err  # (a connection cut by the stop is not counted)
    (conn,) = read_pcap(pcap)
    assert bytes(conn.data["c2s"]) == b"hello" and conn.server == ("127.0.0.1", port)
    assert check_tcp(pcap)["fin"] == 2
