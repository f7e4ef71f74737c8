"""Every vector file matches its JSON Schema (specs/schema/, draft 2020-12).

The schemas say what each kind of vector file holds, which keys are required, their
types and values, and (``layer`` in every error expectation) whether the frame codec or
the connection machine must refuse an error vector.  They are strict
(``additionalProperties``/``unevaluatedProperties`` false), so a misspelled key or a
wrong type in a vector fails here, naming the file and the JSON path.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import attrs
import jsonschema
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

import refwire.tank.frames as tank_frames
import refwire.tank.responses as tank_responses
from refwire.pravega.draft2017.frames import DRAFT
from refwire.pravega.frames import CURRENT

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
SCHEMAS = SPECS / "schema"

#: vector file (relative to specs/) -> its schema (in specs/schema/)
SCHEMA_FOR: dict[str, str] = {
    "lumberjack/vectors/frames.json": "lumberjack-frames.json",
    "lumberjack/vectors/conversations.json": "lumberjack-conversations.json",
    "lumberjack/vectors/errors.json": "lumberjack-errors.json",
    "pravega/vectors/commands.json": "pravega-commands.json",
    "pravega/vectors/strings.json": "pravega-strings.json",
    "pravega/vectors/errors.json": "pravega-errors.json",
    "pravega/vectors/appends.json": "pravega-appends.json",
    "pravega-draft-2017/vectors/frames.json": "pravega-draft-2017-frames.json",
    "pravega-draft-2017/vectors/partials.json": "pravega-draft-2017-partials.json",
    "pravega-draft-2017/vectors/errors.json": "pravega-draft-2017-errors.json",
    "pravega-draft-2017/vectors/conversations.json": "pravega-draft-2017-conversations.json",
    "seastar-rpc/vectors/negotiation.json": "seastar-rpc-negotiation.json",
    "seastar-rpc/vectors/frames.json": "seastar-rpc-frames.json",
    "seastar-rpc/vectors/compressed.json": "seastar-rpc-compressed.json",
    "seastar-rpc/vectors/errors.json": "seastar-rpc-errors.json",
    "tank/vectors/frames.json": "tank-frames.json",
    "tank/vectors/bundles.json": "tank-bundles.json",
    "tank/vectors/partial_chunks.json": "tank-partial-chunks.json",
}
#: schemas that only hold definitions for the others
SHARED = {"common.json"}
ERROR_FILES = [f for f in SCHEMA_FOR if f.endswith("/errors.json")]


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@functools.cache
def _schemas() -> dict[str, dict[str, Any]]:
    return {p.name: _read(p) for p in sorted(SCHEMAS.glob("*.json"))}


def _registry() -> Registry:
    resources = [(s["$id"], Resource.from_contents(s)) for s in _schemas().values()]
    return Registry().with_resources(resources)


REGISTRY = _registry()


@functools.cache
def _validator(schema_name: str) -> Draft202012Validator:
    return Draft202012Validator(_schemas()[schema_name], registry=REGISTRY, format_checker=Draft202012Validator.FORMAT_CHECKER)


def _first_error(schema_name: str, doc: Any) -> jsonschema.ValidationError | None:
    """The first error in document order, the most precise one at that place: an error
    inside a subschema also leaves its keys "unevaluated" one level up; the former is
    the one to report."""
    errors = []
    for err in _validator(schema_name).iter_errors(doc):
        errors.extend(_leaves(err))
    errors.sort(key=lambda e: (_top_index(e), e.validator == "unevaluatedProperties", -len(e.absolute_path)))
    return errors[0] if errors else None


def _leaves(err: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors of a oneOf/anyOf branch that came closest, else the error itself."""
    if not err.context:
        return [err]
    best = jsonschema.exceptions.best_match(err.context)
    return _leaves(best) if best is not None else [err]


def _top_index(err: jsonschema.ValidationError) -> list[Any]:
    """Where in the file: the index of the vector (errors of one vector stay together)."""
    return [(0, p) if isinstance(p, int) else (1, p) for p in list(err.absolute_path)[:2]]


def test_every_vector_file_has_a_schema() -> None:
    files = {p.relative_to(SPECS).as_posix() for p in SPECS.glob("*/vectors/*.json")}
    assert files == set(SCHEMA_FOR), f"vector files without a schema: {sorted(files - set(SCHEMA_FOR))}; stale entries: {sorted(set(SCHEMA_FOR) - files)}"
    assert set(SCHEMA_FOR.values()) | SHARED == set(_schemas()), "every schema file is used"


@pytest.mark.parametrize("name", sorted(_schemas()))
def test_schema_is_valid(name: str) -> None:
    schema = _schemas()[name]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].endswith("/specs/schema/" + name)


@pytest.mark.parametrize("vector_file", sorted(SCHEMA_FOR))
def test_vector_file_matches_its_schema(vector_file: str) -> None:
    err = _first_error(SCHEMA_FOR[vector_file], _read(SPECS / vector_file))
    assert err is None, f"specs/{vector_file} at {err.json_path}: {err.message}"  # type: ignore[union-attr]


@pytest.mark.parametrize("vector_file", ERROR_FILES)
def test_every_error_vector_names_its_layer(vector_file: str) -> None:
    """Beyond the schema: the layer of an error vector is never left out."""
    key = "error" if "error" in _read(SPECS / vector_file)["vectors"][0] else "expect"
    for v in _read(SPECS / vector_file)["vectors"]:
        if v[key].get("outcome", "error") == "error":
            assert v[key]["layer"] in ("codec", "machine"), v["name"]


# --------------------------------------------------------------------------- negative


def _mutated(vector_file: str, mutate: Any) -> Any:
    doc = copy.deepcopy(_read(SPECS / vector_file))
    mutate(doc["vectors"][0])
    return doc


def _rename(obj: dict[str, Any], old: str, new: str) -> None:
    obj[new] = obj.pop(old)


MUTATIONS: list[tuple[str, str, Any, str]] = [
    # (file, what, mutation, JSON path the error must name)
    ("lumberjack/vectors/errors.json", "misspelled key", lambda v: _rename(v, "frames_before_error", "frames_before_eror"), "$.vectors[0]"),
    ("lumberjack/vectors/errors.json", "misspelled error key", lambda v: _rename(v["error"], "offset", "ofset"), "$.vectors[0].error"),
    ("lumberjack/vectors/errors.json", "layer missing", lambda v: v["error"].pop("layer"), "$.vectors[0].error"),
    ("lumberjack/vectors/errors.json", "unknown layer", lambda v: v["error"].update(layer="decoder"), "$.vectors[0].error.layer"),
    ("lumberjack/vectors/frames.json", "version as a number", lambda v: v["frames"][0].update(version=2), "$.vectors[0].frames[0].version"),
    ("pravega/vectors/errors.json", "offset as text", lambda v: v["expect"].update(offset="12"), "$.vectors[0].expect.offset"),
    ("pravega/vectors/commands.json", "misspelled field", lambda v: _rename(v["fields"], "high_version", "hi_version"), "$.vectors[0].fields"),
    ("pravega/vectors/commands.json", "odd hex", lambda v: v.update(hex=v["hex"] + "0"), "$.vectors[0].hex"),
    ("pravega-draft-2017/vectors/errors.json", "misspelled key", lambda v: _rename(v["expect"], "sent", "send"), "$.vectors[0].expect"),
    ("seastar-rpc/vectors/errors.json", "wrong type", lambda v: v.update(eof="no"), "$.vectors[0].eof"),
    ("seastar-rpc/vectors/frames.json", "misspelled frame key", lambda v: _rename(v["frames"][0], "msg_id", "msgid"), "$.vectors[0].frames[0]"),
    ("tank/vectors/partial_chunks.json", "wrong type", lambda v: v["cuts"][0].update(partial=1), "$.vectors[0].cuts[0].partial"),
    ("tank/vectors/frames.json", "uppercase hex", lambda v: v.update(hex=v["hex"].upper()), "$.vectors[0].hex"),
]


@pytest.mark.parametrize(("vector_file", "what", "mutate", "path"), MUTATIONS, ids=[f"{f}-{w}" for f, w, _, _ in MUTATIONS])
def test_a_broken_vector_is_rejected(vector_file: str, what: str, mutate: Any, path: str) -> None:
    err = _first_error(SCHEMA_FOR[vector_file], _mutated(vector_file, mutate))
    assert err is not None, f"{what} accepted"
    assert err.json_path == path or err.json_path.startswith((path + ".", path + "[")), (what, err.json_path, err.message)


#: objects whose keys are data, not format: a Lumberjack J frame's JSON payload, the
#: writer/connection maps of the Pravega segments (keyed by UUID, checked as such)
FREE_KEYS = {"json", "writers", "connections"}


def _objects(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every object inside ``obj`` (the first three items of each list)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(obj, dict):
        out.append(path)
        for k, v in obj.items():
            if k not in FREE_KEYS:
                out.extend(_objects(v, (*path, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out.extend(_objects(v, (*path, i)))
    return out


@pytest.mark.parametrize("vector_file", sorted(SCHEMA_FOR))
def test_every_key_is_checked(vector_file: str) -> None:
    """Systematically, in the first vectors of each file: any key misspelled, and any
    value replaced by one of another JSON type, makes the file invalid."""
    doc = _read(SPECS / vector_file)
    doc["vectors"] = doc["vectors"][:3]
    validator = _validator(SCHEMA_FOR[vector_file])
    missed = []
    for path in _objects({"vectors": doc["vectors"]}):
        for key in list(_at(doc, path)):
            for what in ("misspelled", "retyped"):
                broken = copy.deepcopy(doc)
                target = _at(broken, path)
                if what == "misspelled":
                    target[key + "_"] = target.pop(key)
                else:
                    target[key] = {"bogus": 1} if isinstance(target[key], str | None) else "not-this-type"
                if validator.is_valid(broken):
                    missed.append(f"{what} {'/'.join(map(str, (*path, key)))}")
    assert not missed, f"specs/{vector_file}: accepted with " + ", ".join(missed)


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def test_command_field_sets_follow_the_codec() -> None:
    """The per-command field sets of the Pravega schemas and the per-class ones of the
    TANK schema are those of refwire's layouts and classes (no command left out)."""
    for schema_name, dialect in (("pravega-commands.json", CURRENT), ("pravega-draft-2017-frames.json", DRAFT)):
        fields = _schemas()[schema_name]["$defs"]["fields"]
        assert set(fields) == {cls.NAME for cls in dialect.commands.values()}, schema_name
        for cls in dialect.commands.values():
            assert list(fields[cls.NAME]["properties"]) == [name for name, _, _ in cls.LAYOUT], cls.NAME
    for name, schema in _schemas()["tank-frames.json"]["$defs"]["types"].items():
        cls = getattr(tank_frames, name, None) or getattr(tank_responses, name)
        assert list(schema["properties"]) == ["type", *(f.name for f in attrs.fields(cls))], name
