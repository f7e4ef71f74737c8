"""Running the real Pravega Python client (tests/interop/peers/pravega_client_peer.py) as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

#: The peer script: one scenario of the ``pravega`` PyPI client, printing ``RESULT {json}`` lines.
PEER = Path(__file__).resolve().parent.parent / "interop" / "peers" / "pravega_client_peer.py"


async def run_peer(uri: str, scenario: str, n: int = 1000, *, deadline: float = 60) -> list[dict[str, Any]]:
    """Run ``scenario`` of the peer against the controller at ``uri``; its RESULT records, in order.

    Killed after ``deadline`` seconds (the client retries forever when something is wrong)."""
    env = dict(os.environ, RUST_LOG="error")
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(PEER), uri, scenario, str(n)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
    )
    out = bytearray()
    try:
        with trio.fail_after(deadline):
            assert proc.stdout is not None
            async for chunk in proc.stdout:
                out.extend(chunk)
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.move_on_after(5):
                await proc.wait()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    return [json.loads(line[7:]) for line in text.splitlines() if line.startswith("RESULT ")]
