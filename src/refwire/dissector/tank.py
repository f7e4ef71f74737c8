"""TANK's part of its Wireshark dissector (specs/tank/README.md).

The generic generator (:mod:`refwire.dissector.generate`) makes the header fields
(``msg_id``, ``length``, ``request_id``), the sizes (5 + ``payloadLen``, §2) and the
frame loop from :data:`~refwire.tank.describe.LAYOUT` (requests) and
:data:`~refwire.tank.describe.RESPONSE_LAYOUT` (responses); this module holds only
what is TANK's own:

* the usual port, 11011 (the broker's default);
* the message ids (§3) as the frame types' codes, and the direction: one id is a
  request or a response depending on who sent it (§3), so every frame is read with
  the layout of its side.  The broker is the side on port 11011; on another port
  (a heuristic or *Decode As*), the side that sent the connection's first bytes if
  they are a Ping (the broker sends one on accept, §6), else the other side (the
  client spoke first);
* the heuristic mark: a connection whose very first bytes (relative TCP seq 1) are
  the broker's Ping ``03 00000000`` (§3, §6).  TANK has no magic of its own: the
  mark is that Ping, so a capture that misses the connection's start is found on
  port 11011 (or through *Decode As*) only;
* hand-written Lua for what a table cannot say: every request and response body
  (§3: topics, partitions, error codes, sequence numbers, high-water marks,
  admin answers), bundles (§4: flags, count, sparse ranges, messages with their
  varints, seqs, timestamps, keys and contents; raw Snappy inflated by a small
  Snappy decoder in Lua), consume chunks (§5: entries of ``bundleLen bundle``,
  messages numbered from the partition's base), and matching by request id per
  connection (§8.16): "response in frame N" on a request (with two passes),
  "request in frame M" and the latency on a response; a produce response's error
  bytes are read against its request's topics and partitions (§3).

Where refwire rejects (§2, §3, §4, §6: unknown message id, ``payloadLen`` over the
limit, a payload overrun or trailing bytes, a varint over 5 bytes or over u32, an
unknown consume error code, a bundle refwire's broker refuses), the frame gets an
expert-info warning citing the section; so does a response refwire's client machine rejects
(§3: a request id not in flight, a response of another kind than its request, a Consume
response naming a partition its request did not ask for; §5: walking an err 0x00 or 0xfe chunk,
a later sparse bundle's firstSeq below the running seq, or err 0xfe's first bundle not sparse --
refwire raises nothing else against the requested seq: bundles wholly below it are skipped), once
the client's side was seen.
"""

from __future__ import annotations

from typing import Final

from ..tank.describe import RESPONSE_LAYOUT
from ..tank.frames import DEFAULT_LIMITS, HEADER_SIZE, MSG_NAMES
from .generate import Part

__all__ = ["PART"]

SPEC: Final = "specs/tank/README.md"

#: ProtoFields of the hand-written part (the layout's own come from the generator).
_FIELDS: Final = r"""
hf["response"] = ProtoField.bool("tank.response", "response (broker to client)")
hf["client_version"] = ProtoField.uint16("tank.client_version", "clientVersion", base.DEC)
hf["client_id"] = ProtoField.string("tank.client_id", "clientId", base.UNICODE)
hf["required_acks"] = ProtoField.uint8("tank.required_acks", "requiredAcks", base.DEC)
hf["ack_timeout"] = ProtoField.uint32("tank.ack_timeout", "ackTimeoutMs", base.DEC)
hf["topics_count"] = ProtoField.uint8("tank.topics_count", "topicsCnt", base.DEC)
hf["topic"] = ProtoField.string("tank.topic", "topic", base.UNICODE)
hf["partitions_count"] = ProtoField.uint8("tank.partitions_count", "partitionsCnt", base.DEC)
hf["partition"] = ProtoField.uint16("tank.partition", "partitionId", base.DEC)
hf["bundle_len"] = ProtoField.uint32("tank.bundle_len", "bundleLen", base.DEC)
hf["base_seq"] = ProtoField.uint64("tank.base_seq", "baseSeqNum", base.DEC)
hf["max_wait"] = ProtoField.uint64("tank.max_wait", "maxWaitMs", base.DEC)
hf["min_bytes"] = ProtoField.uint32("tank.min_bytes", "minBytes", base.DEC)
hf["op_flags"] = ProtoField.uint8("tank.op_flags", "opFlags", base.HEX)
hf["seq"] = ProtoField.uint64("tank.seq", "absSeqNum", base.DEC)
hf["fetch_size"] = ProtoField.uint32("tank.fetch_size", "fetchSize", base.DEC)
hf["header_len"] = ProtoField.uint32("tank.header_len", "headerLen", base.DEC)
hf["err"] = ProtoField.uint8("tank.err", "err", base.HEX)
hf["hwmark"] = ProtoField.uint64("tank.hwmark", "highWaterMark", base.DEC)
hf["first_avail"] = ProtoField.uint64("tank.first_avail", "firstAvailSeqNum", base.DEC)
hf["chunk_len"] = ProtoField.uint32("tank.chunk_len", "chunkLen", base.DEC)
hf["chunk"] = ProtoField.bytes("tank.chunk", "chunk")
hf["unknown_topic"] = ProtoField.bool("tank.unknown_topic", "unknown topic (0xffff)")
hf["leader_addr"] = ProtoField.uint32("tank.leader_addr", "leaderAddr", base.HEX)
hf["leader_port"] = ProtoField.uint16("tank.leader_port", "leaderPort", base.DEC)
hf["partition_count"] = ProtoField.uint16("tank.partition_count", "partitions", base.DEC)
hf["config"] = ProtoField.string("tank.config", "config", base.UNICODE)
hf["flags"] = ProtoField.uint8("tank.flags", "flags", base.HEX)
hf["count"] = ProtoField.uint32("tank.count", "count", base.DEC)
hf["reason"] = ProtoField.uint8("tank.reason", "reason", base.HEX)
hf["enabled"] = ProtoField.uint8("tank.enabled", "enabled", base.DEC)
hf["rf"] = ProtoField.uint8("tank.rf", "replication factor", base.DEC)
hf["global_flags"] = ProtoField.uint8("tank.global_flags", "globalFlags", base.HEX)
hf["cluster_aware"] = ProtoField.uint8("tank.cluster_aware", "clusterAware", base.DEC)
hf["cluster_flags"] = ProtoField.uint8("tank.cluster_flags", "clusterFlags", base.HEX)
hf["cluster_name"] = ProtoField.string("tank.cluster_name", "clusterName", base.UNICODE)
hf["nodes"] = ProtoField.uint32("tank.nodes", "nodesAvailable", base.DEC)
hf["n_topics"] = ProtoField.uint32("tank.status.topics", "topics", base.DEC)
hf["n_partitions"] = ProtoField.uint32("tank.status.partitions", "partitions", base.DEC)
hf["open_partitions"] = ProtoField.uint32("tank.status.open_partitions", "openPartitions", base.DEC)
hf["open_time"] = ProtoField.uint32("tank.status.open_time", "openPartitionsTime", base.DEC)
hf["startup_ts"] = ProtoField.uint32("tank.status.startup_ts", "startupTs", base.DEC)
hf["version"] = ProtoField.uint32("tank.status.version", "version", base.DEC)
hf["topology"] = ProtoField.bytes("tank.topology", "topology")
hf["errors"] = ProtoField.bytes("tank.errors", "error bytes (no request matched)")
hf["bundle"] = ProtoField.none("tank.bundle", "bundle")
hf["bundle_flags"] = ProtoField.uint8("tank.bundle.flags", "flags", base.HEX)
hf["bundle_codec"] = ProtoField.uint8("tank.bundle.codec", "codec", base.DEC, {[0] = "none", [1] = "raw Snappy"})
hf["bundle_count"] = ProtoField.uint32("tank.bundle.count", "message count", base.DEC)
hf["bundle_sparse"] = ProtoField.bool("tank.bundle.sparse", "sparse")
hf["bundle_first_seq"] = ProtoField.uint64("tank.bundle.first_seq", "firstSeq", base.DEC)
hf["bundle_last_seq"] = ProtoField.uint64("tank.bundle.last_seq", "lastSeq", base.DEC)
hf["bundle_partial"] = ProtoField.bool("tank.bundle.partial", "partial bundle (cut by the chunk's end)")
hf["snappy_len"] = ProtoField.uint32("tank.bundle.snappy_len", "Snappy uncompressed length", base.DEC)
hf["msg"] = ProtoField.none("tank.msg", "message")
hf["msg_flags"] = ProtoField.uint8("tank.msg.flags", "flags", base.HEX)
hf["msg_seq_delta"] = ProtoField.uint32("tank.msg.seq_delta", "seqDelta", base.DEC)
hf["msg_seq"] = ProtoField.uint64("tank.msg.seq", "seq", base.DEC)
hf["msg_ts"] = ProtoField.uint64("tank.msg.ts", "ts", base.DEC)
hf["msg_key"] = ProtoField.bytes("tank.msg.key", "key")
hf["msg_content_len"] = ProtoField.uint32("tank.msg.content_len", "contentLen", base.DEC)
hf["msg_content"] = ProtoField.bytes("tank.msg.content", "content")
hf["response_in"] = ProtoField.framenum("tank.response_in", "response in frame", base.NONE, frametype.RESPONSE)
hf["request_in"] = ProtoField.framenum("tank.request_in", "request in frame", base.NONE, frametype.REQUEST)
hf["time"] = ProtoField.relative_time("tank.time", "response time")
"""

#: The hand-written Lua (see the module docstring); it runs inside the generated file's block.
_LUA: Final = r"""
local SPEC = "specs/tank/README.md"
local PORTS = {[11011] = true}
local U64_MAX = 18446744073709551615
-- A Lua number (a seq below 2^53) as the UInt64 a 64-bit field takes.
local function u64(n) return UInt64.new(n % 4294967296, math.floor(n / 4294967296)) end

-- ----------------------------------------------------------------- direction
-- The broker: the side on a TANK port; else the sender of the connection's first bytes
-- if they are a Ping (the broker's on accept, §6); else the other side.
local function is_ping(tvb, off)
  return tvb:len() - off >= 5 and tvb:range(off, 5):bytes():tohex() == "0300000000"
end

PART.from_server = function(tvb, pinfo, conv)
  local s = conv.state
  local src = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
  local dst = tostring(pinfo.dst) .. ":" .. tostring(pinfo.dst_port)
  if s.server == nil then
    if PORTS[pinfo.src_port] and not PORTS[pinfo.dst_port] then s.server = src
    elseif PORTS[pinfo.dst_port] and not PORTS[pinfo.src_port] then s.server = dst
    elseif is_ping(tvb, 0) then s.server = src
    else s.server = dst end
  end
  return s.server == src
end

-- The heuristic mark: the connection's first bytes are the broker's Ping (§3, §6).
local f_seq = Field.new("tcp.seq")
PART.heuristic = function(tvb, pinfo)
  if not is_ping(tvb, 0) then return false end
  if tvb:len() > 5 and TYPE_CODES[tvb:range(5, 1):uint()] == nil then return false end
  local seq = f_seq()
  return seq ~= nil and tonumber(tostring(seq.value)) == 1
end

-- Every frame starts with a known message id (§2, §3); anything else ends the stream (§6).
PART.start = function(tvb, off, avail)
  local b = tvb:range(off, 1):uint()
  if TYPE_CODES[b] == nil then
    return {"malformed", string.format("unknown message id 0x%02x (%s §3, §6)", b, SPEC)}
  end
end

-- ----------------------------------------------------------------- a payload reader
-- A reject is a Lua error carrying {tank = text, kind = expert key, truncated = bool}.
local function reject(text, sections, truncated, kind)
  error({tank = text .. " (" .. SPEC .. " " .. sections .. ")", truncated = truncated, kind = kind or "malformed"}, 0)
end

local Reader = {}
Reader.__index = Reader
local function new_reader(tvb, pos, stop, tree, what)
  return setmetatable({tvb = tvb, pos = pos, stop = stop, tree = tree, what = what}, Reader)
end
function Reader:left() return self.stop - self.pos end
function Reader:take(n, field)
  if n > self.stop - self.pos then
    reject(string.format("%s: %s needs %d bytes, %d left", self.what, field, n, self.stop - self.pos), "§2, §3, §6", true)
  end
  local at = self.pos
  self.pos = self.pos + n
  return at
end
function Reader:range(at, n) return self.tvb:range(at, n) end
-- An unsigned little-endian integer of n bytes (a number; 8 bytes: exact up to 2^53), shown under hfk.
function Reader:uint(n, field, hfk, tree)
  local at = self:take(n, field)
  local r = self.tvb:range(at, n)
  if hfk then (tree or self.tree):add_le(hf[hfk], r) end
  if n == 8 then return tonumber(tostring(r:le_uint64())) end
  return r:le_uint()
end
function Reader:u8(field, hfk, tree) return self:uint(1, field, hfk, tree) end
function Reader:u16(field, hfk, tree) return self:uint(2, field, hfk, tree) end
function Reader:u32(field, hfk, tree) return self:uint(4, field, hfk, tree) end
function Reader:u64(field, hfk, tree) return self:uint(8, field, hfk, tree) end
-- str8: u8 length + bytes, shown (with its length byte) under hfk.
function Reader:str8(field, hfk, tree)
  local at = self.pos
  local n = self:u8(field)
  self:take(n, field)
  local s = n > 0 and self.tvb:range(at + 1, n):string(ENC_UTF_8) or ""
  if hfk then (tree or self.tree):add(hf[hfk], self.tvb:range(at, n + 1), s) end
  return s
end
-- An unsigned LEB128 u32 (§2): at most 5 bytes, at most 2^32-1.
function Reader:varint(field, hfk, tree)
  local at, v, mul = self.pos, 0, 1
  for _ = 1, 5 do
    if self.pos >= self.stop then
      reject(string.format("%s: %s varint runs past the end", self.what, field), "§2, §6", true)
    end
    local b = self.tvb:range(self.pos, 1):uint()
    self.pos = self.pos + 1
    v = v + (b % 128) * mul
    mul = mul * 128
    if b < 128 then
      if v > 4294967295 then reject(string.format("%s: %s varint overflows u32", self.what, field), "§2, §6") end
      if hfk then (tree or self.tree):add(hf[hfk], self.tvb:range(at, self.pos - at), v) end
      return v
    end
  end
  reject(string.format("%s: %s varint longer than 5 bytes", self.what, field), "§2, §6")
end
-- A topic name (str8) as the head of its subtree (its length is set once its entries are read).
function Reader:topic(tree)
  local at = self.pos
  local name = self:str8("topic")
  return name, (tree or self.tree):add(hf.topic, self.tvb:range(at, self.pos - at), name), at
end
-- A partition id (u16) as the head of its subtree.
function Reader:partition(tree)
  local at = self:take(2, "partitionId")
  local r = self.tvb:range(at, 2)
  return r:le_uint(), tree:add_le(hf.partition, r), at
end
function Reader:finish()
  if self.pos ~= self.stop then
    reject(string.format("%s: %d bytes after the last field", self.what, self.stop - self.pos), "§3, §6")
  end
end

-- ----------------------------------------------------------------- Snappy (raw, §4)
-- The declared length is checked against max_decompressed_size before anything is inflated.
local function snappy(tvb, pos, stop, tree)
  local r = new_reader(tvb, pos, stop, tree, "bundle")
  local n = r:varint("snappyLength", "snappy_len")
  if n > LIMIT.max_decompressed_size then
    reject(string.format("Snappy length %d exceeds max_decompressed_size=%d", n, LIMIT.max_decompressed_size), "§4", false, "limit")
  end
  local s = tvb:raw(pos, stop - pos)
  local i, out = r.pos - pos + 1, {}
  local function corrupt(why) reject("corrupt Snappy data: " .. why, "§4") end
  while i <= #s do
    local tag = s:byte(i)
    i = i + 1
    local kind = tag % 4
    if kind == 0 then
      local len = math.floor(tag / 4)
      if len >= 60 then
        local nb = len - 59
        if i + nb - 1 > #s then corrupt("literal length cut short") end
        len = 0
        for k = nb - 1, 0, -1 do len = len * 256 + s:byte(i + k) end
        i = i + nb
      end
      len = len + 1
      if i + len - 1 > #s then corrupt("literal runs past the input") end
      for k = i, i + len - 1 do out[#out + 1] = s:byte(k) end
      i = i + len
    else
      local len, offset
      if kind == 1 then
        if i > #s then corrupt("copy cut short") end
        len = math.floor(tag / 4) % 8 + 4
        offset = math.floor(tag / 32) * 256 + s:byte(i)
        i = i + 1
      elseif kind == 2 then
        if i + 1 > #s then corrupt("copy cut short") end
        len = math.floor(tag / 4) + 1
        offset = s:byte(i) + s:byte(i + 1) * 256
        i = i + 2
      else
        if i + 3 > #s then corrupt("copy cut short") end
        len = math.floor(tag / 4) + 1
        offset = s:byte(i) + s:byte(i + 1) * 256 + s:byte(i + 2) * 65536 + s:byte(i + 3) * 16777216
        i = i + 4
      end
      if offset == 0 or offset > #out then corrupt("copy offset out of range") end
      local from = #out - offset
      for k = 1, len do out[#out + 1] = out[from + k] end
    end
    if #out > n then corrupt("more bytes than its length says") end
  end
  if #out ~= n then corrupt(string.format("%d bytes, its length says %d", #out, n)) end
  if n == 0 then return nil end
  local parts = {}
  for k = 1, n, 4096 do parts[#parts + 1] = string.char(table.unpack(out, k, math.min(k + 4095, n))) end
  return ByteArray.new(table.concat(parts), true):tvb("Snappy-inflated bundle")
end

-- ----------------------------------------------------------------- bundles (§4)
-- The bundle at tvb[pos, stop) under tree bt: its header and messages, numbered from
-- base_seq (nil: no numbers) unless sparse.  partial: the bundle was cut by its chunk's
-- end (§5): the complete messages are shown, the rest is quiet.  Returns the last seq.
local function dissect_bundle(tvb, pos, stop, bt, base_seq, partial, hdr)
  local r = new_reader(tvb, pos, stop, bt, "bundle")
  local flags = r:u8("flags", "bundle_flags")
  if flags >= 128 then reject(string.format("bundle flags 0x%02x: bit 7 is not implemented by TANK", flags), "§4") end
  local codec = flags % 4
  bt:add(hf.bundle_codec, codec):set_generated()
  if codec > 1 then reject(string.format("bundle codec %d is undefined (0 none, 1 Snappy)", codec), "§4") end
  local sparse = math.floor(flags / 64) % 2 == 1
  bt:add(hf.bundle_sparse, sparse):set_generated()
  local count = math.floor(flags / 4) % 16
  if count == 0 then
    count = r:varint("count")
    if count == 0 then reject("bundle message count is 0", "§4") end
  end
  bt:add(hf.bundle_count, count):set_generated()
  local first, last
  if sparse then
    first = r:u64("firstSeq", "bundle_first_seq")
    if count == 1 then last = first else last = first + r:varint("lastSeq") + 1 end
    bt:add(hf.bundle_last_seq, u64(last)):set_generated()
    if first == 0 or last >= U64_MAX then reject(string.format("sparse sequence numbers %.0f..%.0f out of range", first, last), "§4") end
    if last - first + 1 < count then reject(string.format("sparse range %.0f..%.0f cannot hold %d messages", first, last, count), "§4") end
  end
  if hdr then hdr.sparse, hdr.first = sparse, first end  -- the header read: the chunk walk's checks (§5)
  local mtvb, mpos, mstop = tvb, r.pos, stop
  if codec == 1 then
    if partial then  -- a partial Snappy bundle delivers nothing (§5)
      bt:add(hf.bundle_partial, true):set_generated()
      return nil
    end
    local inflated = snappy(tvb, r.pos, stop, bt)
    if inflated == nil then reject(string.format("count %d cannot fit in 0 bytes of messages", count), "§4") end
    mtvb, mpos, mstop = inflated, 0, inflated:len()
  end
  if not partial and count > math.floor((mstop - mpos) / 2) then
    reject(string.format("count %d cannot fit in %d bytes of messages", count, mstop - mpos), "§4")
  end
  local m = new_reader(mtvb, mpos, mstop, bt, "bundle")
  local seq = sparse and first or base_seq
  for i = 1, count do
    local start = m.pos
    if m.pos >= m.stop then
      if partial then break end
      reject(string.format("bundle: truncated: message %d of %d", i - 1, count), "§4", true)
    end
    local mt = bt:add(hf.msg, mtvb:range(start, 1))
    local ok, err = pcall(function()
      local mflags = m:u8("messageFlags", "msg_flags", mt)
      if mflags >= 8 then reject(string.format("message %d: unknown flags 0x%02x", i - 1, mflags), "§4") end
      if i > 1 and not sparse then
        seq = seq and seq + 1
      elseif i > 1 then
        if mflags % 8 >= 4 then seq = seq + 1
        elseif i == count then seq = last
        else seq = seq + 1 + m:varint("seqDelta", "msg_seq_delta", mt) end
        local middle = i < count
        if (middle and seq >= last) or (not middle and seq ~= last) then
          reject(string.format("message %d: seq %.0f disagrees with lastSeq %.0f", i - 1, seq, last), "§4")
        end
      end
      if mflags % 4 < 2 then m:u64("ts", "msg_ts", mt) end
      if mflags % 2 == 1 then
        local klen = m:u8("keyLen")
        local at = m:take(klen, "key")
        mt:add(hf.msg_key, mtvb:range(at, klen))
      end
      local clen = m:varint("contentLen", "msg_content_len", mt)
      local at = m:take(clen, "content")
      mt:add(hf.msg_content, mtvb:range(at, clen))
    end)
    if not ok then
      if partial and type(err) == "table" and err.truncated then
        mt:set_text("message (cut by the chunk's end)")
        break
      end
      error(err, 0)
    end
    mt:set_len(m.pos - start)
    if seq ~= nil then mt:add(hf.msg_seq, u64(seq)):set_generated() end
    mt:set_text(string.format("message %d%s (%d bytes)", i - 1, seq ~= nil and string.format(": seq %.0f", seq) or "", m.pos - start))
  end
  if partial then
    bt:add(hf.bundle_partial, true):set_generated()
  elseif m.pos ~= mstop then
    reject(string.format("%d bytes after the last of %d messages", mstop - m.pos, count), "§4")
  end
  return seq
end

-- One bundle under its own subtree; a bundle refwire refuses gets the warning there.
local function bundle_item(tvb, pos, stop, tree, base_seq, partial, blen, hdr)
  -- an empty bundle is shown on the last byte of its length varint
  local bt = stop > pos and tree:add(hf.bundle, tvb:range(pos, stop - pos)) or tree:add(hf.bundle, tvb:range(pos - 1, 1))
  if blen ~= nil then bt:add(hf.bundle_len, blen):set_generated() end
  local ok, res = pcall(dissect_bundle, tvb, pos, stop, bt, base_seq, partial, hdr)
  if not ok then
    if type(res) ~= "table" or res.tank == nil then error(res, 0) end
    bt:add_proto_expert_info(ef[res.kind], res.tank)
    return nil, false
  end
  return res, true
end

-- A consume chunk (§5): bundleLen:varint bundle entries; non-sparse bundles numbered from
-- base (then the previous end), sparse ones from their own header; a bundle cut by the end is partial.
-- Returns nil, or what refwire's client raises walking the chunk itself (read_chunk, §5: a later
-- sparse bundle's firstSeq below the running seq, err 0xfe's first bundle not sparse), checked on
-- each bundle's header before its messages, whatever the requested seq.
local function dissect_chunk(tvb, pos, stop, tree, base)
  local r = new_reader(tvb, pos, stop, tree, "chunk")
  local running = base
  local walk_err
  while r.pos < stop do
    local entry = r.pos
    local ok, blen = pcall(r.varint, r, "bundleLen")
    if not ok then
      if type(blen) ~= "table" or not blen.truncated then error(blen, 0) end
      tree:add(hf.bundle_partial, true):set_generated()
      return walk_err
    end
    local bend = math.min(r.pos + blen, stop)
    local hdr = {}
    local last, good = bundle_item(tvb, r.pos, bend, tree, running, r.pos + blen > stop, blen, hdr)
    if walk_err == nil and hdr.sparse ~= nil then
      if hdr.sparse and running ~= nil and hdr.first < running and entry > pos then
        walk_err = string.format("sparse firstSeq %.0f below the running seq %.0f", hdr.first, running)
      elseif not hdr.sparse and running == nil then
        walk_err = "err 0xfe but the first bundle is not sparse"
      end
    end
    if not good then return walk_err end
    if last ~= nil then running = last + 1 end
    r.pos = bend
  end
  return walk_err
end

-- ----------------------------------------------------------------- matching (§3, §8.16)
local function nstime(seconds)
  local secs = math.floor(seconds)
  return NSTime.new(secs, math.floor((seconds - secs) * 1e9 + 0.5))
end

local function match_state(ctx)
  local s = ctx.conv.state
  if s.pending == nil then s.pending = {}; s.match = {} end
  return s
end

-- A request: kept per request id until its response comes (first pass).
local function track_request(pinfo, item, v, ctx, t)
  local s = match_state(ctx)
  if not pinfo.visited then
    local req = {frame = pinfo.number, ts = pinfo.abs_ts, type = t}
    local q = s.pending[v.request_id] or {}
    q[#q + 1] = req
    s.pending[v.request_id] = q
    s.match[ctx.key] = req
  end
  local req = s.match[ctx.key]
  if req ~= nil and req.response ~= nil then item:add(hf.response_in, req.response):set_generated() end
  return req
end

-- A response: the oldest request of its id (and kind: ProduceWithSeqnum is answered by Produce, §3).
local ANSWERS = {Produce = {Produce = true, ProduceWithSeqnum = true}}
local function track_response(pinfo, item, v, ctx, t)
  local s = match_state(ctx)
  if not pinfo.visited then
    local q = s.pending[v.request_id]
    if q ~= nil then
      for i, req in ipairs(q) do
        if req.type == t or (ANSWERS[t] and ANSWERS[t][req.type]) then
          table.remove(q, i)
          req.response = pinfo.number
          s.match[ctx.key] = req
          break
        end
      end
    end
  end
  local req = s.match[ctx.key]
  if req ~= nil then
    item:add(hf.request_in, req.frame):set_generated()
    item:add(hf.time, nstime(pinfo.abs_ts - req.ts)):set_generated()
  end
  return req
end

-- ----------------------------------------------------------------- requests (§3)
local REQ = {}

REQ.Ping = function(r) r:finish() end

local function produce(r, v, req, with_seqnum)
  r:u16("clientVersion", "client_version")
  r:u32("requestId")
  r:str8("clientId", "client_id")
  r:u8("requiredAcks", "required_acks")
  r:u32("ackTimeoutMs", "ack_timeout")
  local layout, bundles = {}, {}
  for _ = 1, r:u8("topicsCnt", "topics_count") do
    local name, tt, at = r:topic()
    local parts = {}
    for _ = 1, r:u8("partitionsCnt", "partitions_count", tt) do
      local pid, pt, pat = r:partition(tt)
      local blen = r:varint("bundleLen", "bundle_len", pt)
      local base = with_seqnum and r:u64("baseSeqNum", "base_seq", pt) or nil
      local bat = r:take(blen, "bundle")
      bundles[#bundles + 1] = {pt, bat, bat + blen, base}
      parts[#parts + 1] = pid
      pt:set_len(r.pos - pat)
    end
    tt:set_len(r.pos - at)
    layout[#layout + 1] = {name, parts}
  end
  r:finish()
  if req ~= nil then req.layout = layout end
  -- the bundles (§4): refwire's broker validates every one before storing any (§6)
  for _, b in ipairs(bundles) do bundle_item(r.tvb, b[2], b[3], b[1], b[4], false, nil) end
  local names = {}
  for _, t in ipairs(layout) do names[#names + 1] = t[1] end
  return table.concat(names, ",")
end
REQ.Produce = function(r, v, req) return produce(r, v, req, false) end
REQ.ProduceWithSeqnum = function(r, v, req) return produce(r, v, req, true) end

REQ.Consume = function(r, v, req)
  local version = r:u16("clientVersion", "client_version")
  r:u32("requestId")
  r:str8("clientId", "client_id")
  r:u64("maxWaitMs", "max_wait")
  r:u32("minBytes", "min_bytes")
  if version >= 3 then r:u8("opFlags", "op_flags") end
  local names = {}
  for _ = 1, r:u8("topicsCnt", "topics_count") do
    local name, tt, at = r:topic()
    for _ = 1, r:u8("partitionsCnt", "partitions_count", tt) do
      local pid, pt, pat = r:partition(tt)
      if req ~= nil then req.asked = req.asked or {}; req.asked[name .. "/" .. pid] = true end
      local seq = r:u64("absSeqNum", "seq", pt)
      r:u32("fetchSize", "fetch_size", pt)
      pt:set_len(r.pos - pat)
      pt:set_text(string.format("partitionId: %d from seq %s", pid, seq == U64_MAX and "the end" or string.format("%.0f", seq)))
    end
    tt:set_len(r.pos - at)
    names[#names + 1] = name
  end
  r:finish()
  return table.concat(names, ",")
end

REQ.DiscoverPartitions = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  if r:left() % 2 == 1 then reject("DiscoverPartitions: partition id list has an odd byte count", "§3, §6") end
  while r:left() > 0 do r:u16("partitionId", "partition") end
  return name
end

REQ.CreateTopic = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  r:u16("partitions", "partition_count")
  local n = r:varint("configLen")
  if n > LIMIT.max_string_size * 256 then
    reject(string.format("CreateTopic: config of %d bytes over its limit %d", n, LIMIT.max_string_size * 256), "§3, §6", false, "limit")
  end
  local at = r:take(n, "config")
  if n > 0 then r.tree:add(hf.config, r:range(at, n), r:range(at, n):string(ENC_UTF_8)) end
  r:finish()
  return name
end

REQ.ReloadConf = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  r:u16("partition", "partition")
  r:finish()
  return name
end

REQ.Status = function(r) r:u32("requestId"); r:finish() end
REQ.DiscoverTopics = function(r) r:u32("requestId"); r:u8("flags", "flags"); r:finish() end
REQ.DiscoverTopology = REQ.DiscoverTopics

-- ----------------------------------------------------------------- responses (§3)
local RESP = {}

RESP.Ping = function(r) r:finish() end

-- Produce: one err byte per requested partition (a topic-wide 0xff/0xfe once per topic,
-- 0xfc adds addr4:u32 port:u16), read against the matched request's topics (§3).
RESP.Produce = function(r, v, req)
  r:u32("requestId")
  if req == nil or req.layout == nil then
    if r:left() > 0 then r.tree:add(hf.errors, r:range(r.pos, r:left())) end
    while r:left() > 0 do
      local err = r:u8("err", "err")
      if err == 0xfc and r:left() >= 6 then r:u32("leaderAddr", "leader_addr"); r:u16("leaderPort", "leader_port") end
    end
    return
  end
  for _, t in ipairs(req.layout) do
    for j, pid in ipairs(t[2]) do
      local at = r.pos
      local err = r:u8("err")
      local et = r.tree:add_le(hf.err, r:range(at, 1))
      et:set_text(string.format("err: 0x%02x (%s partition %d)", err, t[1], pid))
      if err == 0xfc then r:u32("leaderAddr", "leader_addr", et); r:u16("leaderPort", "leader_port", et) end
      if j == 1 and (err == 0xff or err == 0xfe) then break end  -- topic-wide
    end
  end
  r:finish()
end

RESP.Consume = function(r, v, req)
  local header_len = r:u32("headerLen", "header_len")
  if header_len > r:left() then
    reject(string.format("Consume: headerLen %d runs past the frame (%d bytes left)", header_len, r:left()), "§3, §6")
  end
  local h = new_reader(r.tvb, r.pos, r.pos + header_len, r.tree, "Consume")
  h:u32("requestId")
  local wants, names, parts = {}, {}, {}
  v._parts = parts  -- (topic, partition) of every entry: refwire's machine checks them (§3)
  for _ = 1, h:u8("topicsCnt", "topics_count") do
    local name, tt, at = h:topic()
    names[#names + 1] = name
    local count = h:u8("partitionsCnt", "partitions_count", tt)
    if h:left() >= 2 and h:range(h.pos, 2):le_uint() == 0xffff then
      h:u16("unknownTopic")
      tt:add(hf.unknown_topic, h:range(h.pos - 2, 2), true)
      count = 0
    end
    for _ = 1, count do
      local pid, pt, pat = h:partition(tt)
      local part = {name, pid}
      parts[#parts + 1] = part
      local err = h:u8("err", "err", pt)
      local text = string.format("partitionId: %d err 0x%02x", pid, err)
      if err == 0x00 or err == 0xfe or err == 0x01 then
        local base = nil
        if err ~= 0xfe then base = h:u64("baseSeqNum", "base_seq", pt) end
        local hw = h:u64("highWaterMark", "hwmark", pt)
        local clen = h:u32("chunkLen", "chunk_len", pt)
        if err == 0x01 then h:u64("firstAvailSeqNum", "first_avail", pt) end
        -- refwire's client walks the chunks of err 0x00 and 0xfe only (§5)
        if clen > 0 then wants[#wants + 1] = {pt, clen, base, err ~= 0x01 and part or nil} end
        text = text .. string.format(" hwmark %.0f chunk %d bytes", hw, clen)
      elseif err == 0xfc then
        h:u32("leaderAddr", "leader_addr", pt)
        h:u16("leaderPort", "leader_port", pt)
      elseif err ~= 0xff and err ~= 0xfb and err ~= 0xfd then
        reject(string.format("Consume: unknown partition error code 0x%02x", err), "§3")
      end
      pt:set_len(h.pos - pat)
      pt:set_text(text)
    end
    tt:set_len(h.pos - at)
  end
  h:finish()
  r.pos = h.stop
  local total = 0
  for _, w in ipairs(wants) do total = total + w[2] end
  if total ~= r:left() then
    reject(string.format("Consume: chunk lengths add up to %d but %d bytes follow the header", total, r:left()), "§3, §6")
  end
  for _, w in ipairs(wants) do
    local at = r:take(w[2], "chunk")
    local ct = w[1]:add(hf.chunk, r:range(at, w[2]))
    local walk_err = dissect_chunk(r.tvb, at, at + w[2], ct, w[3])
    if w[4] ~= nil then w[4][3] = walk_err end
  end
  return table.concat(names, ",")
end

RESP.DiscoverPartitions = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  for _ = 1, r:u16("count", "count") do
    local first = r:u64("firstAvailSeqNum", "first_avail")
    local hw = r:u64("highWaterMark", "hwmark")
    if first == U64_MAX and hw == U64_MAX then
      local reason = r:u8("reason", "reason")
      if reason == 0xfc then r:u32("leaderAddr", "leader_addr"); r:u16("leaderPort", "leader_port") end
    end
  end
  r:finish()
  return name
end

RESP.CreateTopic = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  r:u8("err", "err")
  r:finish()
  return name
end

RESP.ReloadConf = function(r)
  r:u32("requestId")
  local name = r:str8("topic", "topic")
  r:u16("partition", "partition")
  r:u8("err", "err")
  r:finish()
  return name
end

RESP.Status = function(r)
  r:u32("requestId")
  r:u8("globalFlags", "global_flags")
  local aware = r:u8("clusterAware", "cluster_aware")
  r:u32("topics", "n_topics")
  r:u32("partitions", "n_partitions")
  if aware ~= 0 then
    r:u8("clusterFlags", "cluster_flags")
    r:str8("clusterName", "cluster_name")
    r:u32("nodesAvailable", "nodes")
  end
  for _, k in ipairs({"open_partitions", "open_time", "startup_ts", "version"}) do  -- older brokers stop early (§3)
    if r:left() > 0 then r:u32(k, k) end
  end
  r:finish()
end

RESP.DiscoverTopics = function(r)
  r:u32("requestId")
  local count = r:u32("count", "count")
  local aware = r:u8("clusterAware", "cluster_aware")
  if count > math.floor(r:left() / 4) then
    reject(string.format("DiscoverTopics: count %d cannot fit in %d bytes", count, r:left()), "§3, §6")
  end
  for _ = 1, count do
    local _, tt, at = r:topic()
    r:u8("enabled", "enabled", tt)
    r:u16("partitions", "partition_count", tt)
    if aware ~= 0 then r:u8("rf", "rf", tt) end
    tt:set_len(r.pos - at)
  end
  r:finish()
end

RESP.DiscoverTopology = function(r)
  r:u32("requestId")
  if r:left() > 0 then r.tree:add(hf.topology, r:range(r.pos, r:left())) end
  r.pos = r.stop
end

-- ----------------------------------------------------------------- every frame
-- refwire's client machine (§3) on what the broker sends, in its order: the response decodes (else
-- the codec's warning, and the machine stops there), it names a request id in flight, it answers
-- that request's kind, and a Consume response names only partitions the request asked for (and
-- their chunks walk, §5).
-- Checked once the client's side was seen (a capture of one side cannot tell).  The first two are
-- decided before the response is matched (and taken off the requests in flight).
local function in_flight(t, v, ctx)
  local s = match_state(ctx)
  if not s.requests_seen then return nil end
  local q = s.pending[v.request_id]
  if q == nil or #q == 0 then return string.format("response to unknown request id %d", v.request_id), "§3" end
  for _, req in ipairs(q) do
    if req.type == t or (ANSWERS[t] and ANSWERS[t][req.type]) then return nil end
  end
  return string.format("a %s response answers a %s request", t, q[1].type), "§3"
end

-- In partition order (refwire's client stops at the first): a partition not requested (§3), or
-- what walking its chunk raises (§5).
local function consume_parts(req, parts)
  if req == nil or req.asked == nil or parts == nil then return nil end
  for _, p in ipairs(parts) do
    if not req.asked[p[1] .. "/" .. p[2]] then
      return string.format("response names %s/%d, which was not requested", p[1], p[2]), "§3"
    end
    if p[3] ~= nil then return p[3], "§5" end
  end
end

local function body(t)
  return function(tvb, off, size, item, pinfo, v, ctx)
    item:add(hf.response, ctx.server):set_generated()
    local req, text, section
    if v.request_id ~= nil then
      if ctx.server then
        if not pinfo.visited then text, section = in_flight(t, v, ctx) end
        req = track_response(pinfo, item, v, ctx, t)
      else
        match_state(ctx).requests_seen = true
        req = track_request(pinfo, item, v, ctx, t)
      end
    end
    local parse = (ctx.server and RESP or REQ)[t]
    local r = new_reader(tvb, off + HEADER, off + size, item, t)
    local ok, res = pcall(function()
      if parse == nil then
        reject(string.format("%s (0x%02x) is not a %s", t, v.msg_id, ctx.server and "broker response" or "client request"), "§3, §6")
      end
      return parse(r, v, req)
    end)
    if not ok then
      if type(res) ~= "table" or res.tank == nil then error(res, 0) end
      item:add_proto_expert_info(ef[res.kind], res.tank)
      res = nil
      local mb = ctx.conv.machine_broken
      if not pinfo.visited and mb[ctx.dir] == nil then mb[ctx.dir] = pinfo.number end  -- refwire stops here
    elseif ctx.server and v.request_id ~= nil then
      machine_error(tvb, off, size, item, pinfo, v, ctx, function()
        if text ~= nil then return text, section end
        if t == "Consume" then return consume_parts(req, v._parts) end
      end)
    end
    local summary = t .. (t == "Ping" and "" or (ctx.server and " response" or " request"))
    if v.request_id ~= nil then summary = summary .. " id=" .. v.request_id end
    if type(res) == "string" and res ~= "" then summary = summary .. " " .. res end
    v._text = summary
  end
end
for _, t in pairs(TYPE_CODES) do
  PART.body[t] = body(t)
  PART.summary[t] = function(v) return v._text end
end
"""

#: TANK's dissector part (the descriptor's ``dissector`` piece).
PART: Final = Part(
    name="tank",
    title="TANK broker protocol (refwire)",
    short="TANK",
    ports=(11011,),
    heuristic=True,
    type_field="msg_id",
    type_codes=dict(MSG_NAMES),
    length_rule=(HEADER_SIZE, "length"),
    server_layout=RESPONSE_LAYOUT,
    limits={
        "max_frame_size": DEFAULT_LIMITS.max_frame_size,
        "max_decompressed_size": DEFAULT_LIMITS.max_decompressed_size,
        "max_string_size": DEFAULT_LIMITS.max_string_size,
    },
    spec=SPEC,
    unknown_type_text="unknown message id %s",
    unknown_type_section="§3, §6",
    limit_section="§2",
    eof_section="§2",
    fields_lua=_FIELDS,
    lua=_LUA,
)
