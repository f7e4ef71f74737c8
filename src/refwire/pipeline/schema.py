"""Column lists as data, and their Arrow / Spark forms (one explicit schema per table, never inferred).

A table is declared once as a tuple of ``(name, type)`` pairs, with ``type``
one of :data:`TYPES`.  :func:`arrow_schema` and :func:`spark_ddl` turn that
into a ``pyarrow.Schema`` or a Spark DDL string, importing pyarrow only when
asked, so the pure-Python parts of the pipeline never need it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TYPES", "Columns", "arrow_schema", "spark_ddl"]

#: ``(name, type)`` pairs describing one table.
Columns = tuple[tuple[str, str], ...]

#: The column types the pipeline uses, with their Spark DDL spelling.
TYPES: dict[str, str] = {
    "string": "STRING",
    "int64": "BIGINT",
    "double": "DOUBLE",
    "bool": "BOOLEAN",
    "list<string>": "ARRAY<STRING>",
    "map<string,int64>": "MAP<STRING,BIGINT>",
}


def spark_ddl(columns: Columns) -> str:
    """``"name TYPE, ..."`` for ``mapInArrow`` and Python data sources."""
    return ", ".join(f"`{name}` {TYPES[kind]}" for name, kind in columns)


def arrow_schema(columns: Columns) -> Any:
    """The same columns as a ``pyarrow.Schema`` (pyarrow comes with the ``spark`` extra)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    kinds: dict[str, Any] = {
        "string": pa.string(),
        "int64": pa.int64(),
        "double": pa.float64(),
        "bool": pa.bool_(),
        "list<string>": pa.list_(pa.string()),
        "map<string,int64>": pa.map_(pa.string(), pa.int64()),
    }
    return pa.schema([pa.field(name, kinds[kind]) for name, kind in columns])
