"""The loss and metrics of ``KerasModel.compile``, resolved as ``keras.Model.compile`` does.

Losses and metrics may be Keras objects, functions or strings (``'accuracy'`` and
``'crossentropy'`` pick the binary, categorical or sparse form from the shapes,
as in Keras). A single loss applies to every output; a list gives one per output;
a dict maps output names to losses (outputs left out have no loss).
Metrics are a list (applied to every output), a list of lists (one list per
output) or a dict. An output with a loss or a metric needs a target (a metric
compares the output with it, as in Keras); other outputs take none.
``loss=None`` (Keras 3's default) compiles no output loss: the model's own
``add_loss`` losses are the whole loss (a VAE's KL and reconstruction terms), and
only outputs with metrics need a target; :meth:`Objectives.compute` then returns a
total of None, and the caller adds ``model.losses``.

Metrics are computed *per batch, without state* (``Metric.stateless_*``), so they
can run inside every replica of every step; the trainer averages them over the
steps of a call, and epoch logs average them over the epoch (as Keras' running
means do). Statistic names follow Keras' logs: ``'loss'``, ``'accuracy'``, and for
several outputs ``'<output>_loss'`` and ``'<output>_<metric>'``.

Example::

    obj = Objectives(loss='sparse_categorical_crossentropy', metrics=['accuracy'],
                     loss_weights=None, output_names=['dense'])
    obj.resolve(y_true={'dense': labels}, y_pred={'dense': probs})
    total, stats = obj.compute({'dense': labels_t}, {'dense': probs_t})
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import keras
import tensorflow as tf

from .. import _internals

__all__ = ["Objectives"]


def _per_output(spec, output_names: List[str], what: str, broadcast: bool = True) -> Dict[str, object]:
    """Map a compile argument onto the outputs: one value for all, a list in order, or a dict."""
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(output_names))
        if unknown:
            raise ValueError(f"compile({what}=...) names outputs {unknown} that the model does not have; "
                             f"its outputs are {output_names}.")
        return {o: spec.get(o) for o in output_names}
    if isinstance(spec, (list, tuple)) and not (what == "metrics" and broadcast):
        if len(spec) != len(output_names):
            raise ValueError(f"compile({what}=...) is a list of {len(spec)} but the model has "
                             f"{len(output_names)} outputs: {output_names}. Give one per output, or a dict.")
        return dict(zip(output_names, spec))
    return {o: spec for o in output_names}


def _name(obj) -> str:
    if isinstance(obj, str):
        return obj
    return getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__


class Objectives:
    """Resolved losses and metrics of a compiled Keras model (see the module doc)."""

    def __init__(self, loss, metrics, loss_weights, output_names: List[str]):
        self.output_names = list(output_names)
        # None: no output loss, the model's add_loss losses are the loss (checked by the caller)
        self.loss_ids = _per_output(loss, self.output_names, "loss")
        weights = _per_output(loss_weights, self.output_names, "loss_weights") if loss_weights is not None \
            else {o: 1.0 for o in self.output_names}
        self.loss_weights = {o: float(1.0 if w is None else w) for o, w in weights.items()}
        self.metric_ids = self._metric_spec(metrics)
        self.losses: Dict[str, keras.losses.Loss] = {}
        self._keras_scaled: Dict[str, bool] = {}
        self.metrics: Dict[str, List[Tuple[str, keras.metrics.Metric]]] = {}

    def _metric_spec(self, metrics) -> Dict[str, list]:
        if metrics is None:
            return {o: [] for o in self.output_names}
        if isinstance(metrics, dict):
            spec = _per_output(metrics, self.output_names, "metrics")
            return {o: ([] if m is None else list(m) if isinstance(m, (list, tuple)) else [m])
                    for o, m in spec.items()}
        if not isinstance(metrics, (list, tuple)):
            metrics = [metrics]
        if metrics and all(isinstance(m, (list, tuple)) or m is None for m in metrics) \
                and len(self.output_names) > 1:
            spec = _per_output(list(metrics), self.output_names, "metrics", broadcast=False)
            return {o: list(m or []) for o, m in spec.items()}
        return {o: list(metrics) for o in self.output_names}

    @property
    def has_loss(self) -> Dict[str, bool]:
        return {o: self.loss_ids[o] is not None for o in self.output_names}

    @property
    def needs_target(self) -> Dict[str, bool]:
        """The outputs the data gives a target for: those with a loss or a metric."""
        return {o: self.loss_ids[o] is not None or any(m is not None for m in self.metric_ids[o])
                for o in self.output_names}

    def resolve(self, y_true: Dict[str, object], y_pred: Dict[str, object]) -> None:
        """Make the loss and metric objects, given one example batch per output (shapes decide
        between binary, categorical and sparse forms of 'accuracy' and 'crossentropy')."""
        multi = len(self.output_names) > 1
        for o in self.output_names:
            lid = self.loss_ids[o]
            yt = y_true.get(o)
            if lid is not None:
                loss = self._get_loss(lid, yt, y_pred[o], o)
                self.losses[o] = loss
                self._keras_scaled[o] = self._scaled_by_keras(loss, yt, y_pred[o])
            ms = []
            for mid in self.metric_ids[o]:
                if mid is None:
                    continue
                if yt is None:  # never against the prediction itself: that is a silent 0 (or 1)
                    raise ValueError(f"compile(metrics=...): output '{o}' has the metric {_name(mid)!r} but no "
                                     "target to compare it with; give the data a target for it.")
                metric = self._get_metric(mid, yt, y_pred[o], o)
                ms.append((f"{o}_{metric.name}" if multi else metric.name, metric))
            self.metrics[o] = ms
        names = [n for ms in self.metrics.values() for n, _ in ms]
        dup = sorted({n for n in names if names.count(n) > 1 or n in self.loss_names})
        if dup:
            raise ValueError(f"compile(metrics=...) gives several statistics the name(s) {dup}; give the "
                             "metric objects distinct names (name=...).")

    @staticmethod
    def _scaled_by_keras(loss, y_true, y_pred) -> bool:
        """Whether Keras divides this loss by the number of replicas (a mean of per-sample values)."""
        if getattr(loss, "reduction", None) not in ("sum_over_batch_size", "mean", "mean_with_sample_weight"):
            return False
        try:
            values = loss.call(tf.convert_to_tensor(y_true), tf.convert_to_tensor(y_pred))
        except Exception:  # noqa: BLE001 - a loss that needs Keras' own conversions: assume per-sample
            return True
        return tuple(getattr(values, "shape", ())) not in ((), (0,))

    @staticmethod
    def _get_loss(identifier, y_true, y_pred, output: str):
        try:
            loss = _internals.keras_compile_loss(identifier, y_true, y_pred)
            if loss is not None:
                return loss
            loss = keras.losses.get(identifier)
            return loss if isinstance(loss, keras.losses.Loss) else \
                keras.losses.LossFunctionWrapper(loss, name=_name(identifier))
        except (ValueError, TypeError) as e:
            raise ValueError(f"compile(loss=...): cannot use {identifier!r} as the loss of output "
                             f"'{output}': {e}") from e

    @staticmethod
    def _get_metric(identifier, y_true, y_pred, output: str):
        try:
            metric = _internals.keras_compile_metric(identifier, y_true, y_pred)
            if metric is not None:
                return metric
            metric = keras.metrics.get(identifier)
            return metric if isinstance(metric, keras.metrics.Metric) else \
                keras.metrics.MeanMetricWrapper(metric, name=_name(identifier))
        except (ValueError, TypeError) as e:
            raise ValueError(f"compile(metrics=...): cannot use {identifier!r} as a metric of output "
                             f"'{output}': {e}") from e

    @property
    def loss_names(self) -> List[str]:
        """Per-output loss statistics (only with several outputs with a loss)."""
        with_loss = [o for o in self.output_names if self.loss_ids[o] is not None]
        return [f"{o}_loss" for o in with_loss] if len(self.output_names) > 1 else []

    @property
    def stat_names(self) -> List[str]:
        """Every statistic :meth:`compute` returns besides the total ``'loss'``."""
        return self.loss_names + [n for o in self.output_names for n, _ in self.metrics.get(o, [])]

    @property
    def has_output_loss(self) -> bool:
        """Whether any output has a compiled loss (else only the model's ``add_loss`` losses count)."""
        return any(self.has_loss.values())

    def compute(self, y_true: Dict[str, tf.Tensor], y_pred: Dict[str, tf.Tensor],
                sample_weight: Optional[Dict[str, tf.Tensor]] = None
                ) -> Tuple[Optional[tf.Tensor], Dict[str, tf.Tensor]]:
        """``(weighted sum of the output losses, {statistic name: scalar})`` for one batch; the sum
        is None when no output has a loss. ``sample_weight`` (per output) weights each loss as
        ``keras.Model.fit`` does (the loss's own reduction); metrics are unweighted, as Keras's
        ``metrics`` (not ``weighted_metrics``) are."""
        sample_weight = sample_weight or {}
        total = None
        stats = {}
        multi = len(self.output_names) > 1
        for o in self.output_names:
            if o not in self.losses:
                continue
            sw = sample_weight.get(o)
            value = self.losses[o](y_true[o], y_pred[o]) if sw is None else \
                self.losses[o](y_true[o], y_pred[o], sample_weight=sw)
            if self._keras_scaled[o]:
                value = _internals.unscale_loss_for_distribution(value)  # the per-replica mean; the trainer averages replicas
            value = tf.cast(value, tf.float32)
            if multi:
                stats[f"{o}_loss"] = value
            weighted = value * self.loss_weights[o] if self.loss_weights[o] != 1.0 else value
            total = weighted if total is None else total + weighted
        for o in self.output_names:
            for name, metric in self.metrics.get(o, []):
                state = metric.stateless_update_state(metric.stateless_reset_state(), y_true[o], y_pred[o])
                stats[name] = tf.cast(metric.stateless_result(state), tf.float32)
        return total, stats
