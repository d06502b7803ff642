"""Debugging helpers at tensorpack's path (``tensorpack.utils.debug``): :func:`enable_call_trace`."""
from __future__ import annotations

import sys

__all__ = ["enable_call_trace"]


def enable_call_trace() -> None:
    """Print every Python function call from now on (``sys.settrace``), with where it is and where
    it was called from; ``print``/``write`` calls are left out. For this thread only, as
    ``sys.settrace``; ``sys.settrace(None)`` stops it.

    Example::

        enable_call_trace()
        build_dataflow()    # Call to `__iter__` on line .../common.py:120 from .../train.py:33
    """
    def trace(frame, event, arg):
        if event != "call":
            return None
        code = frame.f_code
        if code.co_name in ("write", "print"):
            return None
        caller = frame.f_back
        if caller is not None:
            print(f"Call to `{code.co_name}` on line {code.co_filename}:{frame.f_lineno} "
                  f"from {caller.f_code.co_filename}:{caller.f_lineno}")
        return None

    sys.settrace(trace)
