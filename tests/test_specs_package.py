"""The specs ship inside the package: the accessor in a checkout, and a built
wheel installed into a fresh venv reads a vector through it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import refwire.specs

REPO = Path(__file__).resolve().parent.parent
PROTOCOLS = ["lumberjack", "pravega", "pravega-draft-2017", "seastar-rpc", "tank"]


def test_accessor_lists_every_protocol_and_its_vectors() -> None:
    assert refwire.specs.protocols() == PROTOCOLS
    for name in PROTOCOLS:
        folder = refwire.specs.path(name)
        assert (folder / "README.md").read_text().startswith("#")
        files = refwire.specs.vector_files(name)
        assert files, name
        for stem in files:
            assert refwire.specs.load_vectors(name, stem) == json.loads(files[stem].read_text())


def test_the_schema_folder_is_no_protocol() -> None:
    assert (refwire.specs.root() / "schema" / "common.json").is_file()
    assert "schema" not in refwire.specs.protocols()


def test_accessor_names_what_is_missing() -> None:
    with pytest.raises(KeyError, match="no spec for 'http2'; known: lumberjack"):
        refwire.specs.path("http2")
    with pytest.raises(KeyError, match="tank has no vector file 'nope'; it has: bundles"):
        refwire.specs.load_vectors("tank", "nope")


@pytest.mark.timeout(300)
def test_the_wheel_carries_the_specs(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # Built from a clean copy: a build/ directory left in the checkout would lend
    # the wheel files the package list does not name.
    clean = tmp_path / "src-copy"
    clean.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, clean / name)
    for name in ("src", "specs"):
        shutil.copytree(REPO / name, clean / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(clean)],
        check=True,
        capture_output=True,
    )
    [wheel] = dist.glob("refwire-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every package of the source tree is in the wheel (the pytest plugin's entry
    # point names refwire.conform; the simulator's scenarios are a package too).
    packages = {
        f"refwire/{p.parent.relative_to(REPO / 'src' / 'refwire').as_posix()}/__init__.py".replace("/./", "/")
        for p in (REPO / "src" / "refwire").rglob("__init__.py")
    }
    assert packages - names == set(), "packages missing from [tool.setuptools] packages in pyproject.toml"
    for name in PROTOCOLS:
        assert f"refwire/_specs/{name}/README.md" in names
        for stem in refwire.specs.vector_files(name):
            assert f"refwire/_specs/{name}/vectors/{stem}.json" in names
    # The JSON Schemas of the vector files ship with them.
    schemas = sorted(p.name for p in (REPO / "specs" / "schema").glob("*.json"))
    assert schemas
    for schema in schemas:
        assert f"refwire/_specs/schema/{schema}" in names
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import refwire.specs as s; v = s.load_vectors('lumberjack', 'frames');"
        "print(s.root().is_relative_to(sys.argv[1]), len(v) > 0, (s.root() / 'schema' / 'common.json').is_file())"
    )
    out = subprocess.run([str(python), "-I", "-c", code, str(target)], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["True", "True", "True"]
