"""The speed path of Seastar RPC's frame decoder (specs/seastar-rpc/README.md §3, §4).

The plain path, :class:`refwire.seastar_rpc.frames.FrameDecoder`, decodes one
frame at a time as the spec's sections read: the negotiation frame (§2), then
requests, responses or stream frames (§3, §5), each in its envelope once a
compressor was negotiated (§4).  :class:`FastFrameDecoder`, the decoder
``FrameDecoder(..., fast=True)`` builds (and ``fast=None`` unless
``REFWIRE_REFERENCE`` is set: :mod:`refwire.speed`), does the same work faster
for the frames a busy connection carries:

* :meth:`~FastFrameDecoder.next_frame` builds a complete regular request or
  response without the plain path's calls (the frames' fields filled through
  their slots), and opens a single-block LZ4 envelope -- ``LZ4``'s
  ``uncompressed_size:u32 + block`` or ``LZ4_FRAGMENTED``'s lone last chunk --
  inline, for exactly the compressor types :meth:`~FastFrameDecoder.configure`
  picked;
* :meth:`~FastFrameDecoder.next_responses` decodes the complete regular responses
  at the head of the buffer as one :class:`~refwire.seastar_rpc.frames.ResponseRun`
  (columns), which the client connection delivers one event per ``next_event``.

Anything else -- incomplete, over a limit, an exception, a no-op, several
chunks, a bad block -- goes to the plain path, which raises the same errors at
the same offsets (``tests/test_seastar_differential.py``).

It registers the class in :data:`refwire.seastar_rpc.frames._SPEED` when imported
(the package's ``__init__`` imports it, so before any use).
"""

from __future__ import annotations

from typing import Final, cast

import attrs
import lz4.block  # type: ignore[import-untyped]

from ..wire import Limits
from . import _fast_compression, frames
from .compression import _LAST, _MAX_RATIO, Compressor, LZ4Compressor, LZ4FragmentedCompressor
from .frames import _SPEED, DEFAULT_LIMITS, MAX_RUN, Frame, FrameDecoder, Kind, Request, Response, ResponseRun

__all__ = ["FastFrameDecoder"]

# The layouts, bound here by assignment: CPython 3.11 compiles ``name.method(...)``
# of a name bound by an import as an attribute load (a bound method made per call),
# of any other name as a method call.
_U32: Final = frames._U32
_U32X2: Final = _fast_compression._U32X2
_REQ28: Final = frames._REQ28
_REQ20: Final = frames._REQ20
_RSP16: Final = frames._RSP16
_RSP12: Final = frames._RSP12

# Trusted construction of the frames the decoder's hot path builds: every field
# filled through its slot (the classes have no validators), half the cost of
# the keyword __init__.
_new = object.__new__
_SET_REQ_VERB, _SET_REQ_ID, _SET_REQ_PAYLOAD, _SET_REQ_TIMEOUT = (Request.__dict__[a.name].__set__ for a in attrs.fields(Request))
_SET_RSP_ID, _SET_RSP_PAYLOAD, _SET_RSP_DURATION = (Response.__dict__[a.name].__set__ for a in attrs.fields(Response))
assert [a.name for a in attrs.fields(Request)] == ["verb", "msg_id", "payload", "timeout_ms"]
assert [a.name for a in attrs.fields(Response)] == ["msg_id", "payload", "handler_duration"]


class FastFrameDecoder(FrameDecoder):
    """:class:`~refwire.seastar_rpc.frames.FrameDecoder` on the speed path: the same
    frames, errors and state, faster (see the module's text)."""

    def __init__(
        self, kind: Kind, *, limits: Limits = DEFAULT_LIMITS, negotiation: bool = True, fast: bool | None = None
    ) -> None:
        super().__init__(kind, limits=limits, negotiation=negotiation, fast=fast)
        self.fast = True
        #: the compressor whose single-block envelopes :meth:`next_frame` opens inline
        #: (exactly an ``LZ4Compressor`` or ``LZ4FragmentedCompressor`` given to
        #: :meth:`configure`), and the flag its first payload word must carry
        self._fast_compressor: Compressor | None = None
        self._fast_flag = 0

    def configure(
        self,
        *,
        kind: Kind | None = None,
        timeout: bool = False,
        duration: bool = False,
        compressor: Compressor | None = None,
        discard_over: int | None = None,
    ) -> None:
        super().configure(kind=kind, timeout=timeout, duration=duration, compressor=compressor, discard_over=discard_over)
        self._fast_compressor = None
        self._fast_flag = 0
        if compressor is not None and self._held is None:
            # (an oversized request still held -- being skipped, or skipped and not yet
            # returned -- is the general path's to finish)
            if type(compressor) is LZ4Compressor:
                self._fast_compressor = compressor
            elif type(compressor) is LZ4FragmentedCompressor:
                self._fast_compressor = compressor
                self._fast_flag = _LAST

    def next_frame(self) -> Frame | None:
        """The next complete frame, or ``None`` when more bytes are needed: a complete
        regular request or response -- uncompressed, or in a single-block LZ4
        envelope -- built here, anything else by the plain path."""
        comp = self.compressor
        if comp is not None:
            if comp is not self._fast_compressor:
                return self._next_frame()
            # The compressed hot path (spec §4): a complete envelope that
            # is one LZ4 block -- ``LZ4``'s ``uncompressed_size:u32 + block``, or
            # ``LZ4_FRAGMENTED``'s single last chunk ``0x80000000|U:u32 + block`` -- within
            # every limit (checked before decompressing, as the general path does), that
            # decodes to exactly the declared size, holding a regular request or response
            # (spec §3), is opened and parsed here with the general path's checks and
            # result.  Anything else -- incomplete, over a limit, a no-op, several chunks,
            # a bad block, a stream frame, an oversized or short inner frame -- goes to the
            # general path (:meth:`FrameDecoder._next_frame`, or :meth:`FrameDecoder._open` once decompressed),
            # which raises the same errors at the same offsets.
            buf = self._buf
            data = buf.data
            pos = buf.pos
            end = len(data)
            if end - pos < 8:
                return self._next_frame()
            clen, word = _U32X2.unpack_from(data, pos)
            stop = pos + 4 + clen
            flag = self._fast_flag
            size = word ^ flag
            limits = self.limits
            # (the ratio check also refuses a payload under 4 bytes, a no-op: 255 * (clen - 4) + 16 < 1)
            if not (
                clen <= limits.max_frame_size
                and stop <= end
                and word & _LAST == flag
                and 0 < size <= limits.max_decompressed_size
                and size <= _MAX_RATIO * (clen - 4) + 16
            ):
                return self._next_frame()
            try:
                # positional (source, uncompressed_size): the keyword form costs more than a small block
                inner: bytes = lz4.block.decompress(data[pos + 8 : stop], size)
            except lz4.block.LZ4BlockError:
                return self._next_frame()  # the general path raises it with its field and offset
            if len(inner) != size:
                return self._next_frame()
            kind = self.kind
            limit = limits.max_frame_size
            if kind == "response":
                if self.duration:
                    if size >= 16:
                        msg_id, n, duration = _RSP16.unpack_from(inner, 0)
                        if n <= limit and 16 + n <= size:
                            rsp = _new(Response)
                            _SET_RSP_ID(rsp, msg_id)
                            _SET_RSP_PAYLOAD(rsp, inner[16 : 16 + n])
                            _SET_RSP_DURATION(rsp, duration)
                            buf.advance_to(stop)
                            self._need = 0
                            return rsp
                elif size >= 12:
                    msg_id, n = _RSP12.unpack_from(inner, 0)
                    if n <= limit and 12 + n <= size:
                        rsp = _new(Response)
                        _SET_RSP_ID(rsp, msg_id)
                        _SET_RSP_PAYLOAD(rsp, inner[12 : 12 + n])
                        _SET_RSP_DURATION(rsp, None)
                        buf.advance_to(stop)
                        self._need = 0
                        return rsp
            elif kind == "request":
                timeout: int | None = None
                hs = 0
                if self.timeout:
                    if size >= 28:
                        timeout, verb, msg_id, n = _REQ28.unpack_from(inner, 0)
                        hs = 28
                elif size >= 20:
                    verb, msg_id, n = _REQ20.unpack_from(inner, 0)
                    hs = 20
                discard_over = self.discard_over
                if hs and n <= limit and (discard_over is None or n <= discard_over) and hs + n <= size:
                    req = _new(Request)
                    _SET_REQ_VERB(req, verb)
                    _SET_REQ_ID(req, msg_id)
                    _SET_REQ_PAYLOAD(req, inner[hs : hs + n])
                    _SET_REQ_TIMEOUT(req, timeout)
                    buf.advance_to(stop)
                    self._need = 0
                    return req
            base = buf.consumed
            buf.advance_to(stop)
            self._need = 0
            return self._open(inner, clen, base)
        if self._phase == "frames" and not self._skip and self._held is None:
            # The hot path: a complete, regular uncompressed request or response,
            # built without the general path's calls (same checks, same result);
            # anything else (incomplete, over a limit, a stream) takes the general path.
            buf = self._buf
            data = buf.data
            pos = buf.pos
            have = len(data) - pos
            kind = self.kind
            if kind == "response":
                if self.duration:
                    if have >= 16:
                        msg_id, n, duration = _RSP16.unpack_from(data, pos)
                        stop = pos + 16 + n
                        if n <= self.limits.max_frame_size and stop <= len(data):
                            payload = data[pos + 16 : stop]
                            rsp = _new(Response)
                            _SET_RSP_ID(rsp, msg_id)
                            _SET_RSP_PAYLOAD(rsp, payload if type(payload) is bytes else bytes(payload))
                            _SET_RSP_DURATION(rsp, duration)
                            buf.advance_to(stop)
                            self._need = 0
                            return rsp
                elif have >= 12:
                    msg_id, n = _RSP12.unpack_from(data, pos)
                    stop = pos + 12 + n
                    if n <= self.limits.max_frame_size and stop <= len(data):
                        payload = data[pos + 12 : stop]
                        rsp = _new(Response)
                        _SET_RSP_ID(rsp, msg_id)
                        _SET_RSP_PAYLOAD(rsp, payload if type(payload) is bytes else bytes(payload))
                        _SET_RSP_DURATION(rsp, None)
                        buf.advance_to(stop)
                        self._need = 0
                        return rsp
            elif kind == "request":
                if self.timeout:
                    if have < 28:
                        return self._next_frame()
                    timeout, verb, msg_id, n = _REQ28.unpack_from(data, pos)
                    hs = 28
                else:
                    if have < 20:
                        return self._next_frame()
                    verb, msg_id, n = _REQ20.unpack_from(data, pos)
                    timeout, hs = None, 20
                stop = pos + hs + n
                discard_over = self.discard_over
                if n <= self.limits.max_frame_size and (discard_over is None or n <= discard_over) and stop <= len(data):
                    payload = data[pos + hs : stop]
                    req = _new(Request)
                    _SET_REQ_VERB(req, verb)
                    _SET_REQ_ID(req, msg_id)
                    _SET_REQ_PAYLOAD(req, payload if type(payload) is bytes else bytes(payload))
                    _SET_REQ_TIMEOUT(req, timeout)
                    buf.advance_to(stop)
                    self._need = 0
                    return req
        return self._next_frame()

    def next_responses(self, max_frames: int = MAX_RUN) -> ResponseRun | None:
        """The complete regular responses with ``msg_id >= 0`` at the head of the
        buffer, up to ``max_frames``, in columns (the response decoder's hot path,
        spec §3), or ``None`` when the next frame is not one -- incomplete, over a
        limit, an exception (``msg_id < 0``), a no-op, an envelope that is not one
        LZ4 block, anything :meth:`next_frame` would not decode on its fast path
        -- or is all that is buffered (one frame costs less as :meth:`next_frame`'s
        :class:`Response` than as a run): :meth:`next_frame` then decodes it, with
        its errors at its offsets.

        The run stops before the first frame that is not such a response, so
        calling this and then :meth:`next_frame` in turn decodes the stream
        exactly as :meth:`next_frame` alone does, frame for frame.
        """
        if max_frames < 1:
            raise ValueError(f"a run holds at least 1 response: max_frames={max_frames}")
        buf = self._buf
        data = buf.data
        pos = buf.pos
        end = len(data)
        if end - pos <= 8:  # (the usual miss, first: less than any frame and a byte behind it)
            return None
        if self.kind != "response" or self._phase != "frames":  # (only requests are ever skipped or held)
            return None
        comp = self.compressor
        if comp is not None and comp is not self._fast_compressor:
            return None
        # A lone frame (nothing buffered behind it) costs less as next_frame's
        # Response than as a run: checked before anything is allocated.
        if comp is None:
            hs = 16 if self.duration else 12
            if end - pos < hs or pos + hs + _U32.unpack_from(data, pos + 8)[0] >= end:
                return None
        elif end - pos < 8 or pos + 4 + _U32.unpack_from(data, pos)[0] >= end:
            return None
        limit = self.limits.max_frame_size
        msg_ids: list[int] = []
        payloads: list[bytes] = []
        durations: list[int] | None = [] if self.duration else None
        if comp is not None:
            pos = self._compressed_responses(data, pos, end, msg_ids, payloads, durations, max_frames)
        else:
            sliced: list[bytes | bytearray] = []  # (bytearray slices when the buffer is one)
            add_id = msg_ids.append
            add_payload = sliced.append
            if durations is not None:
                add_duration = durations.append
                unpack16 = _RSP16.unpack_from
                while end - pos >= 16 and len(msg_ids) < max_frames:
                    msg_id, n, duration = unpack16(data, pos)
                    stop = pos + 16 + n
                    if msg_id < 0 or n > limit or stop > end:
                        break
                    add_id(msg_id)
                    add_payload(data[pos + 16 : stop])
                    add_duration(duration)
                    pos = stop
            else:
                unpack12 = _RSP12.unpack_from
                while end - pos >= 12 and len(msg_ids) < max_frames:
                    msg_id, n = unpack12(data, pos)
                    stop = pos + 12 + n
                    if msg_id < 0 or n > limit or stop > end:
                        break
                    add_id(msg_id)
                    add_payload(data[pos + 12 : stop])
                    pos = stop
            payloads = cast("list[bytes]", sliced) if type(data) is bytes else list(map(bytes, sliced))
        if not msg_ids:
            return None
        buf.advance_to(pos)
        self._need = 0
        return ResponseRun(msg_ids, payloads, durations)

    def _compressed_responses(
        self,
        data: bytes | bytearray,
        pos: int,
        end: int,
        msg_ids: list[int],
        payloads: list[bytes],
        durations: list[int] | None,
        max_frames: int,
    ) -> int:
        """:meth:`next_responses` over single-block LZ4 envelopes (spec §4), with
        :meth:`next_frame`'s fast-path checks: the position after the last
        envelope taken."""
        limits = self.limits
        limit = limits.max_frame_size
        max_size = limits.max_decompressed_size
        flag = self._fast_flag
        hs = 12 if durations is None else 16
        unpack = _RSP12.unpack_from if durations is None else _RSP16.unpack_from
        decompress = lz4.block.decompress
        while end - pos >= 8 and len(msg_ids) < max_frames:
            clen, word = _U32X2.unpack_from(data, pos)
            stop = pos + 4 + clen
            size = word ^ flag
            # (the ratio check also refuses a payload under 4 bytes, a no-op: 255 * (clen - 4) + 16 < 1)
            if not (
                clen <= limit
                and stop <= end
                and word & _LAST == flag
                and hs <= size <= max_size
                and size <= _MAX_RATIO * (clen - 4) + 16
            ):
                break
            try:
                inner: bytes = decompress(data[pos + 8 : stop], size)
            except lz4.block.LZ4BlockError:
                break  # next_frame raises it with its field and offset
            if len(inner) != size:
                break
            head = unpack(inner, 0)
            msg_id, n = head[0], head[1]
            if msg_id < 0 or n > limit or hs + n > size:
                break
            msg_ids.append(msg_id)
            payloads.append(inner[hs : hs + n])
            if durations is not None:
                durations.append(head[2])
            pos = stop
        return pos


_SPEED["decoder"] = FastFrameDecoder
