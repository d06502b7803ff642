"""Mirrors ``tensorpack.utils.serialize``: ``dumps`` / ``loads`` of kerastrainer's wire format."""
from ..dataflow.wire import dumps, loads

__all__ = ["loads", "dumps"]
