"""FeedInput: numpy batches passed as arguments of every call (the slow baseline)."""
from __future__ import annotations

from ..dataflow.base import check_dataflow
from .base import InputSource, check_datapoint

__all__ = ["FeedInput"]


class FeedInput(InputSource):
    """Pass each datapoint from Python as the arguments of a one-step call.

    This is the feed_dict way: Python runs between every two steps. It exists as a
    baseline and for debugging; use :class:`QueueInput` to train.

    Example::

        TrainConfig(model=M(), data=FeedInput(df), ...)
    """

    requires_feed = True

    def __init__(self, ds, infinite: bool = True):
        self.ds = check_dataflow(ds, "FeedInput")
        self.infinite = infinite
        self._iter = None

    def _setup(self, specs):
        self.ds.reset_state()
        self._iter = iter(self.ds)

    def size(self) -> int:
        return len(self.ds)

    def next_feed(self) -> list:
        """The next datapoint as numpy arrays in the order of the signature."""
        try:
            dp = next(self._iter)
        except StopIteration:
            if not self.infinite:
                raise
            self._iter = iter(self.ds)
            dp = next(self._iter)
        return check_datapoint(dp, self.input_signature, f"FeedInput ({type(self.ds).__name__})")

    def _get_input_tensors(self):
        raise RuntimeError("FeedInput has no in-graph tensors; the trainer passes next_feed() instead.")

    def close(self) -> None:
        close = getattr(self.ds, "close", None)
        if callable(close):
            close()
