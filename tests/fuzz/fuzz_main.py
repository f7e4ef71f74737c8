"""Run refwire's fuzz targets (tests/fuzz/fuzz_targets.py) under atheris, or replay and minimise a corpus.

    python tests/fuzz/fuzz_main.py fuzz TARGET|all [--plant] [--seeds DIR] -- [libFuzzer flags] [corpus dirs]
    python tests/fuzz/fuzz_main.py replay TARGET FILE_OR_DIR...     # check every input (no atheris)
    python tests/fuzz/fuzz_main.py minimise TARGET DIR              # keep the inputs that add coverage
    python tests/fuzz/fuzz_main.py list

``all`` multiplexes every target in one process (the input's first byte picks
the target; the in-suite short run, tests/fuzz/test_fuzz.py).  ``--seeds DIR``
first writes the target's seeds (specs/*/vectors) into DIR (a corpus directory
to pass on).  ``--plant`` turns on the planted defect of refwire.tank.frames (a
test-only module flag) to show the run finds one.  The long run is
scripts/fuzz.sh (docs/guides/fuzzing.rst).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

REFWIRE_SRC = str(Path(__file__).resolve().parents[2] / "src" / "refwire")


def _load(instrument: bool) -> Any:
    if instrument:
        import atheris  # type: ignore[import-untyped]

        with atheris.instrument_imports(include=["refwire"]):
            import fuzz_targets

            _import_everything(fuzz_targets)
    else:
        import fuzz_targets
    return fuzz_targets


def _import_everything(ft: Any) -> None:
    """Import (and so instrument) every module a target reaches, lazy imports
    included: each target's first seed runs once here."""
    for t in ft.targets().values():
        for data in t.seeds()[:3]:
            ft.check(t, data)


def _one_input(ft: Any, name: str) -> tuple[Callable[[bytes], None], list[Any]]:
    everything = list(ft.targets().values())
    if name == "all":

        def test_all(data: bytes) -> None:
            if data:
                ft.check(everything[data[0] % len(everything)], data[1:])

        return test_all, everything
    target = ft.targets()[name]

    def test_one(data: bytes) -> None:
        ft.check(target, data)

    return test_one, [target]


def _write_seeds(name: str, ft: Any, directory: Path) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    everything = list(ft.targets().values())
    n = 0
    for i, t in enumerate(everything):
        if name not in ("all", t.name):
            continue
        prefix = bytes([i]) if name == "all" else b""
        for data in t.seeds(spread=name == "all"):
            unit = prefix + data
            (directory / hashlib.sha1(unit).hexdigest()).write_bytes(unit)
            n += 1
    return n


def _plant() -> None:
    import refwire.tank.frames

    refwire.tank.frames._FUZZ_PLANTED_DEFECT = True


def fuzz(argv: list[str]) -> None:
    own, _, libfuzzer = _split(argv)
    name = own[0]
    plant = "--plant" in own
    seeds = own[own.index("--seeds") + 1] if "--seeds" in own else None
    ft = _load(instrument=True)
    if seeds is not None:
        _write_seeds(name, ft, Path(seeds))
    if plant:
        _plant()
    test, _ = _one_input(ft, name)
    import atheris

    atheris.Setup([sys.argv[0], *libfuzzer], test)
    atheris.Fuzz()


def _split(argv: list[str]) -> tuple[list[str], str, list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], "--", argv[i + 1 :]
    return argv, "", []


def _inputs(paths: list[str]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p])
    return files


def replay(argv: list[str]) -> int:
    """Check every input of the given files and directories; print the first failure."""
    ft = _load(instrument=False)
    if "--plant" in argv:
        _plant()
        argv = [a for a in argv if a != "--plant"]
    test, _ = _one_input(ft, argv[0])
    files = _inputs(argv[1:])
    for f in files:
        try:
            test(f.read_bytes())
        except Exception:
            print(f"FAILED on {f}", file=sys.stderr)
            raise
    print(f"{len(files)} inputs replayed, no finding")
    return 0


def minimise(argv: list[str]) -> int:
    """Keep, smallest first, only the inputs of DIR that reach an arc (line pair)
    of refwire's code no smaller kept one reaches; delete the rest."""
    ft = _load(instrument=False)
    test, _ = _one_input(ft, argv[0])
    directory = Path(argv[1])
    files = sorted(_inputs([str(directory)]), key=lambda f: (f.stat().st_size, f.name))
    seen: set[tuple[Any, ...]] = set()
    kept = 0
    for f in files:
        arcs = _arcs(test, f.read_bytes())
        if arcs - seen:
            seen |= arcs
            kept += 1
        else:
            f.unlink()
    print(f"{argv[0]}: kept {kept} of {len(files)} inputs ({len(seen)} arcs)")
    return 0


def _arcs(test: Callable[[bytes], None], data: bytes) -> set[tuple[Any, ...]]:
    arcs: set[tuple[Any, ...]] = set()
    last: dict[FrameType, int] = {}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            arcs.add((frame.f_code, last.get(frame, -1), frame.f_lineno))
            last[frame] = frame.f_lineno
        elif event == "return":
            arcs.add((frame.f_code, last.pop(frame, -1), 0))
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(REFWIRE_SRC) else None

    sys.settrace(trace)
    try:
        test(data)
    except Exception:
        pass  # a crash input is kept by the caller's choice, not here
    finally:
        sys.settrace(None)
    return arcs


def main() -> int:
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "fuzz":
        fuzz(args)
        return 0  # pragma: no cover - atheris.Fuzz exits the process
    if cmd == "replay":
        return replay(args)
    if cmd == "minimise":
        return minimise(args)
    if cmd == "list":
        print("\n".join(_load(instrument=False).targets()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
