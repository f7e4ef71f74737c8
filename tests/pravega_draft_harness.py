"""Test helpers for the Pravega 2017 draft dialect: a synchronous model of
:class:`refwire.pravega.draft2017.server.DraftFrontend` (a Sans-IO
:class:`ServerConnection` + a :class:`SegmentStore`, durable at once), and the
vectors' segment shape (specs/pravega-draft-2017/README.md §12)."""

from __future__ import annotations

import uuid
from typing import Any

from refwire.errors import RemoteProtocolError
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, REPLY_PART_SIZE, ServerConnection
from refwire.pravega.draft2017.events import BlockAppend, ConnectionClosed, KeepAliveReceived, RequestReceived
from refwire.pravega.draft2017.frames import AppendSetup, ReadSegment, SegmentRead, SetupAppend
from refwire.pravega.draft2017.server import level_attribute
from refwire.pravega.errors import StoreError
from refwire.pravega.frames import NULL_VALUE
from refwire.pravega.store import SegmentStore
from refwire.sansio import NEED_DATA
from refwire.wire import Limits


def level(store: SegmentStore, segment: str, cid: uuid.UUID) -> int:
    value = store.writer_attribute(segment, level_attribute(cid))
    return 0 if value == NULL_VALUE else value


class DraftHarness:
    """Bytes in, the server's bytes out, applying events as the frontend does
    (reads at the tail are parked forever: no time passes)."""

    def __init__(
        self, store: SegmentStore | None = None, *, reply_part_size: int = REPLY_PART_SIZE, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.store = store if store is not None else SegmentStore()
        self.conn = ServerConnection(limits, reply_part_size=reply_part_size)
        self.closed = False
        self.error: RemoteProtocolError | None = None
        self.refused = ""  #: why the store side closed, if it did
        self.events: list[Any] = []
        self.parked: list[ReadSegment] = []
        self.now = 0.0  #: no time passes

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        if data and not self.closed:
            self.conn.receive_data(data, now=self.now)
        while not self.closed:
            try:
                ev = self.conn.next_event()
            except RemoteProtocolError as exc:
                self.error = exc
                self.closed = True
                break
            if ev is NEED_DATA:
                break
            self.events.append(ev)
            if isinstance(ev, BlockAppend):
                try:
                    seg = self.store.get(ev.segment)
                    ok = not seg.sealed and level(self.store, ev.segment, ev.connection_id) == ev.previous_level
                    if ok and ev.data:
                        self.store.append(ev.segment, ev.data, writer_id=level_attribute(ev.connection_id), event_number=ev.level)
                except StoreError:
                    ok = False
                if not ok:
                    self.refused = "block refused"
                    self.closed = True
                    break
                self.conn.block_stored(ev, now=self.now)
            elif isinstance(ev, RequestReceived):
                cmd = ev.command
                try:
                    if isinstance(cmd, SetupAppend):
                        lv = level(self.store, cmd.segment, cmd.connection_id)
                        self.conn.send(
                            AppendSetup(segment=cmd.segment, connection_id=cmd.connection_id, connection_offset_ack_level=lv),
                            now=self.now,
                        )
                    elif isinstance(cmd, ReadSegment):
                        r = self.store.read(cmd.segment, cmd.offset, cmd.suggested_length)
                        if r is None:
                            self.parked.append(cmd)
                        else:
                            self.conn.send(
                                SegmentRead(
                                    segment=cmd.segment,
                                    offset=cmd.offset,
                                    at_tail=r.at_tail,
                                    end_of_segment=r.end_of_segment,
                                    data=r.data,
                                ),
                                now=self.now,
                            )
                except StoreError as exc:
                    self.refused = f"{cmd.NAME}: {exc}"
                    self.closed = True
                    break
            elif isinstance(ev, KeepAliveReceived):
                pass  # the machine queued the echo
            elif isinstance(ev, ConnectionClosed):
                self.closed = True
            out += self.conn.data_to_send()
        return bytes(out)

    def eof(self) -> bytes:
        if not self.closed:
            self.conn.receive_data(b"", now=self.now)
        return self.feed(b"")


# --------------------------------------------------------------------------- vector segments


def populate(store: SegmentStore, segments: list[dict[str, Any]]) -> None:
    """``initial_segments``: ``data`` holds the bytes from offset 0, those below
    ``start_offset`` truncated; ``connections`` the stored ack levels."""
    for s in segments:
        store.create(s["name"])
        seg = store.segments[s["name"]]
        data = bytes.fromhex(s["data"])
        start = s["start_offset"]
        seg.start_offset = start
        seg.data = bytearray(data[start:])
        seg.length = seg.visible = len(data)
        seg.sealed = seg.sealed_visible = s["sealed"]
        seg.attributes = {level_attribute(uuid.UUID(c)): n for c, n in s["connections"].items()}


def check_final(store: SegmentStore, final: list[dict[str, Any]]) -> None:
    assert sorted(store.segments) == sorted(s["name"] for s in final)
    for s in final:
        seg = store.segments[s["name"]]
        data = bytes.fromhex(s["data"])
        assert seg.start_offset == s["start_offset"]
        assert bytes(seg.data).hex() == data[s["start_offset"] :].hex()
        assert seg.length == len(data)
        assert seg.sealed == s["sealed"]
        want = {level_attribute(uuid.UUID(c)): n for c, n in s["connections"].items()}
        assert seg.attributes == want, (seg.attributes, s["connections"])


def stream_hex(v: dict[str, Any]) -> bytes:
    if "hex" in v:
        return bytes.fromhex(v["hex"])
    return bytes.fromhex(v["hex_prefix"]) + bytes.fromhex(v["hex_repeat"]) * int(v["repeat"]) + bytes.fromhex(v["hex_suffix"])
