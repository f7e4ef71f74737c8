"""What the Seastar RPC cases share: the spec, the profiles of the real server,
the features, the conformance verbs (§11) and the observers of what a server
(:class:`ServerObserver`) and a client (:class:`ClientObserver`) send.
"""

from __future__ import annotations

from typing import Any

from ....describe import Described
from ....errors import ProtocolError
from ....seastar_rpc.compression import LZ4, LZ4_FRAGMENTED
from ....seastar_rpc.conform_verbs import CONFORM_VERBS
from ....seastar_rpc.describe import SeastarDescriber
from ....seastar_rpc.frames import (
    DEFAULT_LIMITS,
    UNMEASURED,
    Feature,
    Features,
    Negotiation,
    Request,
    Response,
    UnknownVerb,
    UserError,
    decode_exception,
)
from ...model import Verdict, expect

SPEC = "specs/seastar-rpc/README.md"
PASS, NON_STRICT, INFO, FAIL, UNSUPPORTED = Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.FAIL, Verdict.UNSUPPORTED
ALL = "strict seastar"
CLOSED = "FIN RST"
ECHO, SLEEP_MS, RAISE, SIZE = (CONFORM_VERBS[k] for k in ("echo", "sleep_ms", "raise", "size"))

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's server and client)",
    "seastar": "the real Seastar 25.05 RPC library as the spec records it (§2-§6, §8, §11): it reads an oversized "
    "request's whole body before answering it, reads a negotiation frame of any length, and reads a STREAM_PARENT "
    "record shorter than 8 bytes as if it were 8",
}

#: Every requirement a server testee can leave out (``--declare``; spec §11).  A
#: case needing one of them is UNSUPPORTED when it is declared, and also when the
#: testee shows on the wire that it lacks it (:data:`LACKS`, :data:`NO_STREAMING`,
#: and ss.S6.1's admitted oversized request).
FEATURES = {
    "lz4": "the LZ4 compressor (§4)",
    "lz4-fragmented": "the LZ4_FRAGMENTED compressor (§4)",
    "streams": "streaming: CONNECTION_ID and STREAM_PARENT (§5)",
    "timeout": "the TIMEOUT feature and dropping expired replies (§3)",
    "memory-limit": "a memory limit (max_memory) of at most 16 MiB, so that a request of 16 MiB + 64 KiB is refused (§3, §11)",
    "verb-echo": "the conformance verb echo, 100 (§11)",
    "verb-sleep-ms": "the conformance verb sleep_ms, 101 (§11)",
    "verb-raise": "the conformance verb raise, 102 (§11)",
    "verb-size": "the conformance verb size, 103 (§11)",
}

#: The testee answered a conformance verb with UNKNOWN_VERB: it lacks the verb (§11).
LACKS = expect(UNSUPPORTED, "*", ["...", "E * UNKNOWN_VERB 10[0-3] d=*", "..."], note="the testee lacks a conformance verb (§11)")
#: The parent connection got no CONNECTION_ID: the testee has no streaming configured (§5.1, §11).
NO_STREAMING = expect(
    UNSUPPORTED,
    "*",
    ["..."],
    facts=["the parent connection got no CONNECTION_ID"],
    note="the testee has no streaming configured: its connections get no CONNECTION_ID (§5.1, §11)",
)
NEG = "neg TIMEOUT HANDLER_DURATION"


def _invalid(err: ProtocolError) -> tuple[str, dict[str, Any]]:
    return f"invalid {err.field or 'frame'}", {
        "type": "invalid",
        "field": err.field,
        "frame": err.frame,
        "offset": err.offset,
        "reason": err.reason,
    }


def _neg_token(neg: Negotiation) -> tuple[str, dict[str, Any]]:
    """``neg`` + the features in wire order (first record of a number wins),
    leaving out CONNECTION_ID (its own token, ``conn-id``)."""
    seen: dict[int, bytes] = {}
    for number, data in neg.records:
        seen.setdefault(number, data)
    names = []
    for number, data in seen.items():
        if number == Feature.CONNECTION_ID:
            continue
        if number == Feature.COMPRESS:
            names.append(f"COMPRESS={data.decode('latin-1')}")
        elif number == Feature.ISOLATION:
            names.append(f"ISOLATION={data.decode('latin-1')}")
        elif number in Feature._value2member_map_:
            names.append(Feature(number).name)
        else:
            names.append(f"F{number}")
    return " ".join(["neg", *names]), {"type": "negotiation", "features": {str(k): v.hex() for k, v in seen.items()}}


class _Observer:
    """Shared loop: the protocol's describer (:mod:`refwire.seastar_rpc.describe`),
    ``invalid <field>`` at the first bad byte (then nothing more is decoded)."""

    def __init__(self, direction: str, session: dict[str, Any]) -> None:
        self._session = session
        self._describer = SeastarDescriber(DEFAULT_LIMITS.max_frame_size, direction, session)
        self._broken = False

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        for d in self._describer.feed(data):
            try:
                if d.error is not None:
                    raise d.error
                out.extend(self._tokens(d.inner[0] if d.inner else d))
            except ProtocolError as err:
                self._broken = True
                out.append(_invalid(err))
                break
        return out

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        return [("truncated", {"type": "truncated", "bytes": len(d.data), "offset": d.offset}) for d in self._describer.end()]

    def _tokens(self, d: Described) -> list[tuple[str, dict[str, Any]]]:
        raise NotImplementedError


class ServerObserver(_Observer):
    """Tokens for what a server sends: ``neg <features>`` (then ``conn-id`` when
    it sent a CONNECTION_ID), ``R <msg_id> <len>B`` (a reply),
    ``E <msg_id> USER d=<µs>`` / ``E <msg_id> UNKNOWN_VERB <verb> d=<µs>``
    (``d=-``: not measured), ``S <len>B`` / ``EOS`` on a stream connection,
    ``invalid <field>``, ``truncated``."""

    def __init__(self) -> None:
        super().__init__("s2c", {"stream": False})
        self.reply: Features | None = None
        self.responses: list[Response] = []

    @property
    def kind(self) -> str:
        """"stream" once the case made this a stream connection (before its reply)."""
        return "stream" if self._session["stream"] else "response"

    @kind.setter
    def kind(self, value: str) -> None:
        self._session["stream"] = value == "stream"

    def _tokens(self, d: Described) -> list[tuple[str, dict[str, Any]]]:
        frame = d.frame
        if isinstance(frame, Negotiation):
            token = _neg_token(frame)
            self.reply = Features(**d.fields)
            comp = self.reply.compress
            if comp is not None and comp not in (LZ4, LZ4_FRAGMENTED):
                _unknown(comp)
            out = [token]
            if self.reply.connection_id is not None:
                out.append(("conn-id", {"type": "connection_id", "id": self.reply.connection_id}))
            return out
        if isinstance(frame, Response):
            self.responses.append(frame)
            d_ = (
                "none"
                if frame.handler_duration is None
                else "-"
                if frame.handler_duration == UNMEASURED
                else str(frame.handler_duration)
            )
            info = {
                "type": "response",
                "msg_id": frame.msg_id,
                "len": len(frame.payload),
                "handler_duration": frame.handler_duration,
            }
            if frame.msg_id >= 0:
                return [(f"R {frame.msg_id} {len(frame.payload)}B", info)]
            exc = decode_exception(frame.payload)
            if isinstance(exc, UserError):
                info["message"] = exc.message.decode("utf-8", "replace")
                return [(f"E {frame.msg_id} USER d={d_}", info)]
            if isinstance(exc, UnknownVerb):
                return [(f"E {frame.msg_id} UNKNOWN_VERB {exc.verb} d={d_}", info)]
            return [(f"E {frame.msg_id} TYPE{exc.type} d={d_}", info)]
        if d.type == "stream":
            return [(f"S {d.fields['len']}B", {"type": "stream", "len": d.fields["len"]})]
        if d.type == "stream-end":
            return [("EOS", {"type": "eos"})]
        if d.type == "noop":
            return []
        return [(type(frame).__name__, {"type": type(frame).__name__})]


def _unknown(name: str) -> Any:
    raise ProtocolError(f"the server chose compressor {name!r}, which was not offered", field="compress", frame="negotiation")


class ClientObserver(_Observer):
    """Tokens for what a client sends: ``neg <features>``, then ``call <verb>``
    per request (the requests are kept in :attr:`requests`).  refwire's case
    server never accepts a compressor, so requests are uncompressed."""

    def __init__(self) -> None:
        # The case server's reply is known (no compressor) and makes no stream connection.
        super().__init__("c2s", {"reply": Features(), "stream": False})
        self.offer: Features | None = None
        self.requests: list[Request] = []

    def _tokens(self, d: Described) -> list[tuple[str, dict[str, Any]]]:
        frame = d.frame
        if isinstance(frame, Negotiation):
            self.offer = Features(**d.fields)
            return [_neg_token(frame)]
        if isinstance(frame, Request):
            self.requests.append(frame)
            return [
                (f"call {frame.verb}", {"type": "request", "verb": frame.verb, "msg_id": frame.msg_id, "len": len(frame.payload)})
            ]
        if d.type == "noop":
            return []
        return [(type(frame).__name__, {"type": type(frame).__name__})]
