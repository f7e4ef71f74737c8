"""Recorded traffic on disk: capture directories, tcpflow directories and pcap files.

The unit is one raw byte file per connection and
direction.  A *capture directory* (what ``refwire record`` writes) holds

* ``<conn>.c2s`` and ``<conn>.s2c``: the bytes each side sent, exactly;
* ``<conn>.json``: ``{"conn", "client", "server", "started", "ended",
  "times": {"c2s": [[offset, unix_time], ...], "s2c": [...]}}`` -- when each
  received chunk began, so a frame's time can be looked up (the note's
  cross-direction-ordering pitfall), and ``"gaps"`` when bytes were missing.

A *tcpflow directory* has files named ``SRCIP.SRCPORT-DSTIP.DSTPORT`` (IP
octets and ports zero-padded, as tcpflow 1.6 writes them); the side with the
lower port, or the one in ``server_ports``, is the server.  A *pcap* (or
pcapng) file is reassembled per TCP connection with dpkt
(:func:`read_pcap`) and can be written out as a capture directory.
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
import socket
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final

import attrs

from ..errors import RefwireError
from .decoders import FrameRow, decode_stream

__all__ = [
    "CaptureError",
    "Stream",
    "TcpConnection",
    "connection_protocols",
    "decode_capture",
    "frame_dict",
    "is_pcap",
    "list_streams",
    "peer_path",
    "plan_partitions",
    "read_chunks",
    "read_pcap",
    "sniff_protocol",
    "write_capture",
]

DIRECTIONS = ("c2s", "s2c")
CHUNK = 1 << 20
_CONN_FILE = re.compile(r"^(?P<conn>.+)\.(?P<dir>c2s|s2c)$")
_TCPFLOW = re.compile(r"^(?P<a>\d{3}\.\d{3}\.\d{3}\.\d{3})\.(?P<ap>\d{5})-(?P<b>\d{3}\.\d{3}\.\d{3}\.\d{3})\.(?P<bp>\d{5})(?P<tag>c\d+)?$")


#: ``(conn, direction, path, size, meta_path)``: a :class:`Stream` as plain, picklable data.
StreamTuple = tuple[str, str, str, int, str | None]


@attrs.frozen(order=True)
class Stream:
    """One direction of one recorded connection."""

    conn: str
    direction: str  #: "c2s" or "s2c"
    path: str
    size: int
    meta_path: str | None = None  #: the capture's ``<conn>.json`` (timestamps), if any


def is_pcap(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            magic = f.read(4)
    except OSError:
        return False
    return magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x0a\x0d\x0d\x0a")


def _tcpflow_endpoint(ip: str, port: str) -> tuple[str, int]:
    return ".".join(str(int(o)) for o in ip.split(".")), int(port)


def list_streams(path: str | Path, *, server_ports: Iterable[int] = ()) -> list[Stream]:
    """Every stream of a capture directory, a tcpflow directory, or single ``.c2s``/``.s2c`` files."""
    p = Path(path)
    if p.is_file():
        m = _CONN_FILE.match(p.name)
        if m is None:
            head = _head_bytes(p)
            raise CaptureError(
                f"{p}: not a capture: neither a pcap/pcapng file (it starts with {head.hex(' ') or 'nothing'}, "
                "not a pcap magic number) nor a .c2s/.s2c stream file"
            )
        meta = p.with_name(m["conn"] + ".json")
        return [Stream(m["conn"], m["dir"], str(p), p.stat().st_size, str(meta) if meta.exists() else None)]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such capture file or directory")
    out: list[Stream] = []
    flows: dict[str, Path] = {}
    for f in sorted(p.iterdir()):
        if not f.is_file():
            continue
        m = _CONN_FILE.match(f.name)
        if m is not None:
            meta = f.with_name(m["conn"] + ".json")
            out.append(Stream(m["conn"], m["dir"], str(f), f.stat().st_size, str(meta) if meta.exists() else None))
        elif _TCPFLOW.match(f.name):
            flows[f.name] = f
    servers = set(server_ports)
    for name, f in flows.items():
        m = _TCPFLOW.match(name)
        assert m is not None
        src, dst = _tcpflow_endpoint(m["a"], m["ap"]), _tcpflow_endpoint(m["b"], m["bp"])
        src_is_server = src[1] in servers or (dst[1] not in servers and src[1] < dst[1])
        client, server = (dst, src) if src_is_server else (src, dst)
        conn = f"{client[0]}.{client[1]}-{server[0]}.{server[1]}{m['tag'] or ''}"
        out.append(Stream(conn, "s2c" if src_is_server else "c2s", str(f), f.stat().st_size))
    return sorted(out)


def plan_partitions(streams: list[StreamTuple], n: int) -> list[list[StreamTuple]]:
    """Group streams by connection, then deal connections (largest first) to the ``n``
    least-loaded partitions."""
    by_conn: dict[str, list[StreamTuple]] = {}
    for s in streams:
        by_conn.setdefault(s[0], []).append(s)
    groups = sorted(by_conn.values(), key=lambda g: (-sum(s[3] for s in g), g[0][0]))
    n = max(1, min(n, len(groups)))
    parts: list[list[StreamTuple]] = [[] for _ in range(n)]
    load = [0] * n
    for g in groups:
        i = load.index(min(load))
        parts[i].extend(g)
        load[i] += sum(s[3] for s in g)
    return [sorted(p) for p in parts if p]


def read_chunks(path: str | Path, chunk_size: int = CHUNK) -> Iterator[bytes]:
    """A file's bytes in chunks of at most ``chunk_size`` (streaming: huge files are fine)."""
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk_size)
            if not b:
                return
            yield b


def _times(meta_path: str | None, direction: str) -> tuple[list[int], list[float]]:
    if meta_path is None:
        return [], []
    try:
        meta = json.loads(Path(meta_path).read_text())
        pairs = meta.get("times", {}).get(direction, [])
        return [int(o) for o, _ in pairs], [float(t) for _, t in pairs]
    except (OSError, ValueError, TypeError):
        return [], []


def frame_dict(protocol: str, stream: Stream, row: FrameRow, offsets: list[int], times: list[float], parent_end: int | None) -> dict[str, Any]:
    """A frames-table row (:data:`~refwire.pipeline.decoders.FRAME_COLUMNS`)."""
    ts = None
    if offsets:
        last_byte = (parent_end if parent_end is not None else row.offset + max(row.size, 1)) - 1
        i = bisect.bisect_right(offsets, last_byte) - 1
        ts = times[max(i, 0)]
    return {
        "protocol": protocol,
        "conn": stream.conn,
        "direction": stream.direction,
        "frame_no": row.frame_no,
        "offset": row.offset,
        "parent_offset": row.parent_offset,
        "type": row.type,
        "size": row.size,
        "seq": row.seq,
        "count": row.count,
        "name": row.name,
        "fields_json": row.fields_json,
        "error": row.error,
        "ts": ts,
    }


def peer_path(stream: Stream) -> Path | None:
    """The file holding the other direction of ``stream``'s connection, if it exists:
    ``<conn>.s2c`` for ``<conn>.c2s`` (and back), or the tcpflow file with the
    endpoints swapped."""
    p = Path(stream.path)
    m = _CONN_FILE.match(p.name)
    if m is not None:
        other = p.with_name(f"{m['conn']}.{'s2c' if m['dir'] == 'c2s' else 'c2s'}")
    else:
        t = _TCPFLOW.match(p.name)
        if t is None:
            return None
        other = p.with_name(f"{t['b']}.{t['bp']}-{t['a']}.{t['ap']}{t['tag'] or ''}")
    return other if other.is_file() else None


def decode_stream_file(protocol: str, stream: Stream, chunk_size: int = CHUNK) -> Iterator[dict[str, Any]]:
    """Frames-table rows of one stream file, read chunk by chunk.  The other
    direction of the connection (:func:`peer_path`) is handed to the decoder
    for the protocols whose framing depends on it (Seastar RPC, TANK).

    A stream whose first bytes do not decode but which holds good frames
    further on (a capture started mid-connection, leading garbage) is decoded
    from the first good frame (:func:`resync_offset`); the bytes skipped are
    one error row of kind ``Resync`` at offset 0."""
    offsets, times = _times(stream.meta_path, stream.direction)
    parents: dict[int, int] = {}
    other = peer_path(stream)
    peer = None if other is None else (lambda: read_chunks(other, chunk_size))
    start = resync_offset(protocol, stream)
    rows: Iterable[FrameRow]
    if start:
        skipped = FrameRow(
            0,
            0,
            "error",
            0,
            fields_json=json.dumps({"frame": None, "field": None, "reason": f"{start} bytes before the first good frame skipped", "kind": "Resync"}),
            error=f"{start} bytes before the first good frame skipped (the capture starts inside a frame, or with bytes that are not {protocol})",
        )
        rows = itertools.chain([skipped], _shifted(decode_stream(protocol, _skip(read_chunks(stream.path, chunk_size), start), stream.direction, peer), start))
    else:
        rows = decode_stream(protocol, read_chunks(stream.path, chunk_size), stream.direction, peer)
    last = -1
    for row in rows:
        last = row.frame_no
        if row.parent_offset is None and row.type != "error":
            parents[row.offset] = row.offset + row.size
        yield frame_dict(protocol, stream, row, offsets, times, parents.get(row.parent_offset) if row.parent_offset is not None else None)
    cut = _cut(stream)
    if cut is not None:  # (once a capture: on its last connection's c2s stream)
        why, when = cut
        reason = {"frame": None, "field": None, "reason": why, "kind": "CaptureCut"}
        row = FrameRow(last + 1, stream.size, "error", 0, fields_json=json.dumps(reason), error=why)
        out = frame_dict(protocol, stream, row, offsets, times, None)
        if when is not None:
            out["ts"] = when + 1e-6  # just after the last whole packet, of either direction: the line comes last
        yield out


def _cut(stream: Stream) -> tuple[str, float | None] | None:
    """The "capture is cut" message :func:`write_capture` left in the meta of a
    pcap's last connection (for its c2s stream: one line a capture), and the
    time of that connection's last packet."""
    if stream.meta_path is None or stream.direction != "c2s":
        return None
    try:
        meta = json.loads(Path(stream.meta_path).read_text())
        cut = meta.get("cut")
        stamps = [float(t) for pairs in meta.get("times", {}).values() for _, t in pairs]
    except (OSError, ValueError, AttributeError, TypeError):
        return None
    return (cut, max(stamps, default=None)) if isinstance(cut, str) else None


def _skip(chunks: Iterable[bytes], n: int) -> Iterator[bytes]:
    """``chunks`` without their first ``n`` bytes."""
    for c in chunks:
        if n >= len(c):
            n -= len(c)
            continue
        yield c[n:]
        n = 0


def _shifted(rows: Iterable[FrameRow], by: int) -> Iterator[FrameRow]:
    """Rows decoded from ``by`` bytes into the stream, with stream offsets (and frame numbers after the skip row)."""
    for r in rows:
        yield attrs.evolve(
            r,
            frame_no=r.frame_no + 1,
            offset=r.offset + by if r.parent_offset is None else r.offset,
            parent_offset=None if r.parent_offset is None else r.parent_offset + by,
        )


SNIFF_BYTES = 64 * 1024


#: How far into a stream's head a good frame is looked for when its first bytes do not decode.
RESYNC_SCAN = 4096
#: Good frames in a row (from a resync point, before any error) that count as finding the protocol.
RESYNC_FRAMES = 2


def _head_rows(protocol: str, stream: Stream, start: int = 0) -> list[FrameRow]:
    head = next(iter(read_chunks(stream.path, SNIFF_BYTES)), b"")
    other = peer_path(stream)
    peer_head = None if other is None else next(iter(read_chunks(other, SNIFF_BYTES)), b"")
    return list(decode_stream(protocol, [head[start:]], stream.direction, None if peer_head is None else (lambda: [peer_head])))


def _good_from_start(rows: list[FrameRow]) -> int:
    """Top-level frames decoded before the first error; -1 when the very first bytes fail."""
    if any(r.type == "error" and r.offset < 16 and r.parent_offset is None for r in rows):
        return -1
    return sum(r.type != "error" for r in rows)


def resync_offset(protocol: str, stream: Stream) -> int:
    """0 when ``stream`` decodes as ``protocol`` from its first byte; else the
    first offset in its first :data:`RESYNC_SCAN` bytes from which at least
    :data:`RESYNC_FRAMES` frames decode before any error (0 if there is none:
    the stream is decoded from the start and its error reported there)."""
    if _good_from_start(_head_rows(protocol, stream)) >= 0:
        return 0
    head = next(iter(read_chunks(stream.path, RESYNC_SCAN + 64)), b"")
    for k in range(1, min(len(head), RESYNC_SCAN)):
        rows = decode_stream(protocol, [head[k:]], stream.direction, None)
        good = 0
        for r in rows:
            if r.type == "error":
                break
            good += r.parent_offset is None
            if good >= RESYNC_FRAMES:
                break
        if good >= RESYNC_FRAMES and _good_from_start(_head_rows(protocol, stream, k)) > 0:
            return k
    return 0


def sniff_score(protocol: str, stream: Stream, *, resync: bool = False) -> int:
    """Frames ``protocol``'s decoder gets from the head of ``stream`` before an
    error, from its first byte or (``resync``), when those do not decode, from
    the first good frame (:func:`resync_offset`); -1 when none decodes."""
    score = _good_from_start(_head_rows(protocol, stream))
    if score >= 0 or not resync:
        return score
    k = resync_offset(protocol, stream)
    return -1 if k == 0 else _good_from_start(_head_rows(protocol, stream, k))


def sniff_protocol(streams: Iterable[Stream]) -> str | None:
    """The registered decoder that decodes the most frames from the heads of
    ``streams`` (ties: alphabetical); when none decodes their first bytes, the
    one that decodes the most from the first good frame on (a capture started
    mid-connection); None when none decodes anything."""
    from .decoders import decoder_names

    chosen = [s for s in streams if s.size][:8]
    for resync in (False, True):
        best, best_score = None, 0
        for proto in sorted(decoder_names()):
            score = sum(max(sniff_score(proto, s, resync=resync), 0) for s in chosen)
            if score > best_score:
                best, best_score = proto, score
        if best is not None:
            return best
    return None


def connection_protocols(path: str | Path, *, server_ports: Iterable[int] = ()) -> dict[str, str | None]:
    """conn -> the protocol its client stream (else its server stream) decodes as."""
    by_conn: dict[str, list[Stream]] = {}
    for s in list_streams(path, server_ports=server_ports):
        by_conn.setdefault(s.conn, []).append(s)
    out: dict[str, str | None] = {}
    for conn, streams in by_conn.items():
        c2s = [s for s in streams if s.direction == "c2s" and s.size]
        out[conn] = sniff_protocol(c2s or streams)
    return out


def decode_capture(protocol: str | None, path: str | Path, *, server_ports: Iterable[int] = ()) -> Iterator[dict[str, Any]]:
    """Every frames-table row of a capture (a plain loop; Spark uses the data source).
    ``protocol`` None (or ``"auto"``) guesses it per connection, so one capture may
    hold several protocols; a connection nothing recognises is skipped."""
    auto = protocol in (None, "auto")
    protos = connection_protocols(path, server_ports=server_ports) if auto else {}
    for stream in list_streams(path, server_ports=server_ports):
        proto = protos.get(stream.conn) if auto else protocol
        if proto is not None:
            yield from decode_stream_file(proto, stream)


# --------------------------------------------------------------------------- pcap


class CaptureError(RefwireError, ValueError):
    """A capture file that cannot be read as one: the message names the file,
    the byte offset and what is wrong there."""


def _head_bytes(path: Path, n: int = 4) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


#: pcap magic numbers (as the file's first 4 bytes) -> (byte order, nanosecond timestamps)
_PCAP_MAGICS: Final = {
    b"\xd4\xc3\xb2\xa1": ("<", False),
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),
    b"\xa1\xb2\x3c\x4d": (">", True),
}
#: a record longer than this is not a packet but damage (pcap's own snaplen cap is 256 KiB)
_MAX_RECORD: Final = 16 * 1024 * 1024


class _PcapRecords:
    """The records of a classic pcap file, each checked: ``cut`` is set (a
    message) when the file ends inside a record, instead of the short record
    being handed on as a packet; damage is :class:`CaptureError` with its offset."""

    def __init__(self, f: BinaryIO, path: str) -> None:
        self.path = path
        self.cut: str | None = None
        self._f = f
        head = f.read(24)
        if len(head) < 24:
            raise CaptureError(
                f"{path}: the pcap file is cut at offset {len(head)}, inside its 24-byte file header: no packets to decode"
            )
        order, nano = _PCAP_MAGICS[head[:4]]
        self._order = order
        self._divisor = 1e9 if nano else 1e6
        major, _minor, _zone, _sigfigs, self.snaplen, self.linktype = struct.unpack(order + "HHiIII", head[4:24])
        if major != 2:
            raise CaptureError(f"{path}: offset 4: pcap version {major} (a pcap file says 2): not a pcap file, or damaged")

    def datalink(self) -> int:
        return int(self.linktype)

    def __iter__(self) -> Iterator[tuple[float, bytes]]:
        f, path = self._f, self.path
        rec = struct.Struct(self._order + "IIII")
        offset = 24
        n = 0
        while True:
            head = f.read(16)
            if not head:
                return
            n += 1
            if len(head) < 16:
                self.cut = (
                    f"the capture {path} is cut at offset {offset + len(head)}: packet {n}'s 16-byte record header "
                    f"(at offset {offset}) has only {len(head)} bytes; the packets before it are decoded"
                )
                return
            sec, frac, caplen, _origlen = rec.unpack(head)
            if caplen > _MAX_RECORD:
                raise CaptureError(
                    f"{path}: offset {offset}: packet {n}'s record says it holds {caplen} bytes: "
                    "the file is damaged here (or it is not a pcap file)"
                )
            data = f.read(caplen)
            if len(data) < caplen:
                self.cut = (
                    f"the capture {path} is cut at offset {offset + 16 + len(data)}: packet {n} (at offset {offset}) "
                    f"has {len(data)} of its {caplen} bytes; the packets before it are decoded"
                )
                return
            offset += 16 + caplen
            yield sec + frac / self._divisor, data


@attrs.define
class TcpConnection:
    """One TCP connection reassembled from a pcap."""

    client: tuple[str, int]
    server: tuple[str, int]
    data: dict[str, bytearray] = attrs.Factory(lambda: {"c2s": bytearray(), "s2c": bytearray()})
    times: dict[str, list[tuple[int, float]]] = attrs.Factory(lambda: {"c2s": [], "s2c": []})
    gaps: dict[str, int] = attrs.Factory(dict)  #: direction -> offset of the first missing byte
    started: float = 0.0
    #: set on the last connection of a pcap that ends inside a packet: what is missing, in words
    cut: str | None = None


def _ip_packets(reader: Any) -> Iterator[tuple[float, Any]]:
    import dpkt  # type: ignore[import-untyped]

    link = reader.datalink()
    for ts, buf in reader:
        try:
            if link == dpkt.pcap.DLT_EN10MB:
                ip = dpkt.ethernet.Ethernet(buf).data
            elif link == dpkt.pcap.DLT_LINUX_SLL:
                ip = dpkt.sll.SLL(buf).data
            elif link in (dpkt.pcap.DLT_NULL, dpkt.pcap.DLT_LOOP):
                ip = dpkt.loopback.Loopback(buf).data
            elif link in (dpkt.pcap.DLT_RAW, 101):
                ip = dpkt.ip.IP(buf) if buf and buf[0] >> 4 == 4 else dpkt.ip6.IP6(buf)
            else:
                raise ValueError(f"unsupported pcap link type {link}")
        except (dpkt.UnpackError, IndexError):
            continue
        if isinstance(ip, dpkt.ip.IP | dpkt.ip6.IP6) and isinstance(ip.data, dpkt.tcp.TCP):
            yield float(ts), ip


def _addr(ip: Any, raw: bytes) -> str:
    import dpkt

    return socket.inet_ntop(socket.AF_INET if isinstance(ip, dpkt.ip.IP) else socket.AF_INET6, raw)


def read_pcap(path: str | Path, *, server_ports: Iterable[int] = ()) -> list[TcpConnection]:
    """Reassemble every TCP connection of a pcap/pcapng file (dpkt).

    Segments are placed by sequence number relative to the SYN (or to the first
    segment seen), so reordering and retransmissions are undone; bytes after a
    hole in the sequence space are dropped and the hole is recorded in ``gaps``.
    The client is the side that sent the SYN, else the side not in
    ``server_ports``, else the side with the higher port.
    """
    import dpkt

    servers = set(server_ports)
    segs: dict[int, list[tuple[float, int, bytes]]] = {}  # (conn index * 2 + dir) -> (ts, seq, payload)
    isn: dict[int, int] = {}
    conns: list[TcpConnection] = []
    live: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
    with open(path, "rb") as f:
        head = f.read(4)
        f.seek(0)
        if head in _PCAP_MAGICS:
            reader: Any = _PcapRecords(f, str(path))
        elif head == b"\x0a\x0d\x0d\x0a":
            try:
                reader = dpkt.pcapng.Reader(f)
            except (dpkt.NeedData, dpkt.UnpackError, ValueError) as exc:
                raise CaptureError(f"{path}: offset {f.tell()}: not a readable pcapng section header ({exc or 'cut short'})") from None
        else:
            raise CaptureError(f"{path}: not a pcap/pcapng file (it starts with {head.hex(' ') or 'nothing'})")
        try:
            packets = list(_ip_packets(reader))
        except (dpkt.NeedData, dpkt.UnpackError, struct.error) as exc:  # (pcapng: dpkt reads the blocks)
            raise CaptureError(
                f"{path}: offset {f.tell()}: the pcapng file is cut or damaged here ({exc or type(exc).__name__})"
            ) from None
        for ts, ip in packets:
            tcp = ip.data
            src, dst = (_addr(ip, ip.src), tcp.sport), (_addr(ip, ip.dst), tcp.dport)
            syn_only = bool(tcp.flags & dpkt.tcp.TH_SYN) and not tcp.flags & dpkt.tcp.TH_ACK
            key = (src, dst) if (src, dst) in live else (dst, src)
            idx = live.get(key)
            if idx is not None and syn_only and conns[idx].client == src and (segs.get(2 * idx) or segs.get(2 * idx + 1)):
                idx = None  # the 4-tuple is reused by a new connection
            if idx is None:
                if syn_only or dst[1] in servers:
                    client, server = src, dst
                elif src[1] in servers:
                    client, server = dst, src
                else:
                    client, server = (src, dst) if src[1] > dst[1] else (dst, src)
                idx = len(conns)
                conns.append(TcpConnection(client, server, started=ts))
                live[(client, server)] = idx
            conn = conns[idx]
            d = 2 * idx + (0 if src == conn.client else 1)
            if tcp.flags & dpkt.tcp.TH_SYN:
                isn[d] = (tcp.seq + 1) & 0xFFFFFFFF
            if tcp.data:
                isn.setdefault(d, tcp.seq)
                segs.setdefault(d, []).append((ts, tcp.seq, bytes(tcp.data)))
    for idx, conn in enumerate(conns):
        for k, direction in enumerate(DIRECTIONS):
            d = 2 * idx + k
            placed = sorted(((seq - isn[d]) & 0xFFFFFFFF, ts, data) for ts, seq, data in segs.get(d, []))
            out = conn.data[direction]
            for rel, ts, data in placed:
                end = rel + len(data)
                if rel > len(out):
                    conn.gaps[direction] = len(out)
                    break
                if end <= len(out):
                    continue  # retransmission of bytes already placed
                conn.times[direction].append((len(out), ts))
                out += data[len(out) - rel :]
    cut = getattr(reader, "cut", None)
    if cut is not None:
        if not conns:
            raise CaptureError(f"{cut.split('; ')[0]}, and no whole TCP packet comes before it: nothing to decode")
        conns[-1].cut = cut
    return conns


def write_capture(conns: Iterable[TcpConnection], out: str | Path) -> list[Path]:
    """Write connections as a capture directory (``connNNNNN.c2s/.s2c/.json``)."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for i, conn in enumerate(conns, 1):
        name = f"conn{i:05d}"
        for direction in DIRECTIONS:
            p = d / f"{name}.{direction}"
            p.write_bytes(bytes(conn.data[direction]))
            written.append(p)
        meta = {
            "conn": name,
            "client": f"{conn.client[0]}:{conn.client[1]}",
            "server": f"{conn.server[0]}:{conn.server[1]}",
            "started": conn.started,
            "times": {k: [[o, t] for o, t in v] for k, v in conn.times.items()},
            "gaps": conn.gaps,
        }
        if conn.cut is not None:
            meta["cut"] = conn.cut
        (d / f"{name}.json").write_text(json.dumps(meta))
    return written
