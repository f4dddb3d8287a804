"""Argument checks with one wording, returning the value: ``n = check_int("repeats", n)``.
Bools are refused (``True == 1`` in Python, but ``repeats=True`` is a mistake, not one repeat)."""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_int", "check_number"]


def _kind(minimum: int | None, maximum: int | None) -> str:
    if maximum is not None:
        return (
            f"an int in [{minimum}, {maximum}]" if minimum is not None else f"an int <= {maximum}"
        )
    named = {None: "an int", 0: "a non-negative int", 1: "a positive int"}
    return named.get(minimum, f"an int >= {minimum}")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = 1,
    maximum: int | None = None,
    why: str = "",
) -> int:
    """``value`` if it is an integer (NumPy's too, not a bool) within the bounds, else ValueError."""
    ok = isinstance(value, numbers.Integral) and _within(value, minimum, maximum)
    _refuse_unless(ok, name, value, _kind(minimum, maximum), why)
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    why: str = "",
) -> float:
    """``value`` as a float if it is a finite real number (not a bool) within the bounds, else ValueError."""
    ok = isinstance(value, numbers.Real) and math.isfinite(value)
    bounds = [f">= {minimum}"] if minimum is not None else []
    bounds += [f"<= {maximum}"] if maximum is not None else []
    kind = " ".join(["a finite number", *bounds])
    _refuse_unless(ok and _within(value, minimum, maximum), name, value, kind, why)
    return float(value)


def _within(value: Any, minimum: Any, maximum: Any) -> bool:
    return (minimum is None or value >= minimum) and (maximum is None or value <= maximum)


def _refuse_unless(ok: bool, name: str, value: Any, kind: str, why: str) -> None:
    if not ok or isinstance(value, bool):
        reason = f": {why}" if why else ""
        raise ValueError(f"{name} must be {kind}, got {value!r}{reason}")
