"""Argument types for the command line: numbers and sizes checked at parse time.

argparse's plain ``int`` and ``float`` accept what no command can use (``--epochs -2`` trains
nothing and exits 0, ``--lr nan`` writes a bare NaN into the JSON summary, ``--batch-size 0``
divides by zero later). Each type here refuses such a value while parsing, so the user gets
argparse's usage line and one sentence naming the option's rule, with exit status 2.

Example:
    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--epochs", type=positive_int)
    >>> parser.parse_args(["--epochs", "3"]).epochs
    3
"""
from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from portable.errors import PortableError
from portable.sizes import parse_size


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _real(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _bounded(parse: Callable[[str], float], low: float, strict: bool, rule: str,
             doc: str) -> Callable[[str], Any]:
    """An argparse type: ``parse`` the text, then refuse values below ``low`` (or equal to it
    when ``strict``) with ``rule`` as the message."""
    def check(text: str) -> Any:
        value = parse(text)
        if value < low or (strict and value == low):
            raise argparse.ArgumentTypeError(f"{rule}, got {text!r}")
        return value
    check.__doc__ = doc
    return check


positive_int = _bounded(_integer, 1, False, "must be a positive integer",
                        "An integer of at least 1 (epochs, batch sizes, ranks).")
nonnegative_int = _bounded(_integer, 0, False, "must be 0 or more",
                           "An integer of at least 0 (seeds, step counts where 0 means off).")
positive_float = _bounded(_real, 0.0, True, "must be a positive number",
                          "A finite number above 0 (learning rates, timeouts).")
nonnegative_float = _bounded(_real, 0.0, False, "must be 0 or more",
                             "A finite number of at least 0 (weight decay, momentum).")


def unit_fraction(text: str) -> float:
    """A finite number above 0 and at most 1 (EASGD's elastic coefficient)."""
    value = positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be at most 1, got {text!r}")
    return value


def byte_size(text: str) -> int:
    """A byte size such as ``64MB`` or ``1.5GiB`` (``portable.sizes.parse_size``)."""
    try:
        return parse_size(text)
    except PortableError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
