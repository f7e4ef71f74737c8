"""Every Python example in README.md runs unmodified (each in its own interpreter,
with a time limit), and every ``refwire serve`` line of its shell examples parses.
The README is a front page: its two Python examples (read a spec's vectors, embed
a server) run here; the manual's examples run in tests/test_docs.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
RUNNABLE = [b for b in BLOCKS if "pravega_client" not in b]


def test_the_readme_has_examples() -> None:
    assert len(RUNNABLE) >= 2
    assert any("LumberjackServer" in block for block in RUNNABLE)  # the embed example


@pytest.mark.parametrize("code", RUNNABLE, ids=[f"block{i}" for i in range(len(RUNNABLE))])
def test_readme_example_runs(code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]


def _serve_commands() -> list[str]:
    """The README's ``refwire serve`` command lines, as a user would paste them:
    continuations joined, a console's ``$`` prompt, comments, ``[optional]`` parts, ``...``
    and a trailing ``&`` dropped."""
    commands = []
    for block in re.findall(r"```(?:sh|bash|console)\n(.*?)```", README.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("refwire serve"):
                line = re.sub(r"\s#.*$", "", line)
                line = re.sub(r"\[[^\]]*\]|\.\.\.", "", line).rstrip(" &")
                commands.append(line)
    return commands


def test_every_readme_serve_command_parses_and_binds_each_address_once() -> None:
    """A README example that listens where the same command's other listener
    defaults (the Pravega store on 9090, the controller's default) fails as written."""
    import shlex

    from refwire.cli import build_parser

    commands = _serve_commands()
    assert len(commands) >= 5
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])
        addresses = [
            v for v in vars(args).values() if isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], int) and v[1] != 0
        ]
        assert addresses, command
        assert len(addresses) == len(set(addresses)), f"{command!r} binds one address twice: {addresses}"
