"""Mirrors ``tensorpack.libinfo``: the version."""
from ._version import __version__

__git_version__ = __version__
__all__ = ["__version__"]
