"""Driving a Pravega :class:`ServerConnection` by hand (specs/pravega/README.md §5): a
:class:`Harness` that applies the segment store's outcomes as the trio server
does, the encoded append frames the tests feed it, and a server with writers
already set up."""

from __future__ import annotations

import uuid

from refwire.errors import RemoteProtocolError
from refwire.pravega.connection import ServerConnection
from refwire.pravega.events import Append, ConnectionClosed, HelloReceived, KeepAliveReceived, RequestReceived
from refwire.pravega.frames import (
    AppendBlock,
    AppendBlockEnd,
    AppendSetup,
    Command,
    CommandDecoder,
    SetupAppend,
    encode_event,
)
from refwire.pravega.service import SegmentStoreService
from refwire.pravega.store import SegmentStore
from refwire.sansio import NEED_DATA
from refwire.wire import Limits

#: The segment every helper here sets writers up on.
SEG = "sc/st/0.#epoch.0"
#: Two writer ids, and two encoded events (``hello``, ``world``: 13 bytes each).
W = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
W2 = uuid.UUID("ffeeddcc-bbaa-9988-7766-554433221100")
E1 = encode_event(b"hello")
E2 = encode_event(b"world")


class Harness:
    """A ServerConnection + SegmentStoreService + SegmentStore, applying outcomes as
    ``SegmentStoreServer``'s connection handler does (synchronously; the store is durable at once)."""

    def __init__(self, store: SegmentStore | None = None, *, fast: bool | None = None) -> None:
        if store is None:
            store = SegmentStore()
            store.create(SEG)
        self.store = store
        self.service = SegmentStoreService(store)
        self.conn = ServerConnection(fast=fast)
        self.closed = False
        self.error: RemoteProtocolError | None = None

    def feed(self, data: bytes) -> list[Command]:
        """Bytes in; the decoded server replies out (in order)."""
        out = bytearray()
        if data and not self.closed:  # b"" only runs the machine; EOF is conn.receive_data(b"", now=0.0)
            self.conn.receive_data(data, now=0.0)
        while not self.closed:
            try:
                ev = self.conn.next_event()
            except RemoteProtocolError as exc:
                self.error = exc
                self.closed = True
                break
            if isinstance(ev, Append):
                res = self.service.append(ev)
                if res.kind == "ok":
                    self.conn.append_stored(ev, self.store.segments[ev.segment].length, now=0.0)
                elif res.kind == "conditional":
                    self.conn.append_conditional_failed(ev, now=0.0)
                elif res.kind == "failed":
                    assert res.reply is not None
                    self.conn.append_failed(ev, res.reply, now=0.0)
                else:
                    if res.reply is not None:
                        self.conn.send(res.reply, now=0.0)
                    self.closed = True
                out += self.conn.data_to_send()
            elif isinstance(ev, RequestReceived):
                o = self.service.process(ev.command)
                if o.reply is not None:
                    self.conn.send(o.reply, now=0.0)
                out += self.conn.data_to_send()
                if o.close:
                    self.closed = True
            elif isinstance(ev, HelloReceived | KeepAliveReceived):
                out += self.conn.data_to_send()
                if self.conn.must_close:
                    self.closed = True
            elif isinstance(ev, ConnectionClosed):
                self.closed = True
            else:
                assert ev is NEED_DATA
                break
        dec = CommandDecoder()
        dec.feed(bytes(out))
        replies = list(dec.commands())
        assert dec.buffered == 0
        return replies

    def setup(self, writer: uuid.UUID = W, rid: int = 1, segment: str = SEG) -> AppendSetup:
        """Send a SetupAppend for ``writer``; the AppendSetup it gets back."""
        (reply,) = self.feed(SetupAppend(request_id=rid, writer_id=writer, segment=segment).encode())
        assert isinstance(reply, AppendSetup)
        return reply

    @property
    def data(self) -> bytes:
        """The bytes stored in :data:`SEG`."""
        return bytes(self.store.segments[SEG].data)


def block_end(size: int, data: bytes, num: int, last: int, rid: int = 2, writer: uuid.UUID = W) -> bytes:
    """An encoded AppendBlockEnd of ``writer`` (``num`` events up to ``last``, ``size`` bytes of them in the block)."""
    return AppendBlockEnd(
        writer_id=writer, size_of_whole_events=size, data=data, num_events=num, last_event_number=last, request_id=rid
    ).encode()


def block(data: bytes, writer: uuid.UUID = W) -> bytes:
    """An encoded AppendBlock of ``writer`` holding ``data``."""
    return AppendBlock(writer_id=writer, data=data).encode()


def ready(
    limits: Limits | None = None, *, writers: tuple[uuid.UUID, ...] = (W,), last: int = 0, fast: bool | None = None
) -> ServerConnection:
    """A server with ``writers`` set up on SEG (AppendSetup sent with ``last``)."""
    s = ServerConnection(limits, fast=fast) if limits is not None else ServerConnection(fast=fast)
    for i, w in enumerate(writers):
        s.receive_data(SetupAppend(request_id=i + 1, writer_id=w, segment=SEG).encode(), now=0.0)
        assert isinstance(s.next_event(), RequestReceived)
        s.send(AppendSetup(request_id=i + 1, segment=SEG, writer_id=w, last_event_number=last), now=0.0)
    s.data_to_send()
    return s


def where(e: RemoteProtocolError) -> tuple[str, str | None, str | None, int | None]:
    """Where an error points: (protocol, frame, field, offset)."""
    return (e.protocol or "", e.frame, e.field, e.offset)
