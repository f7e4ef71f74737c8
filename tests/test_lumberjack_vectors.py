"""The language-neutral Lumberjack vectors (specs/lumberjack/vectors/*.json, format in
specs/lumberjack/README.md §8) run against refwire's codec and Sans-IO machines.

* frame vectors: decode the hex and compare with the fields; rebuild the bytes from
  the fields (a ``C`` frame is compared by its inflated content, since zlib output
  depends on the compressor);
* client->server streams with ``expect``: the batches and acks of a ServerConnection
  (both ack modes), fed whole and one byte at a time;
* server->client vectors with ``client_context``: what a ClientConnection makes of them;
* error vectors: the RemoteProtocolError (field, offset, frame, limit or not) and the
  batches delivered before it.

Where refwire reports something other than what the vector (the spec) says, the
vector is right and the case is marked xfail(strict) with the reason below, so a
fix shows up as an XPASS.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from vector_layers import LAYERS, codec_error, same_error

from refwire.errors import RemoteLimitExceeded, RemoteProtocolError
from refwire.lumberjack import (
    DEFAULT_LIMITS,
    NEED_DATA,
    V1,
    V2,
    Ack,
    AckReceived,
    Batch,
    ClientConnection,
    Compressed,
    ConnectionClosed,
    DataFrame,
    EmptyWindow,
    FrameDecoder,
    JsonFrame,
    KeepAlive,
    ServerConnection,
    Window,
    decode_all,
)
from refwire.lumberjack.frames import inflate

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "lumberjack" / "vectors"
VERSIONS = {"1": V1, "2": V2}
DIRECTIONS = ("client->server", "server->client")

# Cases where refwire disagrees with a vector: none today.  A disagreement is
# recorded here (vector name -> reason) as xfail(strict), never by editing the vector.
REFWIRE_DIVERGES: dict[str, str] = {}
# Only when the bytes arrive in pieces.
REFWIRE_DIVERGES_SPLIT: dict[str, str] = {}


def _load() -> Iterator[dict[str, Any]]:
    for path in sorted(VECTOR_DIR.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["protocol"] == "lumberjack", path
        for v in doc["vectors"]:
            yield {**v, "_file": path.name}


ALL = list(_load())


def _params(vectors: list[dict[str, Any]], diverges: dict[str, str] | None = None) -> list[Any]:
    out = []
    for v in vectors:
        reason = (diverges or {}).get(v["name"])
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(v, id=v["name"], marks=marks))
    return out


FRAME_VECTORS = [v for v in ALL if "frames" in v]
STREAM_VECTORS = [v for v in ALL if "expect" in v]
CLIENT_VECTORS = [v for v in ALL if "client_sees" in v]
SERVER_ERRORS = [v for v in ALL if "error" in v and v["direction"] == "client->server"]
CLIENT_ERRORS = [v for v in ALL if "error" in v and v["direction"] == "server->client"]


# --------------------------------------------------------------------------- helpers


def _json_payload(fd: dict[str, Any]) -> bytes:
    text = fd.get("json_text")
    if text is None:
        text = json.dumps(fd["json"], separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8")


def _build(fd: dict[str, Any], compressed: Compressed | None = None) -> bytes:
    """The bytes of one frame from its fields.  A C frame needs the compressed
    payload it was decoded from (zlib output is not unique)."""
    t, version = fd["type"], VERSIONS[fd["version"]]
    if t == "W":
        return Window(fd["count"], version).encode()
    if t == "A":
        return Ack(fd["seq"], version).encode()
    if t == "J":
        return JsonFrame(fd["seq"], _json_payload(fd), version).encode()
    if t == "D":
        pairs = tuple((k.encode("utf-8"), v.encode("utf-8")) for k, v in fd["pairs"])
        return DataFrame(fd["seq"], pairs, version).encode()
    assert t == "C", fd
    assert compressed is not None
    return Compressed(compressed.payload, version).encode()


def _inner_bytes(fds: list[dict[str, Any]]) -> bytes:
    """The uncompressed frame stream a list of frame dicts stands for (C frames
    inside are compressed here at level 6; only their inflated content matters)."""
    parts = []
    for fd in fds:
        if fd["type"] == "C":
            inner = _inner_bytes(fd["inflated_frames"])
            parts.append(Compressed(zlib.compress(inner, 6), VERSIONS[fd["version"]]).encode())
        else:
            parts.append(_build(fd))
    return b"".join(parts)


def _canonical(stream: bytes) -> list[Any]:
    """A frame stream with every C frame replaced by its inflated content, recursively."""
    out: list[Any] = []
    for f in decode_all(stream):
        if type(f) is Compressed:
            out.append(("C", f.version, _canonical(inflate(f.payload, max_size=DEFAULT_LIMITS.max_decompressed_size))))
        else:
            out.append(f.encode())
    return out


def _check_frame(frame: Any, fd: dict[str, Any]) -> None:
    t = fd["type"]
    assert frame.version == VERSIONS[fd["version"]]
    if t == "W":
        assert type(frame) is Window and frame.count == fd["count"]
    elif t == "A":
        assert type(frame) is Ack and frame.seq == fd["seq"]
    elif t == "J":
        assert type(frame) is JsonFrame and frame.seq == fd["seq"]
        assert frame.payload == _json_payload(fd)
        assert frame.fields() == fd["json"]
    elif t == "D":
        assert type(frame) is DataFrame and frame.seq == fd["seq"]
        assert [[k.decode("utf-8"), v.decode("utf-8")] for k, v in frame.pairs] == fd["pairs"]
    else:
        assert t == "C" and type(frame) is Compressed
        inner = inflate(frame.payload, max_size=DEFAULT_LIMITS.max_decompressed_size)
        _check_frames(decode_all(inner), fd["inflated_frames"])
        # Re-encoding from the fields gives the same inflated content (nested C
        # frames compared by their own inflated content).
        assert _canonical(_inner_bytes(fd["inflated_frames"])) == _canonical(inner)


def _check_frames(frames: list[Any], fds: list[dict[str, Any]]) -> None:
    assert [type(f).__name__ for f in frames] == [_type_name(fd) for fd in fds]
    for frame, fd in zip(frames, fds, strict=True):
        _check_frame(frame, fd)


def _type_name(fd: dict[str, Any]) -> str:
    return {"W": "Window", "A": "Ack", "J": "JsonFrame", "D": "DataFrame", "C": "Compressed"}[fd["type"]]


def _chunks(data: bytes, whole: bool) -> list[bytes]:
    return [data] if whole else [data[i : i + 1] for i in range(len(data))]


def _run_server(
    data: bytes, *, whole: bool, **kwargs: Any
) -> tuple[list[list[int]], list[tuple[int, int]], RemoteProtocolError | None]:
    """Feed ``data`` and then EOF; accept every batch.  Returns the batches (as
    sequence lists), the acks sent (version byte, seq) and the error, if any."""
    conn = ServerConnection(**kwargs)
    batches: list[list[int]] = []
    acks: list[tuple[int, int]] = []

    def ack(raw: bytes) -> None:
        for f in decode_all(raw):
            assert type(f) is Ack
            acks.append((f.version, f.seq))

    try:
        for chunk in [*_chunks(data, whole), b""]:
            conn.receive_data(chunk, now=0.0)
            while True:
                event = conn.next_event()
                if event is NEED_DATA or type(event) is ConnectionClosed:
                    break
                if type(event) is Batch:
                    batches.append([e.seq for e in event.events])
                    conn.accept(event, now=0.0)
                    ack(conn.data_to_send())
                else:
                    assert type(event) is EmptyWindow
                    ack(conn.data_to_send())
    except RemoteProtocolError as exc:
        return batches, acks, exc
    return batches, acks, None


def _client(ctx: dict[str, Any]) -> tuple[ClientConnection, bytes]:
    """A ClientConnection with the window ``ctx`` describes already sent."""
    version = VERSIONS[ctx["version"]]
    seqs = ctx["seqs"]
    per_window = seqs == list(range(1, len(seqs) + 1))
    conn = ClientConnection(
        version=version,
        compression_level=0,
        sequence="window" if per_window else "running",
        first_seq=seqs[0],
        ack_interpretation="count" if ctx.get("ack_meaning") == "count" else "seq",
    )
    events = [{"n": i} if version == V2 else {"line": str(i)} for i in range(len(seqs))]
    conn.send_window(events, now=0.0)
    sent = conn.data_to_send()
    frames = decode_all(sent)
    assert [f.seq for f in frames[1:]] == seqs  # the context is reproducible
    return conn, sent


def _run_client(
    ctx: dict[str, Any], data: bytes, *, whole: bool, eof: bool
) -> tuple[list[dict[str, Any]], RemoteProtocolError | None]:
    conn, _ = _client(ctx)
    seen: list[dict[str, Any]] = []
    try:
        for chunk in _chunks(data, whole) + ([b""] if eof else []):
            conn.receive_data(chunk, now=0.0)
            while True:
                event = conn.next_event()
                if event is NEED_DATA or type(event) is ConnectionClosed:
                    break
                if type(event) is KeepAlive:
                    seen.append({"keepalive": True})
                else:
                    assert type(event) is AckReceived
                    seen.append({"acked": event.total, "complete": event.complete})
    except RemoteProtocolError as exc:
        return seen, exc
    return seen, None


# --------------------------------------------------------------------------- the files


def test_vector_files_are_well_formed() -> None:
    assert {p.name for p in VECTOR_DIR.glob("*.json")} >= {"frames.json", "conversations.json", "errors.json"}
    names = [v["name"] for v in ALL]
    assert len(names) == len(set(names)), "vector names must be unique across files"
    for v in ALL:
        assert v["direction"] in DIRECTIONS, v["name"]
        assert v["source"].startswith(("captured: ", "derived: ")), v["name"]
        bytes.fromhex(v["hex"])
        assert ("frames" in v) != ("error" in v), v["name"]


def test_research_examples_are_present() -> None:
    """Every hex example of specs/lumberjack/README.md §2.6 is a vector, byte for byte."""
    hexes = {v["hex"] for v in ALL}
    for h in (
        "32 57 00 00 00 02",
        "32 4a 00 00 00 01 00 00 00 07 7b 22 61 22 3a 31 7d",
        "32 41 00 00 00 02",
        "32 41 00 00 00 00",
        "31 44 00 00 00 01 00 00 00 01 00 00 00 04 6c 69 6e 65 00 00 00 02 68 69",
        "32 43 00 00 00 17 78 9c 33 f2 62 60 60 60 04 62 f6 6a a5 44 25 2b c3 5a 00 10 6a 02 8d",
    ):
        assert h.replace(" ", "") in hexes
    stored = next(v for v in ALL if v["name"] == "compressed-go-lumber-stored-block")
    assert bytes.fromhex(stored["hex"])[6:13] == bytes.fromhex("785e004e00b1ff")
    level3 = next(v for v in ALL if v["name"] == "compressed-json-seq-1-zlib-3")
    assert bytes.fromhex(level3["hex"])[6:8] == b"\x78\x5e"


# --------------------------------------------------------------------------- frames


@pytest.mark.parametrize("vector", _params(FRAME_VECTORS))
def test_decode(vector: dict[str, Any]) -> None:
    frames = decode_all(bytes.fromhex(vector["hex"]))
    _check_frames(frames, vector["frames"])


@pytest.mark.parametrize("vector", _params(FRAME_VECTORS))
def test_encode(vector: dict[str, Any]) -> None:
    data = bytes.fromhex(vector["hex"])
    decoded = decode_all(data)
    rebuilt = b"".join(
        _build(fd, frame if type(frame) is Compressed else None) for fd, frame in zip(vector["frames"], decoded, strict=True)
    )
    assert rebuilt == data
    for fd in vector["frames"]:
        if fd["type"] == "C":
            # Any zlib level gives a C frame that decodes to the same fields.
            for level in (0, 3, 9):
                c = Compressed.wrap(_inner_bytes(fd["inflated_frames"]), level=level, version=VERSIONS[fd["version"]])
                _check_frames(decode_all(c.encode()), [fd])


# --------------------------------------------------------------------------- conversations


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "bytewise"])
@pytest.mark.parametrize("ack_mode", ["last-seq", "count"])
@pytest.mark.parametrize("vector", _params(STREAM_VECTORS))
def test_server_conversation(vector: dict[str, Any], ack_mode: str, whole: bool) -> None:
    expect = vector["expect"]
    batches, acks, err = _run_server(bytes.fromhex(vector["hex"]), whole=whole, ack_mode=ack_mode)
    assert err is None
    assert batches == expect["batches"]
    assert [seq for _, seq in acks] == expect["acks"][ack_mode]
    # Acks carry the connection's version byte.
    first = VERSIONS[vector["frames"][0]["version"]]
    assert {v for v, _ in acks} <= {first}


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "bytewise"])
@pytest.mark.parametrize("vector", _params(CLIENT_VECTORS))
def test_client_reads(vector: dict[str, Any], whole: bool) -> None:
    seen, err = _run_client(vector["client_context"], bytes.fromhex(vector["hex"]), whole=whole, eof=False)
    assert err is None
    assert seen == vector["client_sees"]


# --------------------------------------------------------------------------- errors


def _check_error(vector: dict[str, Any], err: RemoteProtocolError | None) -> None:
    expected = vector["error"]
    assert err is not None, "the stream was accepted"
    assert (err.frame, err.field, err.offset) == (expected["frame"], expected["field"], expected["offset"]), err
    assert isinstance(err, RemoteLimitExceeded) == expected["limit"], err


def _check_prefix(vector: dict[str, Any]) -> None:
    """frames_before_error really are the first frames of the stream."""
    fds = vector["frames_before_error"]
    decoder = FrameDecoder()
    decoder.feed(bytes.fromhex(vector["hex"]))
    frames, _ = decoder.frames_before_error()
    assert len(frames) >= len(fds)
    _check_frames(frames[: len(fds)], fds)


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "bytewise"])
@pytest.mark.parametrize("vector", _params(SERVER_ERRORS, REFWIRE_DIVERGES))
def test_server_rejects(vector: dict[str, Any], whole: bool) -> None:
    _check_prefix(vector)
    limits = attrs.evolve(DEFAULT_LIMITS, **vector.get("limits", {}))
    batches, _, err = _run_server(bytes.fromhex(vector["hex"]), whole=whole, limits=limits)
    # The batches completed before the bad byte reach the application first.
    assert batches == vector["batches_before_error"]
    _check_error(vector, err)


@pytest.mark.parametrize("vector", _params(CLIENT_ERRORS, REFWIRE_DIVERGES))
def test_client_rejects(vector: dict[str, Any]) -> None:
    _check_prefix(vector)
    seen, err = _run_client(vector["client_context"], bytes.fromhex(vector["hex"]), whole=True, eof=True)
    assert len(seen) == len(vector["frames_before_error"])
    _check_error(vector, err)


@pytest.mark.parametrize("vector", _params(CLIENT_ERRORS, {**REFWIRE_DIVERGES, **REFWIRE_DIVERGES_SPLIT}))
def test_client_rejects_bytewise(vector: dict[str, Any]) -> None:
    seen, err = _run_client(vector["client_context"], bytes.fromhex(vector["hex"]), whole=False, eof=True)
    assert len(seen) == len(vector["frames_before_error"])
    _check_error(vector, err)


@pytest.mark.parametrize("vector", _params(SERVER_ERRORS + CLIENT_ERRORS))
def test_error_vector_layer(vector: dict[str, Any]) -> None:
    """``error.layer`` says who refuses the stream: ``codec``, the bare FrameDecoder
    raises this very error; ``machine``, the decoder takes every byte and only the
    connection (versions across a window, sequence numbers, acks, end of stream) refuses it."""
    expected = vector["error"]
    assert expected["layer"] in LAYERS
    err = codec_error("lumberjack", bytes.fromhex(vector["hex"]), vector)
    if expected["layer"] == "codec":
        assert err is not None and same_error(err, expected), err
    else:
        assert err is None, err
