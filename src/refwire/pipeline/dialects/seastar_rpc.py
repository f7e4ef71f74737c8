"""Seastar RPC captures (specs/seastar-rpc/README.md §1-§5): the decoder and the conformance rules.

**Decoder** (:func:`decode`, on the protocol's describer, :mod:`refwire.seastar_rpc.describe`).

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

**Rules** (:data:`RULES`), each a DataFrame query with a pure twin:

* ``SS-DECODES`` -- every byte of both directions decodes, envelopes included (§2-§4).
* ``SS-NEGOTIATION-FIRST`` -- each direction starts with its negotiation frame (§1).
* ``SS-RESPONSE-MATCHES-REQUEST`` -- every response's msg id (its absolute value: a
  negative id carries an exception) is the id of a request the client sent earlier on
  the connection and that was not answered yet (§3: replies for other ids are stray).
* ``SS-NO-REPLY-TO-ONE-WAY`` -- a request of a one-way verb gets no response (§3), an
  UNKNOWN_VERB exception aside.  Whether a verb is one-way is not on the wire: it is
  the application's, given as :data:`ONE_WAY_VERBS`, the one-way verbs of refwire's
  demo application (:data:`refwire.seastar_rpc.demo.DEMO_ONE_WAY`, numbered as in the
  captured sessions of specs/seastar-rpc/README.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

from refwire.seastar_rpc.demo import DEMO_ONE_WAY

from ...describe import Described, Describer
from ...errors import ProtocolError
from ..decoders import FrameRow, Peer, dumps, error_row, json_value
from ..rulekit import Found, Rule, check_decodes, decodes_query, not_before, ordered, per_connection
from ..rulekit import fields as row_fields

__all__ = ["ONE_WAY_VERBS", "RULES", "decode", "negotiation_of"]

PROTOCOL = "seastar-rpc"

#: Verbs whose calls expect no reply: the demo application's (not on the wire, so not in the capture).
ONE_WAY_VERBS: Final = DEMO_ONE_WAY


# --------------------------------------------------------------------------- decoder


def negotiation_of(chunks: Iterable[bytes]) -> Any:
    """The :class:`~refwire.seastar_rpc.frames.Features` of a direction's negotiation frame, or None."""
    from refwire.seastar_rpc.describe import describer
    from refwire.seastar_rpc.frames import DEFAULT_LIMITS, Features

    described = describer(DEFAULT_LIMITS.max_frame_size)
    for chunk in chunks:
        for d in described.feed(chunk):
            return Features(**d.fields) if d.type == "negotiation" else None
    return None


def _frame_rows(frame_no: int, d: Described, parent: int | None) -> list[FrameRow]:
    """The rows of a described (uncompressed or inner) frame."""
    from refwire.seastar_rpc.frames import UnknownVerb, UserError, decode_exception

    off, size, fields = d.offset, len(d.data), d.fields
    n = fields.get("len", 0)
    if d.type == "request":
        req = {"verb": fields["verb"], "msg_id": fields["msg_id"], "timeout_ms": fields["timeout_ms"], "len": n}
        return [FrameRow(frame_no, off, "request", size, parent, seq=fields["msg_id"], count=n, name=str(fields["verb"]), fields_json=dumps(req))]
    if d.type == "response":
        resp: dict[str, Any] = {"msg_id": fields["msg_id"], "handler_duration": fields["handler_duration"], "len": n}
        extra: list[FrameRow] = []
        if fields["msg_id"] < 0:
            try:
                exc = decode_exception(d.frame.payload, base=off + size - n)
                if isinstance(exc, UserError):
                    resp["exception"], resp["message"] = "USER", exc.message[:200].decode("utf-8", "replace")
                elif isinstance(exc, UnknownVerb):
                    resp["exception"], resp["verb"] = "UNKNOWN_VERB", exc.verb
                else:
                    resp["exception"] = f"type {exc.type}"
            except ProtocolError as err:
                resp["exception"] = "malformed"
                extra.append(error_row(frame_no + 1, err, off, off if parent is None else parent))
        return [FrameRow(frame_no, off, "response", size, parent, seq=fields["msg_id"], count=n, fields_json=dumps(resp)), *extra]
    if d.type == "stream":
        return [FrameRow(frame_no, off, "stream-message", size, parent, count=n, fields_json=dumps({"len": n}))]
    return [FrameRow(frame_no, off, "stream-end", size, parent)]


def _described(described: Describer, chunks: Iterable[bytes]) -> Iterator[Described]:
    for chunk in chunks:
        yield from described.feed(chunk)
    yield from described.end()


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    from refwire.seastar_rpc.compression import COMPRESSOR_NAMES
    from refwire.seastar_rpc.describe import describer
    from refwire.seastar_rpc.frames import DEFAULT_LIMITS, Features

    c2s = direction == "c2s"
    # What follows the negotiation depends on both negotiation frames (§2): the describer
    # configures each direction as the endpoint does, from the peer's frame.
    other = negotiation_of(peer()) if peer is not None else None
    session: dict[str, Any] = {}
    if c2s:
        session["reply"] = other if other is not None else Features()
    elif other is not None:
        session["offer"] = other
    described = describer(DEFAULT_LIMITS.max_frame_size, direction, session)
    frame_no = 0
    for d in _described(described, chunks):
        if d.error is not None:
            yield error_row(frame_no, d.error, d.offset, None)
            return
        if d.type == "negotiation":
            own = Features(**d.fields)
            yield FrameRow(frame_no, d.offset, "negotiation", len(d.data), fields_json=dumps({k: json_value(v) for k, v in d.fields.items()}))
            frame_no += 1
            end = d.offset + len(d.data)
            server = other if c2s else own
            compressor_name = server.compress if server is not None else None
            problem = None
            if server is None and own.compress is not None:
                problem = ("the peer's negotiation frame is not in the capture, so the compressor is unknown", "(peer)")
            elif compressor_name is not None and compressor_name not in COMPRESSOR_NAMES:
                problem = (f"the server chose compressor {compressor_name!r}, which is not one of {', '.join(COMPRESSOR_NAMES)}", "COMPRESS")
            if problem is not None:
                yield error_row(frame_no, ProtocolError(problem[0], protocol=PROTOCOL, frame="negotiation", field=problem[1], offset=end), end, None)
                return
        elif d.type in ("compressed", "noop"):
            inner = _frame_rows(frame_no + 1, d.inner[0], d.offset) if d.inner else []
            yield FrameRow(frame_no, d.offset, "compressed", len(d.data), count=1 if inner else 0, name=d.fields["compressor"], fields_json=dumps(d.fields))
            yield from inner
            frame_no += 1 + len(inner)
        else:
            rows = _frame_rows(frame_no, d, None)
            yield from rows
            frame_no += len(rows)


# --------------------------------------------------------------------------- rules


def check_negotiation_first(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    out: list[Found] = []
    for d in ("c2s", "s2c"):
        top = [r for r in ordered(rows, d) if r.get("parent_offset") is None]
        if top and top[0]["type"] != "negotiation":
            r = top[0]
            out.append((d, r["frame_no"], r["offset"], f"the first frame is {r['type']}, not the negotiation frame"))
    return out


def check_response_matches(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    outstanding: dict[int, list[float | None]] = {}
    for r in ordered(rows, "c2s", "request"):
        outstanding.setdefault(r["seq"], []).append(r["ts"])
    out: list[Found] = []
    for r in ordered(rows, "s2c", "response"):
        mid = abs(r["seq"])
        waiting = outstanding.get(mid, [])
        i = next((k for k, ts in enumerate(waiting) if not_before(ts, r["ts"])), None)
        if i is None:
            out.append(("s2c", r["frame_no"], r["offset"], f"response for msg id {r['seq']}, which matches no outstanding request"))
        else:
            del waiting[i]
    return out


def check_no_reply_to_one_way(rows: Sequence[Mapping[str, Any]], one_way: frozenset[int] = ONE_WAY_VERBS) -> list[Found]:
    ids = {r["seq"] for r in ordered(rows, "c2s", "request") if r["name"] is not None and int(r["name"]) in one_way}
    return [
        ("s2c", r["frame_no"], r["offset"], f"response for msg id {r['seq']}, a call of one-way verb(s) {sorted(one_way)}")
        for r in ordered(rows, "s2c", "response")
        if abs(r["seq"]) in ids and row_fields(r).get("exception") != "UNKNOWN_VERB"
    ]


def _negotiation_first(frames: Any) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("conn", "direction").orderBy("frame_no")
    first = frames.where(F.col("parent_offset").isNull()).withColumn("n", F.row_number().over(w)).where("n = 1")
    return first.where(F.col("type") != "negotiation").select(
        "conn", "direction", "frame_no", "offset", F.format_string("the first frame is %s, not the negotiation frame", "type").alias("detail")
    )


def _no_reply_to_one_way(frames: Any) -> Any:
    from pyspark.sql import functions as F

    verbs = sorted(ONE_WAY_VERBS)
    calls = frames.where((F.col("direction") == "c2s") & (F.col("type") == "request") & F.col("name").cast("bigint").isin(*verbs)).select(
        "conn", F.col("seq").alias("mid")
    ).distinct()
    resp = frames.where((F.col("direction") == "s2c") & (F.col("type") == "response"))
    exc = F.get_json_object("fields_json", "$.exception")
    return (
        resp.join(calls, (resp["conn"] == calls["conn"]) & (F.abs(resp["seq"]) == calls["mid"]))
        .where(exc.isNull() | (exc != "UNKNOWN_VERB"))
        .select(resp["conn"], "direction", "frame_no", "offset",
                F.format_string(f"response for msg id %d, a call of one-way verb(s) {verbs}", "seq").alias("detail"))
    )


def _response_matches(frames: Any) -> Any:
    return per_connection(frames, check_response_matches)


RULES: list[Rule] = [
    Rule("SS-DECODES", PROTOCOL, "every byte of both directions decodes, compressed envelopes included", decodes_query, check_decodes),
    Rule("SS-NEGOTIATION-FIRST", PROTOCOL, "each direction starts with its negotiation frame", _negotiation_first, check_negotiation_first),
    Rule("SS-RESPONSE-MATCHES-REQUEST", PROTOCOL, "every response's msg id matches an outstanding request of the connection", _response_matches, check_response_matches),
    Rule("SS-NO-REPLY-TO-ONE-WAY", PROTOCOL, "calls of one-way verbs get no response", _no_reply_to_one_way, check_no_reply_to_one_way),
]
