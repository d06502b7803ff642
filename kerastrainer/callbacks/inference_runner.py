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


def _is_input_source(obj: Any) -> bool:
    return hasattr(obj, "get_input_tensors") and hasattr(obj, "setup")


def dataflow_of_input(input: Any, who: str) -> Any:
    """The DataFlow behind ``input``: a DataFlow itself, or an InputSource that carries one
    (``FeedInput(df)``, ``QueueInput(df)``, ``StagingInput(QueueInput(df))``), whose datapoints
    the runner then feeds to its predictor in order (tensorpack ran them through the source;
    the values are the same). An InputSource without a DataFlow is a TypeError here;
    :class:`InferenceRunner` reads such a source's tensors itself."""
    seen = input
    for _ in range(4):
        if _is_input_source(seen):
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


def _holds_dataflow(input: Any) -> bool:
    seen = input
    for _ in range(4):
        if not _is_input_source(seen):
            return True
        if getattr(seen, "ds", None) is not None:
            return True
        seen = getattr(seen, "input", None)
        if seen is None:
            return False
    return False


def _device_name(device: Union[int, str, None]) -> Optional[str]:
    """tensorpack's ``device=k`` (``/gpu:k``; -1 for ``/cpu:0``), or a TF device string as given."""
    if device is None or isinstance(device, str):
        return device
    if isinstance(device, bool) or not isinstance(device, (int, np.integer)):
        raise TypeError(f"InferenceRunner(device={device!r}): give a device index (k for /gpu:k, -1 for "
                        "/cpu:0) or a TF device string.")
    from ..graph_builder.utils import tower_device
    return tower_device(f"/gpu:{int(device)}") if device >= 0 else "/cpu:0"


class _TensorBatches:
    """One pass over an InputSource that makes its tensors in-graph (``TensorInput``, a
    ``FeedfreeInput`` of the program, ``DummyConstantInput``): ``get_input_tensors()`` in a
    ``tf.function``, called ``size()`` times, or until it raises ``OutOfRangeError`` when the
    size is unknown (tensorpack's rule)."""

    def __init__(self, source: Any, who: str):
        self.source = source
        self.who = who
        self._fn = None
        try:
            self._size: Optional[int] = int(source.size())
        except NotImplementedError:
            self._size = None

    def setup(self, signature) -> None:
        import tensorflow as tf
        if not getattr(self.source, "_setup_done", False):
            self.source.setup(signature)
        if self._size is None:
            logger.warn("%s: %s has no size(); each inference runs until it raises OutOfRangeError.",
                        self.who, type(self.source).__name__)
        self._fn = tf.function(lambda: list(self.source.get_input_tensors()), autograph=False)

    def reset_state(self) -> None:
        pass

    def __len__(self) -> int:
        if self._size is None:
            raise TypeError("size unknown")
        return self._size

    def __iter__(self):
        import tensorflow as tf
        n = 0
        while self._size is None or n < self._size:
            try:
                tensors = self._fn()
            except tf.errors.OutOfRangeError:
                if self._size is not None:
                    logger.error("%s: %s ended after %d of its size() = %d batches.", self.who,
                                 type(self.source).__name__, n, self._size)
                    raise
                return
            n += 1
            yield [t.numpy() for t in tensors]


class _DatasetBatches:
    """One pass over the ``tf.data.Dataset`` of a ``TFDatasetInput`` (not repeated), a fresh
    iterator each time."""

    def __init__(self, source: Any):
        self.source = source
        self.dataset = None

    def setup(self, signature) -> None:
        self.dataset = self.source.make_dataset(signature)

    def reset_state(self) -> None:
        pass

    def __len__(self) -> int:
        return int(self.source.size())

    def __iter__(self):
        for elem in self.dataset:
            if isinstance(elem, dict):
                yield {k: v.numpy() for k, v in elem.items()}
            elif isinstance(elem, (tuple, list)):
                yield [v.numpy() for v in elem]
            else:
                yield [elem.numpy()]


def _batch_size(components: Sequence[np.ndarray]) -> Optional[int]:
    for c in components:
        if c.ndim >= 1:
            return int(c.shape[0])
    return None


class InferenceRunner(Callback):
    """Run :class:`Inferencer` s over one pass of a DataFlow at each trigger (each epoch end).

    The runner builds a predictor once (``trainer.get_predictor(input_names,
    output_names)``, run on ``device``: the names of the input signature, and the union of the
    inferencers' fetches, in inference mode), calls it on each datapoint,
    gives each inferencer its fetches, and lets them put their statistics into
    ``trainer.monitors``. The inferencers are callbacks driven by the runner, as in tensorpack:
    their ``setup_graph`` runs in the runner's, ``before_epoch`` / ``trigger_epoch`` around each
    pass. The DataFlow's ``reset_state()`` is called once, before its first pass. Each datapoint
    must have one component per input of the signature, in its order (a dict datapoint is matched
    by the inputs' names).

    Args:
        input: a DataFlow (anything with ``reset_state()`` and ``__iter__``) of batches, or an
            InputSource: one that wraps a DataFlow (``QueueInput(df)``, ``FeedInput(df)``) gives its
            DataFlow; a ``TFDatasetInput`` one pass of its dataset; a source that makes its tensors
            in-graph (``TensorInput``, a ``FeedfreeInput``) its ``get_input_tensors()``, ``size()``
            times per pass (until ``OutOfRangeError`` without a size).
        infs: an :class:`Inferencer` or a list of them.
        tower_name: tensorpack's name of the inference tower; the predictor names its own graph.
        tower_func: a tower function to infer with instead of the trainer's (a
            :class:`~kerastrainer.tfutils.tower.TowerFunc`, e.g. ``TowerFunc(model.build_eval_graph,
            model.inputs())``), run on the trainer's variables; its input signature is fed.
        device: tensorpack's device index (``k``: ``/gpu:k``, the logical CPU device ``k`` without
            GPUs; ``-1``: ``/cpu:0``), or a TF device string such as ``'/cpu:0'``.

    Wrap it to run less often::

        PeriodicTrigger(InferenceRunner(val_ds, ScalarStats('cost')), every_k_epochs=5)
    """

    _chief_only = True

    def __init__(self, input: Any, infs: Union[Inferencer, Sequence[Inferencer]],
                 tower_name: str = "InferenceTower", tower_func: Any = None,
                 device: Union[int, str, None] = 0):
        if _holds_dataflow(input):
            input = dataflow_of_input(input, "InferenceRunner: input")
        elif callable(getattr(input, "make_dataset", None)):
            input = _DatasetBatches(input)
        else:
            input = _TensorBatches(input, "InferenceRunner")
        if isinstance(infs, Inferencer):
            infs = [infs]
        infs = list(infs)
        if not infs:
            raise ValueError("InferenceRunner: give at least one Inferencer.")
        for inf in infs:
            if not isinstance(inf, Inferencer):
                raise TypeError(f"InferenceRunner: {inf!r} (type {type(inf).__name__}) is not an Inferencer.")
        if tower_func is not None and not (callable(tower_func) and hasattr(tower_func, "input_signature")):
            raise TypeError(f"InferenceRunner(tower_func=...): give a TowerFunc(fn, input_signature) "
                            f"(kerastrainer.tfutils.tower.TowerFunc); got {type(tower_func).__name__}.")
        if device is not None and not isinstance(device, str):
            _device_name(device)   # checks the type now; resolved on the trainer's devices at set-up
        self._input = input
        self.infs: List[Inferencer] = infs
        self._tower_name = tower_name
        self._tower_func = tower_func
        self._device = device
        self._device_str: Optional[str] = None
        self._predictor = None
        self._input_names: List[str] = []
        self._output_names: List[str] = []
        self._fetch_index: List[List[int]] = []
        self._reset_done = False

    def _signature(self):
        signature = (self._tower_func.input_signature if self._tower_func is not None
                     else self.trainer.input_signature)
        if not signature:
            raise ValueError("InferenceRunner: the trainer has no input_signature (ModelDesc.inputs()) "
                             "to feed the predictor with.")
        return list(signature)

    def _make_predictor(self, input_names, output_names):
        # run on the device in _predict: every trainer's get_predictor takes the names
        if self._tower_func is None:
            return self.trainer.get_predictor(input_names, output_names)
        return self.trainer.get_tower_predictor(self._tower_func, input_names, output_names)

    def _setup_graph(self):
        signature = self._signature()
        names = []
        for i, spec in enumerate(signature):
            name = getattr(spec, "name", None)
            if not name:
                raise ValueError(f"InferenceRunner: input {i} of the signature ({spec}) has no name; "
                                 "give every TensorSpec in ModelDesc.inputs() a name.")
            names.append(name)
        self._input_names = names
        if isinstance(self._input, (_TensorBatches, _DatasetBatches)):
            self._input.setup(signature)
        outputs: List[str] = []
        self._fetch_index = []
        for inf in self.infs:
            idx = []
            for f in inf.get_fetches():
                if f not in outputs:
                    outputs.append(f)
                idx.append(outputs.index(f))
            self._fetch_index.append(idx)
        self._output_names = outputs
        self._device_str = _device_name(self._device)
        self._predictor = self._make_predictor(self._input_names, self._output_names)
        for inf in self.infs:   # tensorpack's order: the tower, then the inferencers' own set-up
            inf.setup_graph(self.trainer)

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
        if self._device_str is None:
            return self._predictor(comps)
        import tensorflow as tf
        with tf.device(self._device_str):
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
            inf.before_epoch()
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
            inf.trigger_epoch()
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
        tower_name, tower_func: as for :class:`InferenceRunner`.

    Example::

        DataParallelInferenceRunner(val_ds, [ScalarStats('cost'), ClassificationError('wrong')], gpus=2)
    """

    def __init__(self, input: Any, infs: Union[Inferencer, Sequence[Inferencer]], gpus,
                 tower_name: str = "InferenceTower", tower_func: Any = None):
        super().__init__(input, infs, tower_name=tower_name, tower_func=tower_func, device=None)
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
