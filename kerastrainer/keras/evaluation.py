"""``KerasModel.evaluate`` and ``KerasModel.predict``, as Keras's: what they return and the hooks they run.

:class:`KerasEvaluation` is mixed into :class:`~kerastrainer.keras.KerasModel`: ``evaluate``
computes the compiled loss and metrics batch by batch in inference mode (each batch weighted by
its size; the per-output losses unweighted, as Keras 3 averages them), or runs the model's own
``test_step`` when it has one; ``predict`` is ``keras.Model.predict`` on the trained model. The
same means of fit's ``validation_data`` (:func:`_validation_runner`). Training is
:mod:`kerastrainer.keras.model`'s.

Example::

    loss, acc = km.evaluate(x_test, y_test, verbose=0)
    probs = km.predict(x_test, batch_size=256)
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from ..callbacks.inference import ScalarStats
from ..callbacks.inference_runner import InferenceRunner
from ..dataflow.base import is_dataflow
from ..input_source.base import InputSource, InputSourceError
from ..utils import logger
from ..utils.casting import cast_exactly
from .data import as_keras_data
from .fit_arguments import _check_verbose
from .own_step import overridden, runs_own_step
from .structure import ModelIO, flatten_xy

__all__ = ["KerasEvaluation"]


def _flattener(io: ModelIO) -> Callable:
    """The flat ``[inputs..., targets...(, weights...)]`` of a datapoint, for ``io``."""
    def flatten(dp):
        return flatten_xy(dp, io)
    return flatten


class KerasEvaluation:
    """``evaluate`` and ``predict`` of :class:`~kerastrainer.keras.KerasModel` (see the module doc).

    Example::

        km.evaluate(x_test, y_test, return_dict=True)    # {'loss': ..., 'accuracy': ...}
    """

    def evaluate(self, x=None, y=None, batch_size: Optional[int] = None, verbose: Union[str, int] = "auto",
                 sample_weight=None, steps: Optional[int] = None, callbacks: Optional[Sequence] = None,
                 return_dict: bool = False, *, data=None):
        """Mean loss and metrics over the data, in inference mode, as ``keras.Model.evaluate``:
        a scalar (the loss alone) or a list ``[loss, metrics...]`` in Keras's order, or a dict
        with ``return_dict=True``. Batches are weighted by their size (a short last batch does
        not skew the means); ``sample_weight`` weights the loss as Keras does.

        Every form returns Keras's scalar or list: ``evaluate(x, y)`` and the data as one
        argument (``evaluate((x, y))``, a ``tf.data.Dataset``, a generator, a DataFlow, ``x``
        alone for a model with no target, or ``data=``); ``return_dict=True`` gives the dict.
        ``verbose``: 0 silent, else one summary line is logged. ``callbacks`` are not run (an
        error says so).

        Example::

            loss, acc = km.evaluate(x_test, y_test, verbose=0)
            km.evaluate(x_test, y_test, return_dict=True)    # {'loss': ..., 'accuracy': ...}
        """
        if callbacks:
            raise NotImplementedError("KerasModel.evaluate(callbacks=...) is not supported: evaluate runs no "
                                      "callback hooks. Call keras.Model.evaluate on km.model for them.")
        verbose = _check_verbose(verbose)
        data_arg = data if data is not None else ((x, y) if y is not None else x)
        if data_arg is None:
            data_arg = self.input
        if data_arg is None:
            raise ValueError("KerasModel.evaluate needs data: evaluate(x, y).")
        self._adopt_keras_compile()
        own = overridden(self.model, "test_step") or runs_own_step(self.model)
        if own:
            logs = self._evaluate_with_keras(data_arg, batch_size, steps, sample_weight)
        else:
            logs = self._evaluate_stats(data_arg, batch_size, steps, sample_weight)
        if verbose:
            logger.info("KerasModel.evaluate: %s", " - ".join(f"{k}: {v:.4f}" for k, v in logs.items()))
        if return_dict:
            return logs
        return _keras_result(logs, compiled_order=not own)

    def _evaluate_stats(self, data_arg, batch_size: Optional[int], steps: Optional[int], sample_weight) -> dict:
        """``{statistic: mean}`` over the data (KerasModel's own compiled loss and metrics)."""
        if isinstance(data_arg, InputSource):
            raise TypeError("evaluate needs data it can read in Python (arrays, a DataFlow, a tf.data.Dataset), "
                            f"not a {type(data_arg).__name__}.")
        kd = as_keras_data(data_arg, batch_size=batch_size, shuffle=False, sample_weight=sample_weight)
        io = self._weighted_io(self._prepare(kd), kd, None)
        desc = self._make_desc(io)
        signature = desc.inputs()
        names = desc.stat_names

        @tf.function(input_signature=signature)
        def batch_stats(*tensors):
            loss, stats, _ = desc.compute(tensors, training=False)
            return [loss] + [stats[n] for n in names[1:]]

        # each batch weighted by its size; the per-output losses unweighted, as Keras averages them
        per_batch = np.array([n in desc.per_batch_stats for n in names])
        sums = np.zeros(len(names))
        count = np.zeros(len(names))
        flow = kd.flat_dataflow(_flattener(io), with_share=True)
        flow.reset_state()
        for i, dp in enumerate(flow):
            if steps is not None and i >= steps:
                break
            values = batch_stats(*[_to_spec(c, s, k, len(io.input_specs))
                                   for k, (c, s) in enumerate(zip(dp, signature))])
            weight = np.where(per_batch, 1.0, float(len(dp[0])))
            sums += np.array([float(v) for v in values]) * weight
            count += weight
        if not count.any():
            raise ValueError("evaluate: the data produced no batch.")
        means = {n: float(s / c) for n, s, c in zip(names, sums, count)}
        # Keras 3's order (Model.metrics): the loss, the per-output losses, compile's metrics, those
        # sorted by name for several outputs (its logs name them <output>_<metric>, its metric
        # objects do not, so it lists them among the names it did not match, sorted)
        losses = [n for n in names[1:] if n in desc.per_batch_stats]
        rest = [n for n in names[1:] if n not in desc.per_batch_stats]
        multi = len(self._objectives.output_names) > 1
        return {n: means[n] for n in [names[0]] + losses + (sorted(rest) if multi else rest)}

    def _evaluate_with_keras(self, data, batch_size: Optional[int], steps: Optional[int],
                             sample_weight=None) -> dict:
        """The model's own ``evaluate`` (its ``test_step``), on the data forms ``evaluate`` takes."""
        if isinstance(data, InputSource):
            raise TypeError("evaluate needs data it can read in Python (arrays, a DataFlow, a tf.data.Dataset), "
                            f"not a {type(data).__name__}.")
        kw = dict(steps=steps, verbose=0, return_dict=True)
        if is_dataflow(data):
            data.reset_state()
            gen = (tuple(dp) if isinstance(dp, list) else dp for dp in data)
            return self.model.evaluate(gen, **kw)
        if isinstance(data, tuple) and len(data) in (2, 3) and not isinstance(data[0], tf.data.Dataset):
            return self.model.evaluate(data[0], data[1], batch_size=batch_size,
                                       sample_weight=data[2] if len(data) == 3 else sample_weight, **kw)
        return self.model.evaluate(data, batch_size=batch_size, **kw)

    def predict(self, x, batch_size: Optional[int] = None, verbose: Union[str, int] = "auto",
                steps: Optional[int] = None, callbacks: Optional[Sequence] = None):
        """The model's outputs on ``x``: ``keras.Model.predict`` on the trained model, with its
        arguments and return (numpy arrays in the structure of the outputs). ``verbose``
        defaults to silent (kerastrainer's 'auto'), ``callbacks`` are Keras callbacks (their
        ``on_predict_*`` hooks run, as in Keras).

        Example::

            probs = km.predict(x_test, batch_size=256)
        """
        verbose = 0 if verbose == "auto" else _check_verbose(verbose)
        if isinstance(x, InputSource):
            raise TypeError(f"predict takes data Keras can read (arrays, a tf.data.Dataset, a PyDataset, a "
                            f"generator), not a {type(x).__name__}.")
        if is_dataflow(x):
            x.reset_state()
            x = (tuple(dp) if isinstance(dp, list) else dp for dp in x)
        return self.model.predict(x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks)


def _to_spec(c, spec: tf.TensorSpec, index: int, n_inputs: int) -> tf.Tensor:
    """Component ``index`` of an evaluate batch as a tensor of the signature's dtype; a cast that
    would change a value (an int64 label beyond int32, a float 1.7 made an int) is an error."""
    what = f"evaluate: {'input' if index < n_inputs else 'target'} '{spec.name}'"
    want = spec.dtype.as_numpy_dtype if spec.dtype != tf.string else None
    arr = cast_exactly(c, want, what, InputSourceError) if want is not None else c
    return tf.convert_to_tensor(arr, dtype=spec.dtype)


def _keras_result(logs: dict, compiled_order: bool = True):
    """``keras.Model.evaluate``'s return: the loss alone, or a list in Keras 3's order: of compile's
    statistics (``compiled_order``), the order of ``logs`` (:meth:`KerasEvaluation._evaluate_stats`
    puts them in it); of a model's own ``test_step``, the loss, its other metrics, then the ``*_loss``."""
    if compiled_order:
        names = list(logs)
    else:
        names = ["loss"] + [n for n in logs if n != "loss" and not n.endswith("_loss")] + \
            [n for n in logs if n != "loss" and n.endswith("_loss")]
    values = [logs[n] for n in names if n in logs]
    return values[0] if len(values) == 1 else values


class _ValidationStats(ScalarStats):
    """``val_<statistic>``: each batch weighted by its size, the per-output losses unweighted, as
    Keras averages them."""

    def __init__(self, desc):
        super().__init__(desc.stat_names, prefix="val")
        self._per_batch = [n in desc.per_batch_stats for n in desc.stat_names]

    def _scalar_weight(self, index: int) -> float:
        return 1.0 if self._per_batch[index] else super()._scalar_weight(index)


def _validation_runner(desc, val_flow) -> Optional[InferenceRunner]:
    """The runner of ``val_flow`` through the desc's inference tower (``val_<statistic>``)."""
    return None if val_flow is None else InferenceRunner(val_flow, _ValidationStats(desc))
