"""Pravega codec properties (specs/pravega/README.md §1-§4):
round trip of every command class, split invariance, truncation and garbage
safety, the frame limit checked from the header alone, and the optional
trailing fields of §2.4 decoding with their defaults."""

from __future__ import annotations

import struct
import subprocess
import sys
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pravega_strategies import (
    CODES,
    INNER_CODES,
    TOP_LEVEL_CODES,
    any_command,
    command_strategy,
    field_boundaries,
    first_optional_index,
    optional_defaults,
    reframe,
    split,
    texts,
    top_level_command,
)

from refwire.errors import LimitExceeded, LocalProtocolError, ProtocolError, RemoteLimitExceeded, RemoteProtocolError
from refwire.pravega.connection import ClientConnection, ServerConnection
from refwire.pravega.frames import (
    CLIENT_LIMITS,
    COMMANDS,
    DEFAULT_LIMITS,
    MAX_WIRECOMMAND_SIZE,
    AppendBlockEnd,
    Command,
    CommandDecoder,
    DataAppended,
    Hello,
    SetupAppend,
    decode_command,
    encode_command,
)
from refwire.sansio import NEED_DATA
from refwire.wire import decode_mutf8, encode_mutf8

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decode_frame(frame: bytes, *, allow_inner: bool = True) -> Command:
    code, n = struct.unpack_from(">ii", frame)
    assert n == len(frame) - 8
    return decode_command(code, frame, start=8, base=8, allow_inner=allow_inner)


def decode_stream(chunks: list[bytes], *, allow_inner: bool = False) -> tuple[list[Command], int]:
    dec = CommandDecoder(allow_inner=allow_inner)
    out: list[Command] = []
    for c in chunks:
        dec.feed(c)
        out.extend(dec.commands())
    return out, dec.buffered


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("code", CODES, ids=[COMMANDS[c].NAME for c in CODES])
@SETTINGS
@given(data=st.data())
def test_every_command_round_trips(code: int, data: st.DataObject) -> None:
    cls = COMMANDS[code]
    cmd = data.draw(command_strategy(cls))
    frame = encode_command(cmd)
    assert struct.unpack_from(">i", frame)[0] == code
    assert decode_frame(frame) == cmd
    assert cmd.encode() == frame


def test_every_registered_command_has_a_layout_and_a_unique_name() -> None:
    names = [cls.NAME for cls in COMMANDS.values()]
    assert len(names) == len(set(names))
    assert all(cls.DIRECTION in ("request", "reply", "both", "inner") for cls in COMMANDS.values())
    # the codes of specs/pravega/README.md §3 the seed document names: a spot check that they are registered
    for code in (
        -127,
        -2,
        -1,
        0,
        1,
        2,
        3,
        4,
        5,
        7,
        8,
        9,
        10,
        11,
        12,
        20,
        21,
        28,
        29,
        30,
        31,
        38,
        39,
        50,
        51,
        52,
        53,
        55,
        57,
        60,
        61,
        89,
        100,
    ):
        assert code in COMMANDS, code
    for retired in (13, 14, 22, 23, 24, 25, 26, 27, 54, 72, 73):
        assert retired not in COMMANDS


@SETTINGS
@given(st.lists(top_level_command, max_size=8), st.lists(st.integers(0, 4000), max_size=12))
def test_any_split_of_a_stream_decodes_the_same(cmds: list[Command], cuts: list[int]) -> None:
    data = b"".join(c.encode() for c in cmds)
    whole, left1 = decode_stream([data])
    pieces, left2 = decode_stream(split(data, cuts))
    bytewise, left3 = decode_stream([data[i : i + 1] for i in range(len(data))]) if len(data) < 600 else (whole, 0)
    assert whole == pieces == bytewise == cmds
    assert left1 == left2 == left3 == 0


@SETTINGS
@given(texts)
def test_strings_round_trip_through_mutf8_and_the_utf_field(text: str) -> None:
    raw = encode_mutf8(text)
    assert b"\x00" not in raw  # NUL is C0 80
    assert not any(0xF0 <= b for b in raw)  # no 4-byte sequences: surrogates are 3 bytes each
    assert decode_mutf8(raw) == text
    cmd = SetupAppend(request_id=1, writer_id=uuid.UUID(int=7), segment=text, delegation_token=text)
    assert decode_frame(cmd.encode()) == cmd


# --------------------------------------------------------------------------- truncation and garbage


@SETTINGS
@given(any_command, st.data())
def test_a_truncated_frame_waits_or_gives_a_typed_error(cmd: Command, data: st.DataObject) -> None:
    frame = cmd.encode()
    cut = data.draw(st.integers(0, len(frame) - 1))
    # 1. The header still says the whole length: the decoder waits for more bytes.
    dec = CommandDecoder(allow_inner=True)
    dec.feed(frame[:cut])
    assert dec.next_command() is None
    assert dec.buffered == cut
    # 2. A header that agrees with the cut payload: decoded (optional fields
    #    defaulted) or a typed error naming a field inside the frame -- never another exception.
    if cut < 8:
        return
    short = reframe(frame, cut - 8)
    try:
        got = decode_frame(short)
    except LocalProtocolError as exc:
        assert exc.field is not None
        assert exc.offset is not None and 0 <= exc.offset <= cut
    else:
        assert type(got) is type(cmd)


garbage = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda code, payload, tail: struct.pack(">ii", code, len(payload)) + payload + tail,
        st.one_of(st.sampled_from(CODES), st.integers(-(2**31), 2**31 - 1)),
        st.binary(max_size=120),
        st.binary(max_size=16),
    ),
)


@settings(max_examples=100, deadline=None)
@given(garbage, st.booleans())
def test_garbage_gives_commands_or_a_protocol_error_only(data: bytes, inner: bool) -> None:
    dec = CommandDecoder(allow_inner=inner)
    dec.feed(data)
    try:
        for _ in dec.commands():
            pass
    except LocalProtocolError:
        pass
    for conn in (ServerConnection(), ClientConnection()):
        conn.receive_data(data, now=0.0)
        conn.receive_data(b"", now=0.0)
        for _ in range(200):
            try:
                ev = conn.next_event()
            except RemoteProtocolError:
                break
            if ev is NEED_DATA or type(ev).__name__ == "ConnectionClosed":
                break


@SETTINGS
@given(st.binary(max_size=64))
def test_mutf8_decoder_raises_only_value_error(data: bytes) -> None:
    try:
        decode_mutf8(data)
    except ValueError:
        pass


# --------------------------------------------------------------------------- limits (README §1.1)


@pytest.mark.parametrize(
    ("limits", "largest_ok"),
    [(DEFAULT_LIMITS, MAX_WIRECOMMAND_SIZE - 8), (CLIENT_LIMITS, MAX_WIRECOMMAND_SIZE)],
    ids=["server", "client"],
)
@settings(max_examples=40, deadline=None)
@given(code=st.sampled_from(TOP_LEVEL_CODES), extra=st.integers(1, 2**31 - 1 - MAX_WIRECOMMAND_SIZE))
def test_a_length_past_the_limit_is_refused_from_the_header_alone(limits: object, largest_ok: int, code: int, extra: int) -> None:
    n = min(largest_ok + extra, 2**31 - 1)
    dec = CommandDecoder(limits)  # type: ignore[arg-type]
    dec.feed(b"\x00" * 0 + struct.pack(">ii", code, n))
    with pytest.raises(LimitExceeded) as ei:
        dec.next_command()
    assert ei.value.field == "length" and ei.value.offset == 4
    assert dec.buffered == 8  # nothing was waited for or allocated beyond the header
    # the largest allowed length only waits
    ok = CommandDecoder(limits)  # type: ignore[arg-type]
    ok.feed(struct.pack(">ii", code, largest_ok))
    assert ok.next_command() is None


def test_limit_error_is_remote_on_the_server_machine_and_after_earlier_frames() -> None:
    conn = ServerConnection()
    conn.receive_data(Hello().encode() + struct.pack(">ii", 4, MAX_WIRECOMMAND_SIZE), now=0.0)
    assert type(conn.next_event()).__name__ == "HelloReceived"
    with pytest.raises(RemoteLimitExceeded) as ei:
        conn.next_event()
    assert ei.value.offset == 16 + 4 and ei.value.frame == "AppendBlockEnd"


@pytest.mark.parametrize("n", [-1, -(2**31), -8])
def test_negative_length_is_a_protocol_error_not_a_limit(n: int) -> None:
    dec = CommandDecoder()
    dec.feed(struct.pack(">ii", 100, n))
    with pytest.raises(LocalProtocolError) as ei:
        dec.next_command()
    assert not isinstance(ei.value, LimitExceeded)
    assert ei.value.field == "length" and ei.value.offset == 4


def test_the_encoder_refuses_frames_past_the_limit() -> None:
    big = AppendBlockEnd(
        writer_id=uuid.UUID(int=1),
        size_of_whole_events=0,
        data=bytes(MAX_WIRECOMMAND_SIZE),
        num_events=1,
        last_event_number=1,
    )
    with pytest.raises(LocalProtocolError):
        big.encode()


def test_strings_past_65535_encoded_bytes_are_refused_by_the_encoder() -> None:
    SetupAppend(request_id=1, writer_id=uuid.UUID(int=0), segment="a" * 65535).encode()
    with pytest.raises(LocalProtocolError) as ei:
        SetupAppend(request_id=1, writer_id=uuid.UUID(int=0), segment="\x00" * 32768).encode()
    assert ei.value.field == "segment"


# --------------------------------------------------------------------------- optional trailing fields (§2.4)

OPTIONAL_CODES = [c for c in CODES if first_optional_index(COMMANDS[c]) is not None]


@pytest.mark.parametrize("code", OPTIONAL_CODES, ids=[COMMANDS[c].NAME for c in OPTIONAL_CODES])
@SETTINGS
@given(data=st.data())
def test_every_field_boundary_prefix_after_the_mandatory_fields_decodes_with_defaults(code: int, data: st.DataObject) -> None:
    cls = COMMANDS[code]
    cmd = data.draw(command_strategy(cls))
    frame = cmd.encode()
    bounds = field_boundaries(cmd)
    assert bounds[-1] == len(frame) - 8  # the independent size model agrees with the encoder
    first = first_optional_index(cls)
    assert first is not None
    defaults = optional_defaults(cls)
    names = [name for name, _k, _o in cls.LAYOUT]
    for keep in range(first, len(names) + 1):
        payload_len = bounds[keep - 1] if keep else 0
        got = decode_frame(reframe(frame, payload_len))
        for i, name in enumerate(names):
            want = getattr(cmd, name) if i < keep else defaults[name]
            assert getattr(got, name) == want, (cls.NAME, keep, name)


def test_data_appended_v2_layout_gets_the_java_defaults() -> None:
    """WireCommandsTest's DataAppendedV2 (specs/pravega/README.md §10.2): writerId + eventNumber only."""
    payload = uuid.UUID(int=5).bytes + struct.pack(">q", 9)
    got = decode_frame(struct.pack(">ii", 7, len(payload)) + payload)
    assert got == DataAppended(
        writer_id=uuid.UUID(int=5), event_number=9, previous_event_number=-1, request_id=-1, current_segment_write_offset=-1
    )


@pytest.mark.parametrize("code", INNER_CODES, ids=[COMMANDS[c].NAME for c in INNER_CODES])
def test_in_block_codes_are_not_top_level(code: int) -> None:
    frame = struct.pack(">ii", code, 0)
    if code == -1:
        assert decode_frame(frame, allow_inner=False) == COMMANDS[-1](length=0)  # type: ignore[call-arg]
        return
    with pytest.raises(LocalProtocolError) as ei:
        decode_frame(frame, allow_inner=False)
    assert ei.value.field == "type"


@pytest.mark.parametrize("code", [6, 13, 54, 72, 73, 99, 2**31 - 1, -(2**31)])
def test_unknown_and_retired_codes_are_a_clear_error(code: int) -> None:
    dec = CommandDecoder()
    dec.feed(struct.pack(">ii", code, 0))
    with pytest.raises(LocalProtocolError) as ei:
        dec.next_command()
    assert ei.value.field == "type" and ei.value.offset == 0 and "unknown" in str(ei.value)


def test_errors_are_protocol_errors() -> None:
    assert issubclass(LimitExceeded, ProtocolError)


def test_importing_the_packages_gives_the_core_only() -> None:
    """``refwire.pravega`` and its draft dialect export the Sans-IO core: no trio, simulator or pipeline."""
    code = (
        "import sys, refwire.pravega, refwire.pravega.draft2017\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'h2', 'pyspark')"
        " or m.startswith(('refwire.sim', 'refwire.pipeline')))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
