"""Run the Lumberjack vectors shipped inside refwire against a decoder.

``my_decode`` is the port under test: replace its body with a call into your
implementation (in-process, through a subprocess or an FFI).  Here it wraps
refwire's own frame decoder, so the script passes as shipped.
"""

import json
import zlib

import refwire.specs
from refwire.errors import LimitExceeded, ProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.lumberjack import (
    NEED_DATA,
    Ack,
    Compressed,
    DataFrame,
    FrameDecoder,
    JsonFrame,
    ServerConnection,
    Window,
    decode_all,
)
from refwire.wire import Limits


def as_json(frame):
    """One decoded frame in the vectors' notation (specs/lumberjack/README.md §8)."""
    base = {"version": chr(frame.version)}
    if isinstance(frame, Window):
        return {"type": "W", **base, "count": frame.count}
    if isinstance(frame, Ack):
        return {"type": "A", **base, "seq": frame.seq}
    if isinstance(frame, JsonFrame):
        return {"type": "J", **base, "seq": frame.seq, "json": frame.fields()}
    if isinstance(frame, DataFrame):
        return {"type": "D", **base, "seq": frame.seq, "pairs": [[k.decode(), v.decode()] for k, v in frame.pairs]}
    assert isinstance(frame, Compressed)
    return {"type": "C", **base, "inflated_frames": [as_json(f) for f in decode_all(zlib.decompress(frame.payload))]}


def my_decode(raw, limits=None):
    """Decode a whole stream: (the frames before any error, the error as JSON or None)."""
    decoder = FrameDecoder(Limits(**limits) if limits else Limits())
    decoder.feed(raw)
    frames, err = decoder.frames_before_error()
    error = None
    if isinstance(err, ProtocolError):
        error = {"frame": err.frame, "field": err.field, "offset": err.offset, "limit": isinstance(err, LimitExceeded)}
    return frames, error


def my_server_rejects(raw, limits=None):
    """Feed a whole client->server stream, then EOF, to a server connection
    machine: the error it raises, as JSON (None if it raised none)."""
    server = ServerConnection(limits=Limits(**limits) if limits else Limits())
    server.receive_data(raw, now=0.0)
    server.receive_data(b"", now=0.0)
    try:
        while server.next_event() is not NEED_DATA:
            pass
    except RemoteProtocolError as err:
        return {"frame": err.frame, "field": err.field, "offset": err.offset, "limit": isinstance(err, RemoteLimitExceeded)}
    return None


def expected_frame(want):
    """A ``J`` vector may give ``json_text`` instead of ``json``: compare documents."""
    if "json_text" in want:
        want = {k: v for k, v in want.items() if k != "json_text"} | {"json": json.loads(want["json_text"])}
    if want.get("type") == "C":
        want = want | {"inflated_frames": [expected_frame(f) for f in want["inflated_frames"]]}
    return want


print("spec:", refwire.specs.path("lumberjack") / "README.md")
passed = 0
for vector in refwire.specs.load_vectors("lumberjack", "frames")["vectors"]:
    frames, error = my_decode(bytes.fromhex(vector["hex"]))
    assert error is None, (vector["name"], error)
    assert [as_json(f) for f in frames] == [expected_frame(f) for f in vector["frames"]], vector["name"]
    passed += 1

codec = machine = 0
for vector in refwire.specs.load_vectors("lumberjack", "errors")["vectors"]:
    want = vector["error"]
    frames, error = my_decode(bytes.fromhex(vector["hex"]), vector.get("limits"))
    if want["layer"] == "codec":
        # The decoder alone must refuse the bytes, at the field and offset given.
        got = {k: error[k] for k in ("frame", "field", "offset", "limit")} if error else None
        assert got == {k: want[k] for k in ("frame", "field", "offset", "limit")}, (vector["name"], got)
        assert [as_json(f) for f in frames] == [expected_frame(f) for f in vector["frames_before_error"]], vector["name"]
        codec += 1
    else:
        # The decoder accepts the bytes (or waits for more): the connection machine
        # (versions within a window, sequence numbers, what a C inflates to, the
        # end of the stream) is what must refuse them.
        assert error is None, (vector["name"], error)
        before = [expected_frame(f) for f in vector["frames_before_error"]]
        assert [as_json(f) for f in frames[: len(before)]] == before, vector["name"]
        if vector["direction"] == "client->server":
            got = my_server_rejects(bytes.fromhex(vector["hex"]), vector.get("limits"))
            assert got == {k: want[k] for k in ("frame", "field", "offset", "limit")}, (vector["name"], got)
        machine += 1

print(f"frames.json: {passed} vectors decoded")
print(f"errors.json: {codec} refused by the codec, {machine} left to the connection machine")
