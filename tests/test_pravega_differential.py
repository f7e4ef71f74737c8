"""The Pravega speed paths against the plain paths (specs/pravega/README.md §1-§5).

Every decoder and machine of ``refwire.pravega`` has a plain path that follows
the spec and, beside it, a speed path doing the same work faster
(``refwire.pravega._fast_frames``: hand-written decoders, ``commands()`` with them
inline, AppendBlockEnd runs; ``refwire.pravega._fast_connection``: appends straight
from the buffer).  Here the same input goes through one built with ``fast=False``
and one built with ``fast=True``, and everything they give must be equal: the
commands and events (by value), the bytes out (``data_to_send``), the state
(machine state, stream offset, bytes buffered, transitions seen, writer records),
and the errors (class, message, frame, field, offset).  The input: every vector
of ``specs/pravega/vectors/``, the hypothesis strategies of
``tests/pravega_strategies.py``, hostile streams, writer sessions of both client
styles, each fed whole, byte by byte and split at random.

The 2017 draft dialect has no speed path (its machines decode through the plain
layout interpreter only), so it has no differential test.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pravega_strategies import any_command, reframe, split, top_level_command
from support.pravega_block_end_runs import block_end_frame, block_end_session

from refwire.errors import ProtocolError
from refwire.pravega import frames as pf
from refwire.pravega.connection import ClientConnection, ServerConnection
from refwire.pravega.events import Append, ConnectionClosed, RequestReceived
from refwire.pravega.frames import (
    CLIENT_LIMITS,
    DEFAULT_LIMITS,
    AppendSetup,
    CommandDecoder,
    SegmentIsSealed,
    SetupAppend,
    decode_command,
    split_frames,
)
from refwire.pravega.writer import WriterSession
from refwire.sansio import NEED_DATA
from refwire.wire import Limits

VECTOR_DIR = Path(__file__).resolve().parents[1] / "specs" / "pravega" / "vectors"
SEG = "scope/stream/0.#epoch.0"
W = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
SMALL = Limits(max_frame_size=120, max_buffered=1 << 20)
FAST_AND_PLAIN = (True, False)


def _vectors(name: str) -> list[dict[str, Any]]:
    return list(json.loads((VECTOR_DIR / f"{name}.json").read_text(encoding="utf-8"))["vectors"])


def err_key(exc: BaseException) -> tuple[Any, ...]:
    """An error as both paths must give it: class, message, frame, field, offset."""
    if isinstance(exc, ProtocolError):
        return ("error", type(exc), str(exc), exc.protocol, exc.frame, exc.field, exc.offset)
    return ("error", type(exc), str(exc))


def splits(data: bytes, seed: int, count: int = 3) -> list[list[bytes]]:
    """``data`` whole, byte by byte, and cut at ``count`` random sets of places."""
    rng = random.Random(seed)
    out = [[data]]
    if len(data) <= 4096:  # (a long string vector: whole and one random split)
        out.append([data[i : i + 1] for i in range(len(data))])
    else:
        count = 1
    for _ in range(count):
        out.append(split(data, [rng.randrange(len(data) + 1) for _ in range(rng.randrange(1, 6))]))
    return out


# --------------------------------------------------------------------------- the decoder


def decode(
    parts: Sequence[bytes],
    *,
    fast: bool,
    how: str,
    limits: Limits = DEFAULT_LIMITS,
    allow_inner: bool = False,
    run_size: int = 256,
) -> list[Any]:
    """What a :class:`CommandDecoder` gives for ``parts``, pulled ``how``: ``next``
    (``next_command`` one by one), ``commands`` (the iterator) or ``runs``
    (``block_ends`` runs first, then ``next_command``)."""
    dec = CommandDecoder(limits, allow_inner=allow_inner, fast=fast)
    assert dec.fast is fast
    got: list[Any] = []
    try:
        for part in parts:
            dec.feed(part)
            if how == "commands":
                got.extend(dec.commands())
                continue
            while True:
                if how == "runs":
                    run = dec.block_ends(run_size)
                    if run is not None:
                        got.extend(run.commands())
                        dec.consume(sum(run.frame_sizes))
                        continue
                cmd = dec.next_command()
                if cmd is None:
                    break
                got.append(cmd)
    except ProtocolError as exc:
        got.append(err_key(exc))
    got.append(("state", dec.offset, dec.buffered, dec.pending_frame_name()))
    return got


def assert_decoders_agree(parts: Sequence[bytes], **kw: Any) -> list[Any]:
    """Every way of pulling on the speed path gives what ``next_command`` gives on the plain path."""
    oracle = decode(parts, fast=False, how="next", **kw)
    for fast in FAST_AND_PLAIN:
        for how in ("next", "commands", "runs"):
            assert decode(parts, fast=fast, how=how, **kw) == oracle, (fast, how)
    return oracle


def assert_decode_command_agrees(code: int, payload: bytes, **kw: Any) -> None:
    outcomes = []
    for fast in FAST_AND_PLAIN:
        try:
            got: Any = decode_command(code, payload, fast=fast, **kw)
        except ProtocolError as exc:
            got = err_key(exc)
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]


# --------------------------------------------------------------------------- the machines


def _writers(conn: ServerConnection) -> dict[Any, Any]:
    return {k: attrs.asdict(v) for k, v in conn._writers.items()}


def serve(parts: Sequence[bytes], *, fast: bool, limits: Limits = DEFAULT_LIMITS, fail_every: int = 0) -> list[Any]:
    """What a :class:`ServerConnection` gives for ``parts`` then EOF: its events, the
    bytes it sends and its state after each part, with every SetupAppend answered
    (AppendSetup at 0) and every Append stored, or refused when its event number is
    a multiple of ``fail_every`` (the writer state dropped, §5.4)."""
    conn = ServerConnection(limits, fast=fast)
    assert conn.fast is fast and (conn._fast_append is not None) is fast
    trace: list[Any] = []
    length = 0

    def drain() -> bool:
        nonlocal length
        while True:
            try:
                ev = conn.next_event()
            except ProtocolError as exc:
                trace.append(err_key(exc))
                return False
            if ev is NEED_DATA:
                return True
            trace.append(ev)
            if isinstance(ev, ConnectionClosed):
                continue
            if isinstance(ev, RequestReceived) and isinstance(ev.command, SetupAppend):
                cmd = ev.command
                conn.send(
                    AppendSetup(request_id=cmd.request_id, segment=cmd.segment, writer_id=cmd.writer_id, last_event_number=0),
                    now=0.0,
                )
            elif isinstance(ev, Append):
                if fail_every and ev.event_number % fail_every == 0:
                    conn.append_failed(ev, SegmentIsSealed(request_id=ev.request_id, segment=ev.segment), now=0.0)
                else:
                    length += len(ev.data)
                    conn.append_stored(ev, length, now=0.0)

    def snapshot() -> None:
        dec = conn._decoder
        trace.append(("out", conn.data_to_send()))
        trace.append(
            (
                "state",
                conn.state,
                dec.offset,
                dec.buffered,
                sorted(conn.transitions_seen),
                conn.ignored_block_end_bytes,
                _writers(conn),
                {k: attrs.asdict(v) for k, v in conn._sessions.items()},
                conn.peer_version,
                conn.must_close,
            )
        )

    for part in parts:
        conn.receive_data(part, now=0.0)
        ok = drain()
        snapshot()
        if not ok:
            return trace
    conn.receive_data(b"", now=0.0)
    drain()
    snapshot()
    return trace


def assert_servers_agree(parts: Sequence[bytes], **kw: Any) -> list[Any]:
    plain = serve(parts, fast=False, **kw)
    assert serve(parts, fast=True, **kw) == plain
    return plain


def client(parts: Sequence[bytes], *, fast: bool, limits: Limits = CLIENT_LIMITS) -> list[Any]:
    """What a :class:`ClientConnection` gives for the server's ``parts`` then EOF."""
    conn = ClientConnection(limits, fast=fast)
    assert conn.fast is fast and conn._decoder.fast is fast
    conn.initiate(now=0.0)
    trace: list[Any] = []
    for part in [*parts, b""]:
        conn.receive_data(part, now=0.0)
        try:
            while (ev := conn.next_event()) is not NEED_DATA:
                trace.append(ev)
        except ProtocolError as exc:
            trace.append(err_key(exc))
            break
        finally:
            trace.append(("state", conn.state, conn._decoder.offset, conn._decoder.buffered, conn.data_to_send()))
    return trace


def assert_clients_agree(parts: Sequence[bytes], **kw: Any) -> list[Any]:
    plain = client(parts, fast=False, **kw)
    assert client(parts, fast=True, **kw) == plain
    return plain


# --------------------------------------------------------------------------- every vector


@pytest.mark.parametrize("v", _vectors("commands"), ids=lambda v: v["name"])
def test_command_vectors(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    inner = v.get("context") == "in-block"
    code, n = struct.unpack_from(">ii", raw)
    assert_decode_command_agrees(code, raw, start=8, end=8 + n, base=8, allow_inner=inner)
    for parts in splits(raw * 3, len(raw)):
        assert_decoders_agree(parts, allow_inner=inner)
    if inner:
        assert split_frames(raw, fast=True) == split_frames(raw, fast=False)
    else:
        for parts in splits(raw, n):
            assert_clients_agree(parts)


@pytest.mark.parametrize("v", _vectors("errors"), ids=lambda v: v["name"])
def test_error_vectors(v: dict[str, Any]) -> None:
    raw = bytes.fromhex(v["hex"])
    server_side = v["direction"] == "client->server"
    limits = DEFAULT_LIMITS if server_side else CLIENT_LIMITS
    for parts in splits(raw, len(raw)):
        assert_decoders_agree(parts, limits=limits)
        if server_side:
            assert_servers_agree(parts, limits=limits)
        else:
            assert_clients_agree(parts, limits=limits)


@pytest.mark.parametrize("v", _vectors("appends"), ids=lambda v: v["name"])
def test_append_vectors(v: dict[str, Any]) -> None:
    sent = b"".join(bytes.fromhex(step["client"]) for step in v["steps"] if "client" in step)
    replies = b"".join(bytes.fromhex(step["server"]) for step in v["steps"] if "server" in step)
    for parts in splits(sent, len(sent)):
        assert_decoders_agree(parts)
        assert_servers_agree(parts)
        assert_servers_agree(parts, fail_every=2)
    for parts in splits(replies, len(replies)):
        assert_decoders_agree(parts, limits=CLIENT_LIMITS)
        assert_clients_agree(parts)


def _string_hex(v: dict[str, Any]) -> bytes | None:
    """A string vector's bytes (u16 length + modified UTF-8), None for one that only fails to encode."""
    if "hex" in v:
        return bytes.fromhex(v["hex"])
    if "hex_prefix" in v:
        return bytes.fromhex(v["hex_prefix"]) + bytes.fromhex(v["hex_repeat"]) * int(v["repeat"])
    return None


@pytest.mark.parametrize("v", _vectors("strings"), ids=lambda v: v["name"])
def test_string_vectors(v: dict[str, Any]) -> None:
    raw = _string_hex(v)
    if raw is None:
        pytest.skip("an encoding error only: the encoder has one path")
    body = struct.pack(">q", 1) + W.bytes + raw + b"\x00\x00"
    setup = struct.pack(">ii", SetupAppend.TYPE, len(body)) + body
    for parts in splits(setup, len(raw)):
        assert_decoders_agree(parts)
        assert_servers_agree(parts)
    # the string as the segment of a SegmentRead (the speed path decodes ASCII names only)
    read = raw + struct.pack(">q??i", 5, True, False, 2) + b"ab" + struct.pack(">q", 9)
    frame = struct.pack(">ii", pf.SegmentRead.TYPE, len(read)) + read
    for parts in splits(frame, len(raw)):
        assert_clients_agree(parts)


# --------------------------------------------------------------------------- hypothesis


@st.composite
def _commands_stream(draw: st.DrawFn, commands: st.SearchStrategy[pf.Command]) -> tuple[bytes, list[int]]:
    frames = [c.encode() for c in draw(st.lists(commands, max_size=5))]
    # hostile: some frames cut short (their header saying so), or their header lying
    for i in draw(st.lists(st.integers(0, 4), max_size=2)):
        if i < len(frames):
            n = len(frames[i]) - 8
            if draw(st.booleans()):
                frames[i] = reframe(frames[i], draw(st.integers(0, n)))
            else:
                lie = draw(st.sampled_from([-1, n - 1, n + 1, 1 << 24]))
                frames[i] = frames[i][:4] + struct.pack(">i", lie) + frames[i][8:]
    data = b"".join(frames)
    return data, draw(st.lists(st.integers(0, len(data)), max_size=4))


_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(_commands_stream(top_level_command))
def test_any_top_level_commands_decode_alike(case: tuple[bytes, list[int]]) -> None:
    data, cuts = case
    assert_decoders_agree(split(data, cuts))
    assert_decoders_agree(split(data, cuts), limits=SMALL)


@_SETTINGS
@given(_commands_stream(any_command))
def test_any_commands_in_a_block_decode_alike(case: tuple[bytes, list[int]]) -> None:
    data, cuts = case
    assert_decoders_agree(split(data, cuts), allow_inner=True)
    outcomes = []
    for fast in FAST_AND_PLAIN:
        try:
            got: Any = split_frames(data, base=3, fast=fast)
        except ProtocolError as exc:
            got = err_key(exc)
        outcomes.append(got)
    assert outcomes[0] == outcomes[1]


@_SETTINGS
@given(top_level_command, st.binary(max_size=6), st.integers(0, 64))
def test_one_payload_cut_or_extended_decodes_alike(cmd: pf.Command, tail: bytes, cut: int) -> None:
    wire = cmd.encode()
    for payload in (wire[8:], wire[8 : 8 + cut], wire[8:] + tail):
        assert_decode_command_agrees(cmd.TYPE, payload, base=8)


@_SETTINGS
@given(_commands_stream(top_level_command))
def test_any_server_replies_reach_the_client_alike(case: tuple[bytes, list[int]]) -> None:
    data, cuts = case
    assert_clients_agree(split(pf.Hello().encode() + data, cuts))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(block_end_session(), st.sampled_from([0, 0, 2, 3]))
def test_append_sessions_and_hostile_frames_are_served_alike(case: tuple[list[uuid.UUID], list[bytes]], fail_every: int) -> None:
    """The sessions of ``test_pravega_fast_block_end_runs``: writers set up, Rust and Java
    appends, event numbers going backwards, strangers and hostile frames."""
    writers, parts = case
    setups = b"".join(SetupAppend(request_id=i + 1, writer_id=w, segment=SEG).encode() for i, w in enumerate(writers))
    assert_servers_agree([pf.Hello().encode() + setups, *parts], fail_every=fail_every)
    assert_servers_agree([pf.Hello().encode() + setups + b"".join(parts)], limits=SMALL, fail_every=fail_every)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(block_end_frame([W, uuid.UUID(int=2)]), max_size=8), st.lists(st.integers(0, 400), max_size=4))
def test_hostile_block_end_streams_decode_alike(frames: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frames)
    for limits in (DEFAULT_LIMITS, SMALL):
        for run_size in (2, 3, 256):
            oracle = decode(split(data, cuts), fast=False, how="next", limits=limits)
            assert decode(split(data, cuts), fast=True, how="runs", limits=limits, run_size=run_size) == oracle


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["rust", "java"]),
    st.lists(st.binary(max_size=40), min_size=1, max_size=12),
    st.integers(1, 5),
    st.lists(st.integers(0, 2000), max_size=5),
    st.sampled_from([None, [17], [64, 9], [200]]),
)
def test_writer_sessions_are_served_alike(
    style: str, events: list[bytes], batch: int, cuts: list[int], block_sizes: list[int] | None
) -> None:
    """Realistic traffic: a writer session of either client style (Java blocks
    ending in PartialEvents or Padding, Rust bare AppendBlockEnds), cut anywhere."""
    session = WriterSession(SEG, W, style=style, max_batch_events=batch)  # type: ignore[arg-type]
    if block_sizes is not None:
        session.java_block_sizes = block_sizes
    for e in events:
        session.add(e)
    setup = session.setup(1)
    session.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=pf.NULL_VALUE))
    stream = pf.Hello().encode() + setup.encode() + session.take()
    trace = assert_servers_agree(split(stream, cuts))
    assert sum(e.event_count for e in trace if isinstance(e, Append)) == len(events)


# --------------------------------------------------------------------------- the switch


_PROBE = (
    "from refwire.pravega.connection import ClientConnection, ServerConnection\n"
    "from refwire.pravega.frames import CommandDecoder\n"
    "d, s, c = CommandDecoder(), ServerConnection(), ClientConnection()\n"
    "print(d.fast, type(d).__name__ == 'FastCommandDecoder', s.fast, s._fast_append is not None, c.fast, c._decoder.fast)\n"
)


@pytest.mark.parametrize(("value", "fast"), [(None, True), ("1", False), ("0", True)])
def test_refwire_reference_selects_the_plain_path(value: str | None, fast: bool) -> None:
    """``REFWIRE_REFERENCE=1`` at import: every decoder and machine built without
    ``fast=`` takes the plain path; unset (or 0), the speed path."""
    env = {k: v for k, v in os.environ.items() if k != "REFWIRE_REFERENCE"}
    if value is not None:
        env["REFWIRE_REFERENCE"] = value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(fast)] * 6


def _calls_into_fast_modules(run: Callable[[], object]) -> set[str]:
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        name = os.path.basename(frame.f_code.co_filename)
        if event == "call" and name.startswith("_fast"):
            seen.add(f"{name}:{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return seen


def test_the_plain_path_runs_no_code_of_the_speed_modules() -> None:
    session = WriterSession(SEG, W, style="rust", max_batch_events=1)
    for i in range(4):
        session.add(b"e%d" % i)
    setup = session.setup(1)
    session.on_append_setup(AppendSetup(request_id=1, segment=SEG, writer_id=W, last_event_number=pf.NULL_VALUE))
    stream = pf.Hello().encode() + setup.encode() + session.take()
    reply = pf.DataAppended(writer_id=W, event_number=1, previous_event_number=0, request_id=1).encode()

    def run(fast: bool) -> Callable[[], object]:
        def go() -> object:
            decode([stream], fast=fast, how="runs", allow_inner=True)
            decode([stream], fast=fast, how="commands", allow_inner=True)
            client([reply * 3], fast=fast)
            return serve([stream], fast=fast)

        return go

    assert _calls_into_fast_modules(run(False)) == set()
    if (sys.modules["refwire.pravega._fast_frames"].__file__ or "").endswith(".py"):  # (compiled code reports no calls)
        assert {"_fast_frames.py:commands", "_fast_frames.py:block_ends", "_fast_connection.py:fast_append"} <= (
            _calls_into_fast_modules(run(True))
        )


@pytest.mark.parametrize("fast", [True, False])
def test_a_decoder_is_of_its_path_s_class_and_copies_keep_it(fast: bool) -> None:
    """``CommandDecoder(fast=...)`` builds the speed path's subclass or this class
    (a subclass of it stays plain), and a copy is on the same path."""
    import copy

    from refwire.pravega._fast_frames import FastCommandDecoder
    from refwire.pravega.frames import CommandDecoder, KeepAlive

    dec = CommandDecoder(fast=fast)
    assert dec.fast is fast and (type(dec) is FastCommandDecoder) is fast
    dec.feed(KeepAlive().encode())
    twin = copy.deepcopy(dec)
    assert type(twin) is type(dec) and twin.fast is fast
    assert list(twin.commands()) == [KeepAlive()] and list(dec.commands()) == [KeepAlive()]

    class Mine(CommandDecoder):
        __slots__ = ()

    assert type(Mine(fast=True)) is Mine and Mine(fast=True).fast is False
