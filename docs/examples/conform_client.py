"""Test a Lumberjack client with ``refwire conform --client``: refwire plays the
server (misbehaving where a case says so) and runs the client once per case."""

import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

client = Path(__file__).with_name("my_client.py")
with TemporaryDirectory() as report:
    run = subprocess.run(
        [
            "refwire", "conform", "lumberjack", "--client",
            # placeholders: {host} {port} {case} {slug} {events} {seed} {tls_ca}
            "--exec", f"{sys.executable} {client} {{host}} {{port}} {{events}}",
            "--cases", "lj.C1.1,lj.C1.3,lj.C4.2",  # count acks, an ack byte by byte, an ack going backwards
            "--agent", "my-client",
            "--seed", "7",
            "--out", report,
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
