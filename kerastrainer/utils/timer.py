"""Timing helpers of ``tensorpack.utils.timer``.

Example::

    with timed_operation('loading the dataset'):
        ds = load()
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Optional

from . import logger
from .utils import humanize_time_delta

__all__ = ["timed_operation", "IterSpeedCounter", "Timer"]


@contextmanager
def timed_operation(msg: str, log_start: bool = False) -> Iterator[None]:
    """Log how long the block took: ``'<msg> finished, time:1.2 sec.'``."""
    if log_start:
        logger.info("Start %s ...", msg)
    start = time.perf_counter()
    yield
    logger.info("%s finished, time:%s.", msg, humanize_time_delta(time.perf_counter() - start))


class IterSpeedCounter:
    """Log the speed of a loop every ``print_every`` calls."""

    def __init__(self, print_every: int, name: Optional[str] = None):
        self.cnt = 0
        self.print_every = int(print_every)
        self.name = name or "Speed"
        self.start = None

    def reset(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> None:
        if self.start is None:
            self.reset()
        self.cnt += 1
        if self.cnt % self.print_every == 0:
            logger.info("%s: %.2f sec, %d times, %.3g sec/time", self.name, time.perf_counter() - self.start,
                        self.cnt, (time.perf_counter() - self.start) / self.cnt)


class Timer:
    """A stopwatch that can be paused: ``start()``, ``pause()``, ``resume()``, ``seconds()``."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._total = 0.0
        self._start = time.perf_counter()
        self._paused = False

    def pause(self) -> None:
        if not self._paused:
            self._total += time.perf_counter() - self._start
            self._paused = True

    def is_paused(self) -> bool:
        return self._paused

    def resume(self) -> None:
        if self._paused:
            self._start = time.perf_counter()
            self._paused = False

    def seconds(self) -> float:
        return self._total + (0.0 if self._paused else time.perf_counter() - self._start)
