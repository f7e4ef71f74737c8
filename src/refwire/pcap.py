"""Write TCP conversations as a pcapng file Wireshark opens (``--pcap FILE``).

``refwire record``, ``refwire chaos`` and ``refwire sim`` see their traffic as
chunks of bytes per connection and direction; :class:`PcapWriter` turns each
connection into one TCP conversation with synthetic Ethernet, IPv4 and TCP
headers (built with dpkt): a SYN / SYN-ACK / ACK handshake when it starts, one
segment per chunk (a chunk over :data:`MAX_SEGMENT` bytes, the most an IPv4
packet holds after its headers, is split), a FIN per direction (acknowledged by
the other side) or an RST at its end.  Sequence and acknowledgement numbers
follow the bytes exactly, so Wireshark's TCP analysis finds nothing to flag and
reassembles each stream; the SYNs announce a window scale of 2**14, so a
direction may carry about 1 GiB before its peer acknowledges it (a pure ACK is
added when more is outstanding).

The caller gives every timestamp (its run's clock: real time, or a
simulator's virtual time, so one seed gives one byte-identical file).  Blocks
(dpkt's :class:`dpkt.pcapng.Writer` makes them) go to the file as they come,
each with one unbuffered write: nothing is held in memory, and a file cut short
by a crash is valid up to its last whole block.

Shared by the commands (one level below them): it names no protocol.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import socket
import zlib
from pathlib import Path
from types import TracebackType
from typing import Any, Final

__all__ = ["MAX_SEGMENT", "PcapPathError", "PcapWriter", "TcpConversation", "numbered_path", "synthetic_ipv4"]

#: Payload bytes of the largest segment: 65535 (IPv4 total length) - 20 (IPv4) - 20 (TCP).
MAX_SEGMENT: Final = 65535 - 20 - 20
#: Snapshot length in the interface description: more than the largest frame (14 + 65535 bytes).
SNAPLEN: Final = 262144
#: The window scale the SYNs announce (RFC 7323): an advertised 65535 means 65535 << 14 bytes.
WINDOW_SHIFT: Final = 14
#: Outstanding bytes in one direction after which the receiver sends a pure ACK (well below the window).
_ACK_EVERY: Final = 1 << 28
_MODULO: Final = 1 << 32
#: MSS 65495, NOP, window scale 14: the options of a SYN and a SYN-ACK.
_SYN_OPTIONS: Final = bytes([2, 4, MAX_SEGMENT >> 8, MAX_SEGMENT & 0xFF, 1, 3, 3, WINDOW_SHIFT])

Endpoint = tuple[str, int]


class PcapPathError(ValueError):
    """The pcap file cannot be written (its message is one line for a person)."""


def synthetic_ipv4(name: str) -> str:
    """A stable address in 10.0.0.0/8 for a host ``name`` that is no IPv4 address (a
    simulator's host name, an IPv6 address): the same name always maps to the same address."""
    h = hashlib.sha256(name.encode()).digest()
    return f"10.{h[0]}.{h[1]}.{1 + h[2] % 254}"


def _ipv4(host: str) -> bytes:
    """``host`` as 4 bytes: itself if it is an IPv4 address, 127.0.0.1 for the IPv6
    loopback, else :func:`synthetic_ipv4` of it."""
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return socket.inet_aton(synthetic_ipv4(host))
    if isinstance(addr, ipaddress.IPv6Address):
        mapped = addr.ipv4_mapped
        if mapped is not None:
            return mapped.packed
        return socket.inet_aton("127.0.0.1" if addr.is_loopback else synthetic_ipv4(host))
    return addr.packed


def _mac(ip: bytes) -> bytes:
    """A locally administered MAC address that carries the IPv4 address."""
    return b"\x02\x00" + ip


def numbered_path(path: str | os.PathLike[str], *parts: object) -> Path:
    """``path`` with ``-part-part`` inserted before its suffix (``run.pcapng``,
    7 -> ``run-7.pcapng``): one file per run when a command makes several."""
    p = Path(path)
    if not parts:
        return p
    tag = "-".join(str(x) for x in parts)
    return p.with_name(f"{p.stem}-{tag}{p.suffix}") if p.suffix else p.with_name(f"{p.name}-{tag}")


class _BlockFile:
    """An unbuffered file that writes each block whole (one block per call)."""

    def __init__(self, path: Path) -> None:
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o666)

    def write(self, data: bytes) -> int:
        if self._fd is None:
            raise ValueError("the pcap file is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        return len(data)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


class PcapWriter:
    """A pcapng file of TCP conversations, written as they happen.

    ``PcapWriter(path)`` creates (or truncates) the file and writes its section
    header and its one Ethernet interface; :meth:`connection` starts a
    conversation; :meth:`close` (or leaving a ``with`` block) closes the file.

    Raises:
        PcapPathError: the file cannot be created (the message says why, in one line).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        import dpkt  # type: ignore[import-untyped]

        self.path = Path(path)
        try:
            if self.path.is_dir():
                raise IsADirectoryError(21, "Is a directory", str(self.path))
            self._file: _BlockFile | None = _BlockFile(self.path)
        except OSError as exc:
            raise PcapPathError(f"cannot write the pcap file {self.path}: {exc.strerror or exc}") from None
        self._dpkt: Any = dpkt
        self._writer: Any = dpkt.pcapng.Writer(self._file, snaplen=SNAPLEN, linktype=dpkt.pcap.DLT_EN10MB)
        self.conversations = 0  #: conversations started so far
        self.packets = 0  #: packets written so far

    def connection(self, client: Endpoint | None, server: Endpoint | None, ts: float) -> TcpConversation:
        """Start a conversation between ``client`` and ``server`` (host, port) with its
        handshake at ``ts`` (seconds since the epoch, or the run's clock).  An unknown
        server is 127.0.0.1 port 1; an unknown client is 127.0.0.1, and a client's port 0
        a port of the conversation's own (32768 + its number), so no two share one."""
        self.conversations += 1
        n = self.conversations
        server = server or ("127.0.0.1", 1)
        client = client or ("127.0.0.1", 0)
        if client[1] == 0:
            client = (client[0], 32768 + n % 28000)
        return TcpConversation(self, client, server, n, ts)

    def close(self) -> None:
        """Close the file (idempotent); later packets are ignored."""
        if self._file is not None:
            f, self._file = self._file, None
            f.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._file is None

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _packet(self, ts: float, frame: bytes) -> None:
        if self._file is None:
            return
        self._writer.writepkt_time(frame, ts)
        self.packets += 1


class TcpConversation:
    """One TCP connection in a :class:`PcapWriter` (made by :meth:`PcapWriter.connection`).

    Directions are ``"c2s"`` (the client sends) and ``"s2c"``.  Every method is a
    no-op once the conversation was reset, and :meth:`send` after a direction's
    FIN is dropped (a stream never has bytes after its end).
    """

    def __init__(self, writer: PcapWriter, client: Endpoint, server: Endpoint, n: int, ts: float) -> None:
        self._w = writer
        tcp = writer._dpkt.tcp
        self._flags = tcp
        self._ip: dict[str, tuple[bytes, bytes]] = {
            "c2s": (_ipv4(client[0]), _ipv4(server[0])),
            "s2c": (_ipv4(server[0]), _ipv4(client[0])),
        }
        self._ports = {"c2s": (client[1] & 0xFFFF, server[1] & 0xFFFF), "s2c": (server[1] & 0xFFFF, client[1] & 0xFFFF)}
        # Initial sequence numbers: arbitrary but stable (Wireshark shows them relative).
        isn_c = zlib.crc32(f"{n}c".encode())
        isn_s = zlib.crc32(f"{n}s".encode())
        self._next = {"c2s": (isn_c + 1) % _MODULO, "s2c": (isn_s + 1) % _MODULO}
        self._acked = {"c2s": self._next["c2s"], "s2c": self._next["s2c"]}  #: what the other side acknowledged
        self._ip_id = {"c2s": n * 7 % 65536, "s2c": n * 13 % 65536}
        self.fin_sent: dict[str, bool] = {"c2s": False, "s2c": False}
        self.reset_by: str | None = None
        self._segment("c2s", ts, tcp.TH_SYN, b"", seq=isn_c, ack=0, options=_SYN_OPTIONS)
        self._segment("s2c", ts, tcp.TH_SYN | tcp.TH_ACK, b"", seq=isn_s, options=_SYN_OPTIONS)
        self._segment("c2s", ts, tcp.TH_ACK, b"")

    @property
    def ended(self) -> bool:
        """True once the conversation was reset or both directions sent their FIN."""
        return self.reset_by is not None or all(self.fin_sent.values())

    def send(self, direction: str, data: bytes | bytearray | memoryview, ts: float) -> None:
        """The bytes ``direction``'s sender sent (or, as the caller sees it, delivered) at ``ts``:
        one segment per :data:`MAX_SEGMENT` bytes."""
        if self.reset_by is not None or self.fin_sent[direction] or not data:
            return
        view = memoryview(data).cast("B")
        flags = self._flags.TH_ACK | self._flags.TH_PUSH
        for start in range(0, len(view), MAX_SEGMENT):
            self._segment(direction, ts, flags, bytes(view[start : start + MAX_SEGMENT]))
        other = _OTHER[direction]
        if (self._next[direction] - self._acked[direction]) % _MODULO >= _ACK_EVERY and not self.fin_sent[other]:
            self._segment(other, ts, self._flags.TH_ACK, b"")

    def fin(self, direction: str, ts: float) -> None:
        """``direction``'s sender closed its sending side (a FIN, acknowledged by the
        other side at once); once per direction."""
        if self.reset_by is not None or self.fin_sent[direction]:
            return
        self._segment(direction, ts, self._flags.TH_FIN | self._flags.TH_ACK, b"")
        self.fin_sent[direction] = True
        self._next[direction] = (self._next[direction] + 1) % _MODULO
        self._segment(_OTHER[direction], ts, self._flags.TH_ACK, b"")  # the other side acknowledges it

    def reset(self, direction: str, ts: float) -> None:
        """``direction``'s sender reset the connection (an RST); nothing follows it."""
        if self.ended:
            return
        self._segment(direction, ts, self._flags.TH_RST | self._flags.TH_ACK, b"")
        self.reset_by = direction

    def close(self, ts: float) -> None:
        """Both sides close what they have not closed yet (a FIN each), unless reset."""
        for direction in ("c2s", "s2c"):
            self.fin(direction, ts)

    def _segment(
        self, direction: str, ts: float, flags: int, payload: bytes, *, seq: int | None = None, ack: int | None = None,
        options: bytes = b"",
    ) -> None:
        dpkt = self._w._dpkt
        other = _OTHER[direction]
        seq = self._next[direction] if seq is None else seq
        if ack is None:
            ack = self._next[other]
            self._acked[other] = ack
        sport, dport = self._ports[direction]
        tcp = dpkt.tcp.TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, win=65535, data=payload)
        if options:
            tcp.opts = options
            tcp.off = 5 + len(options) // 4
        src, dst = self._ip[direction]
        self._ip_id[direction] = (self._ip_id[direction] + 1) % 65536
        ip = dpkt.ip.IP(src=src, dst=dst, p=dpkt.ip.IP_PROTO_TCP, ttl=64, id=self._ip_id[direction], df=1, data=tcp)
        frame = dpkt.ethernet.Ethernet(src=_mac(src), dst=_mac(dst), type=dpkt.ethernet.ETH_TYPE_IP, data=ip)
        self._w._packet(ts, bytes(frame))
        if payload:
            self._next[direction] = (seq + len(payload)) % _MODULO


_OTHER: Final = {"c2s": "s2c", "s2c": "c2s"}
