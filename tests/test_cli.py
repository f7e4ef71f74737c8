"""The ``refwire`` console script, run as a subprocess.

``serve`` listens on 127.0.0.1 port 0 and prints ``listening on HOST:PORT`` on
stderr; the tests parse it, run ``send`` against it and read the JSON lines the
server wrote.  Every subprocess runs under a timeout and is killed on the way out.
"""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from support.commands import REFWIRE

LOCAL = "127.0.0.1"
TIMEOUT = 30.0  # per subprocess


def refwire(*args: str, input: str | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*REFWIRE, *args], input=input, capture_output=True, text=True, timeout=timeout)


def assert_clean_failure(proc: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr


class Serve:
    """A running ``refwire serve lumberjack`` (stdout goes to a file, stderr is collected)."""

    def __init__(self, tmp_path: Path, *args: str, verbose: int = 0) -> None:
        self.stdout_path = tmp_path / f"serve-stdout-{time.monotonic_ns()}.txt"
        self._stdout = open(self.stdout_path, "w")
        self.proc = subprocess.Popen(
            [*REFWIRE, *["-v"] * verbose, "serve", "lumberjack", "--listen", f"{LOCAL}:0", *args],
            stdout=self._stdout,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.stderr_lines: list[str] = []
        self._drainer = threading.Thread(target=self._drain, daemon=True)
        self._drainer.start()
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"serve printed no 'listening on' line: {self.stderr}") from None
            if line is None:
                raise AssertionError(f"serve exited before listening: rc={self.proc.wait()} {self.stderr}")
            m = re.fullmatch(r"listening on (\S+):(\d+)", line.strip())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                break
        self.address = f"{self.host}:{self.port}"

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)

    def wait(self, timeout: float = TIMEOUT) -> int:
        rc = self.proc.wait(timeout=timeout)
        self._stdout.close()
        self._drainer.join(timeout)  # it ends at stderr's EOF: every line is in stderr_lines
        return rc

    def wait_for_line(self, part: str, timeout: float = TIMEOUT) -> str:
        """The next stderr line holding ``part`` (lines before it are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"serve printed no line with {part!r}: {self.stderr}") from None
            if line is None:
                raise AssertionError(f"serve ended before a line with {part!r}: {self.stderr}")
            if part in line:
                return line

    def stdout_docs(self) -> list[Any]:
        # split on "\n" only: JSON strings may hold U+2028 & co, which str.splitlines() would cut
        return [json.loads(line) for line in self.stdout_path.read_text(encoding="utf-8").split("\n") if line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT)
        if not self._stdout.closed:
            self._stdout.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Serve] = []

    def start(*args: str, verbose: int = 0) -> Serve:
        s = Serve(tmp_path, *args, verbose=verbose)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def generated(n: int) -> list[dict[str, Any]]:
    return [{"message": f"event {i}", "seq": i} for i in range(n)]


# --------------------------------------------------------------------------- serve + send


def test_serve_and_send_count(serve: Any) -> None:
    srv = serve("--exit-after", "50")
    sent = refwire("send", "lumberjack", srv.address, "--count", "50", "--window", "7")
    assert sent.returncode == 0, sent.stderr
    assert "sent 50 events, all acked" in sent.stderr
    assert srv.wait() == 0, srv.stderr
    assert srv.stdout_docs() == generated(50)
    assert "received 50 events on 1 connection" in srv.stderr


def test_serve_out_file(serve: Any, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    srv = serve("--exit-after", "30", "--out", str(out))
    sent = refwire("send", "lumberjack", srv.address, "--count", "30")
    assert sent.returncode == 0, sent.stderr
    assert srv.wait() == 0, srv.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == generated(30)
    assert srv.stdout_path.read_text() == ""


def test_send_json_lines_from_stdin(serve: Any) -> None:
    docs = [{"msg": f"line {i}", "nested": {"i": i, "ok": True}, "text": "ünïcødé \u2028 ✓"} for i in range(12)]
    srv = serve("--exit-after", "12")
    stdin = "\n".join(json.dumps(d) for d in docs[:5]) + "\n\n" + "\n".join(json.dumps(d) for d in docs[5:]) + "\n"
    sent = refwire("send", "lumberjack", srv.address, "--window", "5", input=stdin)
    assert sent.returncode == 0, sent.stderr
    assert srv.wait() == 0, srv.stderr
    assert srv.stdout_docs() == docs


def test_send_v1_plain_frames(serve: Any) -> None:
    srv = serve("--exit-after", "20")
    sent = refwire("send", "lumberjack", srv.address, "--count", "20", "--lj-version", "1", "--compression", "0", "--window", "6")
    assert sent.returncode == 0, sent.stderr
    assert srv.wait() == 0, srv.stderr
    # v1 D frames carry strings: the number arrives JSON-encoded as text
    assert srv.stdout_docs() == [{"message": f"event {i}", "seq": str(i)} for i in range(20)]


def test_send_running_sequence_across_the_wrap(serve: Any) -> None:
    srv = serve("--exit-after", "10")
    sent = refwire(
        "send",
        "lumberjack",
        srv.address,
        "--count",
        "10",
        "--window",
        "3",
        "--sequence",
        "running",
        "--first-seq",
        str(2**32 - 3),
    )
    assert sent.returncode == 0, sent.stderr
    assert srv.wait() == 0, srv.stderr
    assert srv.stdout_docs() == generated(10)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli-tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    server = ca.issue_cert(LOCAL, "localhost")
    server.cert_chain_pems[0].write_to_path(str(d / "server.crt"))
    server.private_key_pem.write_to_path(str(d / "server.key"))
    ca.issue_cert("beat.example").private_key_and_cert_chain_pem.write_to_path(str(d / "client.pem"))
    return {name: str(d / name) for name in ("ca.pem", "server.crt", "server.key", "client.pem")}


def test_tls_with_client_certificates(serve: Any, tls_files: dict[str, str]) -> None:
    srv = serve(
        "--exit-after", "10", "--tls-cert", tls_files["server.crt"], "--tls-key", tls_files["server.key"],
        "--tls-client-ca", tls_files["ca.pem"],
    )  # fmt: skip
    # without a client certificate: refused, cleanly
    bad = refwire(
        "send",
        "lumberjack",
        srv.address,
        "--count",
        "10",
        "--tls-ca",
        tls_files["ca.pem"],
        "--max-attempts",
        "1",
        "--ack-timeout",
        "5",
    )
    assert_clean_failure(bad, 1, "gave up")
    # without trusting the CA: refused too
    untrusted = refwire(
        "send", "lumberjack", srv.address, "--count", "10", "--tls", "--tls-cert", tls_files["client.pem"], "--max-attempts", "1"
    )
    assert_clean_failure(untrusted, 1, "gave up")
    good = refwire(
        "send", "lumberjack", srv.address, "--count", "10", "--tls-ca", tls_files["ca.pem"],
        "--tls-cert", tls_files["client.pem"], "--server-name", "localhost",
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert srv.wait() == 0, srv.stderr
    assert srv.stdout_docs() == generated(10)


def test_tls_no_verify(serve: Any, tls_files: dict[str, str]) -> None:
    srv = serve("--exit-after", "3", "--tls-cert", tls_files["server.crt"], "--tls-key", tls_files["server.key"])
    sent = refwire("send", "lumberjack", srv.address, "--count", "3", "--tls-no-verify")
    assert sent.returncode == 0, sent.stderr
    assert srv.wait() == 0, srv.stderr
    assert srv.stdout_docs() == generated(3)


def test_serve_stops_on_sigterm(serve: Any) -> None:
    srv = serve()
    # one event first: then the server is surely past installing its signal handler
    # (see test_serve_handles_sigterm_right_after_announcing_its_address for the window before)
    sent = refwire("send", "lumberjack", srv.address, "--count", "1")
    assert sent.returncode == 0, sent.stderr
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.wait() == 0, srv.stderr
    assert "received 1 event on 1 connection" in srv.stderr
    assert "Traceback" not in srv.stderr
    assert srv.stdout_docs() == generated(1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses F_GETPIPE_SZ to fill the stderr pipe")
def test_serve_handles_sigterm_right_after_announcing_its_address() -> None:
    import fcntl

    # Hold serve inside its 'listening on' print: its stderr is a pipe we filled to the brim.
    r, w = os.pipe()
    capacity = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
    os.set_blocking(w, False)
    filled = 0
    for size in (4096, 1):  # whole pages, then byte by byte: not even a short line fits
        try:
            while True:
                filled += os.write(w, b"#" * size)
        except BlockingIOError:
            pass
    assert filled >= capacity
    os.set_blocking(w, True)  # O_NONBLOCK is shared with the child: its write must block, not fail
    proc = subprocess.Popen([*REFWIRE, "serve", "lumberjack", "--listen", f"{LOCAL}:0"], stdout=subprocess.DEVNULL, stderr=w)
    os.close(w)
    try:
        # Signal once serve is stuck in that print: read from /proc, not guessed from a sleep.
        deadline = time.monotonic() + TIMEOUT
        while not _blocked_writing_stderr_with_sigterm_caught(proc.pid):
            assert proc.poll() is None, proc.returncode
            assert time.monotonic() < deadline, "serve never blocked in its announcement with its SIGTERM handler in place"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        rc = proc.wait(timeout=TIMEOUT)
    finally:
        os.close(r)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=TIMEOUT)
    stderr = b"".join(chunks).decode(errors="replace").lstrip("#")
    assert rc == 0, (rc, stderr)
    assert "received 0 events" in stderr


def _blocked_writing_stderr_with_sigterm_caught(pid: int) -> bool:
    """Whether process ``pid`` catches SIGTERM (trio's handler, installed just before
    the announcement) and its main thread sleeps in a write to a full pipe."""
    status = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"^SigCgt:\s*([0-9a-fA-F]+)$", status, re.MULTILINE)
    if m is None or not int(m.group(1), 16) >> (signal.SIGTERM - 1) & 1:
        return False
    wchan = Path(f"/proc/{pid}/wchan").read_text().strip()
    # a kernel that hides wchan ("0" or empty): the handler alone decides the outcome
    return "pipe_write" in wchan or wchan in ("", "0")


# --------------------------------------------------------------------------- failures


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOCAL, 0))
        return int(s.getsockname()[1])


def test_send_to_a_closed_port_fails_quickly() -> None:
    port = free_port()
    t0 = time.monotonic()
    proc = refwire("send", "lumberjack", f"{LOCAL}:{port}", "--count", "3", "--max-attempts", "1", timeout=15)
    assert time.monotonic() - t0 < 10
    assert_clean_failure(proc, 1, "gave up after 1 attempt:")
    assert f"{LOCAL}:{port}" in proc.stderr
    assert "3 not" in proc.stderr


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["send", "lumberjack", "foo:bar", "--count", "1"], None, "bad address 'foo:bar'"),
        (["send", "lumberjack", "127.0.0.1", "--count", "1"], None, "the port must be a number"),
        (["send", "lumberjack", "127.0.0.1:70000", "--count", "1"], None, "out of range"),
        (["send", "lumberjack", "127.0.0.1:5044", "--window", "0", "--count", "1"], None, "--window: 0 must be at least 1"),
        (
            ["send", "lumberjack", "127.0.0.1:5044", "--window", "20000", "--count", "1"],
            None,
            "--window 20000 is above --max-window 10000",
        ),
        (["send", "lumberjack", "127.0.0.1:5044", "--count", "0"], None, "must be at least 1"),
        (["send", "lumberjack", "127.0.0.1:5044", "--compression", "10", "--count", "1"], None, "--compression"),
        (["send", "lumberjack", "127.0.0.1:5044", "--lj-version", "3", "--count", "1"], None, "invalid choice"),
        (["send", "lumberjack", "127.0.0.1:5044", "--first-seq", "0", "--count", "1"], None, "--first-seq must be"),
        (["send", "lumberjack", "127.0.0.1:5044"], "not json\n", "stdin line 1 is not JSON"),
        (["send", "lumberjack", "127.0.0.1:5044"], "[1, 2]\n", "stdin line 1 is not a JSON object"),
        (["send", "nosuchproto", "127.0.0.1:5044"], None, "invalid choice: 'nosuchproto'"),
        (["serve", "nosuchproto"], None, "invalid choice: 'nosuchproto'"),
        (["serve", "lumberjack", "--listen", "localhost:http"], None, "bad address"),
        (["serve", "lumberjack", "--listen", "127.0.0.1:0", "--keepalive", "-1"], None, "must not be negative"),
        (["serve", "lumberjack", "--listen", "127.0.0.1:0", "--tls-key", "k.pem"], None, "need --tls-cert"),
        (["sim", "nosuchproto"], None, "no simulation for 'nosuchproto'"),
        (["sim", "lumberjack", "--seed", "1", "--knobs", "{bad"], None, "--knobs is not valid"),
        (["sim", "lumberjack", "--seed", "1", "--knobs", '{"faults": {"nope": 1}}'], None, "unknown fault knobs: nope"),
        (["bogus"], None, "invalid choice: 'bogus'"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_bad_arguments_exit_2(args: list[str], stdin: str | None, message: str) -> None:
    assert_clean_failure(refwire(*args, input=stdin, timeout=15), 2, message)


def test_send_nothing_from_empty_stdin() -> None:
    proc = refwire("send", "lumberjack", f"{LOCAL}:{free_port()}", input="\n\n", timeout=15)
    assert proc.returncode == 0, proc.stderr
    assert "nothing to send" in proc.stderr


def test_no_command_prints_help_and_exits_2() -> None:
    proc = refwire()
    assert proc.returncode == 2
    assert "usage: refwire" in proc.stdout + proc.stderr


def test_serve_on_a_busy_port_exits_2() -> None:
    with socket.socket() as busy:
        busy.bind((LOCAL, 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = refwire("serve", "lumberjack", "--listen", f"{LOCAL}:{port}", timeout=15)
    assert_clean_failure(proc, 2, f"cannot listen on {LOCAL}:{port}")


# --------------------------------------------------------------------------- sim


SIM_LINE = re.compile(r"^(ok  |FAIL) lumberjack seed=(\d+) outcome=(\S+) trace=([0-9a-f]{16}) ")


def sim_lines(stdout: str) -> list[re.Match[str]]:
    return [m for line in stdout.splitlines() if (m := SIM_LINE.match(line))]


def test_sim_seeds() -> None:
    proc = refwire("sim", "lumberjack", "--seeds", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = sim_lines(proc.stdout)
    assert [int(m.group(2)) for m in lines] == [0, 1, 2]
    assert all(m.group(1) == "ok  " and m.group(3) == "pass" for m in lines)
    assert "3 runs, 3 passed, 0 failed" in proc.stdout


def test_sim_seed_is_reproducible() -> None:
    first, second = refwire("sim", "lumberjack", "--seed", "5"), refwire("sim", "lumberjack", "--seed", "5")
    assert first.returncode == second.returncode == 0, first.stdout + first.stderr
    (a,), (b,) = sim_lines(first.stdout), sim_lines(second.stdout)
    assert a.group(4) == b.group(4)
    assert a.group(0) == b.group(0)
    other = sim_lines(refwire("sim", "lumberjack", "--seed", "6").stdout)
    assert other[0].group(4) != a.group(4)


def test_sim_json_output() -> None:
    proc = refwire("sim", "lumberjack", "--seeds", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 2
    assert [row["seed"] for row in rows] == [0, 1]
    assert all(row["outcome"] == "pass" and row["replay"] == f"refwire sim lumberjack --seed {row['seed']}" for row in rows)
    assert all(re.fullmatch(r"[0-9a-f]{16}", row["trace_hash"]) for row in rows)


def test_sim_planted_bug_fails_with_a_replay_line() -> None:
    proc = refwire("sim", "--seed", "1", "--knobs", '{"workload":{"bug":"ack-before-deliver"}}', "lumberjack")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = sim_lines(proc.stdout)
    assert line.group(1) == "FAIL"
    replays = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip().startswith("replay:")]
    assert len(replays) == 1, proc.stdout
    assert "1 runs, 0 passed, 1 failed" in proc.stdout
    # the replay command reproduces the failure, trace hash and all
    replay = shlex.split(replays[0].removeprefix("replay:").strip())
    assert replay[0] == "refwire"
    again = refwire(*replay[1:])
    assert again.returncode == 1
    (line2,) = sim_lines(again.stdout)
    assert line2.group(4) == line.group(4) and line2.group(3) == line.group(3)


def test_console_script_is_used() -> None:
    # the tests above run the installed console script when it exists next to the interpreter
    exe = Path(REFWIRE[0])
    assert exe.name == "refwire" or REFWIRE[1:] == ["-m", "refwire.cli"]
    assert os.access(REFWIRE[0], os.X_OK)


# --------------------------------------------------------------------------- streaming stdin, ack modes, windows


def test_send_streams_stdin_lines_as_they_arrive(serve: Any) -> None:
    """`tail -f app.log | refwire send lumberjack`: a line is shipped within
    --linger of its arrival, long before stdin ends."""
    srv = serve()
    proc = subprocess.Popen(
        [*REFWIRE, "send", "lumberjack", srv.address, "--window", "100", "--linger", "0.1"],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    try:
        for i in range(3):
            proc.stdin.write(json.dumps({"line": i}) + "\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 10
            while len(srv.stdout_docs()) < i + 1:
                assert time.monotonic() < deadline, f"line {i} was not shipped while stdin stayed open"
                time.sleep(0.05)
        proc.stdin.write('{"line": NaN}\n{"line": 9}\n')
        proc.stdin.close()
        err = proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=TIMEOUT) == 2, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "stdin line 4 is not JSON" in err and "the 3 events before it were sent and acked" in err, err
    assert srv.stdout_docs() == [{"line": 0}, {"line": 1}, {"line": 2}]


def test_send_ack_mode_count_reads_go_lumbers_acks(serve: Any) -> None:
    srv = serve("--ack-mode", "count")
    # running sequence numbers from 101: a count-style ack (A 5) is not the last seq (A 105)
    args = ["send", "lumberjack", srv.address, "--count", "5", "--sequence", "running", "--first-seq", "101"]
    # the ack comes in ms: 20 s is only a cap, so load cannot turn it into a give-up
    sent = refwire(*args, "--ack-mode", "count", "--ack-timeout", "20", "--max-attempts", "1")
    assert sent.returncode == 0, sent.stderr
    # "A 5" never acks seq 105: this one is meant to expire, however long the wait
    wrong = refwire(*args, "--ack-timeout", "0.5", "--max-attempts", "1")
    assert wrong.returncode == 1 and "gave up" in wrong.stderr, wrong.stderr


def test_send_window_limit_is_max_window(serve: Any) -> None:
    srv = serve("--max-window", "20000")
    over = refwire("send", "lumberjack", srv.address, "--count", "1", "--window", "10001")
    assert_clean_failure(over, 2, "--window 10001 is above --max-window 10000 (raise --max-window to allow it)")
    raised = refwire("send", "lumberjack", srv.address, "--count", "3", "--window", "10001", "--max-window", "10001")
    assert raised.returncode == 0, raised.stderr
    assert raised.stderr.count("is above 10000: go-lumber and Logstash refuse such windows") == 1


def test_serve_metadata_as_logstash_names_it(serve: Any, tls_files: dict[str, str]) -> None:
    """--metadata: ip_address and tls_peer as Logstash's beats input names them
    (spec §6.1): verified with the client certificate's subject, unverified
    without one, absent without TLS."""
    tls = ["--tls-cert", tls_files["server.crt"], "--tls-key", tls_files["server.key"]]
    verified = serve("--metadata", "--exit-after", "1", *tls, "--tls-client-ca", tls_files["ca.pem"])
    sent = refwire(
        "send", "lumberjack", verified.address, "--count", "1", "--tls-ca", tls_files["ca.pem"],
        "--tls-cert", tls_files["client.pem"], "--server-name", "localhost",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert verified.wait() == 0, verified.stderr
    (doc,) = verified.stdout_docs()
    meta = doc.pop("@metadata")
    assert doc == generated(1)[0]
    assert meta["ip_address"] == LOCAL and meta["refwire"] == {"version": "2", "seq": 1, "connection": 1}
    peer = meta["tls_peer"]
    assert peer["status"] == "verified" and peer["protocol"].startswith("TLSv") and peer["cipher_suite"]
    assert "O=trustme" in peer["subject"] and peer["subject"].index("OU=") < peer["subject"].index("O=trustme")

    unverified = serve("--metadata", "--exit-after", "1", *tls)
    assert (
        refwire("send", "lumberjack", unverified.address, "--count", "1", "--tls-no-verify", "--lj-version", "1").returncode == 0
    )
    assert unverified.wait() == 0
    (doc,) = unverified.stdout_docs()
    assert doc["@metadata"]["tls_peer"] == {"status": "unverified"} and doc["@metadata"]["refwire"]["version"] == "1"

    plain = serve("--metadata", "--exit-after", "1")
    assert refwire("send", "lumberjack", plain.address, "--count", "1").returncode == 0
    assert plain.wait() == 0
    assert "tls_peer" not in plain.stdout_docs()[0]["@metadata"]


def test_serve_max_connections(serve: Any) -> None:
    srv = serve("--max-connections", "1", verbose=2)  # -vv: the server's debug lines say what it counted
    first = socket.create_connection((srv.host, srv.port), timeout=TIMEOUT)
    peer = "{}:{}".format(*first.getsockname())
    try:
        srv.wait_for_line(f"connection from {peer} accepted (1 open)")  # the server holds it
        second = socket.create_connection((srv.host, srv.port), timeout=TIMEOUT)
        with second:
            assert second.recv(10) == b""  # closed at once: the limit is 1
        sent = refwire("send", "lumberjack", srv.address, "--count", "1", "--max-attempts", "1")
        assert sent.returncode == 1
    finally:
        first.close()
    srv.wait_for_line(f"connection from {peer} closed")  # its slot is free
    sent = refwire("send", "lumberjack", srv.address, "--count", "1")
    assert sent.returncode == 0, sent.stderr
    srv.proc.send_signal(signal.SIGINT)
    assert srv.wait() == 130
    assert "connection refused: 1 open, the limit max_connections=1" in srv.stderr
