"""Mirrors ``tensorpack.input_source.input_source_base``: the base class and remap_input_source."""
from .base import InputSource
from .remap import remap_input_source

__all__ = ["InputSource", "remap_input_source"]
