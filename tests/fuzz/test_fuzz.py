"""The short fuzz run (docs/guides/fuzzing.rst): every target of fuzz_targets.py in one
atheris process, seeded from specs/*/vectors, bounded by a run count with a fixed
seed (so its outcome is the same every time), in a subprocess with a timeout
(atheris.Fuzz exits its process).  It finds nothing; with the planted defect of
refwire.tank.frames switched on (a test-only module flag) the same run finds it.
And the registry covers every protocol and every machine its descriptor names.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fuzz_targets
import pytest

from refwire.protocols import names, registry

HERE = Path(__file__).resolve().parent
MAIN = HERE / "fuzz_main.py"


def _short_run(tmp_path: Path, *extra: str, runs: int) -> subprocess.CompletedProcess[str]:
    corpus = tmp_path / "corpus"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("REFWIRE_REFERENCE", None)
    cmd = [
        sys.executable, str(MAIN), "fuzz", "all", *extra, "--seeds", str(corpus), "--",
        f"-runs={runs}", "-seed=1", "-use_value_profile=1", "-max_len=1024", "-timeout=20", "-reload=0",
        f"-artifact_prefix={tmp_path}/", str(corpus),
    ]  # fmt: skip
    # atheris prints a finding's traceback on stdout, libFuzzer its report on stderr
    return subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=170, check=False)


def test_every_protocol_and_every_machine_has_targets() -> None:
    """A sixth protocol is fuzzed by one DIALECTS entry; this fails until it has one."""
    assert set(fuzz_targets.DIALECTS) == set(names())
    for name, d in registry().items():
        dialect = fuzz_targets.DIALECTS[name]
        assert {role for role, _ in d.machines} == set(dialect.machines), name
        assert dialect.codecs, name
        for t in dialect.targets():
            assert t.seeds(), t.name


def test_the_short_run_of_every_target_finds_nothing(tmp_path: Path) -> None:
    out = _short_run(tmp_path, runs=2500)
    assert out.returncode == 0, out.stdout[-6000:]
    assert "DONE " in out.stdout and "Uncaught" not in out.stdout, out.stdout[-3000:]
    assert not list(tmp_path.glob("crash-*"))


def test_the_short_run_finds_the_planted_defect(tmp_path: Path) -> None:
    out = _short_run(tmp_path, "--plant", runs=6000)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "IndexError: planted defect" in out.stdout, out.stdout[-3000:]
    (crash,) = tmp_path.glob("crash-*")
    # the saved input replays: it is an empty non-Ping TANK frame behind the target byte
    replay = subprocess.run(
        [sys.executable, str(MAIN), "replay", "all", "--plant", str(crash)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert replay.returncode != 0 and "IndexError: planted defect" in replay.stderr, replay.stderr[-3000:]
    clean = subprocess.run(
        [sys.executable, str(MAIN), "replay", "all", str(crash)], capture_output=True, text=True, timeout=120, check=False
    )
    assert clean.returncode == 0, clean.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(fuzz_targets.targets()))
def test_the_kept_corpus_replays(name: str) -> None:
    """The committed corpus (tests/fuzz/corpus/<target>/) keeps the properties, in-process."""
    target = fuzz_targets.targets()[name]
    directory = HERE / "corpus" / name
    files = sorted(directory.iterdir()) if directory.is_dir() else []
    for f in files[:: max(1, len(files) // 40)]:
        fuzz_targets.check(target, f.read_bytes())


class _Echo(fuzz_targets.Session):
    """A toy codec: one item per chunk (split-variant), or per input byte with a
    mark of the path (path-variant), or an IndexError on a 0 byte."""

    def __init__(self, fast: bool, variant: int) -> None:
        super().__init__()
        self.fast, self.variant = fast, variant

    def feed(self, chunk: bytes) -> None:
        if self.variant == 0:
            self.trace.items.append(len(chunk))
        elif self.variant == 1:
            self.trace.items.extend((b, self.fast) for b in chunk)
        elif 0 in chunk:
            raise IndexError("a 0 byte")


def _echo(variant: int) -> fuzz_targets.Target:
    return fuzz_targets.Target(
        name="toy", protocol="lumberjack", kind="codec", open=lambda fast, v, head: _Echo(fast, variant), variants=1
    )


def test_check_finds_a_split_variance_a_path_disagreement_and_a_foreign_exception() -> None:
    with pytest.raises(AssertionError, match="reference path, split"):
        fuzz_targets.check(_echo(0), b"\x00abc")
    with pytest.raises(AssertionError, match="speed path"):
        fuzz_targets.check(_echo(1), b"\x00abc")
    with pytest.raises(IndexError):
        fuzz_targets.check(_echo(2), b"\x00ab\x00c")
    fuzz_targets.check(_echo(2), b"\x00abc")
