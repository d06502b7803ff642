"""One home for every layer and variable a tower function creates.

Functional layers (``Conv2D('conv0', x, 32, 3)``) and Keras layers used inside a
tower are created once, the first time their scoped name is seen, and reused by
every later trace and every replica. The store is a ``tf.Module``, so one
``tf.train.Checkpoint(model=store)`` saves them all.

Example::

    store = LayerStore()
    dense = store.get_or_create('fc1', lambda: keras.layers.Dense(10, name='fc1'))
    assert store.get_or_create('fc1', lambda: None) is dense
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

__all__ = ["LayerStore", "get_default_layer_store", "reset_default_layer_store"]


class LayerStore(tf.Module):
    """A name -> Keras layer (and name -> tf.Variable) store shared by all towers."""

    def __init__(self, name: str = "layer_store"):
        super().__init__(name=name)
        self.layers = {}
        self.raw_variables = {}
        self._aliases: Dict[str, Dict[str, str]] = {}
        self._lock = threading.Lock()
        self.allow_create = True

    def _check_create(self, name: str):
        if not self.allow_create:
            raise RuntimeError(
                f"Layer or variable '{name}' is created after the model was built. Every layer must "
                "be created in the first (training) call of the tower function; a layer created only "
                "under some condition (e.g. only in inference, or only in tower 1) cannot be shared. "
                "Create it unconditionally, or in ModelDesc.__init__.")

    def get_or_create(self, name: str, factory: Callable[[], object],
                      var_aliases: Optional[Dict[str, str]] = None):
        """Return the layer stored under ``name``, creating it with ``factory()`` the first time.

        ``var_aliases`` maps Keras variable names to the names :meth:`named_variables`
        reports (e.g. ``{'kernel': 'W', 'bias': 'b'}``, tensorpack's names).
        """
        layer = self.layers.get(name)
        if layer is not None:
            return layer
        with self._lock:
            layer = self.layers.get(name)
            if layer is None:
                self._check_create(name)
                layer = factory()
                self.layers[name] = layer
                if var_aliases:
                    self._aliases[name] = dict(var_aliases)
        return layer

    def get_variable(self, name: str, shape=None, dtype=tf.float32, initializer=None,
                     trainable: bool = True) -> tf.Variable:
        """A plain ``tf.Variable`` under ``name``, created once (like ``tf.get_variable``)."""
        var = self.raw_variables.get(name)
        if var is not None:
            return var
        with self._lock:
            var = self.raw_variables.get(name)
            if var is None:
                self._check_create(name)
                if initializer is None:
                    initializer = tf.zeros_initializer()
                # created outside any trace: the trainer builds variables by tracing once
                with tf.init_scope():
                    init = initializer(shape, dtype=dtype) if callable(initializer) else initializer
                    var = tf.Variable(init, dtype=dtype, trainable=trainable, name=name.replace("/", "_"))
                self.raw_variables[name] = var
        return var

    def _layer_variables(self, lname: str, layer) -> Dict[str, tf.Variable]:
        aliases = self._aliases.get(lname, {})
        own = getattr(layer, "name", None)
        out = {}
        for v in getattr(layer, "weights", []):
            parts = (getattr(v, "path", None) or v.name).split(":")[0].split("/")
            # Keras prefixes the names of enclosing Keras layers: cut up to the layer's own name
            cut = parts.index(own) + 1 if own in parts[:-1] else min(1, len(parts) - 1)
            rel = "/".join(parts[cut:])
            out[aliases.get(rel, rel)] = v
        return out

    def variables_of(self, name: str) -> Dict[str, tf.Variable]:
        """``{variable name: variable}`` of the layer stored under ``name`` (``{'W': .., 'b': ..}``).

        Empty when no layer is stored under ``name``.
        """
        layer = self.layers.get(name)
        return {} if layer is None else self._layer_variables(name, layer)

    def named_variables(self) -> Dict[str, tf.Variable]:
        """``{name: variable}`` with names ``'<scoped layer name>/<variable>'``, e.g. ``'conv0/W'``."""
        out = {}
        for lname, layer in self.layers.items():
            for rel, v in self._layer_variables(lname, layer).items():
                out[f"{lname}/{rel}"] = v
        for vname, v in self.raw_variables.items():
            out[vname] = v
        return out

    @property
    def all_variables(self):
        return list(self.named_variables().values())

    @property
    def trainable_variables_list(self):
        return [v for v in self.named_variables().values() if v.trainable]

    @property
    def layer_losses(self):
        """Regularization losses that Keras layers in the store collected (``layer.losses``)."""
        losses = []
        for layer in self.layers.values():
            losses.extend(getattr(layer, "losses", []))
        return losses


# Layer shapes recorded while a tower is built, printed as one table after the build.
_shape_rows: "weakref.WeakKeyDictionary[LayerStore, List[Tuple[str, str, str]]]" = weakref.WeakKeyDictionary()


def record_layer_shape(store: LayerStore, key: str, input_shape: str, output_shape: str) -> None:
    """Keep a row of the layer-shape table that :func:`log_layer_shapes` prints."""
    with _default_lock:
        _shape_rows.setdefault(store, []).append((key, input_shape, output_shape))


def log_layer_shapes(store: LayerStore) -> None:
    """Log the layers recorded since the last call as one table (on the chief worker only)."""
    with _default_lock:
        rows = _shape_rows.pop(store, [])
    if not rows:
        return
    from ..utils import logger
    from ..utils.cluster import is_chief
    if not is_chief():
        return
    from tabulate import tabulate

    def params(key):
        layer = store.layers.get(key)
        try:
            return f"{int(layer.count_params()):,}" if layer is not None else ""
        except (ValueError, AttributeError):  # not built, or not a Keras layer
            return ""
    table = tabulate([(k, i, o, params(k)) for k, i, o in rows], headers=["layer", "input", "output", "params"],
                     tablefmt="simple", disable_numparse=True)
    logger.info("Layers of the model:\n%s", table)


_default_stores: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_default_lock = threading.Lock()


def _outer_graph():
    # the graph layers outside any tower belong to: TF's global default graph in eager mode
    # (replaced by tf.compat.v1.reset_default_graph), or the user's tf.Graph in TF1 graph mode;
    # never a tf.function's own graph, so that every trace sees the same layers
    with tf.init_scope():
        return tf.compat.v1.get_default_graph()


def get_default_layer_store() -> LayerStore:
    """The store used outside any trainer (tests, interactive use): one per TF graph, so
    ``tf.compat.v1.reset_default_graph()`` (or a new ``tf.Graph``) starts with no layers."""
    graph = _outer_graph()
    with _default_lock:
        store = _default_stores.get(graph)
        if store is None:
            store = _default_stores[graph] = LayerStore()
        return store


def reset_default_layer_store() -> None:
    """Forget the default store of the current graph."""
    graph = _outer_graph()
    with _default_lock:
        _default_stores.pop(graph, None)
