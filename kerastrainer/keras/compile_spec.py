"""What ``KerasModel.compile``'s loss and metrics ask of the data: which outputs need a target.

Keras computes the losses and metrics (``keras.Model.compile`` builds them, Keras's ``train_step``
and ``test_step`` run them); this module only maps compile's arguments onto the model's outputs, as
Keras does: a single loss applies to every output, a list gives one per output, a dict maps output
names to losses (outputs left out have none). An output with a loss or a metric needs a target (a
metric compares the output with it); ``loss=None`` (Keras 3's default) compiles no output loss: the
model's own ``add_loss`` losses are the whole loss.

One form Keras 3 refuses is kept from Keras 2 and tensorpack: a flat ``metrics`` list for a model
with several outputs applies every metric to every output (:meth:`CompileSpec.keras_metrics` gives
Keras the per-output lists, each metric object its own copy).

Example::

    spec = CompileSpec('mse', ['mae'], None, output_names=['a', 'b'])
    spec.needs_target            # {'a': True, 'b': True}
    spec.keras_metrics()         # [['mae'], ['mae']]
"""
from __future__ import annotations

from typing import Dict, List

import keras

__all__ = ["CompileSpec"]


def _per_output(spec, output_names: List[str], what: str) -> Dict[str, object]:
    """Map a compile argument onto the outputs: one value for all, a list in order, or a dict."""
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(output_names))
        if unknown:
            raise ValueError(f"compile({what}=...) names outputs {unknown} that the model does not have; "
                             f"its outputs are {output_names}.")
        return {o: spec.get(o) for o in output_names}
    if isinstance(spec, (list, tuple)):
        if len(spec) != len(output_names):
            raise ValueError(f"compile({what}=...) is a list of {len(spec)} but the model has "
                             f"{len(output_names)} outputs: {output_names}. Give one per output, or a dict.")
        return dict(zip(output_names, spec))
    return {o: spec for o in output_names}


def _name(obj) -> str:
    if isinstance(obj, str):
        return obj
    return getattr(obj, "name", None) or getattr(obj, "__name__", None) or type(obj).__name__


def _copy_metric(metric):
    """A fresh metric of the same kind: one object cannot track two outputs."""
    if isinstance(metric, keras.metrics.Metric):
        return type(metric).from_config(metric.get_config())
    return metric


class CompileSpec:
    """compile's loss and metrics mapped onto the model's outputs (see the module doc)."""

    def __init__(self, loss, metrics, loss_weights, output_names: List[str], weighted_metrics=None):
        self.output_names = list(output_names)
        self.loss_ids = _per_output(loss, self.output_names, "loss")
        if loss_weights is not None:
            _per_output(loss_weights, self.output_names, "loss_weights")
        self._metrics = metrics
        self.metric_ids = self._metric_spec(metrics)
        weighted = self._metric_spec(weighted_metrics)
        self.metric_ids = {o: self.metric_ids[o] + weighted[o] for o in self.output_names}

    def _broadcast(self, metrics) -> bool:
        """A flat list (or one metric) for several outputs: every metric on every output."""
        if len(self.output_names) < 2 or metrics is None or isinstance(metrics, dict):
            return False
        if not isinstance(metrics, (list, tuple)):
            return True
        return not (metrics and all(isinstance(m, (list, tuple)) or m is None for m in metrics))

    def _metric_spec(self, metrics) -> Dict[str, list]:
        if metrics is None:
            return {o: [] for o in self.output_names}
        if self._broadcast(metrics) or len(self.output_names) == 1 and not isinstance(metrics, dict):
            flat = list(metrics) if isinstance(metrics, (list, tuple)) else [metrics]
            return {o: flat for o in self.output_names}
        spec = _per_output(metrics if isinstance(metrics, dict) else list(metrics), self.output_names, "metrics")
        return {o: ([] if m is None else list(m) if isinstance(m, (list, tuple)) else [m]) for o, m in spec.items()}

    @property
    def needs_target(self) -> Dict[str, bool]:
        """The outputs the data gives a target for: those with a loss or a metric."""
        return {o: self.loss_ids[o] is not None or any(m is not None for m in self.metric_ids[o])
                for o in self.output_names}

    @property
    def has_output_loss(self) -> bool:
        """Whether any output has a compiled loss (else only the model's ``add_loss`` losses count)."""
        return any(v is not None for v in self.loss_ids.values())

    @property
    def metric_names(self) -> List[str]:
        """The metrics' log names as Keras gives them (``'<output>_<metric>'`` for several outputs)."""
        multi = len(self.output_names) > 1
        return [f"{o}_{_name(m)}" if multi else _name(m)
                for o in self.output_names for m in self.metric_ids[o] if m is not None]

    def keras_metrics(self):
        """compile's ``metrics`` as ``keras.Model.compile`` takes them (a broadcast list made per output)."""
        if not self._broadcast(self._metrics):
            return self._metrics
        flat = list(self._metrics) if isinstance(self._metrics, (list, tuple)) else [self._metrics]
        return [[m if i == 0 else _copy_metric(m) for m in flat] for i in range(len(self.output_names))]
