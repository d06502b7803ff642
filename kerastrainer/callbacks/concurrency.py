"""tensorpack's ``callbacks.concurrency``: start processes or threads with training, stop them after."""
from __future__ import annotations

import multiprocessing as mp
from typing import Any, List, Union

from ..utils import logger
from ..utils.concurrency import StoppableThread, start_proc_mask_signal
from .base import Callback

__all__ = ["StartProcOrThread"]


class StartProcOrThread(Callback):
    """Start ``startable`` (processes, threads, anything with ``start()``) before training, with
    SIGINT masked in processes (Ctrl-C reaches the trainer only); with ``stop_at_last``, terminate
    processes and stop :class:`StoppableThread`\\ s after training (other threads are left alone).

    Example::

        StartProcOrThread(mp.Process(target=simulator_loop, daemon=True))
    """

    _chief_only = False

    def __init__(self, startable: Union[Any, List[Any]], stop_at_last: bool = True):
        self._procs_threads = startable if isinstance(startable, list) else [startable]
        self._stop_at_last = stop_at_last

    def _before_train(self):
        logger.info("Starting %s ...", ", ".join(getattr(k, "name", type(k).__name__) for k in self._procs_threads))
        start_proc_mask_signal(self._procs_threads)

    def _after_train(self):
        if not self._stop_at_last:
            return
        for k in self._procs_threads:
            if not k.is_alive():
                continue
            if isinstance(k, mp.Process):
                logger.info("Stopping %s ...", k.name)
                k.terminate()
                k.join(5.0)
            elif isinstance(k, StoppableThread):
                logger.info("Stopping %s ...", k.name)
                k.stop()
                k.join(5.0)
            else:
                continue
            if k.is_alive():
                logger.error("Cannot join %s.", k.name)
