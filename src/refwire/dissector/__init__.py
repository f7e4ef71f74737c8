"""Wireshark dissectors generated from refwire's frame layouts (``refwire dissector``).

A protocol's :class:`~refwire.describe.Layout` (the table its describer and its
codec follow) becomes a Wireshark Lua dissector: a ProtoField per field, a frame
size per frame type, TCP reassembly, registration on the protocol's usual ports
and as a heuristic dissector, and expert-info warnings where refwire would
reject the bytes.  What a table cannot say is hand-written Lua in the protocol's
part (:class:`~refwire.dissector.generate.Part`), which its descriptor names
(``Descriptor.dissector``), so the dissector cannot drift from the codec.

The generic part (:mod:`refwire.dissector.generate`, :mod:`refwire.dissector.cli`)
names no protocol; each ``refwire/dissector/<protocol>.py`` holds one protocol's part.
"""

from __future__ import annotations

from .generate import Check, Part, generate, generate_many

__all__ = ["Check", "Part", "generate", "generate_many"]
