"""``InferenceRunner``: run inferencers over a DataFlow, e.g. a validation set, each epoch.

Example::

    InferenceRunner(dataset.Mnist('test').batch(128),
                    [ScalarStats('cross_entropy_loss'), ClassificationError('incorrect_vector')])
"""
from __future__ import annotations

import sys
import time
from typing import Any, List, Optional, Sequence, Union

import numpy as np

from ..dataflow.base import check_dataflow
from ..utils import logger
from .base import Callback
from .inference import Inferencer

__all__ = ["InferenceRunnerBase", "InferenceRunner", "DataParallelInferenceRunner"]


def dataflow_of_input(input: Any, who: str) -> Any:
    """The DataFlow behind ``input``: a DataFlow itself, or an InputSource that carries one
    (``FeedInput(df)``, ``QueueInput(df)``, ``StagingInput(QueueInput(df))``), whose datapoints
    the runner then feeds to its predictor in order (tensorpack ran them through the source;
    the values are the same). An InputSource without a DataFlow (``TFDatasetInput``,
    ``DummyConstantInput``, ``TensorInput``) is a TypeError."""
    seen = input
    for _ in range(4):
        if hasattr(seen, "get_input_tensors") and hasattr(seen, "setup"):  # an InputSource
            if getattr(seen, "ds", None) is not None:
                seen = seen.ds
                break
            if getattr(seen, "input", None) is not None:
                seen = seen.input
                continue
            raise TypeError(f"{who}: {type(input).__name__} holds no DataFlow to run inference over; give "
                            f"the validation DataFlow itself (or FeedInput(df) / QueueInput(df)).")
        break
    return check_dataflow(seen, who, "An InputSource that wraps a DataFlow (FeedInput, QueueInput, "
                                     "StagingInput) is accepted too.")


def _batch_size(components: Sequence[np.ndarray]) -> Optional[int]:
    for c in components:
        if c.ndim >= 1:
            return int(c.shape[0])
    return None


class InferenceRunner(Callback):
    """Run :class:`Inferencer` s over one pass of a DataFlow at each trigger (each epoch end).

    The runner builds a predictor once (``trainer.get_predictor(input_names,
    output_names)``: the names of ``trainer.input_signature``, and the union of the
    inferencers' fetches, with ``is_training=False``), calls it on each datapoint,
    gives each inferencer its fetches, and puts the statistics they return into
    ``trainer.monitors``. The DataFlow's ``reset_state()`` is called once, before its
    first pass. Each datapoint must have one component per input of the signature,
    in its order (a dict datapoint is matched by the inputs' names).

    Args:
        input: a DataFlow (anything with ``reset_state()`` and ``__iter__``) of batches, or an
            InputSource that wraps one (``QueueInput(df)``, ``FeedInput(df)``): its DataFlow is used.
        infs: an :class:`Inferencer` or a list of them.
        tower_name: kept for tensorpack compatibility; the predictor names its own tower.
        device: a TF device string to run the predictor on, e.g. ``'/cpu:0'``.

    Wrap it to run less often::

        PeriodicTrigger(InferenceRunner(val_ds, ScalarStats('cost')), every_k_epochs=5)
    """

    _chief_only = True

    def __init__(self, input: Any, infs: Union[Inferencer, Sequence[Inferencer]],
                 tower_name: str = "InferenceTower", device: Optional[str] = None):
        input = dataflow_of_input(input, "InferenceRunner: input")
        if isinstance(infs, Inferencer):
            infs = [infs]
        infs = list(infs)
        if not infs:
            raise ValueError("InferenceRunner: give at least one Inferencer.")
        for inf in infs:
            if not isinstance(inf, Inferencer):
                raise TypeError(f"InferenceRunner: {inf!r} (type {type(inf).__name__}) is not an Inferencer.")
        self._input = input
        self.infs: List[Inferencer] = infs
        self._tower_name = tower_name
        self._device = device
        self._predictor = None
        self._input_names: List[str] = []
        self._output_names: List[str] = []
        self._fetch_index: List[List[int]] = []
        self._reset_done = False

    def _setup_graph(self):
        signature = self.trainer.input_signature
        if not signature:
            raise ValueError("InferenceRunner: the trainer has no input_signature (ModelDesc.inputs()) "
                             "to feed the predictor with.")
        names = []
        for i, spec in enumerate(signature):
            name = getattr(spec, "name", None)
            if not name:
                raise ValueError(f"InferenceRunner: input {i} of the signature ({spec}) has no name; "
                                 "give every TensorSpec in ModelDesc.inputs() a name.")
            names.append(name)
        self._input_names = names
        outputs: List[str] = []
        self._fetch_index = []
        for inf in self.infs:
            inf.trainer = self.trainer
            idx = []
            for f in inf.get_fetches():
                if f not in outputs:
                    outputs.append(f)
                idx.append(outputs.index(f))
            self._fetch_index.append(idx)
        self._output_names = outputs
        self._predictor = self.trainer.get_predictor(self._input_names, self._output_names)

    def _components(self, dp: Any) -> List[np.ndarray]:
        names = self._input_names
        if isinstance(dp, dict):
            missing = [n for n in names if n not in dp]
            if missing:
                raise ValueError(f"InferenceRunner: a datapoint lacks the inputs {missing}; it has "
                                 f"{sorted(dp)}. Every input of the signature ({names}) is required.")
            return [np.asarray(dp[n]) for n in names]
        if not isinstance(dp, (list, tuple)):
            raise TypeError(f"InferenceRunner: a datapoint must be a list, tuple or dict, got {type(dp).__name__}.")
        if len(dp) != len(names):
            raise ValueError(
                f"InferenceRunner: a datapoint has {len(dp)} components, but the input signature has "
                f"{len(names)} ({names}). Give the validation DataFlow the same components as the "
                "training one, in the same order.")
        return [np.asarray(c) for c in dp]

    def _predict(self, comps):
        if self._device is None:
            return self._predictor(comps)
        import tensorflow as tf
        with tf.device(self._device):
            return self._predictor(comps)

    def _predictions(self):
        """Yield ``(components, outputs)`` for each datapoint of one pass, in order."""
        for dp in self._input:
            comps = self._components(dp)
            yield comps, self._predict(comps)

    def _trigger(self):
        if not self._reset_done:
            self._input.reset_state()
            self._reset_done = True
        for inf in self.infs:
            inf.before_inference()
        t0 = time.perf_counter()
        total = None
        try:
            total = len(self._input)
        except (TypeError, NotImplementedError):
            pass
        from tqdm import tqdm
        n_batches = 0
        with tqdm(total=total, desc="Inference", leave=False, ascii=True, dynamic_ncols=True,
                  disable=not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())) as bar:
            for comps, outs in self._predictions():
                outs = list(outs)
                if len(outs) != len(self._output_names):
                    raise RuntimeError(f"InferenceRunner: the predictor returned {len(outs)} outputs for "
                                       f"{len(self._output_names)} names ({self._output_names}).")
                bs = _batch_size(comps)
                for inf, idx in zip(self.infs, self._fetch_index):
                    inf.on_fetches([outs[i] for i in idx], bs)
                n_batches += 1
                bar.update(1)
        if n_batches == 0:
            logger.warn("InferenceRunner: the DataFlow produced no datapoints; no statistics this time.")
        for inf in self.infs:
            for k, v in inf.after_inference().items():
                try:
                    self.trainer.monitors.put_scalar(k, v)
                except (TypeError, ValueError) as e:
                    logger.warn("InferenceRunner: %s returned a non-scalar for '%s' (%s); skipped.", inf, k, e)
        logger.info("InferenceRunner: %d batches in %.2f s.", n_batches, time.perf_counter() - t0)


class DataParallelInferenceRunner(InferenceRunner):
    """An :class:`InferenceRunner` that runs consecutive batches on several devices at once.

    Batches go round-robin to the devices, each predicted in its own thread; the
    inferencers still see the results in the DataFlow's order, so the statistics
    equal those of :class:`InferenceRunner`.

    Args:
        input: a DataFlow of batches.
        infs: an :class:`Inferencer` or a list of them.
        gpus: a number of devices or a list of device ids (GPUs, else logical CPU devices),
            or a list of device names (``['/cpu:0', '/cpu:1']``).

    Example::

        DataParallelInferenceRunner(val_ds, [ScalarStats('cost'), ClassificationError('wrong')], gpus=2)
    """

    def __init__(self, input: Any, infs: Union[Inferencer, Sequence[Inferencer]], gpus):
        super().__init__(input, infs)
        from ..utils.devices import training_devices
        ids = list(range(gpus)) if isinstance(gpus, int) else list(gpus)
        if not ids:
            raise ValueError("DataParallelInferenceRunner: give at least one device.")
        # device names ('/cpu:0', '/cpu:1') are used as given
        self.devices = ids if all(isinstance(i, str) for i in ids) else training_devices(ids)

    def _predict_on(self, device, comps):
        import tensorflow as tf
        with tf.device(device):
            return list(self._predictor(comps))

    def _predictions(self):
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor
        n = len(self.devices)
        pending = deque()
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="DataParallelInference") as pool:
            for i, dp in enumerate(self._input):
                comps = self._components(dp)
                pending.append((comps, pool.submit(self._predict_on, self.devices[i % n], comps)))
                if len(pending) >= 2 * n:
                    comps0, fut = pending.popleft()
                    yield comps0, fut.result()
            while pending:
                comps0, fut = pending.popleft()
                yield comps0, fut.result()


InferenceRunnerBase = InferenceRunner  # tensorpack's base class of the runners; subclass InferenceRunner
