"""PredictConfig: which model, which weights, which tensors in and out."""
from __future__ import annotations

from typing import Optional, Sequence

from ..tfutils.sessinit import SessionInit, SmartInit

__all__ = ["PredictConfig"]


class PredictConfig:
    """Configuration of a predictor.

    Args:
        model: the :class:`ModelDesc` used in training.
        session_init: weights to load (a checkpoint, a log dir, an ``.npz``; see SmartInit).
        input_names: names of the inputs to feed (from ``inputs()``); default: all.
        output_names: names of the tensors to fetch (``tf.identity(x, name='prob')``).

    Example::

        pred = OfflinePredictor(PredictConfig(model=Model(), session_init=SmartInit('train_log/mnist'),
                                              input_names=['input'], output_names=['prob']))
        prob, = pred(images)
    """

    def __init__(self, model, session_init=None, input_names: Optional[Sequence[str]] = None,
                 output_names: Optional[Sequence[str]] = None, is_training: bool = False):
        if model is None:
            raise ValueError("PredictConfig needs model=")
        if not output_names:
            raise ValueError("PredictConfig needs output_names=[...] (tensor names in build_graph).")
        self.model = model
        self.session_init: SessionInit = SmartInit(session_init)
        self.input_names = list(input_names) if input_names is not None else list(model.input_names)
        self.output_names = list(output_names)
        self.is_training = is_training
