"""Lumberjack's part of its Wireshark dissector (specs/lumberjack/README.md).

The generic generator (:mod:`refwire.dissector.generate`) makes the fields, the
sizes of ``W`` and ``A`` and the frame loop from :data:`~refwire.lumberjack.describe.LAYOUT`;
this module holds only what is Lumberjack's own:

* the usual port, 5044 (§1), and the heuristic mark: a version byte ``'1'``/``'2'``
  followed by a known frame type (§1, §2);
* the checks of fixed fields refwire rejects: a ``D`` on version ``'2'`` (§2.2),
  a ``J`` on version ``'1'`` or of length 0 (§2.3), a ``W`` over ``max_window`` (§3.1, §4);
* hand-written Lua for what a table cannot say: the version byte (§1), the sizes of
  ``J``, ``C`` and ``D`` (§2.2-§2.4), ``J``'s JSON payload as a string (§2.3), checked by a
  linear strict JSON scanner as refwire's orjson parses it (one RFC 8259 object, §4), ``D``'s
  key/value pairs (§2.2), the ``C`` frame, which Lua inflates and dissects as a
  subtree of inner frames, nested at most ``max_nesting_depth`` deep (§2.4, §3.6), and
  the window -> ack matching: an ``A`` acknowledges the window whose last seq it
  names ("acks window in frame N", with the latency), ``A 0`` is a keepalive (§3.3, §3.4);
* refwire's machines (a warning at the frame they reject): among them the bytes of events a
  batch holds (§4: :func:`~refwire.lumberjack.codec.held_bytes`), over ``max_batch_bytes`` or over
  what ``max_connection_memory`` leaves (a quarter of it, less the batches the server has not acked
  yet), at the data frame that crosses it.  The limits are refwire's defaults, as the preferences
  ``lumberjack.max_batch_bytes`` and ``lumberjack.max_connection_memory`` (a server run with other
  limits; the tests).

Every expert-info text cites the spec's section; §4 lists every error refwire detects.
"""

from __future__ import annotations

from typing import Final

from ..lumberjack.connection import EVENT_COST
from ..lumberjack.frames import D_PAIR_HELD, DEFAULT_LIMITS
from .generate import Check, Part

__all__ = ["PART"]

SPEC: Final = "specs/lumberjack/README.md"

#: ProtoFields of the hand-written part (the layout's own come from the generator).
_FIELDS: Final = r"""
hf["json"] = ProtoField.string("lumberjack.json", "json", base.UNICODE)
hf["pair"] = ProtoField.none("lumberjack.pair", "pair")
hf["klen"] = ProtoField.uint32("lumberjack.klen", "klen", base.DEC)
hf["key"] = ProtoField.string("lumberjack.key", "key", base.UNICODE)
hf["vlen"] = ProtoField.uint32("lumberjack.vlen", "vlen", base.DEC)
hf["value"] = ProtoField.string("lumberjack.value", "value", base.UNICODE)
hf["inflated_len"] = ProtoField.uint32("lumberjack.inflated_len", "inflated length", base.DEC)
hf["inner_frames"] = ProtoField.uint32("lumberjack.inner_frames", "inner frames", base.DEC)
hf["keepalive"] = ProtoField.bool("lumberjack.keepalive", "keepalive")
hf["ack_window"] = ProtoField.framenum("lumberjack.ack.window", "acks window in frame", base.NONE, frametype.ACK)
hf["ack_time"] = ProtoField.relative_time("lumberjack.ack.time", "ack latency")
hf["acked_in"] = ProtoField.framenum("lumberjack.acked_in", "acked in frame", base.NONE, frametype.RESPONSE)
"""

#: The hand-written Lua (see the module docstring); it runs inside the generated file's block.
_LUA: Final = r"""
local SPEC = "specs/lumberjack/README.md"
local V1, V2 = 0x31, 0x32  -- '1', '2' (§1)

-- Every frame starts with a version byte, '1' or '2' (§1); anything else ends the stream (§4).
PART.start = function(tvb, off, avail)
  local b = tvb:range(off, 1):uint()
  if b ~= V1 and b ~= V2 then
    return {"malformed", string.format("version byte 0x%02x is neither '1' (0x31) nor '2' (0x32) (%s §1, §4)", b, SPEC)}
  end
end

-- The heuristic mark (§1, §2): a version byte and a known frame type.
PART.heuristic = function(tvb, pinfo)
  if tvb:len() < 2 then return false end
  local b = tvb:range(0, 1):uint()
  return (b == V1 or b == V2) and LAYOUT[tvb:range(1, 1):raw()] ~= nil
end

-- Sizes of the frames with a payload (§2): J is 10 + len, C 6 + len.
PART.size["J"] = function(tvb, off, avail, v) return 10 + v.len, "len" end
PART.size["C"] = function(tvb, off, avail, v) return 6 + v.len, "len" end
-- D: 10 + `pairs` times (klen:u32 key vlen:u32 value) (§2.2); nil while the pairs are incomplete.
PART.size["D"] = function(tvb, off, avail, v)
  local size = 10 + 8 * v.pairs
  if size > LIMIT.max_frame_size then return size, "pairs" end
  local pos = off + 10
  local len = tvb:len()
  for _ = 1, v.pairs do
    for _, name in ipairs({"klen", "vlen"}) do
      if len - pos < 4 then return nil end
      local n = tvb:range(pos, 4):uint()
      size = size + n
      if size > LIMIT.max_frame_size then return size, name end
      pos = pos + 4 + n
    end
  end
  return size
end

PART.summary["W"] = function(v) return string.format("%sW count=%d", v.version, v.count) end
PART.summary["J"] = function(v) return string.format("%sJ seq=%d len=%d", v.version, v.seq, v.len) end
PART.summary["D"] = function(v) return string.format("%sD seq=%d pairs=%d", v.version, v.seq, v.pairs) end
PART.summary["C"] = function(v) return string.format("%sC len=%d", v.version, v.len) end
PART.summary["A"] = function(v)
  if v.seq == 0 then return string.format("%sA seq=0 (keepalive)", v.version) end
  return string.format("%sA seq=%d", v.version, v.seq)
end

-- Window -> ack matching (§3.1, §3.3): per connection the windows in the order they
-- were sent, each with the seqs of its events (inside C frames too); an A acks the
-- oldest window not yet acked that holds the seq it names (its last one: the whole window).
local function windows(ctx)
  local s = ctx.conv.state
  if s.windows == nil then s.windows = {}; s.match = {}; s.filling = nil end
  return s
end

local function nstime(seconds)
  local secs = math.floor(seconds)
  return NSTime.new(secs, math.floor((seconds - secs) * 1e9 + 0.5))
end

PART.body["W"] = function(tvb, off, size, item, pinfo, v, ctx)
  local s = windows(ctx)
  if not pinfo.visited then
    local w = {frame = pinfo.number, ts = pinfo.abs_ts, count = v.count, seqs = {}}
    s.windows[#s.windows + 1] = w
    s.match[ctx.key] = w
    s.filling = (v.count > 0) and w or nil
  end
  local w = s.match[ctx.key]
  if w ~= nil and w.acked_in ~= nil then item:add(hf.acked_in, w.acked_in):set_generated() end
end

local function event(pinfo, v, ctx)
  local s = windows(ctx)
  if pinfo.visited or s.filling == nil then return end
  local w = s.filling
  w.seqs[#w.seqs + 1] = v.seq
  if #w.seqs >= w.count then s.filling = nil end
end

-- J: its JSON document as a string (§2.3), checked as refwire checks it (§4): one strict
-- RFC 8259 JSON object, as orjson parses it -- UTF-8 only (no overlong form, no surrogate, nothing
-- over U+10FFFF), no byte-order mark, no NaN or Infinity, no number that is infinity as a double,
-- \u escapes with their surrogates paired, nesting at most orjson's 1024 deep.  A linear scan
-- of the payload's bytes (runs of plain string bytes, blanks and digits skipped by string.find):
-- nil, nil and the first byte of the document, or what is wrong and its byte offset.
local JSON_DEPTH = 1024
local JSON_ESCAPES = {[34] = true, [92] = true, [47] = true, [98] = true, [102] = true, [110] = true, [114] = true, [116] = true}

local function json_ws(s, i)
  local _, e = s:find("^[ \t\r\n]*", i)
  return e + 1
end

-- the length of the well-formed UTF-8 sequence at i (a byte >= 0x80), or nil
local function json_utf8(s, i)
  local c = s:byte(i)
  local len, lo, hi = 0, 128, 191
  if c >= 194 and c <= 223 then len = 2
  elseif c == 224 then len, lo = 3, 160
  elseif c == 237 then len, hi = 3, 159
  elseif c >= 225 and c <= 239 then len = 3
  elseif c == 240 then len, lo = 4, 144
  elseif c >= 241 and c <= 243 then len = 4
  elseif c == 244 then len, hi = 4, 143
  else return nil end
  local c2 = s:byte(i + 1)
  if c2 == nil or c2 < lo or c2 > hi then return nil end
  for k = i + 2, i + len - 1 do
    local b = s:byte(k)
    if b == nil or b < 128 or b > 191 then return nil end
  end
  return len
end

local function json_hex4(s, i)
  local h = s:match("^%x%x%x%x", i)
  return h and tonumber(h, 16)
end

-- a string whose opening quote is at i - 1: the index after its closing quote, or nil, why, where
local function json_string(s, i)
  while true do
    local j = s:find('[\0-\31"\\\128-\255]', i)
    if j == nil then return nil, "unterminated string", #s end
    local c = s:byte(j)
    if c == 34 then return j + 1 end
    if c == 92 then
      local e = s:byte(j + 1)
      if e == 117 then
        local u = json_hex4(s, j + 2)
        if u == nil then return nil, "invalid \\u escape", j - 1 end
        i = j + 6
        if u >= 55296 and u <= 56319 then
          local low = s:byte(i) == 92 and s:byte(i + 1) == 117 and json_hex4(s, i + 2)
          if not low or low < 56320 or low > 57343 then return nil, "a high surrogate escape without its low surrogate", j - 1 end
          i = i + 6
        elseif u >= 56320 and u <= 57343 then
          return nil, "a low surrogate escape without its high surrogate", j - 1
        end
      elseif e ~= nil and JSON_ESCAPES[e] then
        i = j + 2
      else
        return nil, "invalid escape in a string", j - 1
      end
    elseif c < 32 then
      return nil, "a control character in a string", j - 1
    else
      local len = json_utf8(s, j)
      if len == nil then return nil, "invalid UTF-8", j - 1 end
      i = j + len
    end
  end
end

-- a number at i (RFC 8259 §6): the index after it, or nil and why
local function json_number(s, i)
  local first = s:byte(i) == 45 and i + 1 or i
  local _, e = s:find("^%d+", first)
  if e == nil then return nil, "no digit after the sign" end
  if s:byte(first) == 48 and e > first then return nil, "a number with a leading zero" end
  local j, exp = e + 1, false
  if s:byte(j) == 46 then
    local _, f = s:find("^%d+", j + 1)
    if f == nil then return nil, "no digit after the decimal point" end
    j = f + 1
  end
  local b = s:byte(j)
  if b == 101 or b == 69 then
    local _, f = s:find("^[+-]?%d+", j + 1)
    if f == nil then return nil, "no digit in the exponent" end
    j, exp = f + 1, true
  end
  if exp or e - first >= 308 then  -- (only these can be over the largest double)
    local x = tonumber(s:sub(i, j - 1))
    if x == nil or x == math.huge or x == -math.huge then return nil, "a number that is infinity as a double" end
  end
  return j
end

-- an object's key at i, its colon: the index of its value, or nil, why, where
local function json_key(s, i)
  if s:byte(i) ~= 34 then return nil, "expected a string key", i - 1 end
  local e, err, at = json_string(s, i + 1)
  if e == nil then return nil, err, at end
  i = json_ws(s, e)
  if s:byte(i) ~= 58 then return nil, "expected ':' after a key", i - 1 end
  return json_ws(s, i + 1)
end

local function json_check(s)
  local n = #s
  if s:sub(1, 3) == "\239\187\191" then return "a UTF-8 byte order mark", 0 end
  local stack, depth, top = {}, 0, nil  -- stack[d]: whether the container at depth d is an object
  local i = json_ws(s, 1)
  while true do
    local c, closed = s:byte(i), true  -- a value at i (closed: it ended)
    if c == nil then return "the payload ends where a value is expected", n end
    top = top or c
    if c == 123 or c == 91 then
      depth = depth + 1
      if depth > JSON_DEPTH then return string.format("nested deeper than orjson's limit of %d", JSON_DEPTH), i - 1 end
      local obj = c == 123
      stack[depth] = obj
      i = json_ws(s, i + 1)
      if s:byte(i) == (obj and 125 or 93) then
        depth, i = depth - 1, i + 1
      else
        closed = false
        if obj then
          local err, at
          i, err, at = json_key(s, i)
          if i == nil then return err, at end
        end
      end
    elseif c == 34 then
      local e, err, at = json_string(s, i + 1)
      if e == nil then return err, at end
      i = e
    elseif c == 45 or (c >= 48 and c <= 57) then
      local e, err = json_number(s, i)
      if e == nil then return err, i - 1 end
      i = e
    elseif c == 116 and s:sub(i, i + 3) == "true" then i = i + 4
    elseif c == 102 and s:sub(i, i + 4) == "false" then i = i + 5
    elseif c == 110 and s:sub(i, i + 3) == "null" then i = i + 4
    else
      return "expected a JSON value", i - 1
    end
    while closed do  -- after a value: the document's end, or ',' and the next (after its key), or the container's end
      i = json_ws(s, i)
      if depth == 0 then
        if i <= n then return "content after the document", i - 1 end
        return nil, nil, top
      end
      local obj, d = stack[depth], s:byte(i)
      if d == 44 then
        i = json_ws(s, i + 1)
        if obj then
          local err, at
          i, err, at = json_key(s, i)
          if i == nil then return err, at end
        end
        closed = false
      elseif d == (obj and 125 or 93) then
        depth, i = depth - 1, i + 1
      else
        return obj and "expected ',' or '}'" or "expected ',' or ']'", i - 1
      end
    end
  end
end

local JSON_TOP = {[34] = "a string", [91] = "an array", [116] = "true", [102] = "false", [110] = "null"}

PART.body["J"] = function(tvb, off, size, item, pinfo, v, ctx)
  event(pinfo, v, ctx)
  if v.len == 0 then return end
  local r = tvb:range(off + 10, v.len)
  local json = item:add(hf.json, r)
  local err, at, top = json_check(r:raw())
  local text
  if err ~= nil then
    text = string.format("the J payload is not valid JSON: %s at byte %d of it", err, at)
  elseif top ~= 123 then
    text = "the J payload must be a JSON object, got " .. (JSON_TOP[top] or "a number")
  end
  -- (refwire's error names the field json, at the payload's first byte)
  if text ~= nil then json:add_proto_expert_info(ef.malformed, text .. " (" .. SPEC .. " §2.3, §4)") end
end

-- D: its key/value pairs (§2.2).
PART.body["D"] = function(tvb, off, size, item, pinfo, v, ctx)
  event(pinfo, v, ctx)
  local pos = off + 10
  for i = 1, v.pairs do
    local klen = tvb:range(pos, 4):uint()
    local vlen = tvb:range(pos + 4 + klen, 4):uint()
    local key = tvb:range(pos + 4, klen)
    local value = tvb:range(pos + 8 + klen, vlen)
    local sub = item:add(hf.pair, tvb:range(pos, 8 + klen + vlen))
    sub:set_text(string.format("pair %d: %s = %s", i, key:string(ENC_UTF_8), value:string(ENC_UTF_8)))
    sub:add(hf.klen, tvb:range(pos, 4))
    sub:add(hf.key, key, key:string(ENC_UTF_8))
    sub:add(hf.vlen, tvb:range(pos + 4 + klen, 4))
    sub:add(hf.value, value, value:string(ENC_UTF_8))
    pos = pos + 8 + klen + vlen
  end
end

-- Adler-32 (RFC 1950) of a Lua string.
local function adler32(s)
  local a, b = 1, 0
  for i = 1, #s do
    a = (a + s:byte(i)) % 65521
    b = (b + a) % 65521
  end
  return b * 65536 + a
end

-- C: a zlib stream (RFC 1950) that inflates to a frame stream, dissected as inner
-- frames (§2.4, §3.6).  Wireshark's uncompress also takes gzip and raw DEFLATE and
-- stops quietly at a truncated stream: refwire rejects all three, so the header and
-- the Adler-32 trailer are checked here.
PART.body["C"] = function(tvb, off, size, item, pinfo, v, ctx)
  local function bad(key, text) item:add_proto_expert_info(ef[key], text .. " (" .. SPEC .. " §2.4, §3.6, §4)") end
  if ctx.depth + 1 > LIMIT.max_nesting_depth then
    return bad("limit", string.format("C frames nested deeper than max_nesting_depth=%d", LIMIT.max_nesting_depth))
  end
  local n = v.len
  if n < 6 then return bad("malformed", "the C payload is too short for a zlib stream") end
  local cmf, flg = tvb:range(off + 6, 1):uint(), tvb:range(off + 7, 1):uint()
  if cmf % 16 ~= 8 or (cmf * 256 + flg) % 31 ~= 0 then
    return bad("malformed", string.format("the C payload is no zlib stream (header %02x %02x)", cmf, flg))
  end
  local trailer = tvb:range(off + 6 + n - 4, 4):uint()
  local inflated = tvb:range(off + 6, n):uncompress("inflated C payload")
  local raw = inflated and inflated:raw() or ""
  if inflated == nil and trailer ~= 1 then  -- Adler-32 of nothing is 1: an empty C
    return bad("malformed", "the C payload does not inflate")
  end
  if #raw > LIMIT.max_decompressed_size then
    return bad("limit", string.format("the C payload inflates to %d bytes, over max_decompressed_size=%d", #raw, LIMIT.max_decompressed_size))
  end
  if adler32(raw) ~= trailer then
    return bad("malformed", "the zlib stream is truncated, has bytes after its end, or fails its Adler-32 check")
  end
  item:add(hf.inflated_len, #raw):set_generated()
  if inflated == nil or #raw == 0 then  -- an empty C (§3.6: accepted)
    item:add(hf.inner_frames, 0):set_generated()
    return
  end
  local inner = {depth = ctx.depth + 1, conv = ctx.conv, dir = ctx.dir, count = ctx.count}
  local before = ctx.count.n
  local _, need, broken = dissect_stream(inflated:tvb(), pinfo, item, 0, inner)
  item:add(hf.inner_frames, ctx.count.n - before):set_generated()
  if broken then
    bad("malformed", "a frame inside the C frame is no frame")
  elseif need ~= nil then
    bad("malformed", "the inflated bytes end inside a frame")
  end
end

-- ----------------------------------------------------------------- refwire's machines (§3, §4)
-- The server's machine (a client's frames) and the client's (a server's acks), from the bytes of
-- one connection: the client is the side that sends W/J/D/C (or an A to port 5044); a server's
-- acks are checked only once the client's side was seen (a capture of one side cannot tell).
local function machine(ctx)
  local s = ctx.conv.state
  if s.m == nil then s.m = {} end
  return s.m
end

local function from_client(m, pinfo, ctx, t)
  if m.client == nil then
    if t ~= "A" or pinfo.dst_port == 5044 then m.client = ctx.dir else return false end
  end
  return m.client == ctx.dir
end

local function other_version(m, v)
  if m.version == nil then m.version = v.version; return nil end
  if v.version ~= m.version then
    return string.format("version byte '%s' on a version '%s' connection", v.version, m.version), "§3.10, §4"
  end
end

-- The bytes of events a batch holds (§4, refwire's held_bytes): a J's payload, a D's keys and values
-- plus D_PAIR_HELD a pair, the frames a C inflates to (each counted as itself).  A batch may hold
-- max_batch_bytes, or less when max_connection_memory leaves less: a quarter of it (EVENT_COST) less
-- the events of the batches whose ack the server has not sent yet -- decided at the batch's W.
-- refwire's defaults; a server run with other limits (or a test) sets the preferences.
P.prefs.max_batch_bytes = Pref.uint("max_batch_bytes", ${max_batch_bytes},
  "refwire's max_batch_bytes: the bytes of events one batch may hold (specs/lumberjack/README.md §4)")
P.prefs.max_connection_memory = Pref.uint("max_connection_memory", ${max_connection_memory},
  "refwire's max_connection_memory: a quarter of it bounds the events held per connection (specs/lumberjack/README.md §4)")
local D_PAIR_HELD, EVENT_COST = ${d_pair_held}, ${event_cost}

local function batch_cap(m)
  local room = math.floor(P.prefs.max_connection_memory / EVENT_COST) - (m.held or 0)
  if room < P.prefs.max_batch_bytes then
    m.cap, m.cap_name = math.max(room, 0), "max_connection_memory"
  else
    m.cap, m.cap_name = P.prefs.max_batch_bytes, "max_batch_bytes"
  end
  m.cur = 0
end

local function over_cap(m)
  if m.cap_name == "max_batch_bytes" then
    return string.format("the batch's events exceed the limit max_batch_bytes=%d", m.cap)
  end
  return string.format("the batch's events exceed the %d bytes the limit max_connection_memory=%d leaves them (each byte counts %dx; %d bytes of events await their ack)",
    m.cap, P.prefs.max_connection_memory, EVENT_COST, m.held or 0)
end

PART.machine["W"] = function(tvb, off, size, pinfo, v, ctx)
  local m = machine(ctx)
  if not from_client(m, pinfo, ctx, "W") then return "the server sent a W frame (it sends only A)", "§2.5, §4" end
  local bad, section = other_version(m, v)
  if bad then return bad, section end
  if m.left ~= nil and m.left > 0 then
    return string.format("W while the previous window still expects %d events", m.left), "§3.1, §4"
  end
  if v.count > LIMIT.max_window then  -- the check above flags it; refwire's machine stops there
    ctx.conv.machine_broken[ctx.dir] = pinfo.number
  elseif v.count > 0 then
    m.left, m.count, m.batch_version = v.count, v.count, v.version
    m.win = {count = v.count, seqs = {}, acked = 0}  -- the client's outstanding window
    batch_cap(m)
  end
end

-- The bytes of events the whole frames of an inflated stream hold (refwire's held_bytes of each: a
-- nested C counts its compressed payload); an incomplete or unknown frame ends the count.
local function be_u32(s, i) local a, b, c, d = s:byte(i, i + 3); return ((a * 256 + b) * 256 + c) * 256 + d end
local function held_in(raw)
  local pos, n, total = 1, #raw, 0
  while n - pos + 1 >= 6 do
    local t = raw:sub(pos + 1, pos + 1)
    if t == "W" or t == "A" then
      pos = pos + 6
    elseif t == "C" then
      local len = be_u32(raw, pos + 2)
      if pos + 6 + len - 1 > n then break end
      total, pos = total + len, pos + 6 + len
    elseif t == "J" or t == "D" then
      if n - pos + 1 < 10 then break end
      local count = be_u32(raw, pos + 6)
      if t == "J" then
        if pos + 10 + count - 1 > n then break end
        total, pos = total + count, pos + 10 + count
      else
        local p, held = pos + 10, 0
        for _ = 1, count do
          if p + 3 > n then return total end
          local klen = be_u32(raw, p)
          if p + 4 + klen + 3 > n then return total end
          local vlen = be_u32(raw, p + 4 + klen)
          p = p + 8 + klen + vlen
          held = held + D_PAIR_HELD + klen + vlen
        end
        if p - 1 > n then break end
        total, pos = total + held, p
      end
    else
      break
    end
  end
  return total
end

PART.machine["C"] = function(tvb, off, size, pinfo, v, ctx)
  local m = machine(ctx)
  if not from_client(m, pinfo, ctx, "C") then return "the server sent a C frame (it sends only A)", "§2.5, §4" end
  local bad, section = other_version(m, v)
  if bad then return bad, section end
  -- refwire holds a C's events together (§4): all its frames' against what the batch may still hold
  if v.len < 6 then return nil end
  local inflated = tvb:range(off + 6, v.len):uncompress("inflated C payload")
  if inflated == nil then return nil end
  local cap = m.cap or P.prefs.max_batch_bytes
  local held = held_in(inflated:raw())
  if held > cap - (m.cur or 0) then
    local why = (m.cap_name or "max_batch_bytes") == "max_batch_bytes"
      and string.format("the C frame's events, with the batch's before it, exceed the limit max_batch_bytes=%d", P.prefs.max_batch_bytes)
      or over_cap(m)
    return why .. " (a C frame's events are held together, even when they span windows)", "§4"
  end
end

local function data_frame(t)
  return function(tvb, off, size, pinfo, v, ctx)
    local m = machine(ctx)
    if not from_client(m, pinfo, ctx, t) then return "the server sent a " .. t .. " frame (it sends only A)", "§2.5, §4" end
    if m.left == nil or m.left == 0 then return "data frame outside a window (no W announced it)", "§3.1, §4" end
    if v.version ~= m.batch_version then
      return string.format("version byte '%s' on a version '%s' connection", v.version, m.batch_version), "§3.10, §4"
    end
    -- a J's payload; a D's pairs (8 bytes of lengths each on the wire) count D_PAIR_HELD each
    m.cur = m.cur + (t == "J" and v.len or (size - 10 + v.pairs * (D_PAIR_HELD - 8)))
    if m.cur > m.cap then return over_cap(m), "§4" end
    m.left = m.left - 1
    m.win.seqs[#m.win.seqs + 1] = v.seq
    if m.left == 0 then  -- the batch is whole: its events are held until the server acks it
      m.awaiting = m.awaiting or {}
      m.awaiting[#m.awaiting + 1] = m.cur
      m.held = (m.held or 0) + m.cur
      m.cur = 0
    end
  end
end
PART.machine["J"] = data_frame("J")
PART.machine["D"] = data_frame("D")

PART.machine["A"] = function(tvb, off, size, pinfo, v, ctx)
  local m = machine(ctx)
  if from_client(m, pinfo, ctx, "A") then return "the client sent an A frame (acks flow from server to client)", "§2.5, §4" end
  if m.client == nil then return nil end  -- the client's side unseen: nothing to check against
  local w = m.win
  local at = nil
  if w ~= nil then for i, seq in ipairs(w.seqs) do if seq == v.seq then at = i end end end
  if v.seq == 0 and at == nil then return nil end  -- a keepalive (§3.4)
  if m.version ~= nil and v.version ~= m.version then
    return string.format("ack with version byte '%s' on a version '%s' connection", v.version, m.version), "§4"
  end
  if w == nil or w.acked >= w.count then return string.format("ack %d with no window outstanding", v.seq), "§3.3, §4" end
  if at == nil then
    return string.format("ack %d names no event of the outstanding window", v.seq), "§3.3, §3.7, §4"
  end
  if at < w.acked then
    return string.format("ack %d goes backwards (%d < %d events already acked)", v.seq, at, w.acked), "§3.7, §4"
  end
  w.acked = at
  if at == w.count and m.awaiting ~= nil and #m.awaiting > 0 then  -- the oldest batch acked: released
    m.held = m.held - table.remove(m.awaiting, 1)
  end
end

-- The client closes between frames inside a batch: never acked (§4).
PART.at_eof = function(conv, dir)
  local m = conv.state.m
  if m ~= nil and m.client == dir and m.left ~= nil and m.left > 0 then
    return string.format("connection closed inside a batch (%d of %d events received)", m.count - m.left, m.count), "§4"
  end
end

-- A: acks the window whose last seq it names (§3.3); seq 0 is a keepalive (§3.4).
PART.body["A"] = function(tvb, off, size, item, pinfo, v, ctx)
  local s = windows(ctx)
  if v.seq == 0 then
    item:add(hf.keepalive, true):set_generated()
    return
  end
  if not pinfo.visited then
    for _, w in ipairs(s.windows) do
      if w.acked_in == nil then
        local found = false
        for _, seq in ipairs(w.seqs) do if seq == v.seq then found = true end end
        if found and w.seqs[#w.seqs] == v.seq and #w.seqs == w.count then
          w.acked_in = pinfo.number
          s.match[ctx.key] = w
          break
        elseif found then  -- a partial ack (§3.7): the window stays open
          s.match[ctx.key] = w
          break
        end
      end
    end
  end
  local w = s.match[ctx.key]
  if w ~= nil then
    item:add(hf.ack_window, w.frame):set_generated()
    item:add(hf.ack_time, nstime(pinfo.abs_ts - w.ts)):set_generated()
  end
end
"""

#: Lumberjack's dissector part (the descriptor's ``dissector`` piece).
PART: Final = Part(
    name="lumberjack",
    title="Lumberjack v1/v2 (refwire)",
    short="Lumberjack",
    ports=(5044,),  # §1: the usual port
    heuristic=True,
    type_field="type",
    limits={
        "max_frame_size": DEFAULT_LIMITS.max_frame_size,
        "max_decompressed_size": DEFAULT_LIMITS.max_decompressed_size,
        "max_nesting_depth": DEFAULT_LIMITS.max_nesting_depth,
        "max_window": DEFAULT_LIMITS.max_window,
    },
    spec=SPEC,
    unknown_type_section="§2, §4",
    limit_section="§4",
    eof_section="§4",
    checks=(
        Check("D", 'v.version ~= "1"', "a D frame on version '2' (D exists only in version 1)", "§2.2, §4"),
        Check("J", 'v.version ~= "2"', "a J frame on version '1' (J exists only in version 2)", "§2.3, §4"),
        Check("J", "v.len == 0", "a J frame of length 0", "§2.3, §4"),
        Check("W", "v.count > LIMIT.max_window", "a W count over max_window", "§3.1, §4", "limit"),
    ),
    fields_lua=_FIELDS,
    lua=_LUA.replace("${max_batch_bytes}", str(DEFAULT_LIMITS.max_batch_bytes))
    .replace("${max_connection_memory}", str(DEFAULT_LIMITS.max_connection_memory))
    .replace("${d_pair_held}", str(D_PAIR_HELD))
    .replace("${event_cost}", str(EVENT_COST)),
)
