"""TANK captures (specs/tank/README.md §2-§6): the decoder and the conformance rules.

**Decoder** (:func:`decode`, on refwire's own TANK codec).

Frames are ``msgId:u8 payloadLen:u32le payload``, cut and decoded by
:mod:`refwire.tank.describe` (requests with :func:`~refwire.tank.frames.decode_request`,
responses with :func:`~refwire.tank.responses.decode_response`); a message id the
direction does not carry ends the stream, as :class:`refwire.tank.frames.FrameDecoder`
refuses it.  A response cannot be decoded
alone (spec §8.16: "responses must be matched by request id"): a produce
response is a list of error bytes laid out after its request's partitions, and
a consume chunk is walked from the sequence number the request asked for
(§5).  So the server direction is decoded as the real client does, with the
client direction's requests in hand: the ``peer`` stream is decoded first and
its requests remembered by request id (a capture without the client direction
still decodes, with produce responses left as raw error bytes).

Rows: ``type`` = the message name (``Ping``, ``Produce``, ``Consume`` ...; a
``ProduceWithSeqnum`` request is answered by a ``Produce``), ``seq`` = the
request id, ``name`` = the first topic, ``count`` = partitions in the frame
(messages delivered, for a consume response).  ``fields_json``: ``msg_id``,
``request_id``, and per partition ``topic``, ``partition``, ``error``, and the
sequence numbers: a produce request's bundle ``count`` / ``first_seq`` /
``last_seq`` (sparse) / ``base_seq`` (0x05); a consume request's ``seq`` and
``fetch_size``; a consume response's ``base_seq``, ``hwmark``,
``requested_seq``, ``first_seq``, ``last_seq`` and ``messages`` delivered.
Bundles are not frames: they are summarised in their frame's row, and a bundle
that does not decode is an error row (``parent_offset`` = its frame) after
which decoding goes on.

**Rules** (:data:`RULES`), each a DataFrame query with a pure twin:

* ``TK-DECODES`` -- every byte of both directions decodes, bundles included (§2-§5).
* ``TK-RESPONSE-MATCHES-REQUEST`` -- every broker response (Ping aside) carries the
  request id of a request of the same kind (a ProduceWithSeqnum is answered by a
  Produce) that the client sent earlier and that was not answered yet (§8.16).
* ``TK-CONSUME-SEQ-INCREASING`` -- per partition, the sequence numbers a consume
  response delivers increase inside the response and from one response to the next,
  unless the client asked again from an earlier sequence number (§5, §6).
* ``TK-PRODUCE-ACKED`` -- each produce request is answered by exactly one produce
  response (§3).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...describe import UNDECODED, Described
from ...errors import ProtocolError
from ..decoders import FrameRow, Peer, dumps, error_row, json_value
from ..rulekit import Found, Rule, check_decodes, decodes_query, not_before, ordered, per_connection
from ..rulekit import fields as row_fields

__all__ = ["RULES", "RequestContext", "decode", "requests_of"]

PROTOCOL = "tank"
_PRODUCES = ("Produce", "ProduceWithSeqnum")

#: request id -> [(msg id, layout or consume wants), ...] in the order sent.
RequestContext = dict[int, list[tuple[int, Any]]]


def _frames(chunks: Iterable[bytes], direction: str) -> Iterator[Described | ProtocolError]:
    """The direction's frames as :mod:`refwire.tank.describe` cuts them, then the error
    that ends them (and stop): a frame this direction does not accept, or the first
    byte that is no frame, in the words of the codec's own :class:`~refwire.tank.frames.FrameDecoder`."""
    from refwire.tank.describe import describer
    from refwire.tank.frames import DEFAULT_LIMITS, REQUEST_IDS, RESPONSE_IDS

    accept = REQUEST_IDS if direction == "c2s" else RESPONSE_IDS
    desc = describer(DEFAULT_LIMITS.max_frame_size, direction)
    it = iter(chunks)
    for chunk in it:
        got = desc.feed(chunk)
        for i, d in enumerate(got):
            if d.type == UNDECODED or d.data[0] not in accept:
                rest = [x.data for x in got[i:]] + [x.data for c in it for x in desc.feed(c)] + [x.data for x in desc.end()]
                yield _refused(b"".join(rest), d.offset, accept)
                return
            yield d
    for d in desc.end():
        yield _refused(d.data, d.offset, accept)


def _refused(rest: bytes, offset: int, accept: frozenset[int]) -> ProtocolError:
    """Why the codec's frame splitter refuses the direction's bytes from ``offset`` on (``rest``)."""
    from refwire.tank.frames import FrameDecoder

    dec = FrameDecoder(accept)
    dec.feed(rest[:5])  # its header decides: the splitter refuses a frame from its header alone
    try:
        dec.next_frame()
    except ProtocolError as exc:
        return exc.located(offset_base=offset)
    return ProtocolError(
        f"{len(rest)} bytes of an incomplete frame at the end of the stream", protocol=PROTOCOL, field="(end)", offset=offset
    )


def _legacy(exc: ProtocolError) -> ProtocolError:
    """``exc`` (of a payload decoded at its true stream offset) 5 bytes further on: this
    decoder has always decoded a payload as if its frame began at the payload, and its
    error rows keep those offsets."""
    return copy.copy(exc).located(offset_base=5)


def _bundle_summary(bundle: bytes, base: int) -> dict[str, Any]:
    from refwire.tank.bundles import parse_bundle_header

    h = parse_bundle_header(bundle, base=base)
    out: dict[str, Any] = {"bundle_len": len(bundle), "count": h.count, "compressed": h.codec != 0}
    if h.sparse:
        out["first_seq"], out["last_seq"] = h.first_seq, h.last_seq
    return out


def requests_of(chunks: Iterable[bytes]) -> RequestContext:
    """The client direction's requests by request id (what a client remembers)."""
    from refwire.tank.frames import CONSUME, PRODUCE, PRODUCE_WITH_SEQNUM, ConsumeRequest, ProduceRequest

    ctx: RequestContext = {}
    for d in _frames(chunks, "c2s"):
        if isinstance(d, ProtocolError) or d.error is not None:
            break
        msg_id, req = d.data[0], d.frame
        rid = getattr(req, "request_id", None)
        if rid is None:
            continue
        if isinstance(req, ProduceRequest) and msg_id in (PRODUCE, PRODUCE_WITH_SEQNUM):
            ctx.setdefault(rid, []).append((msg_id, req.layout()))
        elif isinstance(req, ConsumeRequest) and msg_id == CONSUME:
            ctx.setdefault(rid, []).append((msg_id, {(t.name, p.partition): p.seq for t in req.topics for p in t.partitions}))
        else:
            ctx.setdefault(rid, []).append((msg_id, None))
    return ctx


def _request_row(frame_no: int, d: Described) -> list[FrameRow]:
    from refwire.tank.frames import ConsumeRequest, Ping, ProduceRequest

    name, req, off, size, msg_id = d.type, d.frame, d.offset, len(d.data), d.data[0]
    fields: dict[str, Any] = {"msg_id": msg_id}
    errors: list[ProtocolError] = []
    parts: list[dict[str, Any]] = []
    if isinstance(req, Ping):
        return [FrameRow(frame_no, off, name, size, fields_json=dumps(fields))]
    if isinstance(req, ProduceRequest):
        fields.update(request_id=req.request_id, required_acks=req.required_acks, client_version=req.client_version)
        for t in req.topics:
            for p in t.partitions:
                entry: dict[str, Any] = {"topic": t.name, "partition": p.partition}
                if p.base_seq is not None:
                    entry["base_seq"] = p.base_seq
                try:
                    entry.update(_bundle_summary(p.bundle, off))
                except ProtocolError as exc:
                    errors.append(exc)
                parts.append(entry)
    elif isinstance(req, ConsumeRequest):
        fields.update(request_id=req.request_id, max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes, client_version=req.client_version)
        parts = [{"topic": t.name, "partition": p.partition, "seq": p.seq, "fetch_size": p.fetch_size} for t in req.topics for p in t.partitions]
    else:
        fields.update({k: v for k, v in json_value(req).items()})
    if parts:
        fields["partitions"] = parts
    rid = fields.get("request_id")
    topic = parts[0]["topic"] if parts else fields.get("topic")
    rows = [FrameRow(frame_no, off, name, size, seq=rid, count=len(parts) if parts else None,
                     name=topic if isinstance(topic, str) else None, fields_json=dumps(fields))]
    rows += [error_row(frame_no + 1 + i, e, off, off) for i, e in enumerate(errors)]
    return rows


def _response_row(frame_no: int, d: Described, ctx: RequestContext | None) -> list[FrameRow]:
    from refwire.tank.bundles import read_chunk
    from refwire.tank.frames import CONSUME, PRODUCE, PRODUCE_WITH_SEQNUM, Ping
    from refwire.tank.responses import ConsumeResponse, RawProduceResponse, decode_produce_response

    name, resp, off, size, msg_id = d.type, d.frame, d.offset, len(d.data), d.data[0]
    fields: dict[str, Any] = {"msg_id": msg_id}
    errors: list[ProtocolError] = []
    if isinstance(resp, Ping):
        return [FrameRow(frame_no, off, name, size, fields_json=dumps(fields))]
    rid = resp.request_id
    fields["request_id"] = rid
    sent = (ctx or {}).get(rid) or []
    match = next((c for m, c in sent if m in ((PRODUCE, PRODUCE_WITH_SEQNUM) if msg_id == PRODUCE else (msg_id,))), None)
    if ctx is not None:
        fields["matched"] = match is not None or any(m == msg_id or (msg_id == PRODUCE and m == PRODUCE_WITH_SEQNUM) for m, _ in sent)
    parts: list[dict[str, Any]] = []
    delivered = 0
    if isinstance(resp, RawProduceResponse):
        if match is None:
            fields["errors_hex"] = resp.body.hex()
        else:
            try:
                decoded = decode_produce_response(resp, match)
                parts = [{"topic": r.topic, "partition": r.partition, "error": r.error} for r in decoded.results]
            except ProtocolError as exc:
                errors.append(_legacy(exc))
    elif isinstance(resp, ConsumeResponse):
        wants: dict[tuple[str, int], int] = match or {}
        for t in resp.topics:
            if t.unknown:
                parts.append({"topic": t.name, "unknown_topic": True, "partitions_count": t.partitions_count})
                continue
            for p in t.partitions:
                entry: dict[str, Any] = {"topic": t.name, "partition": p.partition, "error": p.error, "base_seq": p.base_seq,
                                         "hwmark": p.hwmark, "chunk_len": len(p.chunk)}
                if p.first_avail is not None:
                    entry["first_avail"] = p.first_avail
                requested = wants.get((t.name, p.partition))
                entry["requested_seq"] = requested
                if p.chunk:
                    try:
                        res = read_chunk(p.chunk, base_seq=p.base_seq, hwmark=p.hwmark, requested_seq=requested or 0, offset=off)
                        seqs = [s for s in res.seqs if s is not None]
                        entry.update(messages=len(seqs), first_seq=seqs[0] if seqs else None, last_seq=seqs[-1] if seqs else None,
                                     increasing=all(a < b for a, b in itertools.pairwise(seqs)), partial=res.partial)
                        delivered += len(seqs)
                    except ProtocolError as exc:
                        errors.append(exc)
                parts.append(entry)
    else:
        fields.update({k: v for k, v in json_value(resp).items() if k != "request_id"})
    if parts:
        fields["partitions"] = parts
    topic = parts[0].get("topic") if parts else fields.get("topic")
    count = delivered if msg_id == CONSUME else (len(parts) if parts else None)
    rows = [FrameRow(frame_no, off, name, size, seq=rid, count=count, name=topic if isinstance(topic, str) else None, fields_json=dumps(fields))]
    rows += [error_row(frame_no + 1 + i, e, off, off) for i, e in enumerate(errors)]
    return rows


def decode(chunks: Iterable[bytes], direction: str, peer: Peer | None = None) -> Iterator[FrameRow]:
    ctx = requests_of(peer()) if direction == "s2c" and peer is not None else None
    frame_no = 0
    fallback = 0
    for d in _frames(chunks, direction):
        if isinstance(d, ProtocolError):
            yield error_row(frame_no, d, fallback, None)
            return
        if d.error is not None:
            # The frame's payload does not decode: its framing still holds, but the real peer closes here.
            yield error_row(frame_no, _legacy(d.error), d.offset, None)
            return
        rows = _request_row(frame_no, d) if direction == "c2s" else _response_row(frame_no, d, ctx)
        yield from rows
        frame_no += len(rows)
        fallback = d.offset + len(d.data)


# --------------------------------------------------------------------------- rules


def _answers(request_type: str) -> str:
    return "Produce" if request_type == "ProduceWithSeqnum" else request_type


def check_response_matches(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    outstanding: dict[tuple[str, int], list[float | None]] = {}
    for r in ordered(rows, "c2s"):
        if r["seq"] is not None and r["type"] not in ("Ping", "error"):
            outstanding.setdefault((_answers(r["type"]), r["seq"]), []).append(r["ts"])
    out: list[Found] = []
    for r in ordered(rows, "s2c"):
        if r["seq"] is None or r["type"] in ("Ping", "error") or r.get("parent_offset") is not None:
            continue
        waiting = outstanding.get((r["type"], r["seq"]), [])
        i = next((k for k, ts in enumerate(waiting) if not_before(ts, r["ts"])), None)
        if i is None:
            out.append(("s2c", r["frame_no"], r["offset"], f"{r['type']} response with request id {r['seq']}, which matches no outstanding {r['type']} request"))
        else:
            del waiting[i]
    return out


def check_consume_seqs(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    last: dict[tuple[str, int], int] = {}
    out: list[Found] = []
    for r in ordered(rows, "s2c", "Consume"):
        for p in row_fields(r).get("partitions", []):
            first, end = p.get("first_seq"), p.get("last_seq")
            if first is None or end is None:
                continue
            key = (p["topic"], p["partition"])
            where = ("s2c", r["frame_no"], r["offset"])
            if not p.get("increasing", True) or end < first:
                out.append((*where, f"{key[0]}/{key[1]}: sequence numbers {first}..{end} do not increase inside the response"))
            prev = last.get(key)
            rewind = p.get("requested_seq") is not None and prev is not None and 0 < p["requested_seq"] <= prev
            if prev is not None and first <= prev and not rewind:
                out.append((*where, f"{key[0]}/{key[1]}: response starts at sequence number {first}, not after {prev} delivered before"))
            last[key] = end
    return out


def check_produce_acked(rows: Sequence[Mapping[str, Any]]) -> list[Found]:
    acks: dict[int, int] = {}
    for r in ordered(rows, "s2c", "Produce"):
        if r["seq"] is not None:
            acks[r["seq"]] = acks.get(r["seq"], 0) + 1
    out: list[Found] = []
    for r in ordered(rows, "c2s", *_PRODUCES):
        n = acks.get(r["seq"], 0)
        if n != 1:
            out.append(("c2s", r["frame_no"], r["offset"], f"{r['type']} request {r['seq']} answered by {n} produce responses"))
    return out


def _produce_acked(frames: Any) -> Any:
    from pyspark.sql import functions as F

    acks = frames.where((F.col("direction") == "s2c") & (F.col("type") == "Produce")).groupBy("conn", F.col("seq").alias("rid")).agg(F.count("*").alias("n"))
    reqs = frames.where((F.col("direction") == "c2s") & F.col("type").isin(*_PRODUCES))
    joined = reqs.join(acks, (reqs["conn"] == acks["conn"]) & (reqs["seq"] == acks["rid"]), "left").fillna({"n": 0})
    return joined.where(F.col("n") != 1).select(
        reqs["conn"], "direction", "frame_no", "offset",
        F.format_string("%s request %d answered by %d produce responses", "type", "seq", "n").alias("detail"),
    )


def _response_matches(frames: Any) -> Any:
    return per_connection(frames, check_response_matches)


def _consume_seqs(frames: Any) -> Any:
    return per_connection(frames, check_consume_seqs)


RULES: list[Rule] = [
    Rule("TK-DECODES", PROTOCOL, "every byte of both directions decodes, bundles included", decodes_query, check_decodes),
    Rule("TK-RESPONSE-MATCHES-REQUEST", PROTOCOL, "every response's request id matches an outstanding request of its kind", _response_matches, check_response_matches),
    Rule("TK-CONSUME-SEQ-INCREASING", PROTOCOL, "per partition, consume responses' sequence numbers increase", _consume_seqs, check_consume_seqs),
    Rule("TK-PRODUCE-ACKED", PROTOCOL, "each produce request gets exactly one produce response", _produce_acked, check_produce_acked),
]
