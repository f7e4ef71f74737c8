"""The language-neutral Pravega vectors (specs/pravega/vectors/*.json, format in
specs/pravega/README.md §12) run against refwire's codec, Sans-IO machines and
segment store.

* ``commands.json``: decode the hex and compare with the fields; encode the fields
  back to the hex when ``encode`` is true; in-block frames (Event, Padding,
  PartialEvent) decode with ``allow_inner=True``;
* ``strings.json``: ``refwire.wire.encode_mutf8``/``decode_mutf8`` and the codec's
  ``utf`` field (a SetupAppend carrying the string as its segment name);
* ``errors.json``: the stream fed whole to a :class:`CommandDecoder` and to the
  Sans-IO machine of the decoding role gives a typed error naming the frame, field
  and offset (never IndexError/struct.error), after the frames before the bad one;
* ``appends.json``: conversations with a real :class:`SegmentStoreServer` over a
  ``trio.testing.memory_stream_pair``; every server reply is compared byte for
  byte, and the close points too.

Where refwire disagrees with a vector and real Pravega says the
vector (the spec) is right, the case is xfail(strict) with the reason below, so a
fix shows up as an XPASS.  Where the vector itself is wrong, the adapter says so
in ``VECTOR_FIELD_ALIASES`` (the lead fixes the vector).
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from vector_layers import LAYERS, codec_error, same_error

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.pravega.connection import ClientConnection, ServerConnection
from refwire.pravega.events import ConnectionClosed
from refwire.pravega.frames import (
    CLIENT_LIMITS,
    COMMANDS,
    DEFAULT_LIMITS,
    AppendSetup,
    Command,
    CommandDecoder,
    SetupAppend,
    TableEntry,
    TableKey,
    decode_command,
    encode_command,
)
from refwire.pravega.server import SegmentStoreServer, ServerConfig
from refwire.pravega.service import TokenVerdict
from refwire.sansio import NEED_DATA
from refwire.wire import decode_mutf8, encode_mutf8

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "pravega" / "vectors"
BY_NAME: dict[str, type[Command]] = {cls.NAME: cls for cls in COMMANDS.values()}

# A vector field name that is not the snake_case of the Java field (README §12 says
# it must be): vector name -> refwire attribute.  These are vector bugs (reported).
#   GetSegmentAttribute/UpdateSegmentAttribute: Java's field is ``segmentName``
#   (WireCommands.java), the vectors say ``segment``;
#   UpdateTableEntries: Java's field is ``tableEntries``, the vectors say ``entries``.
VECTOR_FIELD_ALIASES: dict[tuple[str, str], str] = {}

#: Conversations where a parked read is woken: the waking command's reply must
#: precede the woken read (README §6).  Order there depends on scheduling, so
#: they run RACE_REPEATS times.
RACE_SENSITIVE = frozenset(
    {"byte-stream-conditional-block-end", "read-parked-at-tail-then-sealed", "read-parked-at-tail-then-append"}
)

REFWIRE_DIVERGES: dict[str, str] = {}
RACE_REPEATS = 12


def _load(name: str) -> list[dict[str, Any]]:
    doc = json.loads((VECTOR_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return list(doc["vectors"])


COMMAND_VECTORS = _load("commands")
STRING_VECTORS = _load("strings")
ERROR_VECTORS = _load("errors")
APPEND_VECTORS = _load("appends")


def _params(vectors: list[dict[str, Any]]) -> list[Any]:
    out = []
    for v in vectors:
        reason = REFWIRE_DIVERGES.get(v["name"])
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(v, id=v["name"], marks=marks))
    return out


def test_vector_names_are_unique_and_counts_match_the_readme() -> None:
    names = [v["name"] for v in COMMAND_VECTORS + STRING_VECTORS + ERROR_VECTORS + APPEND_VECTORS]
    assert len(names) == len(set(names))
    readme = (VECTOR_DIR.parent / "README.md").read_text(encoding="utf-8")
    m = re.search(r"Vector counts: commands (\d+) \((\d+) decode-only\), strings (\d+), errors (\d+), appends (\d+)", readme)
    assert m is not None
    assert len(COMMAND_VECTORS) == int(m.group(1))
    assert sum(1 for v in COMMAND_VECTORS if not v["encode"]) == int(m.group(2))
    assert (len(STRING_VECTORS), len(ERROR_VECTORS), len(APPEND_VECTORS)) == tuple(int(m.group(i)) for i in (3, 4, 5))
    for name in REFWIRE_DIVERGES:
        assert name in names, name


# --------------------------------------------------------------------------- fields <-> commands


def _field_value(kind: str, v: Any) -> Any:
    if kind == "uuid":
        return uuid.UUID(v)
    if kind in ("blob32", "opt_blob32", "event") or (kind == "rest" and isinstance(v, str)):
        return bytes.fromhex(v)
    if kind == "entries":
        return tuple(TableEntry(TableKey(bytes.fromhex(e["key"]), e["key_version"]), bytes.fromhex(e["value"])) for e in v)
    if kind == "keys":
        return tuple(TableKey(bytes.fromhex(k["key"]), k["key_version"]) for k in v)
    if kind == "longs":
        return tuple(v)
    return v


def command_from_fields(name: str, fields: dict[str, Any]) -> Command:
    cls = BY_NAME[name]
    kinds = {n: k for n, k, _ in cls.LAYOUT}
    kwargs: dict[str, Any] = {}
    for key, value in fields.items():
        attr = VECTOR_FIELD_ALIASES.get((name, key), key)
        assert attr in kinds, f"{name} has no field {key!r}"
        kwargs[attr] = _field_value(kinds[attr], value)
    assert set(kwargs) == set(kinds), f"{name}: the vector lists {sorted(kwargs)}, the layout {sorted(kinds)}"
    return cls(**kwargs)


def _header(raw: bytes) -> tuple[int, int]:
    code, n = struct.unpack_from(">ii", raw)
    return code, n


# --------------------------------------------------------------------------- commands.json


@pytest.mark.parametrize("v", _params(COMMAND_VECTORS))
def test_command_vector(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    expected = command_from_fields(v["command"], v["fields"])
    code, n = _header(raw)
    assert code == expected.TYPE and n == len(raw) - 8
    inner = v.get("context") == "in-block"
    got = decode_command(code, raw, start=8, base=8, allow_inner=inner)
    assert got == expected
    # The stream decoder agrees, fed whole and one byte at a time.
    for chunks in ([raw], [raw[i : i + 1] for i in range(len(raw))]):
        dec = CommandDecoder(CLIENT_LIMITS if expected.DIRECTION == "reply" else DEFAULT_LIMITS, allow_inner=inner)
        out: list[Command] = []
        for c in chunks:
            dec.feed(c)
            out.extend(dec.commands())
        assert out == [expected] and dec.buffered == 0
    if v["encode"]:
        assert encode_command(expected) == raw
        assert expected.encode() == raw


@pytest.mark.parametrize("v", [pytest.param(v, id=v["name"]) for v in COMMAND_VECTORS if v.get("context") == "in-block"])
def test_in_block_commands_are_refused_at_the_top_level(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    code, _ = _header(raw)
    if v["command"] == "Padding":  # a top-level Padding is accepted and dropped (README §5.3 rule 2)
        assert decode_command(code, raw, start=8, base=8) == command_from_fields("Padding", v["fields"])
        return
    with pytest.raises(LocalProtocolError) as ei:
        decode_command(code, raw, start=8, base=8)
    assert ei.value.field == "type" and ei.value.offset == 0


# --------------------------------------------------------------------------- strings.json


def _text(v: dict[str, Any]) -> str:
    return str(v["text"]) if "text" in v else str(v["text_repeat"]) * int(v["repeat"])


def _string_hex(v: dict[str, Any]) -> bytes:
    if "hex" in v:
        return bytes.fromhex(v["hex"])
    return bytes.fromhex(v["hex_prefix"]) + bytes.fromhex(v["hex_repeat"]) * int(v["repeat"])


def _setup_with_segment(body: bytes) -> bytes:
    """A SetupAppend frame whose segment field is ``body`` (u16 length + bytes, as given)."""
    payload = struct.pack(">q", 1) + bytes(16) + body + b"\x00\x00"
    return struct.pack(">ii", SetupAppend.TYPE, len(payload)) + payload


@pytest.mark.parametrize("v", _params(STRING_VECTORS))
def test_string_vector(v: dict[str, Any]) -> None:
    if v["encode"] == "error":
        text = _text(v)
        assert len(encode_mutf8(text)) > 0xFFFF  # the primitive has no limit; the field has
        with pytest.raises(LocalProtocolError) as ei:
            SetupAppend(request_id=1, writer_id=uuid.UUID(int=0), segment=text).encode()
        assert ei.value.field == "segment" and ei.value.frame == "SetupAppend"
        return
    raw = _string_hex(v)
    (length,) = struct.unpack_from(">H", raw)
    body = raw[2:]
    assert length == len(body)
    if v["encode"] is True:
        text = _text(v)
        assert encode_mutf8(text) == body
        frame = SetupAppend(request_id=1, writer_id=uuid.UUID(int=0), segment=text).encode()
        assert frame == _setup_with_segment(raw)
    if v["decode"] == "ok":
        text = _text(v)
        assert decode_mutf8(body) == text
        frame = _setup_with_segment(raw)
        got = decode_command(SetupAppend.TYPE, frame, start=8, base=8)
        assert isinstance(got, SetupAppend) and got.segment == text
    else:
        with pytest.raises(ValueError, match=rf"\b{v['error_byte']}\b"):
            decode_mutf8(body)
        frame = _setup_with_segment(raw)
        with pytest.raises(LocalProtocolError) as ei:
            decode_command(SetupAppend.TYPE, frame, start=8, base=8)
        # the field's offset is its length prefix: type(4) len(4) rid(8) writer(16)
        assert ei.value.field == "segment" and ei.value.offset == 32


# --------------------------------------------------------------------------- errors.json


def _frames_before(raw: bytes, offset: int) -> int:
    """How many whole frames come before the bad one (they are delivered first): those
    ending at or before ``offset`` with another frame after them (a field missing at
    the very end of a frame has the frame's end as its offset)."""
    pos = count = 0
    while pos + 8 <= len(raw):
        _, n = _header(raw[pos:])
        if n < 0 or pos + 8 + n > offset or pos + 8 + n >= len(raw):
            break
        pos += 8 + n
        count += 1
    return count


def _drain(conn: ServerConnection | ClientConnection) -> tuple[list[Any], BaseException | None]:
    events: list[Any] = []
    for _ in range(1000):
        try:
            ev = conn.next_event()
        except Exception as exc:
            return events, exc
        if ev is NEED_DATA or isinstance(ev, ConnectionClosed):
            return events, None
        events.append(ev)
    raise AssertionError("the machine never stopped producing events")


@pytest.mark.parametrize("v", _params(ERROR_VECTORS))
def test_error_vector(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    expect = v["expect"]
    server_side = v["direction"] == "client->server"
    limits = DEFAULT_LIMITS if server_side else CLIENT_LIMITS

    if expect["outcome"] == "accepted":
        assert "layer" not in expect  # nothing refuses it
        dec = CommandDecoder(limits)
        dec.feed(raw)
        assert list(dec.commands()) == [command_from_fields(expect["command"], expect["fields"])]
        assert dec.buffered == 0
        return

    before = _frames_before(raw, expect["offset"])
    # 1. The Sans-IO machine of the decoding role, stream then EOF.
    conn: ServerConnection | ClientConnection = ServerConnection() if server_side else ClientConnection()
    conn.receive_data(raw, now=0.0)
    conn.receive_data(b"", now=0.0)
    events, exc = _drain(conn)
    assert isinstance(exc, RemoteProtocolError), repr(exc)
    assert isinstance(exc, RemoteLimitExceeded) == expect["limit"]
    assert (exc.frame, exc.field, exc.offset) == (expect["frame"], expect["field"], expect["offset"]), exc
    assert len(events) == before
    # the machine stays failed
    with pytest.raises(RemoteProtocolError):
        conn.next_event()
    # 2. The bare decoder (no EOF: an unfinished frame just waits).  ``expect.layer``
    # says which of the two refuses the stream: "codec", the decoder alone raises this
    # very error; "machine", the decoder takes every byte and only the connection refuses.
    assert expect["layer"] in LAYERS
    dec = CommandDecoder(limits)
    dec.feed(raw)
    got: list[Command] = []
    try:
        got.extend(dec.commands())
    except LocalProtocolError as err:
        assert expect["layer"] == "codec", f"the bare decoder refuses a machine-layer vector: {err}"
        assert isinstance(err, LimitExceeded) == expect["limit"]
        assert (err.frame, err.field, err.offset) == (expect["frame"], expect["field"], expect["offset"])
    else:
        assert expect["layer"] == "machine", "the bare decoder accepts a codec-layer vector"
        assert expect["field"] == "(eof)" and dec.buffered > 0
    assert len(got) == before
    err2 = codec_error("pravega", raw, v)
    assert (err2 is not None and same_error(err2, expect)) == (expect["layer"] == "codec")


# --------------------------------------------------------------------------- appends.json


def _verifier(valid: list[str]) -> Any:
    def verify(resource: str, token: str, write: bool) -> TokenVerdict:
        return "ok" if token in valid else "invalid"

    return verify


def _populate(server: SegmentStoreServer, segments: list[dict[str, Any]]) -> None:
    """``initial_segments``: ``data`` is read as the segment's bytes from offset 0, of
    which those below ``start_offset`` are truncated (README §12 does not say)."""
    for s in segments:
        server.store.create(s["name"])
        seg = server.store.segments[s["name"]]
        data = bytes.fromhex(s["data"])
        start = s["start_offset"]
        seg.start_offset = start
        seg.data = bytearray(data[start:])
        seg.length = seg.visible = len(data)
        seg.sealed = seg.sealed_visible = s["sealed"]
        seg.attributes = {uuid.UUID(w): n for w, n in s["writers"].items()}


def _check_final(server: SegmentStoreServer, final: list[dict[str, Any]]) -> None:
    if not final:
        assert server.store.segments == {}
        return
    for s in final:
        seg = server.store.segments[s["name"]]
        data = bytes.fromhex(s["data"])
        assert seg.start_offset == s["start_offset"]
        assert bytes(seg.data) == data[s["start_offset"] :]
        assert seg.length == len(data)
        assert seg.sealed == s["sealed"]
        assert {str(w): n for w, n in seg.attributes.items()} == s["writers"]


async def run_append_vector(v: dict[str, Any]) -> None:
    config = ServerConfig()
    if v.get("server_config") and "valid_tokens" in v["server_config"]:
        config = ServerConfig(verifier=_verifier(v["server_config"]["valid_tokens"]))
    server = SegmentStoreServer(config=config, now=lambda: 0)
    _populate(server, v.get("initial_segments", []))
    client, srv = trio.testing.memory_stream_pair()
    received = bytearray()
    got_data = trio.Event()
    eof = trio.Event()
    handler_done = trio.Event()

    async def serve() -> None:
        try:
            await server.handle_stream(srv)
        finally:
            await trio.aclose_forcefully(srv)
            handler_done.set()

    async def read() -> None:
        nonlocal got_data
        while True:
            try:
                data = await client.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                eof.set()
                got_data.set()
                return
            received.extend(data)
            got_data.set()

    async def wait_bytes(n: int) -> None:
        nonlocal got_data
        while len(received) < n and not eof.is_set():
            got_data = trio.Event()
            await got_data.wait()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            nursery.start_soon(read)
            closed = False
            for i, step in enumerate(v["steps"]):
                if "client" in step:
                    try:
                        await client.send_all(bytes.fromhex(step["client"]))
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pytest.fail(f"step {i}: the server closed before these client bytes")
                    await trio.testing.wait_all_tasks_blocked()
                elif "server" in step:
                    want = bytes.fromhex(step["server"])
                    await wait_bytes(len(want))
                    assert bytes(received[: len(want)]).hex() == want.hex(), f"step {i}"
                    del received[: len(want)]
                else:
                    assert step.get("close") is True
                    await handler_done.wait()
                    await eof.wait()
                    assert bytes(received).hex() == "", f"step {i}: bytes sent before the close"
                    closed = True
            if not closed:
                await trio.testing.wait_all_tasks_blocked(cushion=0.01)
                assert bytes(received).hex() == "", "the server sent more than the vector lists"
                assert not handler_done.is_set(), "the server closed a connection the vector keeps"
            nursery.cancel_scope.cancel()
    await trio.aclose_forcefully(client)
    if v.get("final_segments") is not None:
        _check_final(server, v["final_segments"])


@pytest.mark.parametrize("v", _params(APPEND_VECTORS))
async def test_append_vector(v: dict[str, Any]) -> None:
    for _ in range(RACE_REPEATS if v["name"] in RACE_SENSITIVE else 1):
        await run_append_vector(v)


def _sansio_server_feed(v: dict[str, Any]) -> Iterator[bytes]:
    for step in v["steps"]:
        if "client" in step:
            yield bytes.fromhex(step["client"])


@pytest.mark.parametrize("v", [pytest.param(v, id=v["name"]) for v in APPEND_VECTORS])
def test_append_vector_client_bytes_split_anywhere_give_the_same_events(v: dict[str, Any]) -> None:
    """The client bytes of each conversation, fed whole and one byte at a time to a
    bare ServerConnection: the same events (or the same error) either way."""

    def run(chunks: list[bytes]) -> tuple[list[Any], tuple[Any, ...] | None]:
        conn = ServerConnection()
        events: list[Any] = []
        for c in chunks:
            conn.receive_data(c, now=0.0)
            while True:
                try:
                    ev = conn.next_event()
                except ProtocolError as exc:
                    return events, (type(exc), exc.frame, exc.field, exc.offset)
                if ev is NEED_DATA:
                    break
                events.append(ev)
                # Set up every writer the moment it asks, so appends get through.
                cmd = getattr(ev, "command", None)
                if isinstance(cmd, SetupAppend):
                    conn.send(
                        AppendSetup(request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=0),
                        now=0.0,
                    )
        return events, None

    data = b"".join(_sansio_server_feed(v))
    whole = run([data])
    bytewise = run([data[i : i + 1] for i in range(len(data))])
    assert whole == bytewise
