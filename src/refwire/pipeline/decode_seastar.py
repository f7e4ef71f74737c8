"""Seastar RPC capture decoder (specs/seastar-rpc/README.md §2-§5) on :class:`refwire.seastar_rpc.frames.FrameDecoder`.

Each direction starts with its negotiation frame (§2); what follows depends on
*both* negotiation frames, as it does for the real endpoints: the client's
offer says whether this is a stream connection (STREAM_PARENT) and whether
requests carry ``timeout_ms`` (TIMEOUT, which the server always accepts); the
server's reply names the compressor of both directions and whether responses
carry ``handler_duration``.  So each direction reads the ``peer``'s
negotiation frame (only that frame) before its own frames.  Without the peer
the client direction still decodes when it offered no compressor; otherwise
the first frame after the negotiation is an error saying the layout is unknown.

Rows: ``negotiation`` (``fields_json``: the features), ``request`` (``seq`` =
msg id, ``name`` = the verb, ``count`` = data length), ``response`` (``seq`` =
msg id as sent, negative for an exception; ``fields_json.exception`` =
``USER`` / ``UNKNOWN_VERB`` / ``type N`` with its message or verb),
``stream-message``, ``stream-end``, and, once a compressor is negotiated,
``compressed`` rows (``name`` = the compressor, ``count`` = 1, or 0 for a
no-op envelope) each followed by its inner frame with ``parent_offset`` = the
envelope's offset and ``offset`` 0 (inside the decompressed bytes), as
Seastar wraps one whole frame per envelope (§4).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import ProtocolError
from .decoders import FrameRow, Peer, dumps, error_row, json_value

__all__ = ["decode", "negotiation_of"]

PROTOCOL = "seastar-rpc"


def negotiation_of(chunks: Iterable[bytes]) -> Any:
    """The :class:`~refwire.seastar_rpc.frames.Features` of a direction's negotiation frame, or None."""
    from refwire.seastar_rpc.frames import Features, FrameDecoder, Negotiation

    dec = FrameDecoder("request")
    for chunk in chunks:
        dec.feed(chunk)
        try:
            got = dec.next_frame()
            if isinstance(got, Negotiation):
                return Features.from_negotiation(got)
        except ProtocolError:
            return None
    return None


def _frame_row(frame_no: int, frame: Any, off: int, parent: int | None, timeout: bool, duration: bool) -> list[FrameRow]:
    from refwire.seastar_rpc.frames import Request, Response, StreamEnd, StreamMessage, UnknownVerb, UserError, decode_exception

    if isinstance(frame, Request):
        size = (28 if timeout else 20) + len(frame.payload)
        fields = {"verb": frame.verb, "msg_id": frame.msg_id, "timeout_ms": frame.timeout_ms, "len": len(frame.payload)}
        return [FrameRow(frame_no, off, "request", size, parent, seq=frame.msg_id, count=len(frame.payload), name=str(frame.verb), fields_json=dumps(fields))]
    if isinstance(frame, Response):
        size = (16 if duration else 12) + len(frame.payload)
        resp: dict[str, Any] = {"msg_id": frame.msg_id, "handler_duration": frame.handler_duration, "len": len(frame.payload)}
        extra: list[FrameRow] = []
        if frame.msg_id < 0:
            try:
                exc = decode_exception(frame.payload, base=off + size - len(frame.payload))
                if isinstance(exc, UserError):
                    resp["exception"], resp["message"] = "USER", exc.message[:200].decode("utf-8", "replace")
                elif isinstance(exc, UnknownVerb):
                    resp["exception"], resp["verb"] = "UNKNOWN_VERB", exc.verb
                else:
                    resp["exception"] = f"type {exc.type}"
            except ProtocolError as err:
                resp["exception"] = "malformed"
                extra.append(error_row(frame_no + 1, err, off, off if parent is None else parent))
        return [FrameRow(frame_no, off, "response", size, parent, seq=frame.msg_id, count=len(frame.payload), fields_json=dumps(resp)), *extra]
    if isinstance(frame, StreamMessage):
        return [FrameRow(frame_no, off, "stream-message", 4 + len(frame.payload), parent, count=len(frame.payload), fields_json=dumps({"len": len(frame.payload)}))]
    if isinstance(frame, StreamEnd):
        return [FrameRow(frame_no, off, "stream-end", 4, parent)]
    return [FrameRow(frame_no, off, type(frame).__name__, 0, parent, fields_json=dumps(json_value(frame)))]  # pragma: no cover


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from refwire.seastar_rpc.compression import COMPRESSOR_NAMES, make_compressor
    from refwire.seastar_rpc.frames import Features, FrameDecoder, Negotiation, NoOp

    c2s = direction == "c2s"
    dec = FrameDecoder("request" if c2s else "response")
    frame_no = 0
    compressor_name: str | None = None
    for chunk in chunks:
        dec.feed(chunk)
        while True:
            start = dec.offset
            try:
                frame = dec.next_frame()
            except ProtocolError as exc:
                yield error_row(frame_no, exc, start, None)
                return
            if frame is None:
                break
            size = dec.offset - start
            if isinstance(frame, Negotiation):
                try:
                    own = Features.from_negotiation(frame, base=start + 12)
                except ProtocolError as exc:
                    yield error_row(frame_no, exc, start, None)
                    return
                yield FrameRow(frame_no, start, "negotiation", size, fields_json=dumps(json_value(own)))
                frame_no += 1
                # What follows depends on both negotiation frames (§2): configure as the endpoint does.
                other = negotiation_of(peer()) if peer is not None else None
                client, server = (own, other) if c2s else (other, own)
                compressor_name = server.compress if server is not None else None
                problem = None
                if server is None and own.compress is not None:
                    problem = ("the peer's negotiation frame is not in the capture, so the compressor is unknown", "(peer)")
                elif compressor_name is not None and compressor_name not in COMPRESSOR_NAMES:
                    problem = (f"the server chose compressor {compressor_name!r}, which is not one of {', '.join(COMPRESSOR_NAMES)}", "COMPRESS")
                if problem is not None:
                    yield error_row(frame_no, ProtocolError(problem[0], protocol=PROTOCOL, frame="negotiation", field=problem[1], offset=dec.offset), dec.offset, None)
                    return
                stream = client is not None and client.stream_parent is not None
                dec.configure(
                    kind="stream" if stream else ("request" if c2s else "response"),
                    timeout=bool(c2s and own.timeout),
                    duration=bool(not c2s and own.handler_duration),
                    compressor=None if compressor_name is None else make_compressor(compressor_name),
                )
                continue
            if dec.compressor is not None:
                inner = [] if isinstance(frame, NoOp) else _frame_row(frame_no + 1, frame, 0, start, dec.timeout, dec.duration)
                info = {"compressor": compressor_name, "clen": size - 4, "inflated_len": inner[0].size if inner else 0}
                yield FrameRow(frame_no, start, "compressed", size, count=1 if inner else 0, name=compressor_name, fields_json=dumps(info))
                yield from inner
                frame_no += 1 + len(inner)
            else:
                rows = _frame_row(frame_no, frame, start, None, dec.timeout, dec.duration)
                yield from rows
                frame_no += len(rows)
    err = dec.eof_error()
    if err is not None:
        yield error_row(frame_no, err, dec.offset, None)
