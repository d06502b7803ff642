"""Mirrors ``tensorpack.utils.compatible_serialize``: ``loads`` and ``dumps`` of ``utils/serialize.py``."""
from .serialize import dumps, loads  # noqa: F401
