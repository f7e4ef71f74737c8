"""Case ids and run ids: how the runner orders cases and tells runs apart.

**Case ids** (``lj.S6.2``) are ordered naturally, numbers as numbers
(:func:`natural_key`: ``lj.S6.2`` before ``lj.S6.10``), wherever cases are
listed, run or reported.

**Run ids** make runs against one long-lived testee independent of each other.
Every name and marker a case leaves on the testee (a TANK topic, a Pravega
segment, a Lumberjack sink event) carries the run id, so a second run never
finds the first one's topics, segments or events.  The bytes a case sends
depend on (run seed, run id, case id): the seed decides the case's random
choices (:func:`~refwire.conform.model.case_seed`), the run id only the names.
A run id is :data:`RUN_ID_LENGTH` lowercase hex digits -- a fixed length, so
that two runs differing only in their run ids send frames of the same sizes,
and ``refwire conform replay`` can mask it when it compares (:func:`mask`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Any

__all__ = ["RUN_ID_LENGTH", "RunIdError", "check_run_id", "mask", "natural_key", "new_run_id", "seed_run_id"]

#: How many hex digits a run id has.
RUN_ID_LENGTH = 8

_RUN_ID = re.compile(rf"[0-9a-f]{{{RUN_ID_LENGTH}}}")
_PARTS = re.compile(r"(\d+)")


class RunIdError(ValueError):
    """A ``--run-id`` that is not :data:`RUN_ID_LENGTH` lowercase hex digits."""


def natural_key(case_id: str) -> tuple[Any, ...]:
    """Sort key for case ids compared naturally: runs of digits as numbers
    (``lj.S6.2`` < ``lj.S6.10`` < ``lj.S10.1``), the rest as text.

    Text and number parts alternate in the same places for every id (a split
    on digit runs always starts with a text part), so keys of any two ids compare."""
    return tuple(int(p) if i % 2 else p for i, p in enumerate(_PARTS.split(case_id)))


def new_run_id() -> str:
    """A fresh random run id (each ``refwire conform`` run draws one unless ``--run-id`` is given)."""
    return secrets.token_hex(RUN_ID_LENGTH // 2)


def seed_run_id(seed: int) -> str:
    """The run id derived from the run seed: what a run gets when nobody chose one
    (library callers, the simulator, whose testee is fresh every run and whose
    trace must depend on the seed alone)."""
    return hashlib.blake2b(f"run-id\x00{seed}".encode(), digest_size=RUN_ID_LENGTH // 2).hexdigest()


def check_run_id(text: str) -> str:
    """``text`` if it is a run id; :class:`RunIdError` saying what one is otherwise."""
    if not _RUN_ID.fullmatch(text):
        raise RunIdError(f"{text!r} is not a run id: {RUN_ID_LENGTH} lowercase hex digits, e.g. {new_run_id()}")
    return text


def mask(data: bytes, *run_ids: str) -> bytes:
    """``data`` with every occurrence of the given run ids (as ASCII) blanked to
    ``*`` (the same length, so the chunking of the bytes is kept)."""
    for rid in run_ids:
        if rid:
            data = data.replace(rid.encode(), b"*" * len(rid))
    return data
