"""``KerasModel.evaluate`` and ``KerasModel.predict``, as Keras's: what they return and the hooks they run.

:class:`KerasEvaluation` is mixed into :class:`~kerastrainer.keras.KerasModel`: ``evaluate``
runs Keras's ``test_step`` batch by batch over kerastrainer's reading of the data (every data form
``fit`` takes; errors name the input or target at fault; exactly ``steps`` batches) and reads the
model's metrics, as ``keras.Model.evaluate`` does; a model with its own ``test_step`` is evaluated by
``keras.Model.evaluate`` itself. fit's ``validation_data`` is the same evaluation, on the trainer's
replicas (:mod:`.validation`). ``predict`` is ``keras.Model.predict`` on the trained model. Training
is :mod:`kerastrainer.keras.model`'s.

Example::

    loss, acc = km.evaluate(x_test, y_test, verbose=0)
    probs = km.predict(x_test, batch_size=256)
"""
from __future__ import annotations

import itertools
from typing import Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from .._internals import clear_model_losses, compiled_metrics_of, keras_forward_losses_unscaled
from ..dataflow.base import is_dataflow
from ..input_source.base import InputSource, InputSourceError
from ..utils import logger
from ..utils.casting import cast_exactly
from .data import as_keras_data
from .fit_arguments import _check_verbose
from .model_desc import _flat_logs, overridden, pack_batch, runs_own_step
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
        if overridden(self.model, "test_step") or runs_own_step(self.model):
            logs = self._evaluate_with_keras(data_arg, batch_size, steps, sample_weight)
        else:
            if isinstance(data_arg, InputSource):
                raise TypeError("evaluate needs data it can read in Python (arrays, a DataFlow, a tf.data.Dataset), "
                                f"not a {type(data_arg).__name__}.")
            kd = as_keras_data(data_arg, batch_size=batch_size, shuffle=False, sample_weight=sample_weight)
            logs = self._evaluate_compiled(kd, self._weighted_io(self._prepare(kd), kd, None), steps)
        if verbose:
            logger.info("KerasModel.evaluate: %s", " - ".join(f"{k}: {v:.4f}" for k, v in logs.items()))
        if return_dict:
            return logs
        return _keras_result(logs, self.model)

    def _evaluate_compiled(self, kd, io: ModelIO, steps: Optional[int] = None,
                           strategy: Optional[tf.distribute.Strategy] = None) -> dict:
        """``{metric: result}`` of Keras's ``test_step`` over the batches of ``kd`` (the first
        ``steps``), the model's metrics reset first; with several replicas (fit's validation) each
        replica runs its part of each batch and the results are read across them, as ``fit``'s."""
        model = self.model
        strategy = strategy or tf.distribute.get_strategy()
        replicas = strategy.num_replicas_in_sync
        step = _test_function(model, io, strategy)
        signature = io.signature
        n_inputs = len(io.input_specs)
        model.reset_metrics()
        flow = kd.flat_dataflow(_flattener(io))
        flow.reset_state()
        batches, skipped = 0, 0
        for dp in itertools.islice(flow, steps):   # (islice reads no batch past the last)
            batches += 1
            if replicas > 1 and len(dp[0]) < replicas:
                skipped += len(dp[0])
                continue
            step(*[_to_spec(c, spec, k, n_inputs) for k, (c, spec) in enumerate(zip(dp, signature))])
        if not batches:
            raise ValueError("evaluate: the data produced no batch.")
        if skipped:
            logger.warn("KerasModel: %d validation sample(s) of a batch smaller than the %d replicas were left out.",
                        skipped, replicas)
        return {str(k): float(np.asarray(v)) for k, v in _flat_logs(model.get_metrics_result()).items()}

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


def _keras_result(logs: dict, model):
    """``keras.Model.evaluate``'s return: the loss alone, or a list in Keras 3's order: the names of
    ``model.metrics`` (compile's metrics each by its own name), then the other logs sorted by name."""
    compiled = compiled_metrics_of(model)
    names = []
    for metric in model.metrics:
        names += [m.name for m in metric.metrics] if metric is compiled else [metric.name]
    values = [logs[n] for n in names if n in logs] + [logs[k] for k in sorted(logs) if k not in names]
    return values[0] if len(values) == 1 else values


def _test_function(model, io: ModelIO, strategy: tf.distribute.Strategy):
    """A ``tf.function`` of one Keras ``test_step`` on a flat batch of ``io``: under ``strategy``
    with several replicas, each runs its contiguous part of the batch (its metrics sum them)."""
    def replica(flat):
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync
        clear_model_losses(model)   # add_loss losses of another trace
        if n == 1:
            model.test_step(pack_batch(io, flat))
            return
        i = ctx.replica_id_in_sync_group
        size = tf.shape(flat[0])[0]
        lo, hi = size * i // n, size * (i + 1) // n
        with keras_forward_losses_unscaled(model):
            model.test_step(pack_batch(io, [t[lo:hi] for t in flat]))

    @tf.function(input_signature=io.signature)
    def step(*flat):
        if strategy.num_replicas_in_sync > 1:
            strategy.run(replica, args=(list(flat),))
        else:
            replica(list(flat))
    return step
