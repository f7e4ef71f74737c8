"""The 2017 Pravega draft's part of its Wireshark dissector (specs/pravega-draft-2017/README.md).

The draft frames commands as Pravega does (``i32 type, i32 length``, §1) with its own type codes
(§3: they clash with today's), strict layouts (bytes after the last field are an error, §10.1
D11) and no Hello, so nothing on the wire marks it: its dissector registers on no port and has no
heuristic.  Pravega's dissector (:mod:`refwire.dissector.pravega`, port 12345 and the Hello
heuristic) hands it every connection that does not open with a Hello, when both are generated
into one file (``refwire dissector pravega pravega-draft-2017 -o all.lua``); alone, it is chosen
with *Decode As* (``tcp.port``).  The payload reader is Pravega's, over the draft's command table;
a PartialMessage (§5) shows its part (Begin / Middle / End) and its slice, not joined with the
others.  The frames of an append block (§6.3) are top-level frames here, read where they stand.

refwire's draft machines (tables made from :mod:`refwire.pravega.draft2017.connection`'s) put a
warning at the frame they reject, citing the section: a type sent the wrong way (§3), a frame its
state refuses (§3, §6.3 rule 2, §6.4), partial messages (§5: Begin first, one at a time, the
reassembled message's type, length and size) and blocks (§6.3: Begin's length, End against Begin,
the wire length W, ``block_length``; an error refwire names on an earlier frame is shown there).
A reassembled message whose fields the codec refuses (§5 rule 5) is refused at the End part
that completes it, as refwire's codec says it (its sections).  What depends on the store's
AppendSetup (a Begin before it, an offset other than the running one, ``max_window``) is not checked.  The side on port 12345 (where
Pravega's dissector hands the draft over) is the server; elsewhere the side that spoke second.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ..pravega.draft2017.connection import (
    _CLIENT_INPUT,
    _SERVER_INPUT,
    CLIENT_TRANSITIONS,
    DEFAULT_LIMITS,
    SERVER_TRANSITIONS,
    WHILE_PARTIAL,
)
from ..pravega.draft2017.frames import DRAFT
from ..pravega.draft2017.machine import State
from .generate import Part, lua_string
from .pravega import fields_lua, part_lua

__all__ = ["PART"]

SPEC: Final = "specs/pravega-draft-2017/README.md"

_LUA: Final = r"""
local SPEC = "specs/pravega-draft-2017/README.md"
local SEC = {type = "§1, §3", length = "§1", limit = "§1, §11", truncated = "§2, §4", utf = "§2",
  count = "§4", event = "§4", trailing = "§2, §10.1 D11"}
-- which side is the server (from_server): the segment store's port, the one Pravega's dissector
-- hands draft connections over from; on another port (Decode As), the side that spoke second
local PORTS = {[12345] = true}
local NORMALIZE = {}
local PART_NAMES = {[0] = "Begin", [1] = "Middle", [2] = "End"}
${commands}
${walker}
-- ----------------------------------------------------------------- refwire's machines
-- The server's machine on what the client sends and the client's on what the server sends: the
-- directions (§3), the states (§3, §6.3 rule 2, §6.4), partial messages (§5: Begin first, one at a
-- time, the reassembled message checked at 4 and 8 bytes and at its End) and blocks (§6.3: lengths,
-- End against Begin, the wire length W and block_length N).  Not here: what depends on the store's
-- AppendSetup (a Begin before it, a connection_offset other than the running offset, the max_window
-- sessions); after a reassembled SetupAppend, Begin or End shorter than its fields nothing more is
-- checked.  A reassembled message whose fields the codec refuses is refused at its End part, as
-- the codec's error (its sections).  An error refwire names
-- on an earlier frame (Begin's length, End's block_length) is shown there.
${machine_tables}
local PM_TYPE, EVENT_TYPE, KEEPALIVE_TYPE, BEGIN_TYPE, END_TYPE = -2, 0, 100, 3, 4

local function be_i32(s, i)  -- the signed big-endian int32 at byte i (1-based) of string s
  local a, b, c, d = s:byte(i, i + 3)
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  return n >= 2147483648 and n - 4294967296 or n
end
local function hex(s, i, n) return ByteArray.new(s:sub(i, i + n - 1), true):tohex():lower() end
-- A tree that keeps nothing: a reassembled message read for refwire's checks only (every method
-- call returns it again).
local NULL_TREE = setmetatable({}, {__index = function(t) return function() return t end end})

local function allowed(m, inp)
  local ok = TRANSITIONS[m.role][m.state][inp] or false
  if m.role == "server" and inp == "end" and TRANSITIONS.server[m.state]["end-trailer"] then ok = true end
  if ok and m.pm ~= nil then
    ok = WHILE_PARTIAL[m.state][inp] and (m.state ~= "in-block" or m.pm.in_block) or false
  end
  return ok
end

-- An error refwire names on the frame whose key is k (an earlier one): shown there, the machine stops.
local function elsewhere(ctx, pinfo, k, text, section)
  ctx.conv.machine[k] = text .. " (" .. SPEC .. " " .. section .. ")"
  ctx.conv.machine_broken[ctx.dir] = pinfo.number
end

local function finish_block(m, ctx, pinfo)
  local b = m.block
  if b.data ~= b.end_length then
    local text = string.format("the block holds %d bytes of Events, its End says %d", b.data, b.end_length)
    if b.end_key == ctx.key then return text, "§6.3" end
    elsewhere(ctx, pinfo, b.end_key, text, "§6.3, §6.4")
    return nil
  end
  m.state, m.block = "open", nil
end

local function begin_block(m, ctx, cid, offset, length, key, whole)
  if length < 0 then return string.format("negative block length %d", length), "§6.3" end
  if length > LIMIT.max_block_size then
    return string.format("length %d exceeds the limit max_block_size=%d", length, LIMIT.max_block_size), "§6.3, §11"
  end
  m.state = "in-block"
  -- (an error on its length names the frame that holds it: refwire's, a reassembled message's)
  m.block = {cid = cid:lower(), offset = offset, wire = length, seen = 0, data = 0, key = key,
    prefix = whole and "" or "reassembled message: "}
end

local function end_block(m, ctx, pinfo, cid, offset, length)
  local b = m.block
  if cid:lower() ~= b.cid then return string.format("EndAppendBlock ConnectionId %s is not its Begin's %s", cid, b.cid), "§6.3" end
  if length < 0 then return string.format("negative block length %d", length), "§6.3" end
  if tostring(offset) ~= tostring(b.offset + length) then
    return string.format("ConnectionOffset %s is not Begin's %s + block length %d", tostring(offset), tostring(b.offset), length), "§6.3"
  end
  if b.seen ~= b.wire then
    elsewhere(ctx, pinfo, b.key, b.prefix .. string.format("%d wire bytes between Begin and End, Begin said %d", b.seen, b.wire), "§6.3")
    return nil
  end
  b.end_length, b.end_key = length, ctx.key
  if m.pm ~= nil then m.state = "trailer"; return nil end
  return finish_block(m, ctx, pinfo)
end

-- The inner type of a partial message (§5 rule 4), at its first 4 bytes.
local function inner_type(m, code)
  local c = CMDS[code]
  if c == nil then return string.format("unknown type code %d", code) end
  if code == PM_TYPE then return "a partial message may not carry a partial message" end
  if INPUT[m.role][code] == nil then return string.format("%s is not sent to a %s", c.name, m.role) end
  if m.role == "server" then
    if m.pm.in_block then
      if code ~= EVENT_TYPE and code ~= KEEPALIVE_TYPE then
        return string.format("a partial message begun in a block must be an Event or KeepAlive, not %s", c.name)
      end
    elseif code == EVENT_TYPE then return "Event outside an append block" end
  end
end

-- A part's data (§5 rule 4): checked as its bytes arrive.
local function add_part(m, data)
  local pm = m.pm
  local have = #pm.buf
  local total = have + #data
  local joined = pm.buf .. data
  if have < 8 and total >= 4 then
    if have < 4 then
      local bad = inner_type(m, be_i32(joined, 1))
      if bad then return bad end
      pm.code = be_i32(joined, 1)
    end
    if total >= 8 then
      local n = be_i32(joined, 5)
      if n < 0 then return string.format("negative length %d", n) end
      if 8 + n > LIMIT.max_partial_size then
        return string.format("length %d exceeds the limit max_partial_size=%d", 8 + n, LIMIT.max_partial_size)
      end
      pm.total = 8 + n
    end
  end
  if pm.total ~= nil and total > pm.total then
    return string.format("the parts carry %d bytes more than the message", total - pm.total)
  end
  pm.buf = joined
end

local function on_message(m, ctx, pinfo, code, vals, size, whole, key)
  local c = CMDS[code]
  local inp = INPUT[m.role][code]
  if not whole and not allowed(m, inp) then
    return string.format("%s is not allowed in state %s", c.name, m.state), "§3, §5"
  end
  if m.role == "client" then return nil end
  if code == EVENT_TYPE then
    m.block.data = m.block.data + size
  elseif code == BEGIN_TYPE then
    if vals == nil then m.stop = true; return nil end
    return begin_block(m, ctx, vals.connection_id, vals.connection_offset, vals.length, key, whole)
  elseif code == END_TYPE then
    if vals == nil then m.stop = true; return nil end
    return end_block(m, ctx, pinfo, vals.connection_id, vals.connection_offset, vals.block_length)
  end
end

-- The fields of a reassembled Begin or End (nil: shorter than them).
local function block_fields(code, s)
  if #s < 36 then return nil end
  local v = {connection_id = hex(s, 9, 16), connection_offset = Int64.fromhex(hex(s, 25, 8))}
  v[code == BEGIN_TYPE and "length" or "block_length"] = be_i32(s, 33)
  return v
end

local function check(m, c, vals, tvb, off, size, pinfo, ctx)
  local code = tvb:range(off, 4):int()
  local inp = INPUT[m.role][code]
  if inp == nil then return string.format("%s is not sent in this direction", c.name), "§3" end
  local b = m.block
  if m.role == "server" and m.state == "in-block" and code ~= END_TYPE and b ~= nil and b.seen + size > b.wire then
    elsewhere(ctx, pinfo, b.key, b.prefix .. string.format("a frame of %d bytes would end past the block's %d wire bytes (%d used)",
      size, b.wire, b.seen), "§6.3")
    return nil
  end
  if not allowed(m, inp) then
    return string.format("%s is not allowed in state %s%s", c.name, m.state,
      m.pm and " while a partial message is incomplete" or ""), "§3, §5, §6.3"
  end
  if b ~= nil and m.state == "in-block" and code ~= END_TYPE then b.seen = b.seen + size end
  if code ~= PM_TYPE then return on_message(m, ctx, pinfo, code, vals, size, true, ctx.key) end
  -- a part (§5)
  local part = vals.part
  if part == 0 then
    if m.pm ~= nil then return "a partial message begins while another is incomplete", "§5" end
    m.pm = {buf = "", in_block = m.state == "in-block"}
  elseif part == 1 or part == 2 then
    if m.pm == nil then return string.format("%s part without a Begin", part == 1 and "Middle" or "End"), "§5" end
  else
    return string.format("part must be 0 (Begin), 1 (Middle) or 2 (End), got %d", part), "§5"
  end
  local bad = add_part(m, tvb:raw(off + 9, size - 9))
  if bad then return "reassembled message: " .. bad, "§5" end
  if part ~= 2 then return nil end
  local pm = m.pm
  if pm.total == nil or #pm.buf < pm.total then
    return string.format("reassembled message: End part after %d bytes of the message", #pm.buf), "§5"
  end
  m.pm = nil
  local inner = be_i32(pm.buf, 1)
  -- refwire decodes the reassembled message (§5 rule 5): a field the codec refuses is its error
  local _, why = read_payload(ByteArray.new(pm.buf, true):tvb("reassembled message"), 0, pm.total, NULL_TREE, inner)
  if why ~= nil then
    local text, section = why:match("^(.*) %(" .. SPEC:gsub("%p", "%%%0") .. " (.-)%)$")
    return "reassembled message: " .. (text or why), section or "§5"
  end
  if pm.in_block then  -- an Event or a KeepAlive, maybe after the End (§6.4)
    if inner == EVENT_TYPE then m.block.data = m.block.data + pm.total end
    if m.state == "trailer" then return finish_block(m, ctx, pinfo) end
    return nil
  end
  local fields = nil
  if inner == BEGIN_TYPE or inner == END_TYPE then fields = block_fields(inner, pm.buf) end
  local text, section = on_message(m, ctx, pinfo, inner, fields, pm.total, false, ctx.key)
  if text ~= nil then return "reassembled message: " .. text, section end
end

MACHINE.check = function(c, vals, tvb, off, size, pinfo, ctx)
  local st = ctx.conv.state
  if st.dm == nil then st.dm = {} end
  local side = from_server(pinfo, ctx.conv) and "client" or "server"  -- the machine that reads these bytes
  local m = st.dm[side]
  if m == nil then m = {role = side, state = "open"}; st.dm[side] = m end
  if m.stop then return nil end
  return check(m, c, vals, tvb, off, size, pinfo, ctx)
end

-- No port, no heuristic (nothing marks the draft on the wire): Pravega's dissector hands over the
-- connections without a Hello; alone, Decode As.
DissectorTable.get("tcp.port"):add_for_decode_as(P)
refwire_pravega = refwire_pravega or {}
refwire_pravega.draft = function(tvb, pinfo, tree) return P.dissector(tvb, pinfo, tree) end
"""

def _set(items: Iterable[str]) -> str:
    return "{" + ", ".join(f"[{lua_string(i)}] = true" for i in sorted(items)) + "}"


def _machine_tables() -> str:
    """refwire's machines as Lua tables: the input of each type code per side, the inputs each
    state takes (its transitions, end of input aside) and those allowed while a partial message
    is incomplete."""
    inputs = {"server": _SERVER_INPUT, "client": _CLIENT_INPUT}
    trans = {"server": SERVER_TRANSITIONS, "client": CLIENT_TRANSITIONS}
    lines = ["local INPUT = {"]
    for side, table in inputs.items():
        lines.append(f"  {side} = {{" + ", ".join(f"[{c}] = {lua_string(i)}" for c, i in sorted(table.items())) + "},")
    lines.append("}")
    lines.append("local TRANSITIONS = {")
    for side, t in trans.items():
        per = {s.value: _set(i for (st, i) in t if st is s and i not in ("eof", "reset")) for s in State if any(st is s for st, _ in t)}
        lines.append(f"  {side} = {{" + ", ".join(f"[{lua_string(k)}] = {v}" for k, v in sorted(per.items())) + "},")
    lines.append("}")
    lines.append("local WHILE_PARTIAL = {" + ", ".join(f"[{lua_string(s.value)}] = {_set(i)}" for s, i in WHILE_PARTIAL.items()) + "}")
    return "\n".join(lines)


PART: Final = Part(
    name="pravega_draft",
    title="Pravega 2017 wire-protocol draft (refwire)",
    short="PravegaDraft",
    type_codes={code: cls.NAME for code, cls in DRAFT.commands.items()},
    length_rule=(8, "length"),
    limits={
        "max_frame_size": DEFAULT_LIMITS.max_frame_size,
        "max_request_size": DEFAULT_LIMITS.max_frame_size,
        "max_block_size": DEFAULT_LIMITS.max_buffered,  # ServerConnection's Begin length bound (§6.3, §11)
        "max_partial_size": DEFAULT_LIMITS.max_decompressed_size,  # a reassembled message (§5, §11)
    },
    spec=SPEC,
    unknown_type_text="unknown type %s",
    unknown_type_section="§1, §3",
    limit_section="§1, §11",
    eof_section="§6.7",
    start_ctx=True,
    fields_lua=fields_lua(DRAFT, "pravega_draft"),
    lua=part_lua(DRAFT, _LUA.replace("${machine_tables}", _machine_tables())),
)
