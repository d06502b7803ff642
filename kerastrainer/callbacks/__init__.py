"""Callbacks: code that runs between training calls, and the monitors they report to.

Everything here is re-exported by ``kerastrainer`` (``from kerastrainer import *``).
See docs/callbacks.md for the loop, how to write a callback, and the checkpoint layout.
"""
from .base import *  # noqa: F401,F403
from .group import *  # noqa: F401,F403
from .monitor import *  # noqa: F401,F403
from .steps import *  # noqa: F401,F403
from .prog import *  # noqa: F401,F403
from .trigger import *  # noqa: F401,F403
from .param import *  # noqa: F401,F403
from .saver import *  # noqa: F401,F403
from .inference import *  # noqa: F401,F403
from .inference_runner import *  # noqa: F401,F403
from .graph import *  # noqa: F401,F403
from .hooks import *  # noqa: F401,F403
from .misc import *  # noqa: F401,F403
from .concurrency import *  # noqa: F401,F403
from .prof import *  # noqa: F401,F403
from .summary import *  # noqa: F401,F403
from . import base, group, monitor, steps, prog, trigger, param, saver, inference, inference_runner
from . import graph, hooks, misc, concurrency, prof, summary

__all__ = (base.__all__ + group.__all__ + monitor.__all__ + steps.__all__ + prog.__all__
           + trigger.__all__ + param.__all__ + saver.__all__ + inference.__all__
           + inference_runner.__all__)
__all__ = list(dict.fromkeys(__all__ + graph.__all__ + hooks.__all__ + misc.__all__ + concurrency.__all__
                             + prof.__all__ + summary.__all__))  # one entry per name
