"""Where the specs, vectors and schemas are in an installed refwire."""

import refwire.specs

print(refwire.specs.protocols())  # ['lumberjack', 'pravega', 'pravega-draft-2017', 'seastar-rpc', 'tank']
print(refwire.specs.path("lumberjack"))  # the folder: README.md, vectors/
print(sorted(refwire.specs.vector_files("tank")))  # ['bundles', 'frames', 'partial_chunks']
frames = refwire.specs.load_vectors("lumberjack", "frames")  # the parsed JSON
print(frames["vectors"][0]["name"], frames["vectors"][0]["hex"])  # window-count-2 325700000002
print(sorted(p.name for p in (refwire.specs.root() / "schema").glob("lumberjack-*.json")))  # the JSON Schemas
