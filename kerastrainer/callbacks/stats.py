"""Mirrors ``tensorpack.callbacks.stats`` (kept there for old imports): ``DumpParamAsImage``,
``InjectShell``, ``SendStat``, whose homes are ``callbacks/graph.py`` and ``callbacks/misc.py``."""
from .graph import DumpParamAsImage  # noqa: F401
from .misc import InjectShell, SendStat  # noqa: F401

__all__ = []
