"""The callbacks and monitors every training run gets unless its config says otherwise
(tensorpack's ``DEFAULT_CALLBACKS`` / ``DEFAULT_MONITORS``; ``kerastrainer.train`` re-exports them)."""
from __future__ import annotations

from typing import List

from .base import Callback
from .monitor import JSONWriter, ScalarPrinter, TFEventWriter
from .prog import EstimatedTimeLeft, ProgressBar, ThroughputTracker
from .steps import MovingAverageSummary, TerminateOnNonFinite

__all__ = ["DEFAULT_CALLBACKS", "DEFAULT_MONITORS"]


def DEFAULT_CALLBACKS() -> List[Callback]:  # noqa: N802 (tensorpack's name)
    """Moving averages of the statistics, the progress bar, the NaN/Inf guard, throughput, time left."""
    return [MovingAverageSummary(), ProgressBar(), TerminateOnNonFinite(), ThroughputTracker(),
            EstimatedTimeLeft()]


def DEFAULT_MONITORS() -> List[Callback]:  # noqa: N802
    """TensorBoard events, ``stats.json`` and the console table."""
    return [TFEventWriter(), JSONWriter(), ScalarPrinter()]
