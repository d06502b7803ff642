"""Casts that keep every value: the one check used wherever the library casts the user's data
(a DataFlow's datapoints, a predictor's inputs, a Keras model's evaluation data, checkpoint arrays).

numpy and TensorFlow cast silently: an int64 2**32 + 3 becomes the int32 3, a float 1.7 the int
1, a float64 1e300 the float32 inf. :func:`check_cast_keeps_values` raises instead, naming the
value, where it is and what the cast would have made of it. Rounding a float to a narrower float
is not a change of value here.

Example::

    check_cast_keeps_values(labels, np.dtype('int32'), "input 'label'")
    labels = labels.astype('int32')
"""
from __future__ import annotations

from typing import Optional, Tuple, Type

import numpy as np

__all__ = ["check_cast_keeps_values", "cast_exactly"]


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
