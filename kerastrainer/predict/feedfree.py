"""FeedfreePredictor: an OfflinePredictor that takes its batches from an InputSource."""
from __future__ import annotations

import weakref
from typing import List

import numpy as np
import tensorflow as tf

from ..input_source.base import InputSource
from .base import OfflinePredictor
from .config import PredictConfig

__all__ = ["FeedfreePredictor"]


class FeedfreePredictor:
    """tensorpack's predictor that reads its inputs from an InputSource instead of arguments.

    Each call takes the next batch of ``input_source`` (a ``QueueInput`` of a DataFlow,
    optionally inside a ``StagingInput``), runs the model on it in inference mode and
    returns one array per name in ``config.output_names``. The source yields the inputs
    named in ``config.input_names``, in that order. Call :meth:`close` (or use it as a
    context manager) to stop the source's threads.

    Example::

        pred = FeedfreePredictor(PredictConfig(model=Model(), session_init=SmartInit(path),
                                               input_names=['input', 'label'],
                                               output_names=['wrong-top1']),
                                 QueueInput(val_dataflow))
        wrong, = pred()
    """

    def __init__(self, config: PredictConfig, input_source: InputSource):
        if not isinstance(input_source, InputSource):
            raise TypeError("FeedfreePredictor takes an InputSource (e.g. QueueInput(dataflow)); "
                            f"got {type(input_source).__name__}. Call an OfflinePredictor on "
                            "numpy batches instead.")
        if input_source.requires_feed:
            raise ValueError("FeedfreePredictor needs an InputSource with in-graph tensors; "
                             f"{type(input_source).__name__} is fed from Python. Use QueueInput.")
        self._predictor = OfflinePredictor(config)
        self.input_names = config.input_names
        self.output_names = config.output_names
        specs = {s.name: s for s in config.model.get_input_signature()}
        self.input_source = input_source
        input_source.setup([specs[n] for n in config.input_names])
        input_source.start(tf.distribute.get_strategy())   # its producer threads, as the fit loop would
        # tensorpack's programs never close their predictor: stop the source's threads (and a
        # DataFlow's workers) once the predictor is garbage, or at exit
        self._finalizer = weakref.finalize(self, input_source.close)

    def __call__(self) -> List[np.ndarray]:
        try:
            tensors = self.input_source.get_input_tensors()
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            self.input_source.raise_pending_error()  # the DataFlow's own error, if it had one
            raise
        return self._predictor(*tensors)

    def close(self) -> None:
        """Stop the input source. Safe to call more than once."""
        self._finalizer()

    def __enter__(self) -> "FeedfreePredictor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
