"""The draft dialect's vectors (specs/pravega-draft-2017/vectors/*.json, format in
the README §12) run against refwire's codec, Sans-IO machines and DraftFrontend.

* ``frames.json``: decode the hex (strict layouts) and compare with the fields,
  fed whole and byte by byte; encode the fields back when ``encode``;
* ``partials.json``: the part frames reassemble, in the receiving machine(s), to
  the message (in-block ones inside an append block, where the Event is
  stored); cutting the message into the ``parts`` gives the hex;
* ``errors.json``: the stream through the machine of the receiving side (frame,
  field, offset, limit, inner; the frames before the bad one delivered and
  answered, ``sent``), and client->server streams also through a real
  DraftFrontend over a memory stream (``sent``, close, ``final_segments``);
* ``conversations.json``: a real DraftFrontend over memory streams, every
  server frame byte for byte, close points, the final store with levels.
"""

from __future__ import annotations

import json
import re
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from pravega_draft_harness import DraftHarness, check_final, populate, stream_hex
from vector_layers import LAYERS, codec_error, same_error

from refwire.errors import ProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.pravega.draft2017.connection import DEFAULT_LIMITS, ClientConnection, ServerConnection, split_message, split_reply
from refwire.pravega.draft2017.events import BlockAppend, ConnectionClosed, KeepAliveReceived, ReplyReceived, RequestReceived
from refwire.pravega.draft2017.frames import DRAFT, AppendSetup, BeginAppendBlock, EndAppendBlock, SetupAppend
from refwire.pravega.draft2017.server import DraftConfig, DraftFrontend
from refwire.pravega.frames import Command, CommandDecoder, decode_command, encode_command
from refwire.pravega.server import SegmentStoreServer
from refwire.sansio import NEED_DATA

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "pravega-draft-2017" / "vectors"
BY_NAME: dict[str, type[Command]] = {cls.NAME: cls for cls in DRAFT.commands.values()}
A = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def _load(name: str) -> list[dict[str, Any]]:
    return list(json.loads((VECTOR_DIR / f"{name}.json").read_text(encoding="utf-8"))["vectors"])


FRAMES, PARTIALS, ERRORS, CONVERSATIONS = (_load(n) for n in ("frames", "partials", "errors", "conversations"))


def _ids(vectors: list[dict[str, Any]]) -> list[Any]:
    return [pytest.param(v, id=v["name"]) for v in vectors]


def test_names_unique_and_counts_match_the_readme() -> None:
    names = [v["name"] for v in FRAMES + PARTIALS + ERRORS + CONVERSATIONS]
    assert len(names) == len(set(names)) == 131
    readme = (VECTOR_DIR.parent / "README.md").read_text(encoding="utf-8")
    m = re.search(r"frames (\d+) \((\d+) decode-only.*?partials (\d+).*?errors (\d+).*?conversations (\d+)", readme, re.S)
    assert m is not None
    assert (len(FRAMES), sum(not v["encode"] for v in FRAMES), len(PARTIALS), len(ERRORS), len(CONVERSATIONS)) == tuple(
        int(g) for g in m.groups()
    )


def command_from_fields(name: str, fields: dict[str, Any]) -> Command:
    cls = BY_NAME[name]
    kinds = {n: k for n, k, _ in cls.LAYOUT}
    assert set(fields) == set(kinds), (name, sorted(fields), sorted(kinds))
    kwargs: dict[str, Any] = {}
    for key, value in fields.items():
        kind = kinds[key]
        kwargs[key] = uuid.UUID(value) if kind == "uuid" else bytes.fromhex(value) if kind == "rest" else value
    return cls(**kwargs)


# --------------------------------------------------------------------------- frames.json


@pytest.mark.parametrize("v", _ids(FRAMES))
def test_frame_vector(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    expected = command_from_fields(v["command"], v["fields"])
    code, n = struct.unpack_from(">ii", raw)
    assert code == expected.TYPE and n == len(raw) - 8
    assert decode_command(code, raw, start=8, base=8, allow_inner=True, dialect=DRAFT) == expected
    for chunks in ([raw], [raw[i : i + 1] for i in range(len(raw))]):
        dec = CommandDecoder(DEFAULT_LIMITS, allow_inner=True, dialect=DRAFT)
        out: list[Command] = []
        for c in chunks:
            dec.feed(c)
            out.extend(dec.commands())
        assert out == [expected] and dec.buffered == 0
    if v["encode"]:
        assert encode_command(expected) == raw
    # One more byte inside the frame is an error on (trailing) unless the last field takes the rest.
    longer = struct.pack(">ii", code, n + 1) + raw[8:] + b"\x00"
    if expected.LAYOUT[-1][1] == "rest":
        decode_command(code, longer, start=8, base=8, allow_inner=True, dialect=DRAFT)
    else:
        with pytest.raises(ProtocolError) as ei:
            decode_command(code, longer, start=8, base=8, allow_inner=True, dialect=DRAFT)
        assert (ei.value.field, ei.value.offset) == ("(trailing)", len(raw))


# --------------------------------------------------------------------------- partials.json


def _parts_cuts(v: dict[str, Any]) -> list[int]:
    cuts, pos = [], 0
    for p in v["parts"][:-1]:
        pos += len(bytes.fromhex(p["data"]))
        cuts.append(pos)
    return cuts


@pytest.mark.parametrize("v", _ids(PARTIALS))
def test_partial_vector_split(v: dict[str, Any]) -> None:
    message = bytes.fromhex(v["message_hex"])
    parts = split_message(message, _parts_cuts(v))
    assert [(p[8], p[9:].hex()) for p in parts] == [(p["part"], p["data"]) for p in v["parts"]]
    assert b"".join(parts).hex() == v["hex"]
    sizes = {len(bytes.fromhex(p["data"])) for p in v["parts"][:-1]}
    if len(sizes) == 1 and 0 < len(bytes.fromhex(v["parts"][-1]["data"])) <= sizes.pop():
        size = len(bytes.fromhex(v["parts"][0]["data"]))
        assert split_reply(message, size).hex() == v["hex"]  # the server's own split (§5 "Sending")


def _server_reassembles(v: dict[str, Any], raw: bytes, expected: Command) -> None:
    conn = ServerConnection()
    if v["context"] == "in-block":
        seg = "seg"
        conn.receive_data(SetupAppend(connection_id=A, segment=seg).encode(), now=0.0)
        assert isinstance(conn.next_event(), RequestReceived)
        conn.send(AppendSetup(segment=seg, connection_id=A, connection_offset_ack_level=0), now=0.0)
        message = bytes.fromhex(v["message_hex"])
        raw = (
            BeginAppendBlock(connection_id=A, connection_offset=0, length=len(raw)).encode()
            + raw
            + EndAppendBlock(connection_id=A, connection_offset=len(message), block_length=len(message)).encode()
        )
    events: list[Any] = []
    for c in [raw[i : i + 3] for i in range(0, len(raw), 3)]:
        conn.receive_data(c, now=0.0)
        while (ev := conn.next_event()) is not NEED_DATA:
            events.append(ev)
    if v["context"] == "in-block":
        assert events == [BlockAppend("seg", A, bytes.fromhex(v["message_hex"]), len(bytes.fromhex(v["message_hex"])), 0)]
    elif v["command"] == "KeepAlive":
        assert events == [KeepAliveReceived(expected.data)]  # type: ignore[attr-defined]
        assert conn.data_to_send() == expected.encode()
    else:
        assert [e.command for e in events] == [expected]


@pytest.mark.parametrize("v", _ids(PARTIALS))
def test_partial_vector_reassembles(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    expected = command_from_fields(v["command"], v["fields"])
    assert expected.encode().hex() == v["message_hex"]
    if v["direction"] in ("client->server", "both"):
        _server_reassembles(v, raw, expected)
    if v["direction"] in ("server->client", "both"):
        client = ClientConnection()
        client.receive_data(raw, now=0.0)
        ev = client.next_event()
        assert ev == (KeepAliveReceived(expected.data) if v["command"] == "KeepAlive" else ReplyReceived(expected))  # type: ignore[attr-defined]
        assert client.next_event() is NEED_DATA


# --------------------------------------------------------------------------- errors.json


def _check_error(exc: BaseException | None, expect: dict[str, Any]) -> None:
    assert isinstance(exc, RemoteProtocolError), repr(exc)
    assert isinstance(exc, RemoteLimitExceeded) == expect["limit"], exc
    assert (exc.frame, exc.field, exc.offset) == (expect["frame"], expect["field"], expect["offset"]), exc
    inner = expect.get("inner")
    if inner is None:
        assert exc.inner is None
    else:
        assert exc.inner is not None
        assert (exc.inner.frame, exc.inner.field, exc.inner.offset) == (inner["frame"], inner["field"], inner["offset"]), exc


@pytest.mark.parametrize("v", _ids(ERRORS))
def test_error_vector_machine(v: dict[str, Any]) -> None:
    raw = stream_hex(v)
    expect = v["expect"]
    assert expect["outcome"] == "error" and expect["connection"] == "closed"
    if v["direction"] == "client->server":
        h = DraftHarness()
        populate(h.store, v["initial_segments"])
        sent = h.feed(raw) + h.eof()
        _check_error(h.error, expect)
        assert sent.hex() == expect["sent"]
        if "final_segments" in v:
            check_final(h.store, v["final_segments"])
        with pytest.raises(RemoteProtocolError):
            h.conn.next_event()
        return
    client = ClientConnection()
    client.receive_data(raw, now=0.0)
    client.receive_data(b"", now=0.0)
    events: list[Any] = []
    err: BaseException | None = None
    while True:
        try:
            ev = client.next_event()
        except ProtocolError as exc:
            err = exc
            break
        assert ev is not NEED_DATA and not isinstance(ev, ConnectionClosed), "the stream was accepted"
        events.append(ev)
    _check_error(err, expect)
    assert expect["sent"] == ""


@pytest.mark.parametrize("v", _ids(ERRORS))
def test_error_vector_layer(v: dict[str, Any]) -> None:
    """``expect.layer``: "codec", the bare CommandDecoder (draft dialect, in-block
    commands allowed) raises this very error; "machine", the decoder takes every byte
    and only the connection refuses the stream (direction, state, block and partial
    message rules, reassembled messages, end of stream)."""
    expect = v["expect"]
    assert expect["layer"] in LAYERS
    err = codec_error("pravega-draft-2017", stream_hex(v), v)
    if expect["layer"] == "codec":
        assert err is not None and same_error(err, expect), err
        assert "inner" not in expect  # a reassembled message is the machine's
    else:
        assert err is None, err


async def _serve_one(front: DraftFrontend, raw: bytes) -> bytes:
    client, srv = trio.testing.memory_stream_pair()
    received = bytearray()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def serve() -> None:
                try:
                    await front.handle_stream(srv)
                finally:
                    await trio.aclose_forcefully(srv)

            nursery.start_soon(serve)
            await client.send_all(raw)
            await client.send_eof()
            while True:
                try:
                    data = await client.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                received += data
    await trio.aclose_forcefully(client)
    return bytes(received)


@pytest.mark.parametrize("v", _ids([v for v in ERRORS if v["direction"] == "client->server"]))
async def test_error_vector_frontend(v: dict[str, Any]) -> None:
    server = SegmentStoreServer(now=lambda: 0)
    populate(server.store, v["initial_segments"])
    front = DraftFrontend(server)
    sent = await _serve_one(front, stream_hex(v))
    assert sent.hex() == v["expect"]["sent"]
    assert front.errors, "the connection closed without an error"
    _check_error(front.errors[-1], v["expect"])
    if "final_segments" in v:
        check_final(server.store, v["final_segments"])


# --------------------------------------------------------------------------- conversations.json

RACE_SENSITIVE = frozenset({"read-parked-at-tail-then-append"})


async def run_conversation(v: dict[str, Any]) -> None:
    server = SegmentStoreServer(now=lambda: 0)
    populate(server.store, v.get("initial_segments", []))
    cfg = DraftConfig(**(v.get("server_config") or {}))
    front = DraftFrontend(server, config=cfg)
    conns: dict[int, dict[str, Any]] = {}

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def open_conn(k: int) -> dict[str, Any]:
                if k in conns:
                    return conns[k]
                client, srv = trio.testing.memory_stream_pair()
                c: dict[str, Any] = {"client": client, "buf": bytearray(), "eof": trio.Event(), "done": trio.Event()}
                c["got"] = trio.Event()

                async def serve() -> None:
                    try:
                        await front.handle_stream(srv)
                    finally:
                        await trio.aclose_forcefully(srv)
                        c["done"].set()

                async def read() -> None:
                    while True:
                        try:
                            data = await client.receive_some(65536)
                        except (trio.BrokenResourceError, trio.ClosedResourceError):
                            data = b""
                        if data:
                            c["buf"].extend(data)
                        else:
                            c["eof"].set()
                        c["got"].set()
                        if not data:
                            return

                nursery.start_soon(serve)
                nursery.start_soon(read)
                conns[k] = c
                return c

            for i, step in enumerate(v["steps"]):
                c = await open_conn(step.get("connection", 1))
                if "client" in step:
                    await c["client"].send_all(bytes.fromhex(step["client"]))
                    await trio.testing.wait_all_tasks_blocked()
                elif "server" in step:
                    want = bytes.fromhex(step["server"])
                    while len(c["buf"]) < len(want) and not c["eof"].is_set():
                        c["got"] = trio.Event()
                        await c["got"].wait()
                    assert bytes(c["buf"][: len(want)]).hex() == want.hex(), f"step {i}"
                    del c["buf"][: len(want)]
                elif step.get("eof"):
                    await c["client"].send_eof()
                    await c["done"].wait()
                    assert bytes(c["buf"]).hex() == "", f"step {i}: bytes the vector does not list"
                else:
                    assert step.get("close") is True
                    errors_before = len(front.errors)
                    await c["done"].wait()
                    await c["eof"].wait()
                    assert bytes(c["buf"]).hex() == "", f"step {i}: bytes sent before the close"
                    assert len(front.errors) >= errors_before and front.errors, "closed without a recorded reason"
                    c["closed"] = True
            await trio.testing.wait_all_tasks_blocked(cushion=0.01)
            for k, c in conns.items():
                assert bytes(c["buf"]).hex() == "", f"connection {k}: the server sent more than the vector lists"
                if not c.get("closed") and not c["eof"].is_set():
                    assert not c["done"].is_set(), f"connection {k}: closed although the vector keeps it"
            nursery.cancel_scope.cancel()
    for c in conns.values():
        await trio.aclose_forcefully(c["client"])
    if v.get("final_segments") is not None:
        check_final(server.store, v["final_segments"])


@pytest.mark.parametrize("v", _ids(CONVERSATIONS))
async def test_conversation_vector(v: dict[str, Any]) -> None:
    for _ in range(8 if v["name"] in RACE_SENSITIVE else 1):
        await run_conversation(v)


@pytest.mark.parametrize("v", _ids(CONVERSATIONS))
def test_conversation_client_bytes_split_anywhere_give_the_same_replies(v: dict[str, Any]) -> None:
    """The Sans-IO model of the frontend gives the same server bytes (in order,
    for a single connection) whether the client bytes come whole or byte by byte."""
    if any(s.get("connection", 1) != 1 for s in v["steps"]):
        pytest.skip("several connections: covered by test_conversation_vector")
    cfg = v.get("server_config") or {}

    def run(bytewise: bool) -> tuple[bytes, bool]:
        h = DraftHarness(reply_part_size=cfg.get("reply_part_size", 1024 * 1024))
        populate(h.store, v.get("initial_segments", []))
        out = b""
        for step in v["steps"]:
            if "client" in step:
                data = bytes.fromhex(step["client"])
                for c in [data[i : i + 1] for i in range(len(data))] if bytewise else [data]:
                    out += h.feed(c)
        return out, h.closed

    whole = run(False)
    assert whole == run(True)
    listed = b"".join(bytes.fromhex(s["server"]) for s in v["steps"] if "server" in s)
    if not any(s.get("eof") or "read-parked" in v["name"] for s in v["steps"]):
        assert whole[0].hex() == listed.hex()
