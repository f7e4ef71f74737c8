"""Test a Lumberjack server with ``refwire conform`` and read the verdicts back.

The server under test here is refwire's own (``refwire serve lumberjack``),
started the way you would start yours; its ``--out`` file is the sink that
case lj.S5.3 reads to check that events are stored before they are acked.
"""

import json
import subprocess
import tempfile
from pathlib import Path

with tempfile.TemporaryDirectory() as tmp:
    sink = Path(tmp) / "events.jsonl"
    server = subprocess.Popen(
        ["refwire", "serve", "lumberjack", "--listen", "127.0.0.1:0", "--out", str(sink)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stderr.readline()  # "listening on 127.0.0.1:PORT"
        address = line.split()[-1]
        run = subprocess.run(
            [
                "refwire", "conform", "lumberjack",
                "--server", address,
                "--sink", str(sink),
                "--cases", "lj.S1.1,lj.S4.4,lj.S5.3,lj.S6.2",
                "--seed", "1",  # the same seed sends the same bytes, split the same way
                "--agent", "my-server",
                "--out", str(Path(tmp) / "report"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
        )  # fmt: skip
        print(run.stdout.strip())
        print("exit status", run.returncode)  # 0: no FAIL
    finally:
        server.terminate()
        server.wait()

    index = json.loads((Path(tmp) / "report" / "index.json").read_text())
    for case_id, result in index["agents"]["my-server"].items():
        print(f"{case_id:8} {result['verdict']:10} closed by {result['close']['by']} ({result['close']['how']})")
    print("to run one again:", result["replay"])
    assert run.returncode == 0
