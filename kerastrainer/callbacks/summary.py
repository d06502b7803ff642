"""Mirrors ``tensorpack.callbacks.summary``: MergeAllSummaries (a no-op) and MovingAverageSummary."""
from .accepted import MergeAllSummaries
from .steps import MovingAverageSummary

__all__ = ["MergeAllSummaries", "MovingAverageSummary"]
