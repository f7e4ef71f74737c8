"""What the Lumberjack cases share: the spec, the profiles of the real servers and
clients, the features, :class:`ServerObserver` (what a server sends), the
frame builders (``W``, ``J``, ``D``, ``C``, :func:`window`) and the server
cases' helpers.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import orjson

from ....describe import Described
from ....errors import ProtocolError
from ....lumberjack.describe import describer
from ....lumberjack.frames import V2, Compressed, DataFrame, JsonFrame, Window
from ...conversation import Conversation
from ...model import CaseBook, Verdict

SPEC = "specs/lumberjack/README.md"
PASS, NON_STRICT, INFO, FAIL = Verdict.PASS, Verdict.NON_STRICT, Verdict.INFO, Verdict.FAIL
ALL = "strict go-lumber logstash"
#: Keepalives may come at any time while a server holds a batch (§3.4).
KEEPALIVES = ("A 0", "1A 0")
CLOSED = "FIN RST"

PROFILES = {
    "strict": f"the behaviour {SPEC} specifies (refwire's defaults)",
    "go-lumber": "go-lumber's server (Beats' library): count acks, W 0 ignored, FIN on errors (§3.3, §6); "
    "as a client, Beats' go-lumber client: forgets a partial ack after an I/O error (§3.7)",
    "logstash": "Logstash's beats input: highest-seq acks with a signed compare, lenient framing, RST on errors (§3.3, §6, §7)",
}

FEATURES = {
    "v1": "protocol version 1 (W/D/A with version byte '1')",
    "compression": "C frames (zlib)",
    "compression.nested": "C frames inside C frames",
    "compression.window-inside": "a W inside a C frame",
    "empty-window": "answering W 0",
    "resend": "a client reconnects and resends what was not acked after a failure (§3.7); a client library that "
    "leaves this to its caller (go-lumber's, without libbeat) declares it",
    "tls": "TLS (client cases: refwire serves TLS with a CA made for the run, passed as {tls_ca})",
}


# --------------------------------------------------------------------------- observer


class ServerObserver:
    """Tokens for what a server sends: ``A n`` (v2 ack), ``1A n`` (v1 ack), any
    other frame as its version and type (``2W``), ``invalid <field>`` at the
    first byte that does not decode (then nothing more is decoded).  An ``A 0``
    is marked a keepalive (the conversation records its version byte and timing)."""

    def __init__(self) -> None:
        self._describer = describer(1 << 20, "s2c")
        self._broken = False

    def feed(self, data: bytes) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        out = []
        for d in self._describer.feed(data):
            if d.error is not None:
                self._broken = True
                out.append(_invalid(d.error))
            else:
                out.append(self._token(d))
        return out

    def eof(self) -> list[tuple[str, dict[str, Any]]]:
        if self._broken:
            return []
        return [("truncated", {"type": "truncated", "bytes": len(d.data), "offset": d.offset}) for d in self._describer.end()]

    @staticmethod
    def _token(d: Described) -> tuple[str, dict[str, Any]]:
        version = d.fields["version"]
        if d.type == "A":
            prefix = "" if version == "2" else version
            frame = {"type": "A", "version": version, "seq": d.fields["seq"]}
            if d.fields["seq"] == 0:
                frame["keepalive"] = True  # (or the ack of a batch whose last seq is 0: they look the same, §3.2)
            return f"{prefix}A {d.fields['seq']}", frame
        return f"{version}{d.type}", {"type": type(d.frame).__name__, "version": version}


def _invalid(err: ProtocolError, **override: Any) -> tuple[str, dict[str, Any]]:
    info = {"type": "invalid", "field": err.field, "frame": err.frame, "offset": err.offset, "reason": err.reason}
    info.update(override)
    return f"invalid {err.field or 'frame'}", info


# --------------------------------------------------------------------------- frame helpers


def W(n: int, v: int = V2) -> bytes:
    return Window(n, v).encode()


def J(seq: int, doc: Any = None, *, raw: bytes | None = None) -> bytes:
    payload = raw if raw is not None else orjson.dumps(doc if doc is not None else {"message": f"event {seq}", "seq": seq})
    return JsonFrame(seq, payload).encode()


def D(seq: int, line: str = "hello") -> bytes:
    return DataFrame(seq, ((b"line", line.encode()), (b"seq", str(seq).encode()))).encode()


def C(inner: bytes, level: int = 6, v: int = V2) -> bytes:
    return Compressed(zlib.compress(inner, level), v).encode()


def window(seqs: Sequence[int], v: int = V2) -> bytes:
    return W(len(seqs), v) + b"".join(J(s) if v == V2 else D(s) for s in seqs)


def field_cuts(frames: Sequence[bytes]) -> list[int]:
    """Offsets of every field boundary of a run of W/J frames (§2)."""
    cuts: list[int] = []
    base = 0
    for f in frames:
        # version | type | u32 (W's count, J's seq) | J's len | J's json: a W (6 bytes) ends before the last two
        cuts.extend(base + k for k in (1, 2, 6, 10) if k < len(f))
        base += len(f)
        cuts.append(base)
    return cuts[:-1]


# --------------------------------------------------------------------------- server-case helpers


def server_book() -> CaseBook:
    """The book of one module's server cases (:mod:`.catalogue` joins the books, in order)."""
    return CaseBook(SPEC, server_ignore=KEEPALIVES)


async def _send_and_wait_acks(
    c: Conversation, data: bytes, acks: int, *, label: str, split: Any = "seeded", gap: float | None = None, wait: float = 3.0
) -> None:
    if await c.send(data, label=label, split=split, gap=gap, answers=acks):
        await c.wait_tokens(acks, wait, ignore=KEEPALIVES)


async def _send_and_wait_close(c: Conversation, data: bytes, *, label: str, wait: float = 3.0) -> None:
    if await c.send(data, label=label):
        await c.wait_close(wait)
