"""A port started from the spec alone: a Lumberjack v2 decoder for the frames a
client reads and writes (W, J, A; specs/lumberjack/README.md §2), written
without refwire's code, then checked against the spec's frame vectors.

Frames it does not implement (v1, ``D``, ``C``) are counted as skipped, as your
port would skip what it leaves out."""

import json
import struct

import refwire.specs


def decode(data):
    """bytes -> list of frames in the vectors' notation (§8)."""
    frames, pos = [], 0
    while pos < len(data):
        version, kind = chr(data[pos]), chr(data[pos + 1])
        if version != "2" or kind not in "WJA":
            raise NotImplementedError(f"{version}{kind}")
        if kind == "W":  # W: u32 count
            (count,) = struct.unpack_from(">I", data, pos + 2)
            frames.append({"type": "W", "version": "2", "count": count})
            pos += 6
        elif kind == "A":  # A: u32 seq
            (seq,) = struct.unpack_from(">I", data, pos + 2)
            frames.append({"type": "A", "version": "2", "seq": seq})
            pos += 6
        else:  # J: u32 seq, u32 length, JSON payload
            seq, length = struct.unpack_from(">II", data, pos + 2)
            text = data[pos + 10 : pos + 10 + length].decode()
            frame = {"type": "J", "version": "2", "seq": seq, "json": json.loads(text)}
            if text != compact(frame["json"]):  # §8: json_text only where the text is not compact
                frame["json_text"] = text
            frames.append(frame)
            pos += 10 + length
    return frames


def compact(value):
    """A J payload as the vectors serialise it (§8): no whitespace, keys in order, UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode(frame):
    """One W, J or A frame from its fields."""
    if frame["type"] == "W":
        return b"2W" + struct.pack(">I", frame["count"])
    if frame["type"] == "A":
        return b"2A" + struct.pack(">I", frame["seq"])
    payload = frame.get("json_text", compact(frame["json"])).encode()
    return b"2J" + struct.pack(">II", frame["seq"], len(payload)) + payload


if __name__ == "__main__":
    passed, skipped = 0, []
    for vector in refwire.specs.load_vectors("lumberjack", "frames")["vectors"]:
        data = bytes.fromhex(vector["hex"])
        try:
            got = decode(data)
        except NotImplementedError:
            skipped.append(vector["name"])
            continue
        assert got == vector["frames"], (vector["name"], got, vector["frames"])
        assert b"".join(encode(f) for f in got) == data, vector["name"]  # and back, byte for byte
        passed += 1
    print(f"{passed} frame vectors pass, {len(skipped)} skipped (not implemented): {', '.join(skipped[:4])}, ...")
