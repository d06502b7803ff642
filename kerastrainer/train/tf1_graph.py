"""A custom trainer's TF1 graph: built by the trainer's own code, run through TF2 functions.

tensorpack's custom trainers (``TowerTrainer`` subclasses such as the GAN examples') build a
TF1 graph in ``__init__``: ``input.get_input_tensors()``, ``tower_func(*inputs)`` under a
``TowerContext``, ``opt.minimize(loss, var_list=tf.get_collection(...))``, ``self.train_op``.
:class:`TF1Graph` gives that code a graph TF2 can execute: the graph of a
``tf.compat.v1.wrap_function`` (TF2's own migration route), where

- TF1 semantics hold: no automatic control dependencies, an op runs only when a fetch needs it
  (``d_min`` and ``g_min`` run separately);
- every variable is made eagerly, once, outside the graph (so it lives on after the build, is
  checkpointed and read eagerly), and is added to the graph's collections as TF1 did
  (``GLOBAL_VARIABLES``, ``TRAINABLE_VARIABLES``): ``tf.get_collection(TRAINABLE_VARIABLES, 'gen')``
  finds a generator's variables. Its name is its variable-scope name, without the name scope of
  a training tower (``gen/...``, never ``tower1/gen/...``), as tensorpack's;
- functional layers live in the trainer's own layer store.

:meth:`TF1Graph.function` prunes the graph to some fetches (and feeds) into a concrete function,
which a ``tf.function`` may call (several steps in one ``tf.range`` loop).

Example::

    g = TF1Graph(LayerStore())
    with g.building():
        x = queue.dequeue()
        loss = tower(x)
        train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
    step = g.function([train_op, loss])
    _, value = step()
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Dict, Iterator, List, Sequence

import tensorflow as tf

from .._internals import give_tf1_op_name, tf_variable_of
from ..tfutils.global_step import active_store
from ..tfutils.layer_store import LayerStore
from ..tfutils.summary import tower_summaries_routed
from ..tfutils.tower import default_layer_store_scope, get_current_tower_context
from .tf1_keras_optimizer import keras_optimizers_as_tf1

__all__ = ["TF1Graph"]

_KEYS = tf.compat.v1.GraphKeys


class TF1Graph:
    """The graph of a custom trainer, and the variables its construction made.

    Args:
        layer_store: the store functional layers use while the graph is built.

    Example::

        g = TF1Graph(LayerStore())
        with g.building():
            w = tf.compat.v1.get_variable('w', initializer=1.0)
            inc = w.assign_add(1.0)
        g.function([inc])()                      # runs the op (its output is None)
        assert g.named_variables()['w'].numpy() == 2.0
    """

    def __init__(self, layer_store: LayerStore):
        self._wrapped = tf.compat.v1.wrap_function(lambda: None, [])
        self.graph = self._wrapped.graph
        self.layer_store = layer_store
        self.created_variables: List[tf.Variable] = []   # in creation order
        self._functions: Dict[tuple, object] = {}
        self._reads: Dict[int, tf.Tensor] = {}
        self._names: Dict[int, str] = {}   # name_of's answers

    @contextmanager
    def building(self) -> Iterator["TF1Graph"]:
        """Run the block as TF1 graph construction in this graph (variables made eagerly)."""
        with self.graph.as_default(), tf.variable_creator_scope(self._create), \
                default_layer_store_scope(self.layer_store), active_store(self.layer_store), \
                tower_summaries_routed(), keras_optimizers_as_tf1(self.graph):   # tf.summary.*, Keras optimizers
            yield self

    def _create(self, next_creator, **kwargs):
        collections = kwargs.get("collections")
        # a training tower's name scope is not part of a variable's name (tensorpack's variables are
        # named by variable scope): 'tower1/gen/fc0/W' would escape get_collection(..., 'gen')
        scope = self.graph.get_name_scope()
        ctx = get_current_tower_context()
        prefix = (ctx._scope_prefix or "").strip("/") if ctx is not None else ""
        if prefix and (scope == prefix or scope.startswith(prefix + "/")):
            scope = scope[len(prefix):].strip("/")
        # made eagerly: it outlives the graph's construction and is shared by every function pruned
        # from it (a variable made as a graph op would need lifting, which Keras' variables miss)
        initial = kwargs.get("initial_value")
        if tf.is_tensor(initial) and not hasattr(initial, "numpy"):
            # a constant made in this graph (a Keras optimizer's iteration count): its value, made eagerly
            value = tf.get_static_value(initial)
            if value is not None:
                kwargs["initial_value"] = value
        with tf.init_scope(), tf.name_scope(scope + "/" if scope else ""):
            var = next_creator(**kwargs)
        # TF1 code names a variable by `v.op.name` (WGAN's ClipCallback): its name here
        give_tf1_op_name(var, self.graph, functools.partial(self.name_of, var))
        self.created_variables.append(var)
        keys = list(collections) if collections else [_KEYS.GLOBAL_VARIABLES]
        if var.trainable and _KEYS.TRAINABLE_VARIABLES not in keys:
            keys.append(_KEYS.TRAINABLE_VARIABLES)
        self.graph.add_to_collections(keys, var)
        return var

    # --- names ---------------------------------------------------------------------------------
    def resolve(self, fetch):
        """A tensor or operation of the graph for ``fetch``: itself, or its name (``'z'``, ``'z:0'``)."""
        if isinstance(fetch, str):
            name = fetch
            try:
                return self.graph.as_graph_element(name)
            except (KeyError, ValueError):
                pass
            if ":" not in name:
                try:
                    return self.graph.get_tensor_by_name(name + ":0")
                except (KeyError, ValueError):
                    pass
            raise KeyError(f"No tensor or operation named {name!r} in the trainer's graph.")
        var = tf_variable_of(fetch)
        if isinstance(var, tf.Variable):   # its value, read in the graph (once per variable)
            read = self._reads.get(id(var))
            if read is None:
                with self.graph.as_default():
                    read = self._reads[id(var)] = tf.identity(var)
            return read
        graph = getattr(fetch, "graph", None)
        if graph is not None and graph is not self.graph:
            raise ValueError(f"{fetch!r} is not in the trainer's graph (it was made outside the trainer's "
                             "construction).")
        return fetch

    def named_variables(self) -> Dict[str, tf.Variable]:
        """Every variable by name: the layer store's (``'gen/fc0/W'``), then the others by their TF1
        names (``'learning_rate'``, ``'optimize/beta1_power'``), with slots of a store variable named
        after its store name (``'gen/fc0/W/Adam'``)."""
        out = dict(self.layer_store.named_variables())
        known = {id(tf_variable_of(v)) for v in out.values()}
        renames = []   # (TF1 name of a store variable, its store name): TF1 names slots after the first
        for name, v in out.items():
            tf1_name = getattr(tf_variable_of(v), "name", "").split(":")[0]
            if tf1_name and tf1_name != name:
                renames.append((tf1_name, name))
        renames.sort(key=lambda p: -len(p[0]))
        for var in self.created_variables:
            if id(var) in known:
                continue
            name = var.name.split(":")[0]
            for tf1_name, store_name in renames:
                if name.startswith(tf1_name + "/"):
                    name = store_name + name[len(tf1_name):]
                    break
            base, k = name, 1
            while name in out:
                name, k = f"{base}_{k}", k + 1
            out[name] = var
            known.add(id(var))
        return out

    def name_of(self, var) -> str:
        """``var``'s name in :meth:`named_variables` (``'discrim/fct/W'``), or its TF name."""
        name = self._names.get(id(var))
        if name is None:
            for n, v in self.named_variables().items():
                if tf_variable_of(v) is var or v is var:
                    name = self._names[id(var)] = n   # a name, once given, stays (TF1 optimizers key slots by it)
                    break
        return name if name is not None else var.name.split(":")[0]

    def collection(self, key: str, scope: str = None) -> list:
        """The graph's collection ``key`` (items whose name matches ``scope``, as TF1's)."""
        return self.graph.get_collection(key, scope)

    # --- running -------------------------------------------------------------------------------
    def function(self, fetches: Sequence, feeds: Sequence = ()):
        """A concrete function computing ``fetches`` (tensors; operations give None) from ``feeds``
        (tensors of the graph, given as its arguments), pruned from the graph; cached."""
        fetches = [self.resolve(f) for f in fetches]
        feeds = [self.resolve(f) for f in feeds]
        key = (tuple(id(f) for f in fetches), tuple(id(f) for f in feeds))
        fn = self._functions.get(key)
        if fn is None:
            try:
                fn = self._wrapped.prune(feeds=feeds, fetches=fetches)
            except ValueError as e:
                raise ValueError(f"Cannot run {[getattr(f, 'name', f) for f in fetches]} from the feeds "
                                 f"{[getattr(f, 'name', f) for f in feeds]}: {e}") from e
            self._functions[key] = fn
        return fn
