"""This worker's shard of a DataFlow, for multi-process training.

The rank and size come from :mod:`kerastrainer.utils.cluster` (which re-exports these
names: ``from kerastrainer.utils.cluster import shard_dataflow`` is the documented path).

Example::

    df = shard_dataflow(BatchData(DataFromList(samples, shuffle=False), 32))
"""
from __future__ import annotations

import math
from typing import Optional

from ..utils._cluster_env import rank_and_size_or_default
from .base import ProxyDataFlow, check_dataflow

__all__ = ["ShardedDataFlow", "shard_dataflow"]


class ShardedDataFlow(ProxyDataFlow):
    """Keep every ``size``-th datapoint of a DataFlow, starting at ``rank``.

    With ``drop_remainder`` (the default) and a DataFlow of known length ``n``, every
    shard yields exactly ``n // size`` datapoints, so all workers run the same number
    of steps per epoch. The wrapped DataFlow is iterated in full: shard its source
    (:func:`~kerastrainer.utils.cluster.shard_list`) when making a datapoint is costly, and make sure every worker
    sees the same order (no per-process shuffling before the shard), or the shards
    overlap.

    Example::

        df = ShardedDataFlow(BatchData(ds, 32), rank=1, size=2)   # batches 1, 3, 5, ...
    """

    def __init__(self, df, rank: Optional[int] = None, size: Optional[int] = None, drop_remainder: bool = True):
        super().__init__(check_dataflow(df, "ShardedDataFlow"))
        self.rank, self.size = rank_and_size_or_default(rank, size)
        self.drop_remainder = bool(drop_remainder)

    def _total(self) -> Optional[int]:
        try:
            return len(self.ds)
        except (TypeError, NotImplementedError):
            return None

    def __len__(self) -> int:
        n = self._total()
        if n is None:
            raise NotImplementedError(f"{type(self.ds).__name__} has no length, so its shard has none.")
        if self.drop_remainder:
            return n // self.size
        return max(0, math.ceil((n - self.rank) / self.size))

    def __iter__(self):
        total = self._total()
        limit = total // self.size if (self.drop_remainder and total is not None) else None
        given = 0
        for i, dp in enumerate(self.ds):
            if limit is not None and given >= limit:
                break
            if i % self.size == self.rank:
                given += 1
                yield dp


def shard_dataflow(df, rank: Optional[int] = None, size: Optional[int] = None, drop_remainder: bool = True):
    """This worker's shard of ``df`` (see :class:`ShardedDataFlow`); ``df`` itself for one worker.

    Example::

        df = shard_dataflow(BatchData(DataFromList(samples, shuffle=False), 32))
    """
    rank, size = rank_and_size_or_default(rank, size)
    if size == 1:
        return df
    return ShardedDataFlow(df, rank, size, drop_remainder)
