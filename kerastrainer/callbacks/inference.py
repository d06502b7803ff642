"""Inferencers: what to compute over a validation set, for :class:`InferenceRunner`.

An inferencer is a callback that the runner drives, as in tensorpack: its ``setup_graph`` runs
in the runner's (an inferencer may build what it needs there, e.g. an all-reduce across ranks),
it names the tensors it needs (``_get_fetches``), sees their values batch by batch
(``_on_fetches``) between ``_before_inference`` (its ``before_epoch``) and ``_after_inference``
(its ``trigger_epoch``), whose statistics it puts into the monitors.

Example::

    class MeanAbsError(Inferencer):
        def _get_fetches(self):
            return ['abs_error']          # tf.identity(..., name='abs_error') in the tower
        def _before_inference(self):
            self.total, self.count = 0.0, 0
        def _on_fetches(self, results):
            self.total += results[0].sum()
            self.count += results[0].size
        def _after_inference(self):
            return {'validation_mae': self.total / self.count}
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from ..utils import logger
from ..utils.stats import BinaryStatistics, RatioCounter
from .base import Callback

__all__ = ["Inferencer", "ScalarStats", "ClassificationError", "BinaryClassificationStats"]


class Inferencer(Callback):
    """Base class of inferencers: a :class:`Callback` that only an :class:`InferenceRunner` calls.
    Subclasses override the underscore methods.

    The runner calls ``setup_graph(trainer)`` from its own (so ``_setup_graph`` runs, and
    ``self.trainer`` is set), then at each of its triggers ``before_epoch()`` (which calls
    ``_before_inference``), ``on_fetches(...)`` for each batch, and ``trigger_epoch()`` (which
    calls ``_after_inference`` and puts the scalars it returns into the monitors).
    While the runner iterates, ``self.batch_size`` is the current batch's size
    (the first dimension of the first input), or None when it cannot be told.

    Example::

        class MaxProb(Inferencer):
            def _get_fetches(self):
                return ['prob']
            def _before_inference(self):
                self.best = 0.0
            def _on_fetches(self, results):
                self.best = max(self.best, float(results[0].max()))
            def _after_inference(self):
                return {'validation_max_prob': self.best}
    """

    batch_size: Optional[int] = None

    def get_fetches(self) -> List[str]:
        """The names of the tensors this inferencer needs, in the order ``_on_fetches`` gets them."""
        fetches = self._get_fetches()
        if isinstance(fetches, str):
            fetches = [fetches]
        # 'prob:0' is 'prob'; 'topk:1' (an op's second output) stays itself (it was cut to 'topk')
        fetches = [f[:-2] if isinstance(f, str) and f.endswith(":0") else f for f in fetches]
        for f in fetches:
            if not isinstance(f, str) or not f:
                raise TypeError(f"{self}: _get_fetches() must return tensor names (strings), got {f!r}.")
        return list(fetches)

    def before_inference(self) -> None:
        self._before_inference()

    def on_fetches(self, results: Sequence[np.ndarray], batch_size: Optional[int] = None) -> None:
        self.batch_size = batch_size
        self._on_fetches(results)

    def after_inference(self) -> Dict[str, float]:
        ret = self._after_inference()
        return {} if ret is None else dict(ret)

    # --- as a callback (tensorpack's): the runner calls these ---------------------------------------
    def _before_epoch(self):
        self._before_inference()

    def _trigger_epoch(self):
        for k, v in self.after_inference().items():
            try:
                v = float(v)
            except (TypeError, ValueError):
                logger.warn("%s returned a non-scalar statistic '%s'; skipped.", self, k)
                continue
            self.trainer.monitors.put_scalar(k, v)

    # --- override these -----------------------------------------------------------------------
    def _get_fetches(self) -> List[str]:
        raise NotImplementedError

    def _before_inference(self) -> None:
        pass

    def _on_fetches(self, results: Sequence[np.ndarray]) -> None:
        raise NotImplementedError

    def _after_inference(self) -> Optional[Dict[str, float]]:
        return None

    def __str__(self):
        return type(self).__name__


class ScalarStats(Inferencer):
    """The mean of some tensors over the whole dataset.

    A scalar tensor (e.g. a batch's mean cost) counts with the weight of its batch's
    size, so a short last batch does not skew the mean; a tensor with a value per
    sample counts each element once. Statistics are named ``<prefix>_<name>``.

    Args:
        names: tensor names (one string or a list).
        prefix: put before each name; '' or None for none.

    Example::

        ScalarStats(['cost', 'accuracy'])   # -> validation_cost, validation_accuracy
    """

    def __init__(self, names: Union[str, Sequence[str]], prefix: Optional[str] = "validation"):
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if not names:
            raise ValueError("ScalarStats: give at least one tensor name.")
        self.names = names
        self.prefix = prefix

    def _get_fetches(self):
        return self.names

    def _before_inference(self):
        self._sums = np.zeros(len(self.names), dtype=np.float64)
        self._weights = np.zeros(len(self.names), dtype=np.float64)

    def _on_fetches(self, results):
        for i, r in enumerate(results):
            r = np.asarray(r, dtype=np.float64)
            if r.ndim == 0:
                w = self._scalar_weight(i)
                self._sums[i] += float(r) * w
                self._weights[i] += w
            else:
                self._sums[i] += float(r.sum())
                self._weights[i] += r.size

    def _scalar_weight(self, index: int) -> float:
        """The weight of a scalar result: its batch's size."""
        return float(self.batch_size or 1)

    def _after_inference(self):
        ret = {}
        for i, name in enumerate(self.names):
            if self._weights[i] == 0:
                continue
            key = f"{self.prefix}_{name}" if self.prefix else name
            ret[key] = self._sums[i] / self._weights[i]
        return ret


class ClassificationError(Inferencer):
    """The error rate from a per-sample 0/1 vector of wrong predictions.

    In the tower::

        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(label, logits, 1)), tf.float32,
                        name='incorrect_vector')

    Args:
        wrong_tensor_name: the vector's tensor name (one entry per sample).
        summary_name: the statistic's name.

    Example::

        ClassificationError('incorrect_vector', 'validation_error')
    """

    def __init__(self, wrong_tensor_name: str = "incorrect_vector", summary_name: str = "validation_error"):
        self.wrong_tensor_name = wrong_tensor_name
        self.summary_name = summary_name

    def _get_fetches(self):
        return [self.wrong_tensor_name]

    def _before_inference(self):
        self.err_stat = RatioCounter()   # tensorpack's: wrong samples / samples

    def _on_fetches(self, results):
        vec = np.asarray(results[0])
        if vec.ndim != 1:
            raise ValueError(
                f"ClassificationError: '{self.wrong_tensor_name}' must be a vector with one 0/1 entry per "
                f"sample, got shape {vec.shape}. Return the per-sample vector, not its mean.")
        self.err_stat.feed(float(vec.sum()), vec.shape[0])

    def _after_inference(self):
        if self.err_stat.total == 0:
            logger.warn("ClassificationError: no samples were seen; %s is not reported.", self.summary_name)
            return {}
        return {self.summary_name: self.err_stat.ratio}


class BinaryClassificationStats(Inferencer):
    """Precision and recall of 0/1 predictions against 0/1 labels over the whole validation set,
    put as ``<prefix>_precision`` and ``<prefix>_recall``.

    Args:
        pred_tensor_name: the name of the 0/1 prediction tensor in the tower.
        label_tensor_name: the name of the 0/1 label tensor (an input's name works).
        prefix: the statistics' prefix.

    Example::

        InferenceRunner(val_ds, BinaryClassificationStats('pred', 'label'))
    """

    def __init__(self, pred_tensor_name: str, label_tensor_name: str, prefix: str = "val"):
        self.pred_tensor_name = pred_tensor_name
        self.label_tensor_name = label_tensor_name
        self.prefix = prefix

    def _before_inference(self):
        self.stat = BinaryStatistics()

    def _get_fetches(self):
        return [self.pred_tensor_name, self.label_tensor_name]

    def _on_fetches(self, outputs):
        pred, label = outputs
        self.stat.feed(pred, label)

    def _after_inference(self):
        return {self.prefix + "_precision": self.stat.precision, self.prefix + "_recall": self.stat.recall}
