"""ModelDesc: the tower-function way to describe a model, as in tensorpack."""
from __future__ import annotations

from typing import Callable, List, Optional

import tensorflow as tf

from ..tfutils.extensions import read_optimizer
from ..tfutils.layer_store import LayerStore
from ..tfutils.tower import get_current_tower_context
from ..tfutils.tower_func import ModelVariables, TowerFunction
from .input_signature import read_input_signature

__all__ = ["ModelDesc", "ModelDescBase", "model_of_functions"]


def _weights_of(holders: dict) -> list:
    """The variables of weight holders: a ``tf.Variable`` itself, a layer / model its ``weights``."""
    return [v for obj in holders.values()
            for v in ([obj] if isinstance(obj, tf.Variable) else getattr(obj, "weights", []))]


def _is_trackable_weight_holder(obj) -> bool:
    return isinstance(obj, tf.Variable) or (hasattr(obj, "weights") and hasattr(obj, "built"))


class ModelDescBase:
    """A model described by its inputs and a tower function.

    Subclasses implement:

    - ``inputs()``: a list of ``tf.TensorSpec`` with names, the batch dimension first
      (``None`` for any batch size);
    - ``build_graph(*inputs)``: the tower function, returning the scalar cost.
      Name the tensors you want to fetch later: ``tf.identity(x, name='prob')``.
    """

    def inputs(self) -> List[tf.TensorSpec]:
        raise NotImplementedError("ModelDesc.inputs() must return a list of tf.TensorSpec")

    def build_graph(self, *args):
        raise NotImplementedError("ModelDesc.build_graph(*inputs) must return the cost")

    def get_input_signature(self) -> List[tf.TensorSpec]:
        """``inputs()`` as named, uniquely named ``tf.TensorSpec``s (placeholders and tensorpack's
        ``InputDesc`` read as their spec: ``input_signature.py``)."""
        if getattr(self, "_input_signature_cache", None) is None:
            self._input_signature_cache = read_input_signature(self.inputs, type(self).__name__)
        return self._input_signature_cache

    @property
    def training(self) -> bool:
        """Whether the tower being built trains (tensorpack >= 0.10's ``self.training``).

        Only meaningful inside ``build_graph``; False outside any tower.
        """
        ctx = get_current_tower_context()
        return bool(ctx is not None and ctx.is_training)

    @property
    def input_names(self) -> List[str]:
        return [s.name for s in self.get_input_signature()]

    # --- variables -----------------------------------------------------------------------
    @property
    def layer_store(self) -> LayerStore:
        """Where this model's functional layers live (created on first use)."""
        store = self.__dict__.get("_layer_store")
        if store is None:
            store = LayerStore(name=type(self).__name__)
            self.__dict__["_layer_store"] = store
        return store

    def get_tower_function(self) -> TowerFunction:
        tf_ = self.__dict__.get("_tower_function")
        if tf_ is None:
            tf_ = TowerFunction(self.build_graph, self.get_input_signature(), self.layer_store,
                                owned_variables=self._attribute_weights)
            self.__dict__["_tower_function"] = tf_
        return tf_

    def _weight_holders(self) -> dict:
        """The Keras layers / models and ``tf.Variable``s kept as public attributes of the model."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_") and _is_trackable_weight_holder(v)}

    def _attribute_weights(self) -> list:
        return _weights_of(self._weight_holders())

    def get_model_variables(self) -> ModelVariables:
        """The trackable root saved as ``model`` in checkpoints."""
        mv = self.__dict__.get("_model_variables")
        if mv is None:
            mv = ModelVariables(self.layer_store, self._weight_holders())
            self.__dict__["_model_variables"] = mv
        # variables the tower created outside the store and outside these attributes (a Keras
        # model built inside build_graph) join the store
        tower = self.__dict__.get("_tower_function")
        if tower is not None:
            tower.adopt_variables(_weights_of(mv.extra))
        return mv


class ModelDesc(ModelDescBase):
    """A :class:`ModelDescBase` that also says how to optimize it.

    Example::

        class Model(ModelDesc):
            def inputs(self):
                return [tf.TensorSpec((None, 28, 28, 1), tf.float32, 'input'),
                        tf.TensorSpec((None,), tf.int32, 'label')]

            def build_graph(self, image, label):
                logits = FullyConnected('fc', image, 10)
                tf.nn.softmax(logits, name='prob')
                cost = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                    name='cross_entropy_loss')
                return cost

            def optimizer(self):
                return keras.optimizers.Adam(1e-3)
    """

    def optimizer(self):
        raise NotImplementedError("ModelDesc.optimizer() must return a Keras optimizer")

    def get_optimizer(self):
        """``optimizer()``, called once and cached.

        It is called as tensorpack did (graph mode, variables made once in the layer
        store); a ``tf.compat.v1.train`` optimizer is translated to its Keras 3 equivalent
        (see :mod:`kerastrainer.compat`).
        """
        opt = self.__dict__.get("_optimizer")
        if opt is None:
            opt = read_optimizer(self.optimizer, self.layer_store)
            self.__dict__["_optimizer"] = opt
        return opt


class _FunctionModel(ModelDesc):
    """A ModelDesc made of tensorpack's ``(input_signature, get_cost_fn, get_opt_fn)``."""

    def __init__(self, input_signature, get_cost_fn: Callable, get_opt_fn: Callable):
        self._signature = list(input_signature)
        self._cost_fn = get_cost_fn
        self._opt_fn = get_opt_fn

    def inputs(self):
        return self._signature

    def build_graph(self, *inputs):
        return self._cost_fn(*inputs)

    def optimizer(self):
        return self._opt_fn()


def model_of_functions(who: str, model_or_signature, get_cost_fn: Optional[Callable],
                       get_opt_fn: Optional[Callable]) -> ModelDescBase:
    """What ``setup_graph``'s two forms give: ``(model, input)``, or tensorpack's ``(input_signature,
    input, get_cost_fn, get_opt_fn)`` as a ModelDesc of those functions."""
    if get_cost_fn is None and get_opt_fn is None:
        return model_or_signature
    if get_cost_fn is None or get_opt_fn is None:
        raise ValueError(f"{who}.setup_graph(input_signature, input, get_cost_fn, get_opt_fn) needs both functions "
                         "(or setup_graph(model, input)).")
    return _FunctionModel(model_or_signature, get_cost_fn, get_opt_fn)
