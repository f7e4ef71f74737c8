"""Every vector file shipped inside refwire, checked against its JSON Schema
(draft 2020-12, ``specs/schema/``), and which layer must refuse each error vector.

Needs ``jsonschema`` (``pip install jsonschema``); refwire itself does not.
"""

import json
from collections import Counter

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

import refwire.specs

schema_dir = refwire.specs.root() / "schema"
schemas = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in schema_dir.glob("*.json")}
# The schemas refer to each other (common.json) by their $id: register them all.
registry = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())

for protocol in refwire.specs.protocols():
    layers = Counter()
    for name in refwire.specs.vector_files(protocol):
        schema = schemas[f"{protocol}-{name.replace('_', '-')}.json"]  # tank's partial_chunks -> tank-partial-chunks.json
        document = refwire.specs.load_vectors(protocol, name)
        Draft202012Validator(schema, registry=registry).validate(document)
        for vector in document["vectors"]:
            # Lumberjack and Seastar RPC say it in "error", the Pravega dialects in "expect".
            expectation = vector.get("error") or vector.get("expect") or {}
            if isinstance(expectation, dict) and "layer" in expectation:
                layers[expectation["layer"]] += 1
    files = ", ".join(refwire.specs.vector_files(protocol))
    print(f"{protocol:20} valid: {files}; error vectors: codec {layers['codec']}, machine {layers['machine']}")
