"""The one switch between the reference paths and the speed paths (src/refwire/speed.py).

``REFWIRE_REFERENCE`` is read once, at import; ``use_fast(fast)`` is the
decision every codec and machine takes at construction.  Each protocol's
differential test (tests/test_<protocol>_differential.py) checks that its
codecs and machines follow the decision.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from refwire import speed


def _reference_in_a_fresh_process(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != speed.ENVIRONMENT_VARIABLE}
    if value is not None:
        env[speed.ENVIRONMENT_VARIABLE] = value
    code = "import refwire.speed as s; print(s.REFERENCE, s.use_fast(), s.use_fast(True), s.use_fast(False))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "False True True False"),
        ("", "False True True False"),
        ("0", "False True True False"),
        (" off ", "False True True False"),
        ("False", "False True True False"),
        ("no", "False True True False"),
        ("1", "True False True False"),
        ("yes", "True False True False"),
        ("true", "True False True False"),
    ],
)
def test_the_environment_variable_turns_the_speed_paths_off_and_an_explicit_flag_wins(value: str | None, expected: str) -> None:
    assert _reference_in_a_fresh_process(value) == expected


def test_the_switch_is_read_once_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    before = speed.use_fast()
    monkeypatch.setenv(speed.ENVIRONMENT_VARIABLE, "0" if speed.REFERENCE else "1")
    assert speed.use_fast() is before
    assert speed.use_fast(None) is (not speed.REFERENCE)


def test_use_fast_returns_a_bool_for_any_truthy_flag() -> None:
    assert speed.use_fast(1) is True  # type: ignore[arg-type]
    assert speed.use_fast(0) is False  # type: ignore[arg-type]
