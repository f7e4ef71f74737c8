"""``refwire dissector PROTOCOL... -o FILE.lua``: write a Wireshark Lua dissector.

The protocols offered are those whose descriptor names a ``dissector`` part
(:mod:`refwire.protocols`); the Lua is generated from their frame layouts
(:mod:`refwire.dissector.generate`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cliutil import Commands, UsageError
from ..protocols import descriptor, names

__all__ = ["register"]


def register(cmds: Commands) -> None:
    """Add ``refwire dissector``."""
    known = names("dissector")
    p = cmds.top.add_parser(
        "dissector",
        help="write a Wireshark Lua dissector generated from the frame layouts",
        description=(
            "Write a Wireshark Lua dissector (Wireshark 4.0 or later) for the protocols named, generated "
            "from the frame layouts refwire's codecs follow. Load it with `tshark -X lua_script:FILE` or "
            f"copy it into Wireshark's personal Lua plugins folder. Protocols with one: {', '.join(known)}."
        ),
    )
    p.add_argument("protocols", nargs="+", metavar="PROTOCOL", help=f"one of: {', '.join(known)}")
    p.add_argument("-o", "--output", required=True, metavar="FILE.lua", help="the Lua file to write ('-': stdout)")
    p.set_defaults(func=_dissector)


def _dissector(args: argparse.Namespace) -> int:
    from .generate import generate_many

    descs = []
    for name in dict.fromkeys(args.protocols):
        try:
            descs.append(descriptor(name, "dissector"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    text = generate_many(descs)
    if args.output == "-":
        print(text, end="")
        return 0
    out = Path(args.output)
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    return 0
