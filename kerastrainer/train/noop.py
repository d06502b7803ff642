"""NoOpTrainer: run the callbacks of a training loop whose steps compute nothing (tensorpack's)."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

import tensorflow as tf

from ..input_source.base import InputSource
from .model_desc import ModelDesc
from .trainers import SimpleTrainer

__all__ = ["NoOpTrainer"]


class _FunctionModel(ModelDesc):
    """A ModelDesc made of tensorpack's ``(input_signature, get_cost_fn, get_opt_fn)``."""

    def __init__(self, input_signature: List[tf.TensorSpec], get_cost_fn: Callable, get_opt_fn: Callable):
        self._signature = list(input_signature)
        self._cost_fn = get_cost_fn
        self._opt_fn = get_opt_fn

    def inputs(self):
        return self._signature

    def build_graph(self, *inputs):
        return self._cost_fn(*inputs)

    def optimizer(self):
        return self._opt_fn()


class NoOpTrainer(SimpleTrainer):
    """A trainer whose steps do nothing: the model is built (its variables exist, callbacks
    may use them) and the loop runs the callbacks, counting steps, as tensorpack's.

    ``setup_graph`` takes a ModelDesc, or tensorpack's ``(input_signature, input,
    get_cost_fn, get_opt_fn)``.

    Example::

        trainer = NoOpTrainer()
        trainer.setup_graph([tf.TensorSpec([1], name='input')], DummyConstantInput([[1]]),
                            lambda x: tf.reduce_sum(x) + tfv1.get_variable('w', shape=[]),
                            lambda: keras.optimizers.SGD(0.1))
        trainer.train_with_defaults(callbacks=[my_callback], steps_per_epoch=10, max_epoch=3)
    """

    def setup_graph(self, model, input_source: InputSource, get_cost_fn: Optional[Callable] = None,
                    get_opt_fn: Optional[Callable] = None) -> None:
        if get_cost_fn is not None or get_opt_fn is not None:
            if get_cost_fn is None or get_opt_fn is None:
                raise ValueError("NoOpTrainer.setup_graph(input_signature, input, get_cost_fn, get_opt_fn) "
                                 "needs both functions.")
            model = _FunctionModel(model, get_cost_fn, get_opt_fn)
        super().setup_graph(model, input_source)

    def _choose_steps(self) -> int:
        return 1

    def run_step_call(self, k: int) -> Dict[str, float]:
        self.global_step += k
        self.local_step += k
        self.global_step_var.assign_add(k)
        self.last_call_steps = k
        self.last_step_outputs = {"_nonfinite_step": -1}
        return self.last_step_outputs
