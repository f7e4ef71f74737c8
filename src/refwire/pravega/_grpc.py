"""Unary gRPC over plaintext HTTP/2 (h2c, prior knowledge) on top of the ``h2``
state machine, for the minimal Pravega controller.

:class:`GrpcServerConnection` is Sans-IO: bytes in (``receive_data``), bytes
out (``data_to_send``); handlers are plain synchronous functions
``request bytes -> response bytes`` that may raise :class:`GrpcError`.
:func:`serve_grpc_connection` is the thin trio driver.

gRPC framing (the gRPC "HTTP/2 protocol" document): each message is
``u8 compressed-flag, u32be length, payload``.  A response is HEADERS
(``:status 200``, ``content-type: application/grpc``), DATA, then trailers
(``grpc-status``, ``grpc-message``); an error is a trailers-only response.

What is handled: HTTP/2 flow control both ways (received data is acknowledged as
it is consumed; responses are sent only within the peer's windows and resumed on
WINDOW_UPDATE), many concurrent streams, client PINGs (h2 acks them), RST_STREAM,
the client's GOAWAY, and a graceful GOAWAY from our side on shutdown.  Limits:
request message size (RESOURCE_EXHAUSTED past it, checked on the 5-byte prefix
before the body is buffered), concurrent streams and header list size (HTTP/2
settings).  Compressed messages are refused (UNIMPLEMENTED); only identity is
supported.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Final

import attrs
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import trio

from ..errors import ProtocolError
from .errors import GrpcError

__all__ = [
    "DEFAULT_GRPC_LIMITS",
    "GrpcError",
    "GrpcLimits",
    "GrpcServerConnection",
    "GrpcStatus",
    "UnaryHandler",
    "grpc_frame",
    "percent_encode",
    "serve_grpc_connection",
]

log = logging.getLogger("refwire.pravega.grpc")

UnaryHandler = Callable[[bytes], bytes]

_PREFIX_LEN: Final = 5


class GrpcStatus(IntEnum):
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


@attrs.frozen(kw_only=True)
class GrpcLimits:
    #: largest request message (gRPC's default receive limit is 4 MiB).
    max_message_size: int = 4 * 1024 * 1024
    #: HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS we announce.
    max_concurrent_streams: int = 100
    #: HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE we announce and enforce.
    max_header_list_size: int = 16 * 1024
    #: our initial stream window (how much a client may send before we acknowledge).
    initial_window_size: int = 1024 * 1024


DEFAULT_GRPC_LIMITS: Final = GrpcLimits()


def grpc_frame(payload: bytes, *, compressed: bool = False) -> bytes:
    """One length-prefixed gRPC message."""
    return bytes((1 if compressed else 0,)) + len(payload).to_bytes(4, "big") + payload


def percent_encode(text: str) -> str:
    """``grpc-message`` encoding: UTF-8, then %XX for bytes outside 0x20..0x7E and for '%'."""
    out = []
    for b in text.encode("utf-8"):
        out.append(chr(b) if 0x20 <= b <= 0x7E and b != 0x25 else f"%{b:02X}")
    return "".join(out)


@attrs.define
class _Call:
    stream_id: int
    path: str = ""
    body: bytearray = attrs.field(factory=bytearray)
    answered: bool = False


@attrs.define
class _Outgoing:
    data: bytes
    pos: int = 0


class GrpcServerConnection:
    """The server side of one h2c connection carrying unary gRPC calls (Sans-IO).

    ``handlers`` maps a method path (``/package.Service/method``) to a handler.
    ``on_call(path)`` is told about every call (for logging).
    """

    def __init__(
        self,
        handlers: Mapping[str, UnaryHandler],
        *,
        limits: GrpcLimits = DEFAULT_GRPC_LIMITS,
        on_call: Callable[[str], None] | None = None,
    ) -> None:
        self._handlers = handlers
        self._limits = limits
        self._on_call = on_call
        config = h2.config.H2Configuration(client_side=False, header_encoding=None, validate_inbound_headers=True)
        self._h2 = h2.connection.H2Connection(config=config)
        self._h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: limits.initial_window_size,
            },
        )
        self._h2.decoder.max_header_list_size = limits.max_header_list_size
        self._h2.initiate_connection()
        self._calls: dict[int, _Call] = {}
        self._outgoing: dict[int, _Outgoing] = {}
        self._draining = False
        #: True once a GOAWAY was sent or received, or the peer broke the protocol.
        self.closed = False

    # -- bytes in / out ------------------------------------------------------
    def data_to_send(self) -> bytes:
        return self._h2.data_to_send()

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the peer (``b""`` = EOF)."""
        if self.closed:
            return
        if not data:
            self.closed = True
            return
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued a GOAWAY naming the error; send it and close.
            log.info("grpc: HTTP/2 protocol error from peer: %s", exc)
            self.closed = True
            return
        for event in events:
            try:
                self._handle(event)
            except h2.exceptions.StreamClosedError as exc:  # the client reset the stream first
                log.debug("grpc: stream %s closed while answering", exc.stream_id)
                self._calls.pop(exc.stream_id, None)
        self._flush()
        self._maybe_finish_drain()

    def start_shutdown(self) -> None:
        """Stop taking calls: GOAWAY as soon as the answers in flight are sent."""
        self._draining = True
        self._maybe_finish_drain()

    def _maybe_finish_drain(self) -> None:
        if self._draining and not self.closed and not self._outgoing:
            self._h2.close_connection(error_code=h2.errors.ErrorCodes.NO_ERROR)
            self.closed = True

    # -- events --------------------------------------------------------------
    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._request(event)
        elif isinstance(event, h2.events.DataReceived):
            self._data(event)
        elif isinstance(event, h2.events.StreamEnded):
            call = self._calls.get(event.stream_id)
            if call is not None and not call.answered:
                self._dispatch(call)
            self._calls.pop(event.stream_id, None)
        elif isinstance(event, h2.events.StreamReset):
            self._calls.pop(event.stream_id, None)
            self._outgoing.pop(event.stream_id, None)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True
        # WindowUpdated / RemoteSettingsChanged: receive_data flushes after every batch;
        # PingReceived: h2 has already queued the PING ACK; the rest needs nothing.

    def _request(self, event: h2.events.RequestReceived) -> None:
        assert event.stream_id is not None
        sid = event.stream_id
        headers = {bytes(k): bytes(v) for k, v in (event.headers or [])}
        call = _Call(sid, path=headers.get(b":path", b"").decode("latin-1"))
        self._calls[sid] = call
        if self._draining:
            self._trailers_only(call, GrpcStatus.UNAVAILABLE, "the controller is shutting down")
        elif headers.get(b":method") != b"POST":
            self._http_error(call, b"405")
        elif not headers.get(b"content-type", b"").startswith(b"application/grpc"):
            self._http_error(call, b"415")
        elif headers.get(b"grpc-encoding", b"identity") != b"identity":
            self._trailers_only(call, GrpcStatus.UNIMPLEMENTED, "only identity grpc-encoding is supported")
        elif call.path not in self._handlers:
            if self._on_call is not None:
                self._on_call(call.path)
            self._trailers_only(call, GrpcStatus.UNIMPLEMENTED, f"method {call.path} is not implemented by this controller")
        if event.stream_ended and not call.answered:
            self._dispatch(call)

    def _data(self, event: h2.events.DataReceived) -> None:
        assert event.stream_id is not None
        sid = event.stream_id
        # Everything received is consumed at once (buffered or dropped), so it is
        # acknowledged at once; h2 sends WINDOW_UPDATEs as the windows run low
        # (for a stream that is already closed it only credits the connection).
        if event.flow_controlled_length:
            self._h2.acknowledge_received_data(event.flow_controlled_length, sid)
        call = self._calls.get(sid)
        if call is None or call.answered:
            return
        call.body += event.data or b""
        if len(call.body) < _PREFIX_LEN:
            return
        # The announced length is checked as soon as the prefix is in, before the body is buffered.
        length = int.from_bytes(call.body[1:5], "big")
        if length > self._limits.max_message_size:
            reason = f"request message of {length} bytes exceeds the limit max_message_size={self._limits.max_message_size}"
            self._refuse(call, GrpcStatus.RESOURCE_EXHAUSTED, reason)
        elif len(call.body) > _PREFIX_LEN + length:
            self._refuse(call, GrpcStatus.INTERNAL, "unary method received more than one request message")

    def _refuse(self, call: _Call, code: GrpcStatus, message: str) -> None:
        """Answer while the client is still sending, then reset the rest of its stream."""
        self._trailers_only(call, code, message)
        call.body = bytearray()
        self._calls.pop(call.stream_id, None)
        with contextlib.suppress(h2.exceptions.StreamClosedError):  # the client had already ended its side
            self._h2.reset_stream(call.stream_id, h2.errors.ErrorCodes.NO_ERROR)

    # -- answering -----------------------------------------------------------
    def _dispatch(self, call: _Call) -> None:
        body = call.body
        if len(body) < _PREFIX_LEN:
            self._trailers_only(call, GrpcStatus.INTERNAL, f"request has {len(body)} bytes, not one length-prefixed message")
            return
        flag = body[0]
        length = int.from_bytes(body[1:5], "big")
        if flag == 1:
            self._trailers_only(call, GrpcStatus.INTERNAL, "compressed message without a grpc-encoding")
            return
        if flag != 0:
            self._trailers_only(call, GrpcStatus.INTERNAL, f"invalid compressed-flag byte {flag}")
            return
        if len(body) != _PREFIX_LEN + length:
            what = "truncated" if len(body) < _PREFIX_LEN + length else "more than one"
            self._trailers_only(
                call, GrpcStatus.INTERNAL, f"unary request: {what} message (prefix says {length} bytes, body has {len(body) - 5})"
            )
            return
        handler = self._handlers[call.path]
        if self._on_call is not None:
            self._on_call(call.path)
        try:
            reply = handler(bytes(body[_PREFIX_LEN:]))
        except GrpcError as exc:
            self._trailers_only(call, GrpcStatus(exc.code), exc.message)
            return
        except ProtocolError as exc:
            self._trailers_only(call, GrpcStatus.INTERNAL, f"cannot decode the request: {exc}")
            return
        except Exception as exc:
            log.exception("grpc: handler for %s failed", call.path)
            self._trailers_only(call, GrpcStatus.INTERNAL, f"{type(exc).__name__}: {exc}")
            return
        call.answered = True
        self._h2.send_headers(call.stream_id, [(b":status", b"200"), (b"content-type", b"application/grpc")])
        self._outgoing[call.stream_id] = _Outgoing(grpc_frame(reply))

    def _trailers_only(self, call: _Call, code: GrpcStatus, message: str) -> None:
        call.answered = True
        self._h2.send_headers(
            call.stream_id,
            [
                (b":status", b"200"),
                (b"content-type", b"application/grpc"),
                (b"grpc-status", str(int(code)).encode()),
                (b"grpc-message", percent_encode(message).encode("ascii")),
            ],
            end_stream=True,
        )

    def _http_error(self, call: _Call, status: bytes) -> None:
        call.answered = True
        self._h2.send_headers(call.stream_id, [(b":status", status)], end_stream=True)

    def _flush(self) -> None:
        """Send pending response bytes within the flow-control windows; finish with trailers."""
        for sid in list(self._outgoing):
            out = self._outgoing[sid]
            try:
                while out.pos < len(out.data):
                    window = min(self._h2.local_flow_control_window(sid), self._h2.max_outbound_frame_size)
                    if window <= 0:
                        break
                    chunk = out.data[out.pos : out.pos + window]
                    self._h2.send_data(sid, chunk)
                    out.pos += len(chunk)
                if out.pos >= len(out.data):
                    self._h2.send_headers(sid, [(b"grpc-status", b"0"), (b"grpc-message", b"")], end_stream=True)
                    del self._outgoing[sid]
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                self._outgoing.pop(sid, None)


async def serve_grpc_connection(
    stream: trio.abc.Stream,
    conn: GrpcServerConnection,
    *,
    closing: trio.Event | None = None,
    receive_size: int = 65536,
) -> None:
    """Drive ``conn`` over ``stream`` until the peer goes away or, once
    ``closing`` is set, the answers in flight are sent and GOAWAY is out."""
    send_lock = trio.Lock()

    async def flush() -> None:
        async with send_lock:
            data = conn.data_to_send()
            if data:
                await stream.send_all(data)

    async def watch_closing(cancel: trio.CancelScope) -> None:
        assert closing is not None
        await closing.wait()
        conn.start_shutdown()
        await flush()
        if conn.closed:
            cancel.cancel()

    try:
        async with trio.open_nursery() as nursery:
            if closing is not None:
                nursery.start_soon(watch_closing, nursery.cancel_scope)
            await flush()  # our SETTINGS
            while not conn.closed:
                data = await stream.receive_some(receive_size)
                conn.receive_data(bytes(data))
                await flush()
            nursery.cancel_scope.cancel()
    except* (trio.BrokenResourceError, trio.ClosedResourceError) as group:
        log.debug("grpc: connection lost: %s", group.exceptions[0])
    except* Exception:  # a bug here must cost this connection only, never the server
        log.exception("grpc: connection failed")
