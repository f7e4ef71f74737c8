"""Pravega server cases S3: reads (tail reads, missing and sealed segments) and
table segments.
"""

from __future__ import annotations

from ....pravega.frames import (
    NULL_VALUE,
    CreateTableSegment,
    ReadSegment,
    ReadTable,
    SealSegment,
    SegmentRead,
    TableEntry,
    TableKey,
    TableRead,
    UpdateTableEntries,
    encode_event,
)
from ....pravega.writer import WriterSession
from ...conversation import Conversation
from ...model import expect
from ._common import (
    PASS,
    SERVERS,
    _write_all,
    create,
    has,
    hello,
    obs,
    read_all,
    replies,
    segment_of,
    server_book,
    setup,
    writer_of,
)

BOOK = server_book()
server_case = BOOK.server


# --------------------------------------------------------------------------- S3 reads


@server_case(
    "pv.S3.1",
    "tail-read-parks-and-wakes",
    "A read at the tail parks, and an append wakes it with the request's offset",
    "§6 (6)",
    "Create the case's segment and read at offset 0 (its tail): no answer for 0.5 s. Then append one event on the same "
    "connection. The read is answered with that event's bytes at offset 0, atTail; refwire sends the DataAppended first, "
    "the Java server in either order.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 3", "DataAppended 1", "SegmentRead 2"],
            "open",
            facts=["woken at offset 0 with the event"],
        ),
        expect(
            PASS,
            "java-server",
            ["Hello", "SegmentCreated 1", "AppendSetup 3", "SegmentRead 2", "DataAppended 1"],
            "open",
            facts=["woken at offset 0 with the event"],
        ),
    ],
)
async def s3_1(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.1")
    await hello(c)
    await create(c, 1, seg)
    await c.send(
        ReadSegment(segment=seg, offset=0, suggested_length=4096, request_id=2).encode(), label="ReadSegment @0 (the tail)"
    )
    await c.quiet(0.5)
    w = WriterSession(seg, writer_of(c), style="rust")
    await setup(c, 3, w)
    w.add(b"wake up")
    await _write_all(c, w, 1)
    await has(c, "SegmentRead 2", 2.0)
    for r in replies(c, SegmentRead):
        if r.request_id == 2 and r.offset == 0 and bytes(r.data) == encode_event(b"wake up"):
            c.note("woken at offset 0 with the event")


@server_case(
    "pv.S3.2",
    "read-missing-segment",
    "A read of a missing segment is answered NoSuchSegment; the connection stays",
    "§6 (3), §8",
    "ReadSegment on a segment that does not exist: NoSuchSegment 1; a second read of it gets NoSuchSegment 2.",
    [expect(PASS, SERVERS, ["Hello", "NoSuchSegment 1", "NoSuchSegment 2"], "open")],
)
async def s3_2(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.2")
    await hello(c)
    for rid in (1, 2):
        await c.send(
            ReadSegment(segment=seg, offset=0, suggested_length=100, request_id=rid).encode(), label="ReadSegment (missing)"
        )
        await has(c, f"NoSuchSegment {rid}")
    await c.quiet(0.3)


@server_case(
    "pv.S3.3",
    "sealed-end-of-segment",
    "A read at the end of a sealed segment answers endOfSegment at once",
    "§6 (4, 5)",
    "Create, append one event, SealSegment, then read from 0 (the event, endOfSegment) and at the length (empty, "
    "endOfSegment, not atTail), each answered at once.",
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "AppendSetup 2", "DataAppended 1", "SegmentSealed 3", "SegmentRead 4", "SegmentRead 5"],
            "open",
            facts=["end of segment reported"],
        )
    ],
)
async def s3_3(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.3")
    await hello(c)
    await create(c, 1, seg)
    w = WriterSession(seg, writer_of(c), style="rust")
    await setup(c, 2, w)
    w.add(b"last words")
    await _write_all(c, w, 1)
    await c.send(SealSegment(request_id=3, segment=seg).encode(), label="SealSegment")
    await has(c, "SegmentSealed 3")
    await read_all(c, 4, seg, 0)
    length = len(encode_event(b"last words"))
    await read_all(c, 5, seg, length)
    rs = {r.request_id: r for r in replies(c, SegmentRead)}
    end = rs.get(5)
    if end is not None and end.end_of_segment and not end.at_tail and not end.data and end.offset == length:
        c.note("end of segment reported")


@server_case(
    "pv.S3.4",
    "table-segment",
    "Table segment: create, update, read; a conditional update on an existing key is refused",
    "§9",
    "CreateTableSegment; UpdateTableEntries one key unconditionally; ReadTable it back (the same value, version as "
    'returned); then an update of that key with version -1 ("must not exist") is answered TableKeyBadVersion, connection kept.',
    [
        expect(
            PASS,
            SERVERS,
            ["Hello", "SegmentCreated 1", "TableEntriesUpdated 2", "TableRead 3", "TableKeyBadVersion 4"],
            "open",
            facts=["value and version read back"],
        )
    ],
    features=["tables"],
)
async def s3_4(c: Conversation) -> None:
    seg = segment_of(c, "pv.S3.4").replace("/0.#", "_kvtable/0.#")
    await hello(c)
    await c.send(CreateTableSegment(request_id=1, segment=seg).encode(), label="CreateTableSegment")
    await has(c, "SegmentCreated 1")
    key, value = b"key-" + bytes(c.rng.getrandbits(8) for _ in range(4)), b"value"
    await c.send(
        UpdateTableEntries(
            request_id=2, segment=seg, delegation_token="", table_entries=(TableEntry(TableKey(key, NULL_VALUE), value),)
        ).encode(),
        label="UpdateTableEntries (unconditional)",
    )
    await has(c, "TableEntriesUpdated 2")
    await c.send(
        ReadTable(request_id=3, segment=seg, delegation_token="", keys=(TableKey(key, NULL_VALUE),)).encode(), label="ReadTable"
    )
    await has(c, "TableRead 3")
    versions = [v for r in obs(c).replies if r.NAME == "TableEntriesUpdated" for v in getattr(r, "updated_versions", ())]
    for r in replies(c, TableRead):
        if [(e.key.data, e.value, e.key.key_version) for e in r.entries] == [(key, value, versions[0] if versions else None)]:
            c.note("value and version read back")
    await c.send(
        UpdateTableEntries(
            request_id=4, segment=seg, delegation_token="", table_entries=(TableEntry(TableKey(key, -1), b"other"),)
        ).encode(),
        label="UpdateTableEntries (version -1: must not exist)",
    )
    await has(c, "TableKeyBadVersion 4")
    await c.quiet(0.3)
