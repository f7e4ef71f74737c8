"""Lua for Wireshark from a :class:`~refwire.describe.Layout` (the generic part of ``refwire dissector``).

:func:`generate` writes one protocol's dissector: the layout becomes a Lua
table (per frame type its fixed fields and its smallest size) and a
``ProtoField`` per field (``uint8/16/32/64`` by size, ``UInt64`` values for
8-byte fields, characters as strings); a generic frame loop reads the frame
type, sizes each frame (its fixed size, or the protocol's size function), asks
TCP for more bytes when a frame is incomplete (``desegment_offset`` /
``desegment_len``: the missing bytes once the frame's size is known, one more
segment while it is not -- see below), and adds an expert-info warning where refwire would reject
the bytes (a first byte no frame starts with, an unknown frame type, a frame
over ``max_frame_size``, a :class:`Check` that fails) -- after a byte that is
no frame, the rest of that direction is undecoded, as refwire's describers say
it (:mod:`refwire.describe`).

A part may also say, as data, three things the loop then does itself: the frame
type's integer codes (``Part.type_codes``: a code -> type name map, for a type
field that is a number), a size from the header (``Part.length_rule``: a fixed
header plus a length field, checked against ``max_frame_size`` from the header
alone; fixed fields past a short frame's end are not read), and a second layout
for the frames the server sends (``Part.server_layout``: the part's
``PART.from_server`` says which side sent a packet, and each frame is read with its
side's layout).  Integers follow the layout's byte order (``add_le`` for little-endian).
Two switches serve a part's Lua: ``Part.start_ctx`` (``PART.start`` also gets ``pinfo`` and the
context, for a check that depends on the side), and ``Part.dispatch`` (``PART.dispatch`` may hand a
connection over to another dissector: a dialect chosen per connection).  A protocol
whose frames carry no type field (what a frame is follows from what the connection negotiated)
sets ``Part.frame_type``: ``PART.frame_type`` then names each frame's type instead.

What a table cannot say -- variable sizes, payloads, nested frames, matching
requests with responses -- is hand-written Lua in the protocol's :class:`Part`,
inserted verbatim between comment lines naming it.

Connection state (refwire's sans-io machines, as far as one conversation's bytes
show it) is the part's too, through two hooks the loop calls.  ``PART.machine[T]``
(asked before ``PART.body[T]``, on the first pass only) returns nil, or the text
and the spec sections of the error refwire's machine raises at this frame: the
frame gets an expert-info warning (``<name>.machine``, group SEQUENCE) with it, on
every pass, and the direction's later frames are not asked (refwire's machine
stops at its first error).  A part whose check needs what its body reads calls
``machine_error(tvb, off, size, item, pinfo, v, ctx, check)`` from the body
instead; per-connection state lives in ``ctx.conv.state``, the error of a frame
in ``ctx.conv.machine`` (by the frame's key, ``ctx.key``: a part may place one on
an earlier frame, where refwire's error points) and the frame that stopped a
direction in ``ctx.conv.machine_broken``.  The end of a direction is read by a
postdissector (``<name>_eof``: the FIN has no payload for the dissector): a FIN
that ends a direction inside a frame gets the warning of refwire's "connection
closed inside a frame" (the frame's type, the bytes received of its size;
``Part.eof_section``), and a FIN between frames asks ``PART.at_eof(conv, dir)``
(nil, or the text and sections of what refwire's machine raises when that side
closes, e.g. Lumberjack's batch cut short), unless the direction already broke.  The output is
deterministic: the same layout and part give the same bytes.

Reassembly.  While a frame's size is not known yet (its header, its type, or what a
size function needs is incomplete) the loop asks TCP for one more segment
(``DESEGMENT_ONE_MORE_SEGMENT``), never for the header's exact missing bytes; only
a frame whose size is known asks for exactly what it lacks.  Asked for the
header's missing bytes, TCP ends the reassembled bytes inside the segment that
completes the header; when the frame then needs more, Wireshark 4.0 extends that
reassembly (a partial reassembly), and a frame that ends inside or at the end of
that same segment is dissected on the first pass but on tshark's second pass
(``-2``) it is never shown -- e.g. a 29-byte Seastar request (a 28-byte header)
or a 12-byte Lumberjack ``J`` frame sent in 3-byte segments.

This module names no protocol and does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from string import Template
from typing import Final, Literal

import attrs

from ..describe import Field, Layout
from ..protocols import Descriptor

__all__ = ["Check", "Part", "generate", "generate_many", "lua_string"]

Expert = Literal["malformed", "limit", "note"]


@attrs.frozen
class Check:
    """A condition on a whole frame's fixed fields that refwire rejects.

    ``when`` is a Lua expression over ``v`` (the frame's fixed fields by name:
    integers as numbers, characters as strings) and ``LIMIT`` (the part's
    limits); when it holds, the frame gets an expert-info ``expert`` with ``text``
    citing the spec's file and ``section``)."""

    frame: str
    when: str
    text: str
    #: the spec sections that say so (``"§2.3, §4"``)
    section: str = ""
    expert: Expert = "malformed"


@attrs.frozen(kw_only=True)
class Part:
    """What of a protocol's dissector is its own (its descriptor's ``dissector`` piece)."""

    #: the Lua ``Proto`` name and display-filter prefix (lower case)
    name: str
    #: its title in Wireshark's protocol list
    title: str
    #: the short name in the packet list's Protocol column
    short: str
    #: the TCP ports it is registered on
    ports: tuple[int, ...] = ()
    #: whether it registers as a heuristic dissector on TCP (the part defines ``PART.heuristic``)
    heuristic: bool = False
    #: the layout's field that names the frame type (read from every frame)
    type_field: str = "type"
    #: integer frame-type codes: the type field's value -> the layout's frame type (empty: the
    #: type field holds the frame type itself, as characters); a code not here is an unknown type
    type_codes: Mapping[int, str] = attrs.field(factory=dict)
    #: every frame's size from its header: ``(header, field)`` -- ``header`` bytes plus the value of
    #: the fixed field ``field`` (a length every frame type has at one place); a frame type's fixed
    #: fields past the frame's end are then not read.  None: a type's ``min_size``, or ``PART.size``
    length_rule: tuple[int, str] | None = None
    #: the frames the server sends, where their layout differs from the client's (None: one
    #: layout both ways); the part then defines ``PART.from_server`` (which side sent these bytes)
    server_layout: Layout | None = None
    #: refwire's limits the Lua checks (``max_frame_size`` at least), by name
    limits: Mapping[str, int] = attrs.field(factory=dict)
    #: the spec's file, cited by every expert-info text
    spec: str = ""
    #: the text of an unknown frame type (``%q``: the type, or its code as ``0x..``)
    unknown_type_text: str = "unknown frame type %q"
    #: the spec sections an unknown frame type and a frame over ``max_frame_size`` break
    unknown_type_section: str = ""
    limit_section: str = ""
    #: conditions on fixed fields refwire rejects
    checks: tuple[Check, ...] = ()
    #: extra ProtoField declarations (Lua statements assigning ``hf.<key>``)
    fields_lua: str = ""
    #: ``PART.start`` is also given ``pinfo`` and ``ctx`` (``PART.start(tvb, off, avail, pinfo, ctx)``):
    #: for a start check that depends on the side that sent the bytes
    start_ctx: bool = False
    #: the part defines ``PART.dispatch(tvb, pinfo, tree, conv)``, called first on every packet: a
    #: function ``(tvb, pinfo, tree)`` that reads this connection instead (another dialect's
    #: dissector, in the same Lua state: the pass without a tree is then read too), ``true`` when the
    #: bytes seen so far cannot tell yet (TCP is asked for one more segment), or nil: this one reads it
    dispatch: bool = False
    #: the frames have no type field: the part defines ``PART.frame_type(tvb, off, avail, pinfo, ctx)``
    #: -> the frame's type (a layout's key), or nil while more bytes are needed to know it (the type follows
    #: from the connection's state: what a negotiation said); ``type_field`` is then unused
    frame_type: bool = False
    #: the spec sections refwire's "connection closed inside a frame" error breaks (its error table's
    #: row): cited by the warning on the FIN that ends a direction inside a frame
    eof_section: str = ""
    #: the hand-written Lua: fills ``PART.start``, ``PART.size``, ``PART.body``,
    #: ``PART.summary`` and ``PART.heuristic`` (see the generated file's comments)
    lua: str = ""


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (double quotes, escapes for the rest)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


_UINT_TYPES: Final = {1: "uint8", 2: "uint16", 3: "uint24", 4: "uint32", 8: "uint64"}
_INT_TYPES: Final = {1: "int8", 2: "int16", 3: "int24", 4: "int32", 8: "int64"}


def _protofield(abbrev: str, f: Field) -> str:
    if f.kind == "char":
        return f"ProtoField.string({lua_string(abbrev)}, {lua_string(f.name)})"
    if f.kind == "bytes":
        return f"ProtoField.bytes({lua_string(abbrev)}, {lua_string(f.name)})"
    table = _UINT_TYPES if f.kind == "uint" else _INT_TYPES
    kind = table.get(f.size)
    if kind is None:
        raise ValueError(f"field {f.name!r}: no Wireshark integer type of {f.size} bytes")
    return f"ProtoField.{kind}({lua_string(abbrev)}, {lua_string(f.name)}, base.DEC)"


def _field_keys(layouts: Iterable[Layout], prefix: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(frame type, field name) -> (Lua key, filter abbreviation): one ProtoField per field
    name, unless frame types disagree on its kind or size (then one per frame type)."""
    shapes: dict[str, set[tuple[str, int]]] = {}
    layouts = tuple(layouts)
    for layout in layouts:
        for fl in layout.frames.values():
            for f in fl.fields:
                shapes.setdefault(f.name, set()).add((f.kind, f.size))
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for layout in layouts:
        for t, fl in sorted(layout.frames.items()):
            for f in fl.fields:
                if len(shapes[f.name]) == 1:
                    out.setdefault((t, f.name), (f.name, f"{prefix}.{f.name}"))
                else:
                    out.setdefault((t, f.name), (f"{t}.{f.name}", f"{prefix}.{t}.{f.name}"))
    return out


def _layout_lua(layout: Layout, keys: Mapping[tuple[str, str], tuple[str, str]], var: str = "LAYOUT") -> str:
    lines = [f"local {var} = {{"]
    for t, fl in sorted(layout.frames.items()):
        lines.append(f"  [{lua_string(t)}] = {{min_size = {fl.min_size}, fields = {{")
        for f in fl.fields:
            key = keys[(t, f.name)][0]
            lines.append(
                f"    {{name = {lua_string(f.name)}, hf = {lua_string(key)}, offset = {f.offset}, size = {f.size}, kind = {lua_string(f.kind)}}},"
            )
        lines.append("  }},")
    lines.append("}")
    return "\n".join(lines)


def _fields_lua(layouts: Iterable[Layout], keys: Mapping[tuple[str, str], tuple[str, str]]) -> str:
    seen: dict[str, str] = {}
    for layout in layouts:
        for t, fl in sorted(layout.frames.items()):
            for f in fl.fields:
                key, abbrev = keys[(t, f.name)]
                seen.setdefault(key, f"hf[{lua_string(key)}] = {_protofield(abbrev, f)}")
    return "\n".join(seen[k] for k in sorted(seen))


def _checks_lua(checks: Iterable[Check], spec: str) -> str:
    by_frame: dict[str, list[Check]] = {}
    for c in checks:
        by_frame.setdefault(c.frame, []).append(c)
    lines = []
    for t in sorted(by_frame):
        lines.append(f"CHECKS[{lua_string(t)}] = function(v)")
        lines.append("  local out = {}")
        for c in by_frame[t]:
            text = f"{c.text} ({' '.join(x for x in (spec, c.section) if x)})"
            lines.append(f"  if {c.when} then out[#out + 1] = {{{lua_string(c.expert)}, {lua_string(text)}}} end")
        lines.append("  return out")
        lines.append("end")
    return "\n".join(lines)


def _type_field(layouts: Iterable[Layout], name: str, what: str = "type") -> Field:
    # the one field of that name every frame type has at the same place (a frame type may have
    # another field of the same name elsewhere: the 2017 Pravega draft's BeginAppendBlock.length)
    per_type = [{f for f in fl.fields if f.name == name} for layout in layouts for fl in layout.frames.values()]
    found = set.intersection(*per_type) if per_type else set()
    if len(found) != 1:
        raise ValueError(f"the {what} field {name!r} is not at one place in every frame type")
    return found.pop()


_TEMPLATE: Final = Template(r"""
-- ${title}: a Wireshark dissector (Lua, Wireshark 4.0 or later).
--
-- GENERATED by `refwire dissector ${name}` from ${layout_ref} (the frame layout
-- refwire's describer and codec follow) and the hand-written part ${part_ref}.
-- Do not edit: generate it again.  Spec: ${spec}.
--
-- Install: tshark -X lua_script:THIS_FILE ..., or copy it into Wireshark's personal
-- Lua plugins folder (Help > About Wireshark > Folders).
do
local P = Proto(${name_lua}, ${title_lua})
local NAME = ${name_lua}

-- refwire's limits (its defaults); a value above one is what refwire rejects.
local LIMIT = {${limits}}

-- ----------------------------------------------------------------- the layout
-- Per frame type: its smallest size and its fixed fields (offset from the frame's
-- first byte, size in bytes, kind).  Integers are ${order}-endian.
${layout}
local BIG_ENDIAN = ${big}
${type_decl}${type_extra}

-- ----------------------------------------------------------------- fields
local hf = {}
${fields}
-- generic ones
hf["_size"] = ProtoField.uint32(NAME .. ".size", "frame size", base.DEC)
hf["_undecoded"] = ProtoField.bytes(NAME .. ".undecoded", "undecoded bytes")
hf["_eof"] = ProtoField.bool(NAME .. ".eof", "connection closed here")
hf["_eof_have"] = ProtoField.uint32(NAME .. ".eof.received", "bytes of the frame received", base.DEC)
hf["_eof_size"] = ProtoField.uint32(NAME .. ".eof.size", "the frame's size", base.DEC)

-- ----------------------------------------------------------------- expert infos
local ef = {
  malformed = ProtoExpert.new(NAME .. ".malformed", "refwire rejects this", expert.group.MALFORMED, expert.severity.WARN),
  limit = ProtoExpert.new(NAME .. ".limit", "over a refwire limit", expert.group.PROTOCOL, expert.severity.WARN),
  note = ProtoExpert.new(NAME .. ".note", "note", expert.group.SEQUENCE, expert.severity.CHAT),
  machine = ProtoExpert.new(NAME .. ".machine", "refwire's connection machine rejects this", expert.group.SEQUENCE, expert.severity.WARN),
  eof = ProtoExpert.new(NAME .. ".eof", "connection closed inside a frame", expert.group.MALFORMED, expert.severity.WARN),
}
local SPEC_FILE = ${spec_lua}

-- ----------------------------------------------------------------- helpers
-- The value of fixed field f of the frame at off (integers as numbers, or UInt64
-- for 8-byte ones; characters as a string).
local function field_value(tvb, off, f)
  local r = tvb:range(off + f.offset, f.size)
  if f.kind == "char" then return r:raw() end
  if f.kind == "bytes" then return r:bytes() end
  if f.kind == "int" then
    if f.size == 8 then return BIG_ENDIAN and r:int64() or r:le_int64() end
    return BIG_ENDIAN and r:int() or r:le_int()
  end
  if f.size == 8 then return BIG_ENDIAN and r:uint64() or r:le_uint64() end
  return BIG_ENDIAN and r:uint() or r:le_uint()
end

-- Every fixed field of the frame at off, by name.
local function read_fixed(tvb, off, lay)
  local v = {}
  for _, f in ipairs(lay.fields) do v[f.name] = field_value(tvb, off, f) end
  return v
end

-- Per direction of a connection: what the first pass learnt (a break, matches, machine errors,
-- the frame a direction's bytes end inside).
local f_stream = Field.new("tcp.stream")
local conversations = {}
local function conversation(pinfo)
  local fi = f_stream()
  local key = fi and tostring(fi.value) or "?"
  local c = conversations[key]
  if c == nil then
    c = {broken = {}, state = {}, machine = {}, machine_broken = {}, cut = {}, consumed = {}, eof = {}}
    conversations[key] = c
  end
  return c
end

-- Bytes that are no frame (from off to the end): shown as such, with why.
local function undecoded(tvb, tree, off, expert_key, text)
  local r = tvb:range(off)
  local item = tree:add(P, r, "undecoded: " .. text)
  item:add(hf._undecoded, r)
  item:add_proto_expert_info(ef[expert_key], text)
end

-- The hand-written part (below) fills these:
--   PART.start(tvb, off, avail)             -> nil, or {expert, text}: no frame starts here
--   PART.size[T](tvb, off, avail, v)        -> the whole frame's size (and the field that sized it),
--                                              or nil: more bytes are needed to know it
--   PART.body[T](tvb, off, size, item, pinfo, v, ctx) -> what follows the fixed fields
--   PART.summary[T](v)                      -> the frame's one-line text
--   PART.heuristic(tvb, pinfo)              -> whether a connection's first bytes are this protocol
--   PART.machine[T](tvb, off, size, pinfo, v, ctx) -> nil, or the text and the spec sections of the
--                                              connection-state error refwire's machine raises at this
--                                              frame (asked before PART.body[T], on the first pass only,
--                                              until the direction's first such error: refwire stops there)
--   PART.at_eof(conv, dir)                  -> nil, or text and sections: what refwire's machine raises
--                                              when dir's side closes between frames${frame_type_doc}
-- CHECKS[T](v) -> {{expert, text}, ...}: the generated checks of the fixed fields.
local PART = {size = {}, body = {}, summary = {}, machine = {}}
local CHECKS = {}
local dissect_stream  -- (tvb, pinfo, tree, off, ctx) -> stop offset, bytes needed (or nil), broken
local machine_error  -- (tvb, off, size, item, pinfo, v, ctx, check): a PART.machine check at a frame

${checks}

-- ----------------------------------------------------------------- hand-written: ${part_ref}
${part_fields}
${part_lua}
-- ----------------------------------------------------------------- end of ${part_ref}

local fields = {}
local names = {}
for k in pairs(hf) do names[#names + 1] = k end
table.sort(names)
for _, k in ipairs(names) do fields[#fields + 1] = hf[k] end
P.fields = fields
local experts = {}
local enames = {}
for k in pairs(ef) do enames[#enames + 1] = k end
table.sort(enames)
for _, k in ipairs(enames) do experts[#experts + 1] = ef[k] end
P.experts = experts

-- ----------------------------------------------------------------- connection state
-- A connection-state error of refwire's machine at this frame (PART.machine[T]): decided on the
-- first pass, until the direction's first one (refwire's machine stops there), shown on every pass.
machine_error = function(tvb, off, size, item, pinfo, v, ctx, check)
  local c = ctx.conv
  if not pinfo.visited and c.machine_broken[ctx.dir] == nil then
    local text, section = check(tvb, off, size, pinfo, v, ctx)
    if text ~= nil then
      c.machine[ctx.key] = text .. " (" .. SPEC_FILE .. (section and (" " .. section) or "") .. ")"
      c.machine_broken[ctx.dir] = pinfo.number
    end
  end
  local text = c.machine[ctx.key]
  if text ~= nil then item:add_proto_expert_info(ef.machine, text) end
end

-- ----------------------------------------------------------------- the frame loop
-- One frame at off: its size; or nil and how many more bytes it needs; or false
-- when these bytes are no frame (they are shown undecoded, with why).
local function frame_at(tvb, pinfo, tree, off, ctx)
  local avail = tvb:len() - off
  ctx.cut_t, ctx.cut_size, ctx.cut_known = nil, nil, false  -- what an incomplete frame is, so far
  if PART.start then
    local bad = PART.start(tvb, off, avail${start_extra})
    if bad then undecoded(tvb, tree, off, bad[1], bad[2]); return false end
  end
${type_read}
  local lay = ${layout_of}[t]
  if lay == nil then
    undecoded(tvb, tree, off, "malformed", string.format(${unknown_type_fmt}, tostring(t)))
    return false
  end
  ctx.cut_t = t
${sizing}
  -- a whole frame
  ctx.count.n = ctx.count.n + 1
  ctx.key = pinfo.number .. "." .. ctx.count.n
  local item = tree:add(P, tvb:range(off, size))
  for _, f in ipairs(lay.fields) do
    local r = tvb:range(off + f.offset, f.size)
    if BIG_ENDIAN or f.kind == "char" or f.kind == "bytes" then item:add(hf[f.hf], r) else item:add_le(hf[f.hf], r) end
  end
  item:add(hf._size, size):set_generated()
  if CHECKS[t] then
    for _, c in ipairs(CHECKS[t](v)) do item:add_proto_expert_info(ef[c[1]], c[2]) end
  end
  if PART.machine[t] then machine_error(tvb, off, size, item, pinfo, v, ctx, PART.machine[t]) end
  if PART.body[t] then PART.body[t](tvb, off, size, item, pinfo, v, ctx) end
  local text = PART.summary[t] and PART.summary[t](v) or t
  item:set_text(${short_lua} .. " " .. text)
  if ctx.depth == 0 then pinfo.cols.info:append((ctx.shown and " " or "") .. text); ctx.shown = true end
  return size
end

dissect_stream = function(tvb, pinfo, tree, off, ctx)
  local len = tvb:len()
  while off < len do
    local size, need = frame_at(tvb, pinfo, tree, off, ctx)
    if size == false then return len, nil, true end
    if size == nil then return off, need, false end
    off = off + size
  end
  return off, nil, false
end

function P.dissector(tvb, pinfo, tree)
  local len = tvb:len()
  if len == 0 then return 0 end
  local conv = conversation(pinfo)${dispatch}
  local dir = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
  pinfo.cols.protocol = ${short_lua}
  -- after a byte that is no frame, refwire reads the rest of the direction as undecoded bytes
  local broke = conv.broken[dir]
  if broke ~= nil and pinfo.number > broke then
    local r = tvb:range(0)
    tree:add(P, r, "undecoded: after the error in frame " .. broke):add(hf._undecoded, r)
    return len
  end
  pinfo.cols.info:clear()
  local ctx = {depth = 0, conv = conv, dir = dir, count = {n = 0}${ctx_extra}}
  local off, need, broken = dissect_stream(tvb, pinfo, tree, 0, ctx)
  if not pinfo.visited then  -- the frame this direction's bytes end inside, if any (for its FIN)
    conv.cut[dir] = (need ~= nil and not broken)
      and {at = (conv.consumed[dir] or 0) + off, t = ctx.cut_t, size = ctx.cut_size, known = ctx.cut_known} or nil
    conv.consumed[dir] = (conv.consumed[dir] or 0) + off  -- the stream offset of the next call's first byte
  end
  if broken then
    if not pinfo.visited and broke == nil then conv.broken[dir] = pinfo.number end
    return len
  end
  if need ~= nil then  -- ask TCP for the rest of the frame
    pinfo.desegment_offset = off
    pinfo.desegment_len = need
  end
  return len
end

-- ----------------------------------------------------------------- the end of a direction
-- A FIN from a side whose bytes end inside a frame: refwire's machine raises "connection closed
-- inside a frame" there, and those bytes wait in TCP's reassembly for ever (shown nowhere else);
-- a FIN between frames asks PART.at_eof.  A postdissector (it sees the FIN, which has no payload).
local f_fin = Field.new("tcp.flags.fin")
local f_fin_seq = Field.new("tcp.seq")  -- relative: the FIN's is the direction's byte count + 1
local END = Proto(NAME .. "_eof", ${title_lua} .. ": connection end")
function END.dissector(tvb, pinfo, tree)
  local fin = f_fin()
  if fin == nil or not fin.value then return end
  local stream = f_stream()
  local conv = stream and conversations[tostring(stream.value)]
  if conv == nil then return end
  local dir = tostring(pinfo.src) .. ":" .. tostring(pinfo.src_port)
  -- (decided once: tshark's first pass of two builds no tree, so the FIN flag may first be
  -- seen on the second, where conv.cut holds what the first pass ended with: the same)
  if conv.eof[pinfo.number] == nil then
    local cut, text, section = conv.cut[dir], nil, ${eof_section_lua}
    local seq = f_fin_seq()
    if cut ~= nil and seq ~= nil then
      cut = {have = tonumber(tostring(seq.value)) - 1 - cut.at, t = cut.t, size = cut.size, known = cut.known}
      local what = cut.t and ((cut.t:match("^[AEIOUaeiou]") and "an " or "a ") .. cut.t .. " frame") or "a frame"
      if cut.t == nil then
        text = string.format("connection closed inside %s: %d byte%s, before its type", what, cut.have, cut.have == 1 and "" or "s")
      elseif cut.known then
        text = string.format("connection closed inside %s: %d of %d bytes", what, cut.have, cut.size)
      else
        text = string.format("connection closed inside %s: %d of at least %d bytes", what, cut.have, cut.size)
      end
    elseif conv.broken[dir] == nil and conv.machine_broken[dir] == nil and PART.at_eof then
      text, section = PART.at_eof(conv, dir)
    end
    conv.eof[pinfo.number] = text ~= nil
      and {text = text .. " (" .. SPEC_FILE .. (section and (" " .. section) or "") .. ")", cut = cut} or false
  end
  local e = conv.eof[pinfo.number]
  if not e then return end
  local item = tree:add(P, tvb:range(0, 0))
  item:set_text(${short_lua} .. " " .. e.text)
  item:add(hf._eof, true):set_generated()
  if e.cut ~= nil then
    item:add(hf._eof_have, e.cut.have):set_generated()
    if e.cut.known then item:add(hf._eof_size, e.cut.size):set_generated() end
  end
  item:add_proto_expert_info(ef.eof, e.text)
  pinfo.cols.info:append(" [" .. e.text .. "]")
end
register_postdissector(END)

-- ----------------------------------------------------------------- registration
local tcp_port = DissectorTable.get("tcp.port")
for _, port in ipairs({${ports}}) do tcp_port:add(port, P) end
${heuristic}
end
""")

#: Sizing a frame by its type's fixed part or the part's size function.
_SIZING_BY_TYPE: Final = r"""  ctx.cut_size, ctx.cut_known = lay.min_size, PART.size[t] == nil
  if avail < lay.min_size then return nil, PART.size[t] and DESEGMENT_ONE_MORE_SEGMENT or lay.min_size - avail end
  local v = read_fixed(tvb, off, lay)
  local size, by = lay.min_size, nil
  if PART.size[t] then
    size, by = PART.size[t](tvb, off, avail, v)
    if size == nil then return nil, DESEGMENT_ONE_MORE_SEGMENT end
    ctx.cut_size, ctx.cut_known = size, true
  end
  if size > LIMIT.max_frame_size then
    undecoded(tvb, tree, off, "limit", string.format(${limit_fmt}, t, size, LIMIT.max_frame_size, by or "size"))
    return false
  end
  if avail < size then return nil, size - avail end"""

#: Sizing every frame by its header: a fixed part plus a length field (``Part.length_rule``).
_SIZING_BY_LENGTH: Final = r"""  -- every frame is HEADER bytes plus its length field (the header alone sizes it)
  local size, by = HEADER + field_value(tvb, off, LENGTH_FIELD), LENGTH_FIELD.name
  ctx.cut_size, ctx.cut_known = size, true
  if size > LIMIT.max_frame_size then
    undecoded(tvb, tree, off, "limit", string.format(${limit_fmt}, t, size, LIMIT.max_frame_size, by))
    return false
  end
  if avail < size then return nil, size - avail end
  if size < lay.min_size then  -- shorter than its type's fixed part: only the fields inside it
    local fit = {min_size = lay.min_size, fields = {}}
    for _, f in ipairs(lay.fields) do
      if f.offset + f.size <= size then fit.fields[#fit.fields + 1] = f end
    end
    lay = fit
  end
  local v = read_fixed(tvb, off, lay)"""

#: Handing a connection over to another dissector (``Part.dispatch``).
_DISPATCH: Final = r"""
  local other = PART.dispatch(tvb, pinfo, tree, conv)
  if other == true then  -- not known yet: one more segment
    pinfo.desegment_offset = 0
    pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
    return len
  end
  if other then other(tvb, pinfo, tree); return len end"""

_HEURISTIC: Final = r"""local function heuristic(tvb, pinfo, tree)
  if not PART.heuristic(tvb, pinfo) then return false end
  pinfo.conversation = P  -- the connection's later packets come here directly
  P.dissector(tvb, pinfo, tree)
  return true
end
P:register_heuristic("tcp", heuristic)"""


def generate(desc: Descriptor, part: Part | None = None, layout: Layout | None = None) -> str:
    """The Lua dissector of the protocol ``desc`` describes, from its layout and its
    dissector part (both loaded through the descriptor unless given)."""
    part = part if part is not None else desc.load("dissector")
    layout = layout if layout is not None else desc.load("layout")
    if not isinstance(part, Part) or not isinstance(layout, Layout):
        raise TypeError(f"{desc.name}: the dissector piece must be a Part and the layout a Layout")
    if "max_frame_size" not in part.limits:
        raise ValueError(f"{desc.name}: the dissector part names no max_frame_size")
    layouts = (layout,) if part.server_layout is None else (layout, part.server_layout)
    keys = _field_keys(layouts, part.name)
    tf = Field("(state)", 0, 0, "uint") if part.frame_type else _type_field(layouts, part.type_field)
    spec = part.spec
    unknown = f"{part.unknown_type_text} ({spec} {part.unknown_type_section})"
    over = f"%s of %d bytes is over max_frame_size=%d (field %s) ({spec} {part.limit_section})"
    extra: list[str] = []
    type_end = tf.offset + tf.size
    if part.frame_type and (part.type_codes or part.length_rule is not None):
        raise ValueError(f"{desc.name}: a part that types frames by state has no type codes or length rule")
    if part.type_codes:
        codes = ", ".join(f"[{c}] = {lua_string(t)}" for c, t in sorted(part.type_codes.items()))
        extra.append(f"-- the frame types by their code (the {tf.name} field)\nlocal TYPE_CODES = {{{codes}}}")
    if part.length_rule is not None:
        header, name = part.length_rule
        lf = _type_field(layouts, name, "length")
        type_end = max(type_end, lf.offset + lf.size)
        extra.append(
            f"local HEADER = {header}  -- a frame is HEADER bytes plus its {name} field\n"
            f"local LENGTH_FIELD = {{name = {lua_string(lf.name)}, offset = {lf.offset}, size = {lf.size}, kind = {lua_string(lf.kind)}}}"
        )
    if part.server_layout is not None:
        extra.append(
            "-- the frames the server sends: PART.from_server(tvb, pinfo, conv) -> whether the server sent these bytes\n"
            + _layout_lua(part.server_layout, keys, "SERVER_LAYOUT")
        )
    if part.frame_type:
        type_decl = "-- no type field: PART.frame_type names each frame's type from the connection's state"
        type_read = "  local t = PART.frame_type(tvb, off, avail, pinfo, ctx)\n  if t == nil then return nil, DESEGMENT_ONE_MORE_SEGMENT end"
    else:
        type_decl = (
            f"local TYPE_FIELD = {{name = {lua_string(tf.name)}, offset = {tf.offset}, size = {tf.size}, kind = {lua_string(tf.kind)}}}\n"
            f"local TYPE_END = {type_end}  -- bytes needed before the frame type is known"
        )
        type_lookup = '\n  t = TYPE_CODES[t] or string.format("0x%02x", t)' if part.type_codes else ""
        type_read = f"  if avail < TYPE_END then return nil, DESEGMENT_ONE_MORE_SEGMENT end\n  local t = field_value(tvb, off, TYPE_FIELD){type_lookup}"
    sizing = Template(_SIZING_BY_TYPE if part.length_rule is None else _SIZING_BY_LENGTH).substitute(limit_fmt=lua_string(over))
    text = _TEMPLATE.substitute(
        name=part.name,
        name_lua=lua_string(part.name),
        title=part.title,
        title_lua=lua_string(part.title),
        short_lua=lua_string(part.short),
        layout_ref=str(desc.layout),
        part_ref=str(desc.dissector),
        spec=spec,
        spec_lua=lua_string(spec),
        eof_section_lua=lua_string(part.eof_section) if part.eof_section else "nil",
        limits=", ".join(f"{k} = {v}" for k, v in sorted(part.limits.items())),
        order=layout.byte_order,
        layout=_layout_lua(layout, keys),
        big="true" if layout.byte_order == "big" else "false",
        type_decl=type_decl,
        type_read=type_read,
        frame_type_doc=(
            "\n--   PART.frame_type(tvb, off, avail, pinfo, ctx) -> the frame's type, or nil: more bytes are needed"
            if part.frame_type
            else ""
        ),
        type_extra="".join("\n" + e for e in extra),
        layout_of="(ctx.server and SERVER_LAYOUT or LAYOUT)" if part.server_layout is not None else "LAYOUT",
        sizing=sizing,
        start_extra=", pinfo, ctx" if part.start_ctx else "",
        dispatch=_DISPATCH if part.dispatch else "",
        ctx_extra=", server = PART.from_server(tvb, pinfo, conv)" if part.server_layout is not None else "",
        fields=_fields_lua(layouts, keys),
        checks=_checks_lua(part.checks, spec),
        part_fields=part.fields_lua.strip(),
        part_lua=part.lua.strip(),
        unknown_type_fmt=lua_string(unknown),
        ports=", ".join(str(p) for p in part.ports),
        heuristic=_HEURISTIC if part.heuristic else "",
    )
    return re.sub(r"\n{3,}", "\n\n", text).lstrip("\n")


def generate_many(descs: Iterable[Descriptor]) -> str:
    """One Lua file holding the dissectors of several protocols (each in its own block)."""
    return "\n".join(generate(d) for d in descs)
