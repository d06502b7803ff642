"""Casts that keep every value: the one check used wherever the library casts the user's data
(a DataFlow's datapoints, a predictor's inputs, a Keras model's evaluation data, checkpoint arrays).

numpy and TensorFlow cast silently: an int64 2**32 + 3 becomes the int32 3, a float 1.7 the int
1, a float64 1e300 the float32 inf. :func:`check_cast_keeps_values` raises instead, naming the
value, where it is and what the cast would have made of it. Rounding a float to a narrower float
is not a change of value here.

Example::

    check_cast_keeps_values(labels, np.dtype('int32'), "input 'label'")
    labels = labels.astype('int32')

The same rule for a single argument: :func:`whole_number` takes a count (``max_to_keep=3``,
``num_proc=np.int64(4)``, ``3.0``) as an int, and raises for ``2.7``, ``"3"`` or ``True``
instead of truncating them with ``int()``.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Optional, Tuple, Type

import numpy as np

__all__ = ["check_cast_keeps_values", "cast_exactly", "whole_number", "float_rounding"]


def _cast_limit(src: np.dtype, dst: np.dtype) -> Optional[Tuple[float, float]]:
    """(low, high) outside which a value of ``src`` changes when cast to ``dst``; None when
    every value survives (or only rounds: float to a narrower float, within range)."""
    if dst.kind in "iu" and src.kind in "iub":
        info, have = np.iinfo(dst), (np.iinfo(src) if src.kind != "b" else None)
        if have is not None and have.min >= info.min and have.max <= info.max:
            return None
        return info.min, info.max
    if dst.kind in "iu" and src.kind == "f":
        return np.iinfo(dst).min, np.iinfo(dst).max
    if dst.kind == "f" and src.kind in "iu":
        exact = 2 ** (np.finfo(dst).nmant + 1)   # every integer up to this is exact in dst
        if np.iinfo(src).max <= exact:
            return None
        return -exact, exact
    if dst.kind == "f" and src.kind == "f" and np.finfo(src).max > np.finfo(dst).max:
        return -np.finfo(dst).max, np.finfo(dst).max
    return None


def check_cast_keeps_values(arr: np.ndarray, want: np.dtype, what: str,
                            error: Type[Exception] = ValueError) -> None:
    """Raise ``error`` naming the first value of ``arr`` that the cast to ``want`` would change."""
    want = np.dtype(want)
    if arr.dtype == want or arr.size == 0 or arr.dtype.kind not in "biuf" or want.kind not in "biuf":
        return
    if want.kind in "iu" and arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            fractional = ~np.isfinite(arr) | (arr != np.round(arr))
        if fractional.any():
            bad = int(np.flatnonzero(fractional)[0])
            _raise(arr, want, bad, what, "is not a whole number", error)
    limit = _cast_limit(arr.dtype, want)
    if limit is None:
        return
    low, high = limit
    lo, hi = arr.min(), arr.max()
    if not (lo < low or hi > high):   # (NaN compares False: NaN stays NaN)
        return
    bad = int(np.flatnonzero((arr < low) | (arr > high))[0])
    _raise(arr, want, bad, what, f"does not fit {want.name} (range {low} .. {high})", error)


def _raise(arr: np.ndarray, want: np.dtype, bad: int, what: str, why: str, error: Type[Exception]):
    at = tuple(int(j) for j in np.unravel_index(bad, arr.shape))
    value = arr.flat[bad]
    with np.errstate(over="ignore", invalid="ignore"):
        changed = np.asarray(value).astype(want).item()
    raise error(f"{what}: the value {value.item()!r} at index {at} {why}: the cast from {arr.dtype.name} "
                f"would make it {changed!r}. Declare it as {arr.dtype.name}, or fix the data.")


def cast_exactly(value, want, what: str, error: Type[Exception] = ValueError) -> np.ndarray:
    """``np.asarray(value)`` cast to ``want``, or ``error`` if the cast would change a value."""
    arr = np.asarray(value)
    want = np.dtype(want)
    if arr.dtype != want:
        check_cast_keeps_values(arr, want, what, error)
        arr = arr.astype(want)
    return arr


def float_rounding(arr: np.ndarray, want) -> Optional[Tuple[int, float]]:
    """A float array cast to a narrower float (float32 saved weights into a float16 variable):
    ``(how many values change, the largest change)``, or None when every value survives. Where
    rounding is the caller's concern (a checkpoint restore says so), not an error here."""
    want = np.dtype(want)
    if arr.dtype.kind != "f" or want.kind != "f" or want.itemsize >= arr.dtype.itemsize or arr.size == 0:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        back = arr.astype(want).astype(arr.dtype)
        changed = (back != arr) & ~(np.isnan(arr) & np.isnan(back))
    n = int(np.count_nonzero(changed))
    if not n:
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        return n, float(np.max(np.abs(back[changed].astype(np.float64) - arr[changed])))


def whole_number(value: Any, what: str, minimum: Optional[int] = None) -> int:
    """``value`` as a Python int, never truncated, or an error naming ``what``.

    Accepted: ints and numpy integers, and floats that are whole (``3.0``). A float with a
    fractional part (``2.7``), NaN or infinity is a ValueError; a bool, a string or any
    other type is a TypeError (``int("3")`` and ``int(True)`` would pass silently). With
    ``minimum``, a smaller value is a ValueError too. ``what`` names the argument, e.g.
    ``"ModelSaver(max_to_keep=...)"``.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be a whole number, got the bool {value!r}; pass an int.")
    try:
        out = operator.index(value)   # int, numpy integers, 0-d integer arrays
    except TypeError:
        if not isinstance(value, numbers.Real):
            raise TypeError(f"{what} must be a whole number, got {value!r} of type {type(value).__name__}; "
                            "pass an int.") from None
        if not math.isfinite(value) or int(value) != value:
            raise ValueError(f"{what} must be a whole number, got {value!r}; it is not truncated, "
                             "pass an int.") from None
        out = int(value)
    if minimum is not None and out < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value!r}.")
    return out
