"""Optional mypyc build of the codec cores (for faster decoders; see the README's benchmarks).

Everything about the package lives in pyproject.toml; this file only adds the
compiled extension modules, and only when ``REFWIRE_MYPYC=1`` is set.  Without
it (the default) the install is pure Python, byte for byte what it was.

    bash scripts/build_mypyc.sh          # compile in place next to the sources (src/refwire/**.so)
    bash scripts/build_mypyc.sh --clean  # remove them again: back to pure Python

The modules compiled are :data:`MYPYC_MODULES`; every other module stays
interpreted and imports the compiled ones as usual.  mypyc needs the ``dev``
extra (mypy) and a C compiler; ``REFWIRE_MYPYC=1 pip install --no-build-isolation .``
builds a compiled wheel the same way.
"""

from __future__ import annotations

import os

from setuptools import setup

#: The codec cores (source paths): the byte primitives and each protocol's frame
#: codec, plain path and speed path alike (refwire.speed chooses between them at run
#: time; a compiled build compiles both).  The connection machines stay interpreted:
#: tests and the conformance runner subclass them.
MYPYC_MODULES = [
    "src/refwire/wire.py",
    "src/refwire/lumberjack/codec.py",
    "src/refwire/lumberjack/compression.py",
    "src/refwire/lumberjack/frames.py",
    "src/refwire/lumberjack/_fast_frames.py",
    "src/refwire/pravega/commands.py",
    "src/refwire/pravega/frames_codec.py",
    "src/refwire/pravega/frames.py",
    "src/refwire/pravega/_fast_frames.py",
    "src/refwire/tank/frames.py",
    "src/refwire/tank/bundles.py",
    "src/refwire/tank/_fast_bundles.py",
    "src/refwire/seastar_rpc/negotiation.py",
    "src/refwire/seastar_rpc/compression.py",
    "src/refwire/seastar_rpc/_fast_compression.py",
    "src/refwire/seastar_rpc/frames.py",
    "src/refwire/seastar_rpc/_fast_frames.py",
]


def _ext_modules() -> list[object]:
    if os.environ.get("REFWIRE_MYPYC", "") in ("", "0"):
        return []
    from mypyc.build import mypycify

    return list(
        mypycify(
            MYPYC_MODULES,
            opt_level=os.environ.get("REFWIRE_MYPYC_OPT", "3"),
            # One shared library inside the package (src/refwire/_codec__mypyc.*.so),
            # not a hash-named one at the top of site-packages.
            group_name="refwire._codec",
            target_dir="build/mypyc",
        )
    )


setup(ext_modules=_ext_modules())
