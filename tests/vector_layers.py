"""Which layer rejects an error vector: what the bare frame decoder of each protocol
makes of the vector's bytes (specs/schema/: every error vector carries ``"layer"``).

``codec``: the decoder alone, fed the whole stream (and told of the end of the stream
where it has a call for that), raises the vector's error.  ``machine``: the decoder
accepts every byte (or waits for more) and only the connection machine, with its
state, sequence and end-of-stream rules, refuses the stream.
"""

from __future__ import annotations

from typing import Any

from refwire.errors import LimitExceeded, ProtocolError
from refwire.lumberjack import FrameDecoder as LumberjackDecoder
from refwire.pravega.draft2017.frames import DRAFT
from refwire.pravega.frames import CLIENT_LIMITS, DEFAULT_LIMITS, CommandDecoder
from refwire.seastar_rpc import FrameDecoder as SeastarDecoder
from refwire.seastar_rpc import make_compressor

LAYERS = ("codec", "machine")


def _lumberjack(raw: bytes, v: dict[str, Any]) -> ProtocolError | None:
    dec = LumberjackDecoder()
    dec.feed(raw)
    return dec.frames_before_error()[1]


def _pravega(raw: bytes, v: dict[str, Any], **kw: Any) -> ProtocolError | None:
    dec = CommandDecoder(DEFAULT_LIMITS if v["direction"] == "client->server" else CLIENT_LIMITS, **kw)
    dec.feed(raw)
    try:
        list(dec.commands())
    except ProtocolError as err:
        return err
    return None


def _seastar(raw: bytes, v: dict[str, Any]) -> ProtocolError | None:
    ctx = v["context"]
    if ctx["phase"] == "negotiation":
        dec = SeastarDecoder("request" if ctx["side"] == "server" else "response")
    else:
        dec = SeastarDecoder(ctx["kind"], negotiation=False)
        comp = ctx.get("compressor")
        dec.configure(timeout=ctx["timeout"], duration=ctx["duration"], compressor=make_compressor(comp) if comp else None)
    dec.feed(raw)
    try:
        while dec.next_frame() is not None:
            pass
    except ProtocolError as err:
        return err
    return dec.eof_error() if v.get("eof") else None


def codec_error(protocol: str, raw: bytes, v: dict[str, Any]) -> ProtocolError | None:
    """The error the bare decoder of ``protocol`` raises on ``raw``, or None."""
    if protocol == "lumberjack":
        return _lumberjack(raw, v)
    if protocol == "pravega":
        return _pravega(raw, v)
    if protocol == "pravega-draft-2017":
        return _pravega(raw, v, allow_inner=True, dialect=DRAFT)
    assert protocol == "seastar-rpc", protocol
    return _seastar(raw, v)


def same_error(err: ProtocolError, want: dict[str, Any]) -> bool:
    return (err.frame, err.field, err.offset, isinstance(err, LimitExceeded)) == (
        want["frame"],
        want["field"],
        want["offset"],
        want.get("limit", False),
    )
