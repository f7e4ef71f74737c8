"""No ``refwire`` command shows a person a traceback.

Every subcommand is run with bad input, against a peer that is not there
(127.0.0.1:1), and against a peer that speaks another protocol (an HTTP
error page); each ends with one plain line on stderr and exit status 1 (what
a user can cause) or 2 (bad usage).  Ctrl-C on a command that waits is exit
status 130 without a traceback (a server stops as asked, exit status 0).  A new subcommand must add its bad
invocations here (a test checks every subcommand is covered).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from support.commands import REFWIRE
from support.socket_peers import socket_peer

from refwire.cli import build_parser, describe_error, main

pytestmark = pytest.mark.timeout(120)

#: An address no local socket can bind (TEST-NET-3, RFC 5737).
NOWHERE = "203.0.113.1:0"
DOWN = "127.0.0.1:1"


@pytest.fixture(scope="module")
def http_peer() -> Iterator[str]:
    """A peer that answers anything with an HTTP error page and closes."""

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(2)
            try:
                conn.recv(4096)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass

    with socket_peer(answer) as address:
        yield address


def bad_invocations(peer: str, tmp: Path) -> dict[str, list[list[str]]]:
    """Subcommand -> argument lists that must fail cleanly."""
    missing = str(tmp / "missing")
    return {
        "serve lumberjack": [
            ["serve", "lumberjack", "--listen", NOWHERE],
            ["serve", "lumberjack", "--listen", "127.0.0.1:0", "--tls-cert", missing, "--tls-key", missing],
        ],
        "serve pravega": [["serve", "pravega", "--listen", NOWHERE], ["serve", "pravega", "--max-connections", "-1"]],
        "serve tank": [["serve", "tank", "--listen", NOWHERE], ["serve", "tank", "--max-connections", "-1"]],
        "serve seastar-rpc": [["serve", "seastar-rpc", "--listen", NOWHERE], ["serve", "seastar-rpc", "--max-connections", "-1"]],
        "send lumberjack": [
            ["send", "lumberjack", DOWN, "--count", "1", "--max-attempts", "1"],
            ["send", "lumberjack", peer, "--count", "1"],
            ["send", "lumberjack", "nowhere.invalid:5044", "--count", "1"],
        ],
        "send pravega": [
            ["send", "pravega", DOWN, "--segment", "s/t/0", "--count", "1", "--max-attempts", "1"],
            ["send", "pravega", peer, "--segment", "s/t/0", "--count", "1"],
            ["send", "pravega", peer, "--segment", "s/t/0", "--count", "1", "--dialect", "draft-2017"],
        ],
        "read pravega": [
            ["read", "pravega", DOWN, "--segment", "s/t/0"],
            ["read", "pravega", peer, "--segment", "s/t/0"],
        ],
        "send tank create-topic": [["send", "tank", DOWN, "create-topic", "t"], ["send", "tank", peer, "create-topic", "t"]],
        "send tank produce": [["send", "tank", DOWN, "produce", "t", "m"], ["send", "tank", peer, "produce", "t", "m"]],
        "send tank consume": [["send", "tank", DOWN, "consume", "t"], ["send", "tank", peer, "consume", "t"]],
        "send tank status": [["send", "tank", DOWN, "status"], ["send", "tank", peer, "status"]],
        "send tank discover": [["send", "tank", DOWN, "discover"], ["send", "tank", peer, "discover"]],
        "read tank": [
            ["read", "tank", DOWN, "t"],
            ["read", "tank", peer, "t"],
            ["read", "tank", DOWN, "t", "--from", "soon"],
            ["read", "tank", DOWN, "t", "--timeout", "0"],
        ],
        "send seastar-rpc": [
            ["send", "seastar-rpc", DOWN, "echo"],
            ["send", "seastar-rpc", peer, "echo"],
            ["send", "seastar-rpc", peer, "no-such-verb"],
        ],
        "campaign": [
            ["campaign", "--protocols", "nosuch"],
            ["campaign", "--seeds", "0"],
            ["campaign", "--runner", "loop", "--workload", '{"bug": "ack-befor-deliver"}'],
            ["campaign", "--runner", "loop", "--workload", '{"windw": 3}'],
        ],
        "record": [["record", "--upstream", DOWN, "--out", str(tmp / "cap"), "--listen", NOWHERE]],
        "chaos": [
            ["chaos", "lumberjack", "--upstream", DOWN, "--listen", NOWHERE],
            ["chaos", "lumberjack", "--upstream", DOWN, "--schedule", missing],
            ["chaos", "nosuch", "--upstream", DOWN],
            ["chaos", "lumberjack"],
            ["chaos", "lumberjack", "--upstream", DOWN, "--control", NOWHERE],
            ["chaos", "lumberjack", "--upstream", DOWN, "--control", "127.0.0.1:0", "--listen", NOWHERE],
            ["chaos", "serve"],
            ["chaos", "serve", "--control", NOWHERE],
            ["chaos", "serve", "--control", "127.0.0.1:0", "--upstream", DOWN],
        ],
        "decode": [["decode", missing]],
        "dissector": [
            ["dissector", "nosuch", "-o", str(tmp / "d.lua")],
            ["dissector", "lumberjack", "-o", str(tmp / "missing" / "dir" / "d.lua")],
        ],
        "analyze": [["analyze", missing, "--out", str(tmp / "out")]],
        "conform lumberjack": [["conform", "lumberjack", "--server", DOWN], ["conform", "lumberjack"]],
        "conform list": [["conform", "list", "nosuch"]],
        "conform show": [["conform", "show", "nosuch"]],
        "conform replay": [["conform", "replay", missing]],
        "conform matrix": [["conform", "matrix", missing, "--out", str(tmp / "m")]],
        "sim": [
            ["sim", "nosuch"],
            ["sim", "lumberjack", "--seeds", "0"],
            ["sim", "lumberjack", "--knobs", '{"workload": {"bug": "nope"}}'],
            ["sim", "tank", "--knobs", '{"faults": {"latncy": 1}}'],
        ],
    }


def _leaf_commands() -> set[str]:
    out: set[str] = set()

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*prefix, name])
                return
        out.add(" ".join(prefix))

    walk(build_parser(), [])
    return out


def test_every_subcommand_has_bad_invocations(tmp_path: Path) -> None:
    table = bad_invocations("127.0.0.1:9", tmp_path)
    # conform's per-protocol commands share one code path: one of them stands for all
    leaves = {
        c
        for c in _leaf_commands()
        if not (c.startswith("conform ") and c.split()[1] not in ("list", "show", "replay", "matrix", "lumberjack"))
    }
    assert leaves - set(table) == set(), "add bad invocations for these subcommands"


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        status = int(exc.code or 0)
    captured = capsys.readouterr()
    return status, captured.err + captured.out


def test_bad_input_down_and_wrong_protocol_peers_give_one_plain_line(
    http_peer: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    failures = []
    for command, runs in bad_invocations(http_peer, tmp_path).items():
        for argv in runs:
            t0 = time.monotonic()
            status, text = _run(argv, capsys)
            took = time.monotonic() - t0
            problem = None
            if status not in (1, 2):
                problem = f"exit status {status}"
            elif "Traceback" in text or "internal error" in text:
                problem = "traceback"
            elif not any(line.startswith(("refwire: ", "refwire ", "usage: ")) for line in text.splitlines()):
                problem = "no plain error line"
            elif took > 15:
                problem = f"took {took:.1f}s"
            if problem:
                failures.append(f"{command}: {' '.join(argv)}: {problem}\n{text[-2000:]}")
    assert not failures, "\n\n".join(failures)


def test_describe_error_names_the_file_and_the_host() -> None:
    with pytest.raises(OSError) as info:
        Path("/nonexistent/cert.pem").read_bytes()
    assert describe_error(info.value) == "No such file or directory: /nonexistent/cert.pem"
    assert describe_error(socket.gaierror(-2, "Name or service not known")).startswith("cannot resolve the host name")


def test_json_with_nan_on_stdin_is_refused_with_its_line(
    lumberjack_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": 1}\n{"a": NaN}\n{"a": 3}\n'))
    status, text = _run(["send", "lumberjack", lumberjack_server.address], capsys)
    assert status == 2 and "stdin line 2 is not JSON" in text and "Traceback" not in text
    # the line before it was shipped; nothing after it was
    assert lumberjack_server.events == [{"a": 1}]


def _interrupted(
    args: list[str], ready: str, stream: str, signum: signal.Signals = signal.SIGINT
) -> subprocess.CompletedProcess[str]:
    """Run ``refwire ARGS``, wait for a line matching ``ready`` on its ``stream``
    ("stdout"/"stderr": the command is then doing what it waits in), send
    ``signum`` (SIGINT: a Ctrl-C)."""
    proc = subprocess.Popen([*REFWIRE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = b""
    try:
        pipe = proc.stdout if stream == "stdout" else proc.stderr
        assert pipe is not None
        fd = pipe.fileno()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            deadline = time.monotonic() + 60
            while not re.search(ready, seen.decode(errors="replace"), re.M):
                left = deadline - time.monotonic()
                assert left > 0 and sel.select(left), f"{args}: no line /{ready}/ on {stream} within 60 s: {seen!r}"
                chunk = os.read(fd, 65536)  # (the raw fd: a buffered reader could hold the line unseen)
                assert chunk, f"{args} exited ({proc.wait()}) before /{ready}/: {seen!r}"
                seen += chunk
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    out_t, err_t = out.decode(errors="replace"), err.decode(errors="replace")
    if stream == "stdout":
        out_t = seen.decode(errors="replace") + out_t
    else:
        err_t = seen.decode(errors="replace") + err_t
    return subprocess.CompletedProcess(proc.args, proc.returncode, out_t, err_t)


def _serve(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [*REFWIRE, *args, "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"listening on (\S+:\d+)", line)
        if found:
            return proc, found.group(1)
    proc.kill()
    raise AssertionError("the server did not start")


def test_ctrl_c_on_a_server_stops_it_gracefully_with_exit_130_and_sigterm_with_0() -> None:
    """A server stops on SIGINT as asked -- drained, its summary printed -- and
    exits 130 as an interrupted command does; SIGTERM, a request to stop, is 0
    (each sent once it prints that it listens, never after a sleep)."""
    proc = _interrupted(["serve", "lumberjack", "--listen", "127.0.0.1:0"], r"listening on", "stderr")
    assert proc.returncode == 130, proc.stderr
    assert "received 0 events on 0 connections" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    proc = _interrupted(["serve", "lumberjack", "--listen", "127.0.0.1:0"], r"listening on", "stderr", signal.SIGTERM)
    assert proc.returncode == 0, proc.stderr
    assert "received 0 events on 0 connections" in proc.stderr, proc.stderr


def test_ctrl_c_on_the_tap_stops_it_with_its_summary_and_130(tmp_path: Path) -> None:
    """``refwire record`` (the loopback tap) stops on Ctrl-C as a server does:
    its summary, exit status 130, no traceback."""
    out = tmp_path / "cap"
    proc = _interrupted(["record", "--upstream", DOWN, "--out", str(out)], r"listening on", "stderr")
    assert proc.returncode == 130, proc.stderr
    assert f"recorded 0 connections into {out}" in proc.stderr + proc.stdout, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr


def test_ctrl_c_on_a_following_read_and_a_pending_call_is_130() -> None:
    """Ctrl-C is a cancellation of the command (refwire.cli.run_interruptibly), so
    the exit status is 130 whatever the cleanup raises or a reply that lands at
    that moment returns (the races behind the old "connection closed before the
    reply to ReadSegment", exit 1, and a pending call that exited 0)."""
    store, store_addr = _serve(["serve", "pravega", "--no-controller"])
    try:
        done = subprocess.run(
            [*REFWIRE, "send", "pravega", store_addr, "--segment", "s/t/0", "--create", "--count", "2"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        proc = _interrupted(["read", "pravega", store_addr, "--segment", "s/t/0", "--follow"], r"^event 1$", "stdout")
        assert proc.returncode == 130, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        rpc, rpc_addr = _serve(["serve", "seastar-rpc"])
        try:
            args = ["send", "seastar-rpc", rpc_addr, "sleep", "--int32", "20000", "--timeout", "60"]
            proc = _interrupted(args, r"^connected:", "stderr")
            assert proc.returncode == 130, proc.stderr
        finally:
            rpc.send_signal(signal.SIGINT)
            rpc.wait(10)
    finally:
        store.send_signal(signal.SIGINT)
        try:
            store.wait(10)
        except subprocess.TimeoutExpired:
            store.kill()
            store.wait()

def _store_and_events() -> tuple[subprocess.Popen[str], str]:
    """A segment store (in a process group of its own) holding "event 0", "event 1" in s/t/0."""
    proc = subprocess.Popen(
        [*REFWIRE, "serve", "pravega", "--no-controller", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,  # a group of its own, which a reader may join (one Ctrl-C for both)
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"listening on (\S+:\d+)", line)
        if found:
            break
    else:
        raise AssertionError(f"the store did not start ({proc.wait()})")
    addr = found.group(1)
    done = subprocess.run(
        [*REFWIRE, "send", "pravega", addr, "--segment", "s/t/0", "--create", "--count", "2"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return proc, addr


def test_one_ctrl_c_for_the_reader_and_the_store_at_once_is_130_and_0() -> None:
    """A terminal's Ctrl-C reaches the following reader and the store in one
    process group: the store stops (closing the reader's connection) while the
    reader handles its own Ctrl-C; the reader still exits 130, never 1 with
    "connection closed before the reply to ReadSegment"."""
    store, addr = _store_and_events()
    try:
        reader = subprocess.Popen(
            [*REFWIRE, "read", "pravega", addr, "--segment", "s/t/0", "--follow"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=store.pid,
        )
        assert reader.stdout is not None
        seen = b""
        while b"event 1\n" not in seen:
            chunk = os.read(reader.stdout.fileno(), 65536)
            assert chunk, f"the reader exited ({reader.wait()}) early: {seen!r}"
            seen += chunk
        os.killpg(store.pid, signal.SIGINT)  # the reader and the store, as one Ctrl-C
        _, err = reader.communicate(timeout=30)
        assert reader.returncode == 130, err
        assert b"Traceback" not in err and b"connection closed" not in err, err
        assert store.wait(30) == 130
    finally:
        for p in (store,):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_ctrl_c_twice_on_a_following_read_is_130_without_a_traceback() -> None:
    """The second Ctrl-C lands while the first one's cancellation unwinds (or
    while the log's last lines are written): still 130, no traceback."""
    from support.interrupt import interrupt_at, looks_clean

    store, addr = _store_and_events()
    try:
        proc = interrupt_at(
            ["-v", "read", "pravega", addr, "--segment", "s/t/0", "--follow"], [("stdout", r"^event 1$"), ("stdout", "")]
        )
        # 130 even when the second Ctrl-C lands while the interpreter itself is exiting
        # (refwire._entry ignores SIGINT once the command is interrupted)
        assert proc.returncode == 130, proc.stderr
        assert looks_clean(proc) is None, looks_clean(proc)
    finally:
        store.send_signal(signal.SIGINT)
        try:
            store.wait(10)
        except subprocess.TimeoutExpired:
            store.kill()
            store.wait()


def test_ctrl_c_while_send_lumberjack_waits_for_stdin_is_130() -> None:
    """``send lumberjack`` reading events from a stdin that says nothing more: Ctrl-C
    ends it at once (the thread blocked on stdin is abandoned, not waited for)."""
    server = subprocess.Popen(
        [*REFWIRE, "-vv", "serve", "lumberjack", "--listen", "127.0.0.1:0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    client: subprocess.Popen[bytes] | None = None
    try:
        assert server.stderr is not None
        addr = ""
        for line in server.stderr:
            found = re.search(r"listening on (\S+:\d+)", line)
            if found:
                addr = found.group(1)
                break
        assert addr, "the server did not start"
        client = subprocess.Popen(
            [*REFWIRE, "send", "lumberjack", addr], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert client.stdin is not None
        client.stdin.write(b'{"a": 1}\n')
        client.stdin.flush()
        for line in server.stderr:  # the first event is through: the client now waits on stdin
            if "batch of 1 event" in line:
                break
        client.send_signal(signal.SIGINT)
        assert client.wait(30) == 130  # (stdin stays open: only the Ctrl-C can end it)
        assert client.stderr is not None and b"Traceback" not in client.stderr.read()
    finally:
        for p in (client, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for an in-process Ctrl-C test, as a console
    command has it (a Spark session earlier in this worker installs its own,
    which cancels Spark jobs instead), put back as found afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _fake_read(monkeypatch: pytest.MonkeyPatch, command: Any) -> None:
    """``refwire read pravega`` runs ``command`` instead (its exit status is the test's)."""
    import refwire.pravega.cli

    monkeypatch.setattr(refwire.pravega.cli, "_read", command)


@pytest.mark.usefixtures("python_sigint")
def test_a_ctrl_c_whose_cleanup_fails_is_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The command's cleanup raises a connection-closed error after Ctrl-C (its
    peer got the same Ctrl-C): the exit status is 130, and that error is not
    reported as the cause."""

    async def command(args: argparse.Namespace) -> int:
        signal.raise_signal(signal.SIGINT)
        try:
            await trio.sleep_forever()
        finally:
            raise trio.BrokenResourceError("connection closed before the reply to ReadSegment")

    _fake_read(monkeypatch, command)
    status, text = _run(["read", "pravega", DOWN, "--segment", "s/t/0"], capsys)
    assert status == 130 and "connection closed" not in text and "Traceback" not in text, text


@pytest.mark.usefixtures("python_sigint")
def test_a_ctrl_c_as_the_command_succeeds_is_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A reply that lands with the Ctrl-C (the command returns 0 right after it): 130, not 0."""

    async def command(args: argparse.Namespace) -> int:
        signal.raise_signal(signal.SIGINT)
        return 0

    _fake_read(monkeypatch, command)
    assert _run(["read", "pravega", DOWN, "--segment", "s/t/0"], capsys)[0] == 130

    async def command_after_a_checkpoint(args: argparse.Namespace) -> int:
        signal.raise_signal(signal.SIGINT)
        await trio.lowlevel.checkpoint()
        return 0

    _fake_read(monkeypatch, command_after_a_checkpoint)
    assert _run(["read", "pravega", DOWN, "--segment", "s/t/0"], capsys)[0] == 130


@pytest.mark.usefixtures("python_sigint")
def test_a_ctrl_c_while_the_last_log_lines_are_written_is_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A second Ctrl-C landing in the log handler's close (the old 13-line
    traceback from logs.py) is 130 too, and further Ctrl-Cs meanwhile are ignored."""
    import refwire.cli
    from refwire.logs import BackgroundStderr

    seen: list[object] = []
    before = signal.getsignal(signal.SIGINT)  # (Python's, or one a Spark session in this worker installed)

    class Interrupted(BackgroundStderr):
        def close(self, timeout: float = 1.0) -> None:
            seen.append(signal.getsignal(signal.SIGINT))
            super().close(timeout)
            raise KeyboardInterrupt

    monkeypatch.setattr(refwire.cli, "_log_to_stderr", lambda level: Interrupted(io.StringIO()))
    status, text = _run(["serve", "pravega", "--max-connections", "-1"], capsys)
    assert status == 130 and "Traceback" not in text, text
    assert seen == [signal.SIG_IGN]
    assert signal.getsignal(signal.SIGINT) is before


def test_v1_says_once_that_non_string_values_go_as_json_text(
    lumberjack_server: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO('{"a": "x"}\n{"a": 1, "b": true}\n{"a": 2}\n'))
    status, text = _run(["send", "lumberjack", lumberjack_server.address, "--lj-version", "1"], capsys)
    assert status == 0, text
    assert text.count("sends every value as a string") == 1 and "event 2, key 'a': 1 becomes the string \"1\"" in text
    assert lumberjack_server.events == [{"a": "x"}, {"a": "1", "b": "true"}, {"a": "2"}]


def test_tls_files_that_cannot_be_used_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    other = ca.issue_cert("127.0.0.1")
    files = {name: str(tmp_path / name) for name in ("cert.pem", "key.pem", "other-key.pem", "ca.pem")}
    cert.cert_chain_pems[0].write_to_path(files["cert.pem"])
    cert.private_key_pem.write_to_path(files["key.pem"])
    other.private_key_pem.write_to_path(files["other-key.pem"])
    ca.cert_pem.write_to_path(files["ca.pem"])
    missing = str(tmp_path / "missing.pem")
    serve = ["serve", "lumberjack", "--listen", "127.0.0.1:0"]
    cases = [
        ([*serve, "--tls-cert", missing], f"the certificate file {missing!r} cannot be read: No such file or directory"),
        ([*serve, "--tls-cert", files["cert.pem"]], f"{files['cert.pem']!r} holds no private key (give it with the key option)"),
        (
            [*serve, "--tls-cert", files["cert.pem"], "--tls-key", files["ca.pem"]],
            f"the key file {files['ca.pem']!r} holds no private key",
        ),
        (
            [*serve, "--tls-cert", files["key.pem"], "--tls-key", files["key.pem"]],
            f"the certificate file {files['key.pem']!r} holds no PEM certificate",
        ),
        (
            [*serve, "--tls-cert", files["cert.pem"], "--tls-key", files["other-key.pem"]],
            f"the private key does not belong to the certificate in {files['cert.pem']!r}",
        ),
        (
            [*serve, "--tls-cert", files["cert.pem"], "--tls-key", files["key.pem"], "--tls-client-ca", files["key.pem"]],
            f"the CA file {files['key.pem']!r} holds no usable PEM certificate",
        ),
        (["send", "lumberjack", DOWN, "--count", "1", "--tls-ca", missing], f"the CA file {missing!r} cannot be read"),
    ]
    for argv, message in cases:
        status, text = _run(argv, capsys)
        assert status == 1 and message in text and "Traceback" not in text, (argv, text)


def test_ctrl_c_while_the_command_is_still_loading_is_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The entry point catches a Ctrl-C that lands while refwire.cli (trio, attrs,
    every protocol's commands) is being imported, and main() one that lands
    while the commands are being loaded."""
    import types

    import refwire.cli
    from refwire import _entry

    class Loading(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt

    monkeypatch.setitem(sys.modules, "refwire.cli", Loading("refwire.cli"))
    monkeypatch.delattr(sys.modules["refwire"], "cli", raising=False)
    assert _entry.main() == 130
    assert capsys.readouterr().err == ""
    monkeypatch.undo()

    def interrupted() -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(refwire.cli, "build_parser", interrupted)
    assert refwire.cli.main(["serve"]) == 130
    assert "Traceback" not in capsys.readouterr().err
