"""Lumberjack's part of its Wireshark dissector (specs/lumberjack/README.md).

The generic generator (:mod:`refwire.dissector.generate`) makes the fields, the
sizes of ``W`` and ``A`` and the frame loop from :data:`~refwire.lumberjack.describe.LAYOUT`;
this module holds only what is Lumberjack's own:

* the usual port, 5044 (§1), and the heuristic mark: a version byte ``'1'``/``'2'``
  followed by a known frame type (§1, §2);
* the checks of fixed fields refwire rejects: a ``D`` on version ``'2'`` (§2.2),
  a ``J`` on version ``'1'`` or of length 0 (§2.3), a ``W`` over ``max_window`` (§3.1, §4);
* hand-written Lua for what a table cannot say: the version byte (§1), the sizes of
  ``J``, ``C`` and ``D`` (§2.2-§2.4), ``J``'s JSON payload as a string (§2.3), ``D``'s
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

-- J: its JSON document as a string (§2.3).  refwire requires a JSON object (§4): a
-- cheap look at its first and last non-blank bytes (Lua has no JSON parser).
PART.body["J"] = function(tvb, off, size, item, pinfo, v, ctx)
  event(pinfo, v, ctx)
  if v.len == 0 then return end
  local r = tvb:range(off + 10, v.len)
  item:add(hf.json, r)
  local s = r:raw()
  if s:match("^[ \t\r\n]*{") == nil or s:match("}[ \t\r\n]*$") == nil then
    item:add_proto_expert_info(ef.malformed, "the J payload is not a JSON object (" .. SPEC .. " §2.3, §4)")
  end
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
