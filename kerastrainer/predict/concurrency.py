"""``MultiThreadAsyncPredictor``: predictors in threads, called with futures (tensorpack's)."""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Callable, Optional, Sequence

from ..utils import logger
from .base import PredictorBase

__all__ = ["MultiThreadAsyncPredictor"]


class MultiThreadAsyncPredictor:
    """Run tasks on a pool of threads, one per predictor. ``put_task(inputs, callback)`` returns a
    ``concurrent.futures.Future`` of the outputs; ``callback(future)`` runs when it is done.

    tensorpack grouped up to ``batch_size`` tasks into one call; here each task is one call (same
    results); a ``batch_size`` other than 1 is accepted and warned about once.

    Example::

        p = MultiThreadAsyncPredictor([OfflinePredictor(config)] * 2)
        p.start()
        f = p.put_task([image_batch]); prob, = f.result()
    """

    def __init__(self, predictors: Sequence[PredictorBase], batch_size: int = 5):
        if not predictors:
            raise ValueError("MultiThreadAsyncPredictor: give at least one predictor")
        if batch_size != 1:
            logger.warning("MultiThreadAsyncPredictor: batch_size=%s is not used; each task runs as one call.",
                           batch_size)
        self._tasks: "queue.Queue" = queue.Queue(maxsize=len(predictors) * 100)
        self._threads = [threading.Thread(target=self._work, args=(p,), daemon=True,
                                          name=f"MultiThreadAsyncPredictor-{i}") for i, p in enumerate(predictors)]
        self._started = False

    def _work(self, predictor):
        while True:
            item = self._tasks.get()
            if item is None:
                return
            inputs, fut = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(predictor(*inputs))
            except BaseException as e:  # noqa: B902 - handed to the caller through the future
                fut.set_exception(e)

    def start(self) -> None:
        if not self._started:
            self._started = True
            for t in self._threads:
                t.start()

    def put_task(self, dp, callback: Optional[Callable[[Future], None]] = None) -> Future:
        if not self._started:
            raise RuntimeError("MultiThreadAsyncPredictor: call start() before put_task()")
        fut: Future = Future()
        if callback is not None:
            fut.add_done_callback(callback)
        self._tasks.put((list(dp), fut))
        return fut

    def stop(self) -> None:
        for _ in self._threads:
            self._tasks.put(None)
