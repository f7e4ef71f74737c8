"""argparse types every command shares (a host:port, counts, seconds), in a
module of their own so that option parsers outside the command line (the
conformance runner's, which its pytest plugin and ``replay`` use) import them
rather than copy them; :mod:`refwire.cliutil` re-exports them."""

from __future__ import annotations

import argparse

from .drivers import parse_hostport

__all__ = ["hostport", "nonneg_float", "positive_float", "positive_int"]


def hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6), as :func:`refwire.drivers.parse_hostport` reads it."""
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def nonneg_float(text: str) -> float:
    """A number, 0 or more."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must not be negative")
    return v


def positive_float(text: str) -> float:
    """A number of seconds above 0 (a bound of 0 would give up at once)."""
    value = nonneg_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be more than 0")
    return value
