"""Tower contexts: what a tower function knows about the copy of the model it builds.

A trainer calls the tower function (``ModelDesc.build_graph``) once per replica,
inside a :class:`TowerContext`. Layers and summaries ask the context whether the
tower is training, which replica it is, and where to store what they create.

The context stack is thread-local because ``tf.distribute.MirroredStrategy``
traces the replicas in separate threads.

Example::

    def build_graph(self, image, label):
        ctx = get_current_tower_context()
        if ctx.is_training:
            image = tf.image.random_flip_left_right(image)
        ...
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Optional

import tensorflow as tf

from .layer_store import LayerStore, get_default_layer_store

__all__ = ["TowerContext", "get_current_tower_context", "current_scope_name", "current_layer_store",
           "layer_scope", "get_variable"]

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_scope_name() -> str:
    """The name scope the current tower's layers see, without the tower's own prefix.

    Functional layers use it to give the same Keras layer to every tower: the layer
    ``conv0`` under ``tf.name_scope('res1')`` is ``res1/conv0`` in every replica.
    """
    scope = tf.get_current_name_scope()
    ctx = get_current_tower_context()
    if ctx is not None and ctx._scope_prefix and scope.startswith(ctx._scope_prefix):
        scope = scope[len(ctx._scope_prefix):]
    return scope.strip("/")


class TowerContext:
    """The context a tower function runs in.

    Args:
        name: the tower's name (``'tower0'``, ``'tower1'`` ..., or ``''`` for inference).
        is_training: whether the tower is built for training (dropout, BatchNorm updates).
        index: the replica index of this tower in its sync group.
        total: the number of towers in the sync group.
        layer_store: where functional layers keep their Keras layers; None uses the
            default store of :mod:`kerastrainer.tfutils.layer_store`.

    Attributes:
        moving_summaries: ``{name: scalar tensor}`` added by :func:`add_moving_summary`.
        tensor_summaries: ``{name: tensor}`` (histograms) added by summary helpers.
        update_ops: callables or ops to run after the step (rarely needed in TF2).
    """

    def __init__(self, name: str = "", is_training: bool = True, index: int = 0, total: int = 1,
                 layer_store=None):
        self.name = name
        self.is_training = bool(is_training)
        self.index = int(index)
        self.total = int(total)
        self._layer_store = layer_store
        self.moving_summaries: dict = {}
        self.tensor_summaries: dict = {}
        self._scope_prefix = ""
        self._name_scope = None

    @property
    def is_main_training_tower(self) -> bool:
        return self.is_training and self.index == 0

    @property
    def has_own_variables(self) -> bool:
        """Towers share variables (data-parallel), so only tower 0 'owns' them."""
        return self.index == 0

    @property
    def ns_name(self) -> str:
        return self.name

    @property
    def layer_store(self) -> LayerStore:
        if self._layer_store is None:
            return get_default_layer_store()
        return self._layer_store

    def __enter__(self):
        stack = _stack()
        stack.append(self)
        self._name_scope = tf.name_scope(self.name) if self.name else None
        if self._name_scope is not None:
            self._name_scope.__enter__()
        self._scope_prefix = tf.get_current_name_scope()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._name_scope is not None:
            self._name_scope.__exit__(exc_type, exc, tb)
            self._name_scope = None
        stack = _stack()
        assert stack and stack[-1] is self, "TowerContext exited out of order"
        stack.pop()
        return False

    def __repr__(self):
        return (f"TowerContext(name={self.name!r}, is_training={self.is_training}, "
                f"index={self.index}, total={self.total})")


def get_current_tower_context() -> Optional[TowerContext]:
    """The innermost :class:`TowerContext` of this thread, or None outside any tower."""
    stack = _stack()
    return stack[-1] if stack else None


def current_layer_store() -> LayerStore:
    """The store of the current tower, or the default store outside any tower.

    The one place that says which store is current: functional layers, ``get_variable``,
    LMS blocks and the global step all ask here.

    Example::

        with TowerContext('tower0', is_training=True, layer_store=store):
            assert current_layer_store() is store
    """
    ctx = get_current_tower_context()
    return ctx.layer_store if ctx is not None else get_default_layer_store()


@contextmanager
def layer_scope(name: str) -> Iterator[str]:
    """Enter the name scope of layer ``name``; yields its key (``'res1/conv0'``).

    The scope is re-entered by absolute name, so calling it twice inside one
    ``tf.function`` gives the same key (plain ``tf.name_scope`` would make ``conv0_1``).

    Example::

        with layer_scope('head') as key:     # key == 'head' at the top level
            w = keras_layer('fc', lambda: keras.layers.Dense(10))
    """
    if not isinstance(name, str) or not name or name.startswith("/") or name.endswith("/"):
        raise ValueError(f"A layer name must be a non-empty string without leading or trailing "
                         f"'/', got {name!r}.")
    outer = tf.get_current_name_scope()
    full = f"{outer}/{name}" if outer else name
    with tf.name_scope(full + "/"):
        yield current_scope_name()


def get_variable(name: str, shape=None, dtype=tf.float32, initializer=None, trainable: bool = True):
    """Create (once) or reuse a variable of the current tower's store, by scoped name."""
    scope = current_scope_name()
    full = f"{scope}/{name}" if scope else name
    return current_layer_store().get_variable(full, shape=shape, dtype=dtype, initializer=initializer,
                                              trainable=trainable)
