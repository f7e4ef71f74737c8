"""Pravega's part of its Wireshark dissector (specs/pravega/README.md), and the pieces the 2017
draft's part (:mod:`refwire.dissector.pravega_draft`) shares.

The generic generator (:mod:`refwire.dissector.generate`) makes the header fields (``type``,
``length``), each command's leading fixed-width fields, the sizes (8 + ``length``, §1) and the
frame loop from :data:`~refwire.pravega.describe.LAYOUT`; this module adds what is Pravega's own:

* the usual port, 12345 (the segment store's; the controller speaks gRPC and is not read here);
* the type codes (§3) as the frame types' codes; a first byte other than 0x00/0xff, an unknown
  code (§1, §3), a negative length (§1.1) and a frame over the side's limit (§1.1, §11: 0x00FFFFFF
  for what the client sends, 0x01000007 for what the server sends) end the direction, as refwire's
  describer says it;
* every command's payload, read by a table made from the codec's command table
  (:mod:`refwire.pravega.frames_codec`, §2, §4): strings (Java modified UTF-8, §2.3), byte fields,
  optional trailing fields (§2.4), table keys and entries (§9); a payload the codec refuses gets
  an expert-info warning naming the field;
* the events inside append data (§5.1, §5.2): AppendBlock's Event, Padding and PartialEvent
  frames and, when its data is whole Event frames (the Rust client's bare block ends),
  AppendBlockEnd's -- their count and each one's length.  A PartialEvent is not joined with the
  rest of its event (the AppendBlockEnd data that follows): the two halves are shown where they are;
* matching replies with requests by ``requestId`` per connection: "response in frame N" on a
  request (two passes), "request in frame M" and the latency on a reply;
* refwire's machines (a warning at the command they reject, citing the section): the server's on
  what the client sends -- a reply (§1.2, §3), a top-level PartialEvent (§5.3, §10.1), §5.3's
  append rules in their order (an append command while an AppendBlock is held, a writer before its
  SetupAppend, ``numEvents <= 0``, ``lastEventNumber`` or a conditional ``eventNumber`` going
  backwards, an AppendBlockEnd of another writer or a ``sizeOfWholeEvents`` past its block, the
  block's remainder -- shown on the AppendBlock, where refwire's error points --, a reassembled
  append's data over ``max_buffered`` + ``max_frame_size``, §5.3, §11), more writers than
  ``max_writers`` (§11), nothing after an incompatible Hello (it is answered and closed, §7.1); the
  client's on what the server sends -- a request (§1.2, §3), a Hello outside the versions of the
  client's Hello (§7.1).  What depends on the store's replies (§5.4) is not checked;
* the dialect (the issue's rule): a connection that opens with a Hello (``ffffff81 00000008``,
  §7.1) is Pravega; one that does not is the 2017 draft (which has no Hello), handed over to the
  draft's dissector when it is loaded (``refwire dissector pravega pravega-draft-2017``).  The
  preference ``pravega.dialect`` (auto / pravega / draft) overrides the rule;
* the heuristic: a connection whose first bytes are a Hello (on any port).
"""

from __future__ import annotations

from typing import Any, Final

from ..pravega.commands import _MIN_BYTES, _NO_DEFAULT, CLIENT_LIMITS, DEFAULT_LIMITS, Dialect
from ..pravega.describe import _FIXED
from ..pravega.frames import OLDEST_COMPATIBLE_VERSION, WIRE_VERSION
from ..pravega.frames_codec import CURRENT
from .generate import Part, lua_string

__all__ = ["PART", "WALKER", "commands_lua", "fields_lua", "part_lua"]

SPEC: Final = "specs/pravega/README.md"

#: wire kind -> the ProtoField constructor of its value
_PROTOFIELD: Final = {
    "i32": "int32", "i64": "int64", "i64_any": "int64", "u8": "uint8", "bool": "uint8", "uuid": "bytes",
    "utf": "string", "blob32": "bytes", "opt_blob32": "bytes", "rest": "bytes", "event": "bytes",
    "longs": "int64", "keys": "none", "entries": "none",
}  # fmt: skip


def _leading(cls: Any) -> int:
    """How many of a command's fields its layout holds (the leading fixed-width ones)."""
    n = 0
    for _name, kind, optional in cls.LAYOUT:
        if kind not in _FIXED or optional is not _NO_DEFAULT:
            break
        n += 1
    return n


def _default(value: Any) -> str:
    """An optional field's default (§2.4) as Lua; ``false``: the field is mandatory."""
    if value is _NO_DEFAULT:
        return "false"
    if isinstance(value, str):
        return lua_string(value)
    return str(int(value))


def commands_lua(dialect: Dialect) -> str:
    """``dialect``'s command table as Lua: per type code its name, direction and fields
    (name, wire kind, optional), and how many of them the layout shows already."""
    lines = ["local CMDS = {"]
    for code, cls in sorted(dialect.commands.items()):
        fields = ", ".join(f"{{{lua_string(n)}, {lua_string(k)}, {_default(o)}}}" for n, k, o in cls.LAYOUT)
        lines.append(
            f"  [{code}] = {{name = {lua_string(cls.NAME)}, dir = {lua_string(cls.DIRECTION)}, leading = {_leading(cls)}, fields = {{{fields}}}}},"
        )
    lines.append("}")
    lines.append("local MIN_BYTES = {" + ", ".join(f"{k} = {v}" for k, v in sorted(_MIN_BYTES.items())) + "}")
    lines.append(f"local STRICT_TRAILING = {'true' if dialect.strict_trailing else 'false'}")
    return "\n".join(lines)


def fields_lua(dialect: Dialect, prefix: str) -> str:
    """A ProtoField per payload field name the layout does not declare already (``hf[name]``),
    and the part's own."""
    seen: dict[str, str] = {}
    for cls in dialect.commands.values():
        for name, kind, _o in cls.LAYOUT:
            seen.setdefault(name, kind)
    out = []
    for name, kind in sorted(seen.items()):
        ctor = _PROTOFIELD[kind]
        abbrev, label = lua_string(f"{prefix}.{name}"), lua_string(name)
        extra = ", base.DEC" if ctor.startswith(("int", "uint")) else ""
        out.append(f"if hf[{lua_string(name)}] == nil then hf[{lua_string(name)}] = ProtoField.{ctor}({abbrev}, {label}{extra}) end")
    own = {
        "key_data": f'ProtoField.bytes("{prefix}.key.data", "key")',
        "key_version": f'ProtoField.int64("{prefix}.key.version", "key version", base.DEC)',
        "value_data": f'ProtoField.bytes("{prefix}.value", "value")',
        "count": f'ProtoField.int32("{prefix}.count", "count", base.DEC)',
        "prefix_length": f'ProtoField.int32("{prefix}.prefix_length", "length prefix", base.DEC)',
        "events": f'ProtoField.uint32("{prefix}.events", "events in the data", base.DEC)',
        "event": f'ProtoField.none("{prefix}.event", "event")',
        "event_length": f'ProtoField.int32("{prefix}.event.length", "event length", base.DEC)',
        "event_type": f'ProtoField.int32("{prefix}.event.type", "inner type", base.DEC)',
        "response_in": f'ProtoField.framenum("{prefix}.response_in", "response in frame", base.NONE, frametype.RESPONSE)',
        "request_in": f'ProtoField.framenum("{prefix}.request_in", "request in frame", base.NONE, frametype.REQUEST)',
        "time": f'ProtoField.relative_time("{prefix}.time", "response time")',
        "dialect": f'ProtoField.string("{prefix}.dialect", "dialect (how it was chosen)")',
    }
    out += [f"hf[{lua_string(k)}] = {v}" for k, v in own.items()]
    return "\n".join(out)


#: The payload reader shared by both dialects (it runs inside the generated block; SPEC, SEC,
#: CMDS, MIN_BYTES, STRICT_TRAILING and NORMALIZE are the part's).
WALKER: Final = r"""
-- A reject is a Lua error carrying {pv = text}.
local function reject(text, section) error({pv = text .. " (" .. SPEC .. " " .. section .. ")"}, 0) end

local Reader = {}
Reader.__index = Reader
function Reader:need(n, field)
  if self.stop - self.pos < n then
    reject(string.format("%s: truncated: %s needs %d bytes, %d left", self.cmd, field, n, self.stop - self.pos), SEC.truncated)
  end
end
function Reader:take(n, field) self:need(n, field); local at = self.pos; self.pos = at + n; return at end
function Reader:i32(field) local at = self:take(4, field); return self.tvb:range(at, 4):int(), at end
function Reader:i64(field) local at = self:take(8, field); return self.tvb:range(at, 8):int64(), at end
function Reader:u8(field) local at = self:take(1, field); return self.tvb:range(at, 1):uint(), at end
function Reader:bytes(n, field)
  if n < 0 then reject(string.format("%s: negative length %d of %s", self.cmd, n, field), SEC.truncated) end
  return self:take(n, field)
end
function Reader:show(key, at, n, value)
  if n == 0 then  -- an empty field at the frame's end: a zero-length range inside the frame
    if at >= self.tvb:len() then at = self.off end
    if value == nil then return self.tree:add(hf[key], self.tvb:range(at, 0)) end
    return self.tree:add(hf[key], self.tvb:range(at, 0), value)
  end
  if value == nil then return self.tree:add(hf[key], self.tvb:range(at, n)) end
  return self.tree:add(hf[key], self.tvb:range(at, n), value)
end

-- Java modified UTF-8 (§2.3) as UTF-8: 1-, 2- and 3-byte forms, surrogate pairs joined.
local function utf8_of(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64) end
  if cp < 0x10000 then return string.char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64) end
  return string.char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64, 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
end
local function mutf8(s)
  local units, i, n = {}, 1, #s
  while i <= n do
    local b = s:byte(i)
    if b < 0x80 then units[#units + 1] = b; i = i + 1
    elseif math.floor(b / 32) == 6 then
      local c = s:byte(i + 1)
      if c == nil or math.floor(c / 64) ~= 2 then return nil, i - 1 end
      units[#units + 1] = (b % 32) * 64 + c % 64; i = i + 2
    elseif math.floor(b / 16) == 14 then
      local c, d = s:byte(i + 1), s:byte(i + 2)
      if c == nil or d == nil or math.floor(c / 64) ~= 2 or math.floor(d / 64) ~= 2 then return nil, i - 1 end
      units[#units + 1] = (b % 16) * 4096 + (c % 64) * 64 + d % 64; i = i + 3
    else return nil, i - 1 end
  end
  local out, j = {}, 1
  while j <= #units do
    local u = units[j]
    if u >= 0xD800 and u < 0xDC00 and units[j + 1] and units[j + 1] >= 0xDC00 and units[j + 1] < 0xE000 then
      out[#out + 1] = utf8_of(0x10000 + (u - 0xD800) * 1024 + (units[j + 1] - 0xDC00)); j = j + 2
    else out[#out + 1] = utf8_of(u); j = j + 1 end
  end
  return table.concat(out)
end

local LENIENT_BLOB = {AppendBlockEnd = true, ConditionalBlockEnd = true}

-- Frames inside append data (§5.1, §5.3): Event, Padding, PartialEvent; how many events.
-- whole: the data must be whole Event frames (else nothing is shown: it is the rest of a split event).
local function inner_frames(tvb, at, n, tree, whole)
  local pos, stop, events, shown = at, at + n, 0, {}
  while stop - pos >= 8 do
    local t, len = tvb:range(pos, 4):int(), tvb:range(pos + 4, 4):int()
    if (t ~= 0 and (whole or (t ~= -1 and t ~= -2))) or len < 0 or len > stop - pos - 8 then break end
    shown[#shown + 1] = {pos, t, len}
    if t == 0 then events = events + 1 end
    pos = pos + 8 + len
    if t ~= 0 then break end
  end
  if whole and (pos ~= stop or events == 0) then return end
  tree:add(hf.events, tvb:range(at, n), events):set_generated()
  for _, e in ipairs(shown) do
    local name = e[2] == 0 and "Event" or (e[2] == -1 and "Padding" or "PartialEvent")
    local sub = tree:add(hf.event, tvb:range(e[1], 8 + e[3]))
    sub:set_text(string.format("%s: %d bytes", name, e[3]))
    sub:add(hf.event_type, tvb:range(e[1], 4))
    sub:add(hf.event_length, tvb:range(e[1] + 4, 4))
  end
end

local function read_key(r, field, tree)
  r:i32(field .. ".payload_length")
  local n, at = r:i32(field .. ".length")
  if n == 0 then return end
  local d = r:bytes(n, field .. ".data")
  tree:add(hf.key_data, r.tvb:range(d, n))
  local _, v = r:i64(field .. ".key_version")
  tree:add(hf.key_version, r.tvb:range(v, 8))
end
local function read_count(r, field, min_item)
  local n, at = r:i32(field)
  if n < 0 then reject(string.format("%s: negative count %d in %s", r.cmd, n, field), SEC.count) end
  if n * min_item > r.stop - r.pos then
    reject(string.format("%s: count %d in %s needs at least %d bytes, %d left", r.cmd, n, field, n * min_item, r.stop - r.pos), SEC.count)
  end
  r.tree:add(hf.count, r.tvb:range(at, 4))
  return n
end

-- One field of kind k: its value (scalars), shown unless it is one of the layout's leading fields.
local function read_field(r, name, k, show)
  if k == "i32" or k == "i64" or k == "i64_any" or k == "u8" or k == "bool" then
    local v, at
    if k == "i32" then v, at = r:i32(name) elseif k == "u8" or k == "bool" then v, at = r:u8(name) else v, at = r:i64(name) end
    local norm = NORMALIZE[r.code]  -- decode-time mappings Java applies (§4.4): shown as read
    if norm and norm[1] == name and not norm[2][v] then v = norm[3] end
    if show then r:show(name, at, (k == "i32" and 4) or ((k == "u8" or k == "bool") and 1) or 8, k == "i32" and v or nil) end
    return v
  end
  if k == "uuid" then
    local at = r:take(16, name)
    if show then r:show(name, at, 16) end
    return r.tvb:range(at, 16):bytes():tohex()
  end
  local start = r.pos
  local res = (function()
    if k == "utf" then
      local n = r.tvb:range(r:take(2, name), 2):uint()
      local at = r:take(n, name)
      local raw = n > 0 and r.tvb:raw(at, n) or ""
      local s, bad = mutf8(raw)
      if s == nil then reject(string.format("%s: %s: malformed modified UTF-8 around byte %d", r.cmd, name, bad), SEC.utf) end
      if show then r:show(name, start, 2 + n, s) end
      return s
    elseif k == "blob32" or k == "opt_blob32" or k == "event" then
      if k == "opt_blob32" and r.stop - r.pos < 4 then return "" end
      if k == "event" then
        local t = r:i32(name .. ".type")
        if t ~= 0 then reject(string.format("%s: %s: event type must be 0, got %d", r.cmd, name, t), SEC.event) end
      end
      local n = r:i32(name .. ".length")
      if (k == "blob32" and n < 0 and LENIENT_BLOB[r.cmd]) or (k == "opt_blob32" and n <= 0) then n = 0
      else r:bytes(n, name) end
      if show then
        local sub = r:show(name, r.pos - n, n)
        sub:add(hf.prefix_length, r.tvb:range(r.pos - n - 4, 4))
        if r.cmd == "AppendBlockEnd" then inner_frames(r.tvb, r.pos - n, n, sub, true) end
      end
    elseif k == "rest" then
      local n = r.stop - r.pos
      r.pos = r.stop
      if show then
        local sub = r:show(name, start, n)
        if r.cmd == "AppendBlock" then inner_frames(r.tvb, start, n, sub, false) end
      end
    elseif k == "longs" then
      for _ = 1, read_count(r, name .. ".count", 8) do
        local _, at = r:i64(name)
        r:show(name, at, 8)
      end
    elseif k == "keys" or k == "entries" then
      local each = k == "keys" and 8 or 16
      for i = 1, read_count(r, name .. ".count", each) do
        local item = r.tree:add(hf[name], r.tvb:range(r.pos, 0))
        item:set_text(string.format("%s[%d]", name, i - 1))
        local at = r.pos
        read_key(r, string.format("%s[%d]", name, i - 1), item)
        if k == "entries" then
          r:i32(name .. ".value.payload_length")
          local vn = r:i32(name .. ".value.length")
          if vn ~= 0 then item:add(hf.value_data, r.tvb:range(r:bytes(vn, name .. ".value"), vn)) end
        end
        item:set_len(r.pos - at)
      end
    end
  end)()
  return res
end

-- The payload of command cmd (whole frame at off, size bytes): its scalar fields by name, or
-- nil and why refwire rejects it.
local function read_payload(tvb, off, size, tree, code)
  local c = CMDS[code]
  local vals = {}
  if code == -1 then return vals end  -- Padding: its length is the payload length
  local r = setmetatable({tvb = tvb, pos = off + 8, stop = off + size, tree = tree, cmd = c.name, code = code, off = off}, Reader)
  local ok, err = pcall(function()
    for i, f in ipairs(c.fields) do
      local name, k, opt = f[1], f[2], f[3]
      if opt ~= false and r.stop - r.pos < (MIN_BYTES[k] or 1) then
        -- absent: the default (§2.4), shown as generated
        vals[name] = opt
        tree:add(hf[name], tvb:range(off, 0), (k == "i64" or k == "i64_any") and Int64.new(opt) or opt):set_generated()
      else
        vals[name] = read_field(r, name, k, i > c.leading)
      end
    end
    if STRICT_TRAILING and r.pos < r.stop then
      reject(string.format("%s: %d bytes after the last field", c.name, r.stop - r.pos), SEC.trailing)
    end
  end)
  if not ok then
    if type(err) == "table" and err.pv then return nil, err.pv end
    error(err, 0)
  end
  return vals
end

-- ----------------------------------------------------------------- the start of a frame
-- The side a packet comes from: the server is the side on a port of PORTS, else the side that
-- did not send the connection's first bytes (the client speaks first, §7.1).
local function from_server(pinfo, conv)
  local s = conv.state
  local src = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
  local dst = tostring(pinfo.dst) .. ":" .. tostring(pinfo.dst_port)
  if s.server == nil then
    if PORTS[pinfo.src_port] and not PORTS[pinfo.dst_port] then s.server = src
    elseif PORTS[pinfo.dst_port] and not PORTS[pinfo.src_port] then s.server = dst
    else s.server = dst end
  end
  return s.server == src
end

-- A first byte other than 0x00/0xff, an unknown type, a negative length, a frame over the side's
-- limit: no frame (the rest of the direction is undecoded).
PART.start = function(tvb, off, avail, pinfo, ctx)
  local b = tvb:range(off, 1):uint()
  if b ~= 0 and b ~= 0xff then
    return {"malformed", string.format("no command starts with byte 0x%02x (%s %s)", b, SPEC, SEC.type)}
  end
  if avail < 8 then return nil end
  local code, n = tvb:range(off, 4):int(), tvb:range(off + 4, 4):int()
  if CMDS[code] == nil then
    return {"malformed", string.format("unknown type %d/%d (%s %s)", code, n, SPEC, SEC.type)}
  end
  if n < 0 then
    return {"malformed", string.format("%s: bad length %d/%d (%s %s)", CMDS[code].name, code, n, SPEC, SEC.length)}
  end
  local limit = from_server(pinfo, ctx.conv) and LIMIT.max_frame_size or LIMIT.max_request_size
  if 8 + n > limit then
    return {"limit", string.format("%s of %d bytes is over max_frame_size=%d (field length) (%s %s)",
      CMDS[code].name, 8 + n, limit, SPEC, SEC.limit)}
  end
end

-- ----------------------------------------------------------------- requests and replies
local function match(item, pinfo, ctx, c, vals)
  local rid = vals.request_id
  if rid == nil or (c.dir ~= "request" and c.dir ~= "reply") then return end
  local s = ctx.conv.state
  s.pending = s.pending or {}
  s.seen = s.seen or {}
  local key = tostring(rid)
  if c.dir == "request" then
    if not pinfo.visited then
      s.pending[key] = s.pending[key] or {}
      table.insert(s.pending[key], {frame = pinfo.number, time = pinfo.abs_ts, key = ctx.key})
    end
    local resp = s.seen[ctx.key]
    if resp then item:add(hf.response_in, resp):set_generated() end
  else
    if not pinfo.visited then
      local q = s.pending[key]
      if q and #q > 0 then
        local req = table.remove(q, 1)
        s.seen[ctx.key] = req
        s.seen[req.key] = pinfo.number
        req.dt = pinfo.abs_ts - req.time
      end
    end
    local req = s.seen[ctx.key]
    if req then
      item:add(hf.request_in, req.frame):set_generated()
      item:add(hf.time, NSTime.new(math.floor(req.dt), math.floor((req.dt % 1) * 1e9 + 0.5))):set_generated()
    end
  end
end

-- refwire's machines (the dialect's MACHINE.check(c, vals, tvb, off, size, pinfo, ctx) -> nil, or
-- the text and sections of the error refwire's machine raises at this command), asked once the
-- payload is read: a payload the codec refuses ends the machine there (refwire stops at it).
local MACHINE = {}

local function body(tvb, off, size, item, pinfo, v, ctx)
  local code = tvb:range(off, 4):int()
  local c = CMDS[code]
  local vals, why = read_payload(tvb, off, size, item, code)
  if vals == nil then
    item:add_proto_expert_info(ef.malformed, why)
    v._text = c.name .. " [rejected]"
    local mb = ctx.conv.machine_broken
    if not pinfo.visited and mb[ctx.dir] == nil then mb[ctx.dir] = pinfo.number end
    return
  end
  if MACHINE.check then
    machine_error(tvb, off, size, item, pinfo, v, ctx, function()
      return MACHINE.check(c, vals, tvb, off, size, pinfo, ctx)
    end)
  end
  match(item, pinfo, ctx, c, vals)
  local text = c.name
  if vals.request_id ~= nil then text = text .. " requestId=" .. tostring(vals.request_id) end
  if vals.part ~= nil and PART_NAMES then text = text .. " " .. (PART_NAMES[vals.part] or "?") end
  v._text = text
end
for _, c in pairs(CMDS) do
  PART.body[c.name] = body
  PART.summary[c.name] = function(v) return v._text or c.name end
end
"""


#: Pravega's own Lua: the sections, the dialect choice, the heuristic.
_LUA: Final = r"""
local SPEC = "specs/pravega/README.md"
local SEC = {type = "§1, §3", length = "§1.1", limit = "§1.1, §11", truncated = "§2, §4", utf = "§2.3",
  count = "§9, §11", event = "§4.2", trailing = "§2.4"}
local PORTS = {[12345] = true}
local NORMALIZE = {[60] = {"error_code", {[-1] = true, [0] = true, [1] = true}, 0}, [61] = {"error_code", {[-1] = true, [0] = true}, -1}}
local PART_NAMES = nil
${commands}
${walker}
-- ----------------------------------------------------------------- the dialect
-- auto: a connection that opens with a Hello is Pravega, else the 2017 draft (no Hello, its §1);
-- the preference overrides.
P.prefs.dialect = Pref.enum("Dialect", 1,
  "auto: a connection opening with a Hello is Pravega, one without is the 2017 draft (pravega_draft, when loaded)",
  {{1, "auto", 1}, {2, "pravega", 2}, {3, "draft", 3}}, false)
local HELLO = "ffffff8100000008"
-- the draft's dissector registers itself in refwire_pravega (a global of Wireshark's Lua state)
local function draft_dissector()
  return refwire_pravega and refwire_pravega.draft
end
PART.dispatch = function(tvb, pinfo, tree, conv)
  local s = conv.state
  if s.dialect == nil then
    local pref = P.prefs.dialect
    if pref == 2 then s.dialect = "pravega"
    elseif pref == 3 then s.dialect = "draft"
    else
      local n = math.min(tvb:len(), 8)
      local head = tvb:range(0, n):bytes():tohex():lower()
      if head ~= HELLO:sub(1, 2 * n) then s.dialect = "draft"
      elseif n < 8 then return true
      else s.dialect = "pravega" end
    end
    if s.dialect == "draft" and draft_dissector() == nil then s.dialect = "pravega" end
  end
  if s.dialect == "draft" then return draft_dissector() end
end

-- ----------------------------------------------------------------- refwire's machines
-- The server's machine (§5.3's AppendDecoder rules in their order, and the directions of §3) on
-- what the client sends, the client's (§3, §7.1) on what the server sends.  Not here: what
-- depends on the server's replies (§5.4: an append before its AppendSetup, "already appended").
-- An error about the bytes of the held AppendBlock (its remainder, §5.3 rule 5.4) is found at its
-- AppendBlockEnd and shown on the AppendBlock, where refwire's error points.
local WIRE_VERSION, OLDEST_VERSION = ${versions}
local APPEND_PATH = {SetupAppend = true, AppendBlock = true, AppendBlockEnd = true, Padding = true,
  ConditionalAppend = true, ConditionalBlockEnd = true}
local ZERO = Int64.new(0)
local function be_i32(s, i)  -- the signed big-endian int32 at byte i (1-based) of string s
  local a, b, c, d = s:byte(i, i + 3)
  local n = ((a * 256 + b) * 256 + c) * 256 + d
  return n >= 2147483648 and n - 4294967296 or n
end

-- The held block's remainder after sizeOfWholeEvents (§5.3 rule 5.4): nil, or the error, and
-- whether it is about the block's bytes (else the AppendBlockEnd's).
local function remainder(block, size, end_data)
  local left = #block.data - size
  if left == 0 then return nil end  -- the AppendBlockEnd's data is ignored (§10.3)
  if left < 8 then return string.format("%d bytes after the whole events are not a command header", left), true end
  local code, n = be_i32(block.data, size + 1), be_i32(block.data, size + 5)
  if code ~= -2 and code ~= -1 then
    return string.format("the block's remainder must be a PartialEvent or Padding, found type %d", code), true
  end
  if n < 0 or n > left - 8 then
    return string.format("the %s length %d does not match the %d bytes left in the block",
      code == -2 and "PartialEvent" or "Padding", n, left - 8), true
  end
  if code == -1 and end_data > 0 then return "an AppendBlockEnd after Padding must carry no data", false end
end

local function server_check(m, c, vals, tvb, off, size, pinfo, ctx)
  local name = c.name
  if m.block ~= nil and APPEND_PATH[name] and name ~= "AppendBlockEnd" then
    return string.format("unexpected %s following an append block", name), "§5.3"
  end
  local function session(w)
    local s = m.sessions[w]
    if s == nil then return nil, string.format("writer %s referenced before SetupAppend", w) end
    return s
  end
  if name == "Hello" then
    if vals.low_version > WIRE_VERSION or vals.high_version < OLDEST_VERSION then m.closing = true end  -- answered, then closed (§7.1)
  elseif name == "SetupAppend" then
    if m.sessions[vals.writer_id] == nil then
      if m.writers + 1 > LIMIT.max_writers then
        return string.format("writer_id %d exceeds the limit max_writers=%d", m.writers + 1, LIMIT.max_writers), "§11"
      end
      m.writers = m.writers + 1
    end
    m.sessions[vals.writer_id] = {last = ZERO}
  elseif name == "AppendBlock" then
    local _, bad = session(vals.writer_id)
    if bad then return bad, "§5.3" end
    m.block = {writer = vals.writer_id, length = size - 24, data = tvb:raw(off + 24, size - 24), key = ctx.key}
  elseif name == "AppendBlockEnd" then
    local s, bad = session(vals.writer_id)
    if bad then return bad, "§5.3" end
    if vals.num_events <= 0 then return string.format("numEvents must be positive, got %d", vals.num_events), "§5.3" end
    if vals.last_event_number < s.last then
      return string.format("last event number went backwards: %s after %s", tostring(vals.last_event_number), tostring(s.last)), "§5.3"
    end
    local block = m.block
    if block ~= nil then
      if block.writer ~= vals.writer_id then
        return string.format("AppendBlockEnd writer %s does not match its AppendBlock writer %s", vals.writer_id, block.writer), "§5.3"
      end
      if vals.size_of_whole_events < 0 or vals.size_of_whole_events > block.length then
        return string.format("sizeOfWholeEvents %d is outside the block's %d bytes", vals.size_of_whole_events, block.length), "§5.3"
      end
      local end_data = math.max(tvb:range(off + 28, 4):int(), 0)  -- a negative length reads as none, as the codec reads it
      local text, in_block = remainder(block, vals.size_of_whole_events, end_data)
      if text ~= nil and in_block then  -- shown on the AppendBlock (machine_error shows it there)
        ctx.conv.machine[block.key] = text .. " (" .. SPEC .. " §5.3)"
        ctx.conv.machine_broken[ctx.dir] = pinfo.number
        return nil
      end
      if text ~= nil then return text, "§5.3" end
      -- the reassembled data (§5.3 rule 5.4): the block's whole events, a PartialEvent's bytes and
      -- the AppendBlockEnd's data, at most max_buffered + max_frame_size (§11)
      local left = #block.data - vals.size_of_whole_events
      if left > 0 and be_i32(block.data, vals.size_of_whole_events + 1) == -2 then
        local n = vals.size_of_whole_events + be_i32(block.data, vals.size_of_whole_events + 5) + end_data
        local limit = LIMIT.max_buffered + LIMIT.max_request_size
        if n > limit then return string.format("data %d exceeds the limit max_buffered=%d", n, limit), "§5.3, §11" end
      end
    end
    m.block = nil
    s.last = vals.last_event_number
  elseif name == "ConditionalAppend" or name == "ConditionalBlockEnd" then
    local s, bad = session(vals.writer_id)
    if bad then return bad, "§5.3" end
    if vals.event_number < s.last then
      return string.format("event number went backwards: %s after %s", tostring(vals.event_number), tostring(s.last)), "§5.3"
    end
    s.last = vals.event_number
  elseif name == "PartialEvent" then  -- (refwire's decoder refuses it before its machine does)
    return "PartialEvent is not a top-level command: type -2", "§5.3, §10.1"
  elseif name ~= "Padding" and c.dir ~= "request" and c.dir ~= "both" then
    return string.format("%s is a reply, not a request", name), "§1.2, §3"
  end
end

local function client_check(m, c, vals)
  local name = c.name
  if name == "Hello" then
    local mine = m.hello  -- the client's own Hello, when seen: the range refwire's client speaks
    if mine ~= nil and (vals.low_version > mine[1] or vals.high_version < mine[2]) then
      return string.format("server speaks versions %d..%d, the client %d..%d", vals.low_version, vals.high_version, mine[2], mine[1]), "§7.1"
    end
  elseif c.dir ~= "reply" and c.dir ~= "both" then
    return string.format("%s is a request, not a reply", name), "§1.2, §3"
  end
end

MACHINE.check = function(c, vals, tvb, off, size, pinfo, ctx)
  local st = ctx.conv.state
  if st.pm == nil then st.pm = {server = {sessions = {}, writers = 0}, client = {}} end
  if ctx.depth ~= 0 then return nil end
  if from_server(pinfo, ctx.conv) then return client_check(st.pm.client, c, vals) end
  local m = st.pm.server
  if m.closing then return nil end  -- refwire's server reads nothing after an incompatible Hello
  if c.name == "Hello" and st.pm.client.hello == nil then st.pm.client.hello = {vals.high_version, vals.low_version} end
  return server_check(m, c, vals, tvb, off, size, pinfo, ctx)
end

-- The heuristic: the connection's first bytes are a Hello (§7.1).
local f_seq = Field.new("tcp.seq")
PART.heuristic = function(tvb, pinfo)
  if tvb:len() < 8 or tvb:range(0, 8):bytes():tohex():lower() ~= HELLO then return false end
  local seq = f_seq()
  return seq ~= nil and tonumber(tostring(seq.value)) == 1
end
"""


def part_lua(dialect: Dialect, own: str) -> str:
    """A dialect's part: its own Lua ``own`` with ``${commands}`` (its command table) and
    ``${walker}`` (the shared payload reader) filled in."""
    return own.replace("${commands}", commands_lua(dialect)).replace("${walker}", WALKER.strip())


PART: Final = Part(
    name="pravega",
    title="Pravega segment store wire protocol v17 (refwire)",
    short="Pravega",
    ports=(12345,),
    heuristic=True,
    type_codes={code: cls.NAME for code, cls in CURRENT.commands.items()},
    length_rule=(8, "length"),
    # the generic check is the larger (client-role) limit; PART.start checks each side's own (§1.1)
    limits={
        "max_frame_size": CLIENT_LIMITS.max_frame_size,
        "max_request_size": DEFAULT_LIMITS.max_frame_size,
        "max_writers": DEFAULT_LIMITS.max_window,  # ServerConnection's SetupAppends per connection (§11)
        "max_buffered": DEFAULT_LIMITS.max_buffered,  # a reassembled append's data, over max_frame_size (§5.3, §11)
    },
    spec=SPEC,
    unknown_type_text="unknown type %s",
    unknown_type_section="§1, §3",
    limit_section="§1.1, §11",
    eof_section="§1.2",
    start_ctx=True,
    dispatch=True,
    fields_lua=fields_lua(CURRENT, "pravega"),
    lua=part_lua(CURRENT, _LUA.replace("${versions}", f"{WIRE_VERSION}, {OLDEST_COMPATIBLE_VERSION}")),
)
