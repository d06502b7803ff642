"""Mirrors ``tensorpack.callbacks.summary``: MergeAllSummaries (a no-op), MovingAverageSummary and
SimpleMovingAverage."""
from .accepted import MergeAllSummaries
from .steps import MovingAverageSummary, SimpleMovingAverage

__all__ = ["MergeAllSummaries", "MovingAverageSummary", "SimpleMovingAverage"]
