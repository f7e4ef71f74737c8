"""Seastar RPC's part of its Wireshark dissector (specs/seastar-rpc/README.md).

The generic generator (:mod:`refwire.dissector.generate`) makes the fixed fields, the
sizes and the frame loop from :data:`~refwire.seastar_rpc.describe.LAYOUT`; Seastar RPC
frames carry no type field, so the part names each frame's type from the connection's
state (``Part.frame_type``).  This module holds only what is Seastar RPC's own:

* no port: Seastar has no standard one (the spec names none), so the dissector is a
  heuristic one -- a connection whose first bytes are the magic ``SSTARRPC`` (§2), or,
  for a connection cut into segments, a prefix of it as the connection's very first
  bytes -- and offered for *Decode As* (``tcp.port``);
* the state per connection (§1, §2): the side that spoke first is the client; each
  direction opens with its negotiation frame (shown record by record: COMPRESS,
  TIMEOUT, CONNECTION_ID, STREAM_PARENT, ISOLATION, HANDLER_DURATION, unknown numbers,
  the first record of a number winning); what both negotiations said then decides how
  later frames are read, as refwire's describer reads them: a request carries
  ``timeout_ms`` when the client's offer had TIMEOUT, a response ``handler_duration``
  when the server's reply had HANDLER_DURATION, a connection whose offer had
  STREAM_PARENT carries stream frames both ways (§5), and once the server's reply names
  a compressor every frame both ways is an envelope (§4).  A direction's frames are read
  with the negotiations of earlier packets only, so both passes read alike;
* envelopes (§4): ``LZ4`` (``uncompressed_size`` and a block) and ``LZ4_FRAGMENTED``
  (32 KiB chunks, the last flagged by the MSB) opened by a small LZ4 block decoder in Lua
  (chunks of one message share their history, as Seastar's), the one frame inside
  dissected as a subtree; an envelope that holds nothing is a no-op;
* responses with a negative ``msg_id``: the exception decoded (USER: its message,
  UNKNOWN_VERB: the verb, §3); ``handler_duration`` 0xffffffff is "not measured";
* matching by ``msg_id`` (§3): "response in frame N" on a request (with two passes),
  "request in frame M" and the latency on a response (an exception's id is the
  request's negated).

Where refwire's codec rejects (§2, §3, §4, §6: a wrong magic, a negotiation ``len`` over
``max_string_size``, a record header or record cut short, a CONNECTION_ID or
STREAM_PARENT that is not 8 bytes, a compressor no-one knows, a ``len`` or ``clen`` over
``max_frame_size``, an LZ4 declared size of 0 or over ``max_decompressed_size`` or past
LZ4's ratio, a block that does not decode to its size, an inflated frame shorter than
its header) and where its machines do (``PART.machine``: a stream message or a second
end-of-stream after a direction's end-of-stream, §5; a server reply naming a compressor the
client did not offer, §2, checked once the client's offer was seen; a malformed exception
answering a call in flight, which refwire's client drops the connection for, §3 -- a stray
one it ignores), the frame gets an expert-info warning citing the section.
"""

from __future__ import annotations

from typing import Final

from ..seastar_rpc.frames import DEFAULT_LIMITS
from .generate import Part

__all__ = ["PART"]

SPEC: Final = "specs/seastar-rpc/README.md"

#: the largest fixed header (a request with ``timeout_ms``): the generic loop bounds a whole
#: frame (header + ``len``), refwire bounds ``len`` alone, which the part checks first (§6)
_LARGEST_HEADER: Final = 28

#: ProtoFields of the hand-written part (the layout's own come from the generator).
_FIELDS: Final = r"""
hf["kind"] = ProtoField.string("seastar_rpc.kind", "frame", base.ASCII)
hf["record"] = ProtoField.none("seastar_rpc.record", "feature record")
hf["feature"] = ProtoField.uint32("seastar_rpc.feature", "feature", base.DEC, {[0] = "COMPRESS", [1] = "TIMEOUT", [2] = "CONNECTION_ID", [3] = "STREAM_PARENT", [4] = "ISOLATION", [5] = "HANDLER_DURATION"})
hf["flen"] = ProtoField.uint32("seastar_rpc.flen", "flen", base.DEC)
hf["feature_data"] = ProtoField.bytes("seastar_rpc.feature_data", "data")
hf["ignored"] = ProtoField.bool("seastar_rpc.ignored", "ignored (a repeated or unknown feature)")
hf["neg_compress"] = ProtoField.string("seastar_rpc.neg.compress", "COMPRESS", base.ASCII)
hf["neg_timeout"] = ProtoField.bool("seastar_rpc.neg.timeout", "TIMEOUT")
hf["neg_connection_id"] = ProtoField.uint64("seastar_rpc.neg.connection_id", "CONNECTION_ID", base.DEC)
hf["neg_stream_parent"] = ProtoField.uint64("seastar_rpc.neg.stream_parent", "STREAM_PARENT", base.DEC)
hf["neg_isolation"] = ProtoField.bytes("seastar_rpc.neg.isolation", "ISOLATION")
hf["neg_duration"] = ProtoField.bool("seastar_rpc.neg.handler_duration", "HANDLER_DURATION")
hf["payload"] = ProtoField.bytes("seastar_rpc.payload", "data")
hf["no_deadline"] = ProtoField.bool("seastar_rpc.no_deadline", "no deadline (timeout_ms 0)")
hf["unmeasured"] = ProtoField.bool("seastar_rpc.unmeasured", "handler duration not measured (0xffffffff)")
hf["exc_type"] = ProtoField.uint32("seastar_rpc.exception.type", "exception type", base.DEC, {[0] = "USER", [1] = "UNKNOWN_VERB"})
hf["exc_len"] = ProtoField.uint32("seastar_rpc.exception.len", "exception len", base.DEC)
hf["exc_message"] = ProtoField.string("seastar_rpc.exception.message", "message", base.UNICODE)
hf["exc_verb"] = ProtoField.uint64("seastar_rpc.exception.verb", "unknown verb", base.DEC)
hf["exc_body"] = ProtoField.bytes("seastar_rpc.exception.body", "exception body")
hf["compressor"] = ProtoField.string("seastar_rpc.compressor", "compressor", base.ASCII)
hf["uncompressed_size"] = ProtoField.uint32("seastar_rpc.lz4.uncompressed_size", "uncompressed_size", base.DEC)
hf["chunk"] = ProtoField.uint32("seastar_rpc.lz4.chunk", "chunk header", base.HEX)
hf["inflated_len"] = ProtoField.uint32("seastar_rpc.inflated_len", "inflated length", base.DEC)
hf["noop"] = ProtoField.bool("seastar_rpc.noop", "no-op (nothing inside)")
hf["response_in"] = ProtoField.framenum("seastar_rpc.response_in", "response in frame", base.NONE, frametype.RESPONSE)
hf["request_in"] = ProtoField.framenum("seastar_rpc.request_in", "request in frame", base.NONE, frametype.REQUEST)
hf["time"] = ProtoField.relative_time("seastar_rpc.time", "response time")
"""

#: The hand-written Lua (see the module docstring); it runs inside the generated file's block.
_LUA: Final = r"""
local SPEC = "specs/seastar-rpc/README.md"
local MAGIC = "SSTARRPC"
local EOS = 4294967295
local FRAGMENT = 32768
local FEATURE = {[0] = "COMPRESS", [1] = "TIMEOUT", [2] = "CONNECTION_ID", [3] = "STREAM_PARENT", [4] = "ISOLATION", [5] = "HANDLER_DURATION"}
local COMPRESSORS = {LZ4 = true, LZ4_FRAGMENTED = true}
local HEADER = {["request"] = 28, ["request/no-timeout"] = 20, ["response"] = 16, ["response/no-duration"] = 12, ["stream"] = 4}
local LEN_AT = {["request"] = 24, ["request/no-timeout"] = 16, ["response"] = 8, ["response/no-duration"] = 8, ["stream"] = 0}

-- No standard port (§8 names none): Decode As, and the heuristic below.
DissectorTable.get("tcp.port"):add_for_decode_as(P)

local function le32(s, i) return s:byte(i) + s:byte(i + 1) * 256 + s:byte(i + 2) * 65536 + s:byte(i + 3) * 16777216 end

local function state(ctx)
  local s = ctx.conv.state
  if s.pending == nil then s.pending = {}; s.match = {} end
  return s
end

-- ----------------------------------------------------------------- what a frame is (§1-§5)
-- The side that spoke first is the client (it opens with its negotiation, §1).  A
-- negotiation counts for frames of later packets (or later in its own packet), so the
-- second pass reads as the first.  Returns {t = frame type, plain = the type inside an
-- envelope, compressor = name or nil} or {err = {expert, text}}; nil and the bytes needed.
local function plain_type(tvb, off, avail, client, offer, reply)
  if offer ~= nil and offer.stream_parent ~= nil then
    if avail < 4 then return nil, 4 - avail end
    return tvb:range(off, 4):le_uint() == EOS and "stream-end" or "stream"
  end
  if client then return (offer ~= nil and offer.timeout) and "request" or "request/no-timeout" end
  return (reply ~= nil and reply.duration) and "response" or "response/no-duration"
end

local function decide(tvb, off, avail, pinfo, ctx)
  local s = state(ctx)
  if s.client == nil then s.client = ctx.dir end
  local client = ctx.dir == s.client
  local inner = ctx.inner
  if inner ~= nil then
    local t, need = plain_type(tvb, off, avail, client, inner.offer, inner.reply)
    if t == nil then return nil, need end
    return {t = t}
  end
  local mine = client and s.offer or s.reply
  if mine == nil or mine.frame > pinfo.number or (mine.frame == pinfo.number and mine.off == off) then
    return {t = "negotiation"}
  end
  local function known(n)
    if n == mine then return n end
    if n ~= nil and n.frame < pinfo.number then return n end
    return nil
  end
  local offer, reply = known(s.offer), known(s.reply)
  local comp = reply and reply.compressor
  if comp ~= nil and not COMPRESSORS[comp] then
    return {err = {"malformed", string.format("the server chose compressor %q, which is not one of LZ4, LZ4_FRAGMENTED: the frames after the negotiation cannot be read (%s §2, §4)", comp, SPEC)}}
  end
  if comp ~= nil then
    if avail < 4 then return nil, 4 - avail end
    local clen = tvb:range(off, 4):le_uint()
    return {t = clen < 4 and "noop" or "compressed", compressor = comp, offer = offer, reply = reply}
  end
  local t, need = plain_type(tvb, off, avail, client, offer, reply)
  if t == nil then return nil, need end
  return {t = t}
end

-- The checks before a frame is sized: a wrong magic, a negotiation len over max_string_size
-- (§2, §6), a len or clen over max_frame_size (§6); the rest of the direction is then undecoded.
PART.start = function(tvb, off, avail, pinfo, ctx)
  local d, need = decide(tvb, off, avail, pinfo, ctx)
  ctx.decision, ctx.need = d, need
  if d == nil then return nil end
  if d.err then return d.err end
  local t = d.t
  if t == "negotiation" then
    local n = math.min(avail, 8)
    if tvb:range(off, n):raw() ~= MAGIC:sub(1, n) then
      return {"malformed", string.format("wrong protocol magic %s (not SSTARRPC) (%s §2, §9)", tvb:range(off, n):bytes():tohex(), SPEC)}
    end
    if avail >= 12 and tvb:range(off + 8, 4):le_uint() > LIMIT.max_string_size then
      return {"limit", string.format("negotiation len %d is over max_string_size=%d (%s §2, §6)", tvb:range(off + 8, 4):le_uint(), LIMIT.max_string_size, SPEC)}
    end
    return nil
  end
  local at, what = LEN_AT[t], t
  if t == "compressed" or t == "noop" then at, what = 0, "envelope clen" end
  if at ~= nil and avail >= at + 4 then
    local n = tvb:range(off + at, 4):le_uint()
    if n > LIMIT.max_len then
      return {"limit", string.format("%s len %d is over max_frame_size=%d (%s §3, §4, §6)", what, n, LIMIT.max_len, SPEC)}
    end
  end
end

PART.frame_type = function(tvb, off, avail, pinfo, ctx)
  local d = ctx.decision
  if d == nil then return nil, ctx.need end
  ctx.frame = d
  return d.t
end

-- Sizes (§2-§4): every len counts only the data after the header.
for _, t in ipairs({"negotiation", "request", "request/no-timeout", "response", "response/no-duration", "stream"}) do
  PART.size[t] = function(tvb, off, avail, v) return LAYOUT[t].min_size + v.len, "len" end
end
PART.size["compressed"] = function(tvb, off, avail, v) return 4 + v.clen, "clen" end
PART.size["noop"] = PART.size["compressed"]

-- The heuristic (§2): the magic, or a prefix of it as the connection's very first bytes.
local f_seq = Field.new("tcp.seq")
PART.heuristic = function(tvb, pinfo)
  local n = math.min(tvb:len(), 8)
  if n < 3 or tvb:range(0, n):raw() ~= MAGIC:sub(1, n) then return false end
  if n == 8 then return true end
  local seq = f_seq()
  return seq ~= nil and tonumber(tostring(seq.value)) == 1
end

local function nstime(seconds)
  local secs = math.floor(seconds)
  return NSTime.new(secs, math.floor((seconds - secs) * 1e9 + 0.5))
end

local function warn(item, key, text, sections)
  item:add_proto_expert_info(ef[key], text .. " (" .. SPEC .. " " .. sections .. ")")
end

-- ----------------------------------------------------------------- negotiation (§2)
PART.body["negotiation"] = function(tvb, off, size, item, pinfo, v, ctx)
  local s = state(ctx)
  item:add(hf.kind, "negotiation"):set_generated()
  local f = {timeout = false, duration = false}
  local seen = {}
  local pos, stop = off + 12, off + size
  local parts = {}
  while pos < stop do
    if stop - pos < 8 then
      warn(item, "malformed", string.format("%d bytes left: fewer than a record header's 8 (bad feature data format)", stop - pos), "§2")
      break
    end
    local num, flen = tvb:range(pos, 4):le_uint(), tvb:range(pos + 4, 4):le_uint()
    local rt = item:add(hf.record, tvb:range(pos, math.min(8 + flen, stop - pos)))
    rt:add_le(hf.feature, tvb:range(pos, 4))
    rt:add_le(hf.flen, tvb:range(pos + 4, 4))
    local name = FEATURE[num] or ("unknown feature " .. num)
    rt:set_text(string.format("%s (flen %d)", name, flen))
    if flen > stop - pos - 8 then
      warn(rt, "malformed", string.format("the %s record's flen %d runs past the frame's end (buffer underflow)", name, flen), "§2")
      break
    end
    local data = tvb:range(pos + 8, flen)
    if flen > 0 then rt:add(hf.feature_data, data) end
    if seen[num] or FEATURE[num] == nil then
      rt:add(hf.ignored, true):set_generated()
    else
      seen[num] = true
      if num == 0 then f.compress = flen > 0 and data:raw() or ""
      elseif num == 1 then f.timeout = true
      elseif num == 4 then f.isolation = data
      elseif num == 5 then f.duration = true
      elseif flen ~= 8 then
        warn(rt, "malformed", string.format("%s must carry 8 bytes, got %d", name, flen), "§2, §6")
      elseif num == 2 then f.connection_id = data:le_uint64()
      else f.stream_parent = data:le_uint64() end
      parts[#parts + 1] = name .. ((num == 0 and f.compress) and ("=" .. f.compress) or "")
    end
    pos = pos + 8 + flen
  end
  if f.compress ~= nil then item:add(hf.neg_compress, f.compress):set_generated() end
  item:add(hf.neg_timeout, f.timeout):set_generated()
  if f.connection_id ~= nil then item:add(hf.neg_connection_id, f.connection_id):set_generated() end
  if f.stream_parent ~= nil then item:add(hf.neg_stream_parent, f.stream_parent):set_generated() end
  if f.isolation ~= nil then item:add(hf.neg_isolation, f.isolation) end
  f.isolation = nil  -- (a range of this packet: not kept)
  item:add(hf.neg_duration, f.duration):set_generated()
  local client = ctx.dir == s.client
  if not pinfo.visited then
    f.frame, f.off = pinfo.number, off
    if f.compress ~= nil and not client then f.compressor = f.compress:match("^[^,]*") end
    if client then s.offer = f else s.reply = f end
  end
  v._text = (client and "negotiation (client)" or "negotiation (server)") .. (#parts > 0 and (" " .. table.concat(parts, " ")) or "")
end
PART.summary["negotiation"] = function(v) return v._text end

-- ----------------------------------------------------------------- requests and responses (§3)
local function key_of(id) return tostring(id) end
local function negate(id)
  local text = tostring(id)
  if text:sub(1, 1) == "-" then return text:sub(2) end
  return "-" .. text
end

local function request(tvb, off, size, item, pinfo, v, ctx, header)
  local s = state(ctx)
  item:add(hf.kind, "request"):set_generated()
  if v.len > 0 then item:add(hf.payload, tvb:range(off + header, v.len)) end
  if v.timeout_ms ~= nil and tostring(v.timeout_ms) == "0" then item:add(hf.no_deadline, true):set_generated() end
  if not pinfo.visited then
    local req = {frame = pinfo.number, ts = pinfo.abs_ts}
    s.pending[key_of(v.msg_id)] = req
    s.match[ctx.key] = req
  end
  local req = s.match[ctx.key]
  if req ~= nil and req.response ~= nil then item:add(hf.response_in, req.response):set_generated() end
  v._text = string.format("request verb=%s id=%s len=%d", tostring(v.verb), tostring(v.msg_id), v.len)
    .. (v.timeout_ms ~= nil and (" timeout=" .. tostring(v.timeout_ms) .. "ms") or "")
end

-- The data of a negative-id response: type:u32 len:u32 body[len] (§3).  Returns its summary and,
-- when refwire's decode_exception refuses it, its error as refwire says it and the sections.
local function exception(tvb, at, n, item)
  if n < 8 then
    warn(item, "malformed", string.format("an exception's data of %d bytes is shorter than its type and len", n), "§3")
    return "exception (cut short)", {string.format("truncated: %s needs 4 bytes, %d left", n < 4 and "type" or "len", n < 4 and n or n - 4), "§3"}
  end
  local etype, elen = tvb:range(at, 4):le_uint(), tvb:range(at + 4, 4):le_uint()
  item:add_le(hf.exc_type, tvb:range(at, 4))
  item:add_le(hf.exc_len, tvb:range(at + 4, 4))
  if elen > n - 8 then
    warn(item, "malformed", string.format("the exception body claims %d bytes, the response has %d", elen, n - 8), "§3")
    return "exception (cut short)", {string.format("exception body claims %d bytes, the response has %d", elen, n - 8), "§3"}
  end
  local body = elen > 0 and tvb:range(at + 8, elen) or nil
  if etype == 0 then
    if body then item:add(hf.exc_message, body, body:string(ENC_UTF_8)) else item:add(hf.exc_message, "") end
    return "USER " .. string.format("%q", body and body:string(ENC_UTF_8) or "")
  elseif etype == 1 then
    if elen ~= 8 then
      local text = string.format("UNKNOWN_VERB body must be 8 bytes, got %d", elen)
      warn(item, "malformed", text, "§3, §9")
      return "UNKNOWN_VERB (malformed)", {text, "§3, §9"}
    end
    item:add_le(hf.exc_verb, body)
    return "UNKNOWN_VERB verb=" .. tostring(body:le_uint64())
  end
  if body then item:add(hf.exc_body, body) end
  return string.format("unknown exception type %d", etype)
end

local function response(tvb, off, size, item, pinfo, v, ctx, header)
  local s = state(ctx)
  item:add(hf.kind, "response"):set_generated()
  if v.handler_duration ~= nil and v.handler_duration == EOS then item:add(hf.unmeasured, true):set_generated() end
  local text = string.format("response id=%s len=%d", tostring(v.msg_id), v.len)
  local bad, in_flight
  if tostring(v.msg_id):sub(1, 1) == "-" then
    local etext
    etext, bad = exception(tvb, off + header, v.len, item)
    text = text .. " exception " .. etext
  elseif v.len > 0 then
    item:add(hf.payload, tvb:range(off + header, v.len))
  end
  if v.handler_duration ~= nil then
    text = text .. (v.handler_duration == EOS and " duration=unmeasured" or (" duration=" .. v.handler_duration .. "us"))
  end
  if not pinfo.visited then
    local k = key_of(v.msg_id)
    local req = s.pending[k]
    if req == nil then k = negate(v.msg_id); req = s.pending[k] end
    if req ~= nil then
      s.pending[k] = nil
      req.response = pinfo.number
      s.match[ctx.key] = req
      in_flight = true
    end
  end
  -- refwire's client drops the connection at a malformed exception for a call in flight (a stray
  -- one it ignores): the codec's error, as its machine's (§3)
  machine_error(tvb, off, size, item, pinfo, v, ctx, function()
    if bad ~= nil and in_flight then
      return bad[1] .. ": a malformed exception for call " .. tostring(negate(v.msg_id)) .. " in flight drops the connection", bad[2]
    end
  end)
  local req = s.match[ctx.key]
  if req ~= nil then
    item:add(hf.request_in, req.frame):set_generated()
    item:add(hf.time, nstime(pinfo.abs_ts - req.ts)):set_generated()
  end
  v._text = text
end

for t, header in pairs(HEADER) do
  if t ~= "stream" then
    local f = t:sub(1, 7) == "request" and request or response
    PART.body[t] = function(tvb, off, size, item, pinfo, v, ctx) f(tvb, off, size, item, pinfo, v, ctx, header) end
    PART.summary[t] = function(v) return v._text end
  end
end

-- ----------------------------------------------------------------- streams (§5)
PART.body["stream"] = function(tvb, off, size, item, pinfo, v, ctx)
  item:add(hf.kind, "stream"):set_generated()
  if v.len > 0 then item:add(hf.payload, tvb:range(off + 4, v.len)) end
end
PART.summary["stream"] = function(v) return string.format("stream len=%d", v.len) end
PART.body["stream-end"] = function(tvb, off, size, item, pinfo, v, ctx) item:add(hf.kind, "stream-end"):set_generated() end
PART.summary["stream-end"] = function(v) return "stream-end" end

-- ----------------------------------------------------------------- refwire's machines (§2, §5)
-- Each direction of a stream connection ends with one end-of-stream: a stream message or a second
-- end-of-stream after it is refused (§5).  The client refuses a server reply naming a compressor it
-- did not offer (§2: "RPC server responded with compression X - unsupported"), checked once the
-- client's offer was seen.
local function eos(ctx)
  local s = state(ctx)
  if s.eos == nil then s.eos = {} end
  return s.eos
end
PART.machine["stream"] = function(tvb, off, size, pinfo, v, ctx)
  if eos(ctx)[ctx.dir] then return "stream message after end-of-stream", "§5" end
end
PART.machine["stream-end"] = function(tvb, off, size, pinfo, v, ctx)
  local e = eos(ctx)
  if e[ctx.dir] then return "a second end-of-stream", "§5" end
  e[ctx.dir] = true
end

-- The first COMPRESS record of the negotiation frame at off (nil: none; the body reads the rest).
local function compress_record(tvb, off, size)
  local pos, stop = off + 12, off + size
  while stop - pos >= 8 do
    local num, flen = tvb:range(pos, 4):le_uint(), tvb:range(pos + 4, 4):le_uint()
    if flen > stop - pos - 8 then return nil end
    if num == 0 then return flen > 0 and tvb:range(pos + 8, flen):raw() or "" end
    pos = pos + 8 + flen
  end
end
PART.machine["negotiation"] = function(tvb, off, size, pinfo, v, ctx)
  local s = state(ctx)
  if ctx.dir == s.client or s.offer == nil then return nil end
  local name = compress_record(tvb, off, size)
  if name == nil then return nil end
  local names = {}
  for n in name:gmatch("[^,]+") do names[n] = true end
  for mine in (s.offer.compress or ""):gmatch("[^,]+") do
    if names[mine] then return nil end
  end
  return string.format("RPC server responded with compression %s - unsupported (the client offered %s)", name,
    s.offer.compress and ("'" .. s.offer.compress .. "'") or "none"), "§2"
end

-- ----------------------------------------------------------------- LZ4 (§4)
-- One LZ4 block (s[i..j]) decoded onto out (a table of bytes, which may already hold
-- the message's earlier chunks: matches may reach back into them), at most `limit`
-- bytes in all.  nil, or why the block is corrupt.
local function lz4_block(s, i, j, out, limit)
  local n = #out
  while true do
    if i > j then return "the block ends before its last sequence" end
    local token = s:byte(i)
    i = i + 1
    local lit = math.floor(token / 16)
    if lit == 15 then
      repeat
        if i > j then return "a literal length runs past the block" end
        local b = s:byte(i)
        i = i + 1
        lit = lit + b
      until b ~= 255
    end
    if i + lit - 1 > j then return "literals run past the block" end
    if n + lit > limit then return "it decodes to more bytes than declared" end
    for k = i, i + lit - 1 do n = n + 1; out[n] = s:byte(k) end
    i = i + lit
    if i > j then return nil end  -- the last sequence: literals only
    if i + 1 > j then return "a match offset is cut short" end
    local offset = s:byte(i) + s:byte(i + 1) * 256
    i = i + 2
    if offset == 0 or offset > n then return "a match offset points before the output" end
    local mlen = token % 16
    if mlen == 15 then
      repeat
        if i > j then return "a match length runs past the block" end
        local b = s:byte(i)
        i = i + 1
        mlen = mlen + b
      until b ~= 255
    end
    mlen = mlen + 4
    if n + mlen > limit then return "it decodes to more bytes than declared" end
    local from = n - offset
    for k = 1, mlen do out[n + k] = out[from + k] end
    n = n + mlen
  end
end

-- An envelope's payload opened: a table of bytes, or nil (a warning was added).
local function inflate(tvb, at, clen, item, comp)
  local p = tvb:raw(at, clen)
  local out = {}
  local function bad(key, text, sections) warn(item, key, comp .. ": " .. text, sections); return nil end
  if comp == "LZ4" then
    local declared = le32(p, 1)
    item:add_le(hf.uncompressed_size, tvb:range(at, 4))
    if declared == 0 then return bad("malformed", "a declared uncompressed_size of 0 (decompressed size cannot be zero)", "§4, §9") end
    if declared > LIMIT.max_decompressed_size then
      return bad("limit", string.format("uncompressed_size %d is over max_decompressed_size=%d", declared, LIMIT.max_decompressed_size), "§6")
    end
    if declared > 255 * (clen - 4) then
      return bad("malformed", string.format("uncompressed_size %d is over 255 times the block's %d bytes (LZ4's maximum ratio)", declared, clen - 4), "§6")
    end
    local e = lz4_block(p, 5, #p, out, declared)
    if e == nil and #out ~= declared then e = string.format("it decodes to %d bytes, not the declared %d", #out, declared) end
    if e ~= nil then return bad("malformed", "corrupt LZ4 block: " .. e, "§4, §6") end
    return out
  end
  local pos = 1
  while true do
    if pos + 3 > #p then
      return bad("malformed", string.format("the payload ends after %d bytes without a last chunk", #out), "§4")
    end
    local h = le32(p, pos)
    item:add_le(hf.chunk, tvb:range(at + pos - 1, 4))
    pos = pos + 4
    local before = #out
    if h >= 2147483648 then
      local u = h - 2147483648
      if before + u > LIMIT.max_decompressed_size then
        return bad("limit", string.format("the last chunk's size %d takes the message over max_decompressed_size=%d", u, LIMIT.max_decompressed_size), "§6")
      end
      local e = lz4_block(p, pos, #p, out, before + u)
      if e == nil and #out - before ~= u then e = string.format("the last chunk decodes to %d bytes, not %d", #out - before, u) end
      if e ~= nil then return bad("malformed", "corrupt LZ4 block: " .. e, "§4, §6") end
      return out
    end
    if h > #p - pos + 1 then
      return bad("malformed", string.format("a chunk claims %d compressed bytes, %d left", h, #p - pos + 1), "§4")
    end
    if before + FRAGMENT > LIMIT.max_decompressed_size then
      return bad("limit", string.format("the chunks take the message over max_decompressed_size=%d", LIMIT.max_decompressed_size), "§6")
    end
    local e = lz4_block(p, pos, pos + h - 1, out, before + FRAGMENT)
    if e == nil and #out - before ~= FRAGMENT then e = string.format("a chunk decodes to %d bytes, not 32768", #out - before) end
    if e ~= nil then return bad("malformed", "corrupt LZ4 block: " .. e, "§4, §6") end
    pos = pos + h
  end
end

-- An envelope (§4): its payload opened and the one frame inside dissected as a subtree.
PART.body["compressed"] = function(tvb, off, size, item, pinfo, v, ctx)
  local d = ctx.frame
  item:add(hf.compressor, d.compressor):set_generated()
  local out = inflate(tvb, off + 4, v.clen, item, d.compressor)
  if out == nil then
    item:add(hf.kind, "compressed"):set_generated()
    v._text = d.compressor .. " envelope (corrupt)"
    return
  end
  item:add(hf.inflated_len, #out):set_generated()
  if #out == 0 then  -- inflates to nothing: a no-op (§4)
    item:add(hf.kind, "noop"):set_generated()
    item:add(hf.noop, true):set_generated()
    v._text = d.compressor .. " no-op"
    return
  end
  item:add(hf.kind, "compressed"):set_generated()
  local s = state(ctx)
  local client = ctx.dir == s.client
  local head = string.char(table.unpack(out, 1, math.min(#out, 28)))
  local t = plain_type(ByteArray.new(head, true):tvb("head"), 0, #head, client, d.offer, d.reply)
  local header = HEADER[t] or 4
  if #out < header then
    warn(item, "malformed", string.format("the envelope inflates to %d bytes, fewer than a %s header's %d", #out, t, header), "§1, §4")
    v._text = d.compressor .. " envelope (too short)"
    return
  end
  local fsize = t == "stream-end" and 4 or header + le32(head, LEN_AT[t] + 1)
  if fsize > #out then
    warn(item, "malformed", string.format("the envelope inflates to %d bytes, the %s inside needs %d", #out, t, fsize), "§1, §4")
    v._text = d.compressor .. " envelope (frame cut short)"
    return
  end
  local parts = {}
  for k = 1, fsize, 4096 do parts[#parts + 1] = string.char(table.unpack(out, k, math.min(k + 4095, fsize))) end
  local inner_tvb = ByteArray.new(table.concat(parts), true):tvb(d.compressor .. "-inflated frame")
  local inner = {depth = ctx.depth + 1, conv = ctx.conv, dir = ctx.dir, count = ctx.count, inner = d}
  local before = ctx.count.n
  local _, need, broken = dissect_stream(inner_tvb, pinfo, item, 0, inner)
  if broken or need ~= nil or ctx.count.n - before ~= 1 then
    warn(item, "malformed", "the frame inside the envelope is no frame", "§4")
  end
  v._text = d.compressor .. " [" .. (inner.text or t) .. "]"
end
PART.summary["compressed"] = function(v) return v._text end

PART.body["noop"] = function(tvb, off, size, item, pinfo, v, ctx)
  item:add(hf.kind, "noop"):set_generated()
  item:add(hf.compressor, ctx.frame.compressor):set_generated()
  item:add(hf.noop, true):set_generated()
end
PART.summary["noop"] = function(v) return "no-op" end

-- every frame's summary kept on its ctx: an envelope's names the frame inside it
for t, body in pairs(PART.body) do
  if t ~= "compressed" then
    PART.body[t] = function(tvb, off, size, item, pinfo, v, ctx)
      body(tvb, off, size, item, pinfo, v, ctx)
      ctx.text = PART.summary[t](v)
    end
  end
end
"""

#: Seastar RPC's dissector part (the descriptor's ``dissector`` piece).
PART: Final = Part(
    name="seastar_rpc",
    title="Seastar RPC (refwire)",
    short="Seastar RPC",
    ports=(),  # Seastar has no standard port: the heuristic and Decode As
    heuristic=True,
    frame_type=True,
    start_ctx=True,
    limits={
        "max_frame_size": DEFAULT_LIMITS.max_frame_size + _LARGEST_HEADER,
        "max_len": DEFAULT_LIMITS.max_frame_size,
        "max_decompressed_size": DEFAULT_LIMITS.max_decompressed_size,
        "max_string_size": DEFAULT_LIMITS.max_string_size,
    },
    spec=SPEC,
    unknown_type_section="§3",
    limit_section="§6",
    eof_section="§1",
    fields_lua=_FIELDS,
    lua=_LUA,
)
