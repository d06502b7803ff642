"""Counters of ``tensorpack.utils.stats``: sums, ratios, accuracy, binary statistics, moments.

Example::

    acc = Accuracy()
    acc.feed(correct_count, batch_size)
    print(acc.accuracy)
"""
from __future__ import annotations

import numpy as np

__all__ = ["StatCounter", "RatioCounter", "Accuracy", "BinaryStatistics", "OnlineMoments"]


class StatCounter:
    """Collects values; reports their count, sum, average, max and min."""

    def __init__(self):
        self.reset()

    def feed(self, v) -> None:
        self._values.append(v)

    def reset(self) -> None:
        self._values = []

    @property
    def count(self) -> int:
        return len(self._values)

    def _check(self):
        if not self._values:
            raise ValueError("StatCounter is empty: feed() values first.")

    @property
    def average(self) -> float:
        self._check()
        return float(np.mean(self._values))

    @property
    def sum(self) -> float:
        self._check()
        return float(np.sum(self._values))

    @property
    def max(self) -> float:
        self._check()
        return float(max(self._values))

    @property
    def min(self) -> float:
        self._check()
        return float(min(self._values))

    def samples(self) -> list:
        return list(self._values)


class RatioCounter:
    """A ratio of sums: ``feed(count, total)``; ``ratio`` = sum(count) / sum(total)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self._tot = 0
        self._cnt = 0

    def feed(self, count, total: int = 1) -> None:
        self._tot += total
        self._cnt += count

    @property
    def ratio(self) -> float:
        return 0.0 if self._tot == 0 else self._cnt * 1.0 / self._tot

    @property
    def total(self):
        return self._tot

    @property
    def count(self):
        return self._cnt


class Accuracy(RatioCounter):
    """A RatioCounter with ``accuracy`` as the name of its ratio."""

    @property
    def accuracy(self) -> float:
        return self.ratio


class BinaryStatistics:
    """Precision, recall and false rates of 0/1 predictions against 0/1 labels."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.nr_pos = self.nr_neg = self.nr_pred_pos = self.nr_pred_neg = 0
        self.corr_pos = self.corr_neg = 0

    def feed(self, pred, label) -> None:
        pred, label = np.asarray(pred), np.asarray(label)
        if pred.shape != label.shape:
            raise ValueError(f"BinaryStatistics.feed: pred shape {pred.shape} != label shape {label.shape}")
        self.nr_pos += int((label == 1).sum())
        self.nr_neg += int((label == 0).sum())
        self.nr_pred_pos += int((pred == 1).sum())
        self.nr_pred_neg += int((pred == 0).sum())
        self.corr_pos += int(((pred == 1) & (pred == label)).sum())
        self.corr_neg += int(((pred == 0) & (pred == label)).sum())

    @property
    def precision(self) -> float:
        return 0.0 if self.nr_pred_pos == 0 else self.corr_pos * 1.0 / self.nr_pred_pos

    @property
    def recall(self) -> float:
        return 0.0 if self.nr_pos == 0 else self.corr_pos * 1.0 / self.nr_pos

    @property
    def false_positive(self) -> float:
        return 0.0 if self.nr_pred_pos == 0 else 1 - self.precision

    @property
    def false_negative(self) -> float:
        return 0.0 if self.nr_pos == 0 else 1 - self.recall


class OnlineMoments:
    """Running mean and variance (Welford)."""

    def __init__(self):
        self._mean = 0.0
        self._M2 = 0.0
        self._n = 0

    def feed(self, x) -> None:
        self._n += 1
        delta = x - self._mean
        self._mean = self._mean + delta / self._n
        self._M2 = self._M2 + delta * (x - self._mean)

    @property
    def mean(self):
        return self._mean

    @property
    def variance(self):
        return self._M2 / (self._n - 1)

    @property
    def std(self):
        return np.sqrt(self.variance)
