"""The protocol registry (refwire.protocols): one descriptor per protocol package,
every piece it names importable and of the right kind, nothing imported early."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from refwire.protocols import PACKAGES, Descriptor, descriptor, load, names, registry
from refwire.specs import protocols as spec_folders


def test_one_descriptor_per_package_with_a_spec() -> None:
    reg = registry()
    assert [d.package for d in reg.values()] == list(PACKAGES)
    assert names() == ("lumberjack", "pravega", "pravega-draft-2017", "tank", "seastar-rpc")
    assert {d.spec for d in reg.values()} == set(spec_folders())


@pytest.mark.parametrize("name", names())
def test_every_named_piece_loads(name: str) -> None:
    d = descriptor(name)
    if d.cli:
        assert callable(d.load("cli"))
    if d.scenario:
        assert d.load("scenario").name == name
    if d.decoder:
        assert callable(d.load("decoder"))
    if d.rules:
        rules = d.load("rules")
        assert rules and all(r.protocol == name for r in rules)
    if d.describer:
        assert callable(d.load("describer"))
        assert d.load("describer")(1 << 20).feed(b"") == []
    if d.layout:
        from refwire.describe import Layout

        assert isinstance(d.load("layout"), Layout) and d.load("layout").frames
    if d.conform:
        assert d.load("conform").protocol == name
    if d.chaos:
        from refwire.chaos.adapter import Adapter

        assert isinstance(d.load("chaos"), Adapter)
    if d.reference_server:
        assert inspect.iscoroutinefunction(d.load("reference_server"))
    assert d.machines, "every protocol has machines with transition tables"
    for machine, table in d.transition_tables():
        assert machine and table and all(isinstance(k, tuple) and len(k) == 2 for k in table)


def test_unknown_names_and_missing_pieces_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"no protocol for 'nope'; known: lumberjack, pravega"):
        descriptor("nope")
    with pytest.raises(
        ValueError, match=r"no capture rules for 'pravega-draft-2017'; known: lumberjack, pravega, tank, seastar-rpc"
    ):
        descriptor("pravega-draft-2017", "rules")
    for piece, words in (("conform", "conformance cases"), ("machines", "state machines"), ("cli", "commands")):
        with pytest.raises(ValueError, match=f"no {words} for 'nope'; known: "):
            descriptor("nope", piece)
    with pytest.raises(LookupError, match="pravega-draft-2017 has no rules"):
        descriptor("pravega-draft-2017").load("rules")
    with pytest.raises(ValueError, match="not a 'module:attribute'"):
        load("refwire.protocols")
    assert isinstance(descriptor("tank"), Descriptor)


def test_the_registry_imports_no_driver_simulator_or_pipeline() -> None:
    code = (
        "import sys, refwire.protocols as p; p.registry(); p.names('scenario'); "
        "bad = sorted(m for m in sys.modules if m == 'trio' or m.startswith(('refwire.sim', 'refwire.pipeline', 'pyspark')) "
        "or m.endswith(('.client', '.server', '.cli'))); print(bad); assert not bad"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
