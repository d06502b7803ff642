"""Tower contexts: what a tower function knows about the copy of the model it builds.

A trainer calls the tower function (``ModelDesc.build_graph``) once per replica,
inside a :class:`TowerContext`. Layers and summaries ask the context whether the
tower is training, which replica it is, and where to store what they create.

The context stack is thread-local because ``tf.distribute.MirroredStrategy``
traces the replicas in separate threads.

This module also holds tensorpack's tower-function API for custom trainers
(``tensorpack.tfutils.tower``): :class:`TowerFunc` (alias ``TowerFuncWrapper``) calls a
tower function under the current context and keeps a :class:`TowerTensorHandle` of
each call, so a tower's tensors are found by name afterwards (``handle.get_tensor('prob')``);
:class:`TowerTensorHandles` indexes them by tower name or position.

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
from typing import Callable, Iterator, List, Optional, Sequence, Union

import tensorflow as tf

from .._internals import keras_training_phase
from .custom_getters import variable_through_custom_getter
from .extensions import tower_contexts
from .layer_store import LayerStore, get_default_layer_store
from .tensors import get_op_tensor_name

__all__ = ["TowerContext", "get_current_tower_context", "current_scope_name", "current_name_scope",
           "variables_named_by_variable_scope",
           "current_layer_store",
           "layer_scope", "get_variable", "default_layer_store_scope", "record_tower_contexts",
           "TowerFunc", "TowerFuncWrapper", "TowerTensorHandle", "TowerTensorHandles", "BaseTowerContext"]

_local = threading.local()


def _stack():
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def _recorders() -> list:
    if not hasattr(_local, "recorders"):
        _local.recorders = []
    return _local.recorders


@contextmanager
def default_layer_store_scope(store: LayerStore) -> Iterator[LayerStore]:
    """Make ``store`` the store of towers entered without one, and of layers built outside
    any tower, in this thread (a custom trainer's own store while its graph is built).

    Example::

        with default_layer_store_scope(trainer_store), TowerContext('', is_training=True):
            assert current_layer_store() is trainer_store
    """
    prev = getattr(_local, "default_store", None)
    _local.default_store = store
    try:
        yield store
    finally:
        _local.default_store = prev


def _default_store() -> LayerStore:
    store = getattr(_local, "default_store", None)
    return store if store is not None else get_default_layer_store()


@contextmanager
def record_tower_contexts() -> Iterator[list]:
    """Collect every :class:`TowerContext` entered in this thread within the block (a custom
    trainer finds the towers its user code built, and their summaries, this way).

    Example::

        with record_tower_contexts() as towers:
            with TowerContext('', is_training=True):
                ...
        assert towers[0].is_main_training_tower
    """
    found: list = []
    _recorders().append(found)
    try:
        yield found
    finally:
        _recorders().remove(found)


# How the running tower names and shares its layers' variables: by name scope (TF2 programs), or by
# TF1's variable scope (a tower whose code uses TF1's API, and custom trainers' TF1 graphs), where a
# tf.name_scope or a tf.while_loop body never makes new variables. Per thread: replicas trace in
# threads of their own, each entering its tower.
_naming = threading.local()


@contextmanager
def variables_named_by_variable_scope(on: bool = True) -> Iterator[None]:
    """Within the block, layers are keyed by TF1's variable scope (``on``) or by the name scope."""
    was = getattr(_naming, "by_variable_scope", False)
    _naming.by_variable_scope = bool(on)
    try:
        yield
    finally:
        _naming.by_variable_scope = was


def current_scope_name() -> str:
    """The scope the current tower's layers are keyed by, without the tower's own prefix.

    Functional layers use it to give the same Keras layer to every tower: the layer
    ``conv0`` under ``tf.name_scope('res1')`` is ``res1/conv0`` in every replica. In a tower
    of TF1 code (:func:`variables_named_by_variable_scope`) the scope is TF1's variable scope
    instead: ``tf.variable_scope('res1')`` names, ``tf.name_scope`` and loop bodies do not.
    """
    if getattr(_naming, "by_variable_scope", False):
        return tf.compat.v1.get_variable_scope().name.strip("/")
    return current_name_scope()


def current_name_scope() -> str:
    """The name scope in the current tower, without the tower's own prefix: what names its
    summaries and tensors (in TF1 code too)."""
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
            default store of :mod:`kerastrainer.tfutils.layer_store` (or the one of
            :func:`default_layer_store_scope`).
        vs_name: tensorpack's variable scope of a tower with its own variables. Only ``''``:
            towers share their variables by scoped name through the layer store; a tower
            with its own copy is an error naming the TF2 way (``SyncMultiGPUTrainerReplicated``).

    Attributes:
        moving_summaries: ``{name: scalar tensor}`` added by :func:`add_moving_summary`.
        tensor_summaries: ``{name: tensor}`` (histograms) added by summary helpers.
        update_ops: callables or ops to run after the step (rarely needed in TF2).

    Inside a TF1 graph (a custom trainer's), the context also remembers which graph ops
    were made in it (``ops()``) and what was added to the graph's collections
    (``get_collection_in_tower(key)``, as in tensorpack).
    """

    def __init__(self, name: str = "", is_training: bool = True, index: int = 0, total: int = 1,
                 layer_store=None, vs_name: str = ""):
        if vs_name:
            raise ValueError(
                f"TowerContext(vs_name={vs_name!r}): a tower with its own copy of the variables (tensorpack's "
                "replicated towers) is not supported; kerastrainer's towers share their variables by scoped "
                "name through the layer store. For replicated data-parallel training use "
                "SyncMultiGPUTrainerReplicated (tf.distribute.MirroredStrategy).")
        self.name = name
        self.vs_name = ""
        self.is_training = bool(is_training)
        self.index = int(index)
        self.total = int(total)
        self._layer_store = layer_store
        self.moving_summaries: dict = {}
        self.tensor_summaries: dict = {}
        self._scope_prefix = ""
        self._name_scope = None
        self._graph = None          # the TF1 graph it was entered in (None: eager or tf.function)
        self._op_range = (0, 0)     # ops of that graph made inside the context
        self._collections_at_enter: dict = {}
        self._collections_at_exit: Optional[dict] = None

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
            return _default_store()
        return self._layer_store

    def __enter__(self):
        stack = _stack()
        stack.append(self)
        self._name_scope = tf.name_scope(self.name) if self.name else None
        if self._name_scope is not None:
            self._name_scope.__enter__()
        self._scope_prefix = tf.get_current_name_scope()
        if not tf.executing_eagerly():
            graph = tf.compat.v1.get_default_graph()
            self._graph = graph
            self._op_range = (len(graph.get_operations()), None)
            self._collections_at_enter = {k: len(graph.get_collection(k)) for k in graph.get_all_collection_keys()}
        for found in _recorders():
            found.append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._graph is not None:
            self._op_range = (self._op_range[0], len(self._graph.get_operations()))
            self._collections_at_exit = {k: len(self._graph.get_collection(k))
                                         for k in self._graph.get_all_collection_keys()}
        if self._name_scope is not None:
            self._name_scope.__exit__(exc_type, exc, tb)
            self._name_scope = None
        stack = _stack()
        assert stack and stack[-1] is self, "TowerContext exited out of order"
        stack.pop()
        return False

    def ops(self) -> list:
        """The graph operations made inside this context (a TF1 graph only; [] otherwise)."""
        if self._graph is None:
            return []
        start, end = self._op_range
        return self._graph.get_operations()[start:end]

    def get_collection_in_tower(self, key: str) -> list:
        """Items added to the graph collection ``key`` while this context was entered (tensorpack's).

        Only meaningful in a TF1 graph (a custom trainer's); [] elsewhere.
        """
        if self._graph is None:
            return []
        items = self._graph.get_collection(key)
        start = self._collections_at_enter.get(key, 0)
        end = (self._collections_at_exit or {}).get(key, len(items))
        return items[start:end]

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
    return ctx.layer_store if ctx is not None else _default_store()


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
    by_variable_scope = getattr(_naming, "by_variable_scope", False)
    variable_scope = current_scope_name() if by_variable_scope else ""
    with tf.name_scope(full + "/"):
        if by_variable_scope:   # the caller enters the variable scope of `name` next
            yield f"{variable_scope}/{name}" if variable_scope else name
        else:
            yield current_scope_name()


def get_variable(name: str, shape=None, dtype=tf.float32, initializer=None, trainable: bool = True):
    """Create (once) or reuse a variable of the current tower's store, by scoped name.

    Inside a TF1 custom getter's scope it returns what the getter makes of the variable, as
    ``tf.get_variable`` did (a ``PReLU``'s ``alpha`` under ``freeze_variables`` is frozen).
    """
    scope = current_scope_name()
    full = f"{scope}/{name}" if scope else name
    store = current_layer_store()
    return variable_through_custom_getter(
        full, lambda trainable_: store.get_variable(full, shape=shape, dtype=dtype, initializer=initializer,
                                                    trainable=trainable_),
        shape, dtype, trainable, exists=full in store.raw_variables)


# --- tensorpack's tower-function API (custom trainers) -------------------------------------

class TowerFunc:
    """A tower function with its input signature, remembering every tower it built.

    tensorpack's ``TowerFunc`` (also ``TowerFuncWrapper``): call it under a
    :class:`TowerContext` with the input tensors; it runs ``tower_fn`` with kerastrainer's
    tower hooks (``tfv1.get_variable`` into the layer store, Keras layers following
    ``is_training``) and keeps a :class:`TowerTensorHandle` of the call, so that the tower's
    tensors are found by name later. Custom trainers (``TowerTrainer`` subclasses) set
    ``self.tower_func`` to one; ``trainer.get_predictor`` builds inference towers with it.

    Example::

        self.tower_func = TowerFunc(model.build_graph, model.inputs())
        with TowerContext('', is_training=True):
            self.tower_func(*input.get_input_tensors())
        prob = self.tower_func.towers[0].get_tensor('prob')
    """

    def __new__(cls, tower_fn, input_signature=None):
        if isinstance(tower_fn, TowerFunc):   # never wrapped twice (tensorpack's rule)
            return tower_fn
        return super().__new__(cls)

    def __init__(self, tower_fn: Callable, input_signature: Sequence[tf.TensorSpec]):
        if isinstance(tower_fn, TowerFunc):
            return
        if not callable(tower_fn):
            raise TypeError(f"TowerFunc needs a callable tower function; got {type(tower_fn).__name__}.")
        names = [s.name for s in input_signature]
        if any(not n for n in names):
            raise ValueError(f"TowerFunc: every TensorSpec of the input signature needs a name; got {names}.")
        if len(set(names)) != len(names):
            raise ValueError(f"TowerFunc: duplicate names in the input signature: {names}.")
        bad = [n for n in names if any(c in n for c in ":/ ")]
        if bad:
            raise ValueError(f"TowerFunc: invalid input names {bad} (no ':', '/' or spaces).")
        self._tower_fn = tower_fn
        self._input_signature = list(input_signature)
        self._handles: List[TowerTensorHandle] = []

    def __call__(self, *args):
        ctx = get_current_tower_context()
        if ctx is None:
            raise RuntimeError("A TowerFunc must be called under a TowerContext: "
                               "`with TowerContext('', is_training=True): tower_func(*inputs)`.")
        with tower_contexts(ctx.layer_store), keras_training_phase(ctx.is_training), \
                variables_named_by_variable_scope():   # a custom trainer's tower is TF1 code
            # tower code has graph semantics, as in tensorpack: not rewritten by AutoGraph
            output = tf.autograph.experimental.do_not_convert(self._tower_fn)(*args)
        self._handles.append(TowerTensorHandle(ctx, args, output, self._input_signature))
        return output

    @property
    def towers(self) -> "TowerTensorHandles":
        """The towers built so far, by position or by name (``towers['tower0']``)."""
        return TowerTensorHandles(self._handles)

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        return self._input_signature

    @property
    def fn(self) -> Callable:
        return self._tower_fn


TowerFuncWrapper = TowerFunc


class TowerTensorHandles:
    """The towers a :class:`TowerFunc` built, by index or by tower name.

    Example::

        trainer.towers.training()[0].get_tensor('conv1/output')
    """

    def __init__(self, handles: Sequence["TowerTensorHandle"]):
        self._handles = list(handles)
        self._by_name = {h.ns_name: h for h in self._handles}

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self):
        return iter(self._handles)

    def __getitem__(self, name_or_index: Union[int, str]) -> "TowerTensorHandle":
        if isinstance(name_or_index, int):
            return self._handles[name_or_index]
        try:
            return self._by_name[name_or_index]
        except KeyError:
            raise KeyError(f"No tower named {name_or_index!r}; the towers are {sorted(self._by_name)}.") from None

    def training(self) -> "TowerTensorHandles":
        return TowerTensorHandles([h for h in self._handles if h.is_training])

    def inference(self) -> "TowerTensorHandles":
        return TowerTensorHandles([h for h in self._handles if not h.is_training])


class TowerTensorHandle:
    """One tower built by a :class:`TowerFunc`: its context, inputs and outputs, and its
    tensors by name without the tower's prefix.

    ``get_tensor(name)`` looks the name up in the tower's name scope of the graph it was built
    in (a custom trainer's TF1 graph); an input name of the signature gives the tensor the
    tower got for it; a variable name (``'gen/fc0/W'``) gives the variable.

    Example::

        handle = tower_func.towers['tower0']
        logits = handle.get_tensor('logits')
        image = handle.get_tensor('input')        # the tensor the tower got as input 'input'
    """

    def __init__(self, ctx: TowerContext, inputs, outputs, input_signature=None):
        self._ctx = ctx
        self._graph = ctx._graph
        self._inputs = list(inputs)
        self._outputs = outputs
        self._extra = {}
        if input_signature is not None and len(input_signature) == len(self._inputs):
            self._extra = {get_op_tensor_name(s.name)[1]: t for s, t in zip(input_signature, self._inputs)}
        # tensorpack's deprecated attribute names
        self.input = self._inputs
        self.output = outputs

    @property
    def ns_name(self) -> str:
        return self._ctx.name

    @property
    def vs_name(self) -> str:
        return self._ctx.vs_name

    @property
    def is_training(self) -> bool:
        return self._ctx.is_training

    @property
    def context(self) -> TowerContext:
        return self._ctx

    @property
    def inputs(self) -> list:
        return self._inputs

    @property
    def outputs(self):
        return self._outputs

    def _lookup(self, name: str):
        """The tensor or operation ``name`` (no tower prefix) in the tower's graph, or None."""
        graph = self._graph
        if graph is None:
            return None
        op_name, tensor_name = get_op_tensor_name(name)
        prefix = self._ctx._scope_prefix.strip("/")
        prefix = prefix + "/" if prefix else ""
        try:
            return graph.get_tensor_by_name(prefix + tensor_name)
        except (KeyError, ValueError):
            pass
        if ":" not in name:
            try:
                return graph.get_operation_by_name(prefix + op_name)
            except (KeyError, ValueError):
                pass
        return None

    def get_tensor(self, name: str):
        """A tensor of this tower by its name without the tower prefix, an input of the signature
        by its name, or a variable by its name."""
        found = self._lookup(name)
        input_name = get_op_tensor_name(name)[1]
        if input_name in self._extra:
            return self._extra[input_name]   # the tower's input, as tensorpack prefers it
        if found is not None:
            return found
        var = self._find_variable(name)
        if var is not None:
            return var
        if self._graph is None:
            raise KeyError(f"Tower '{self.ns_name}' was not built in a graph (it ran eagerly or in a "
                           f"tf.function), so its tensors cannot be looked up by name ({name!r}).")
        raise KeyError(f"No tensor, input or variable named {name!r} in tower '{self.ns_name}'. Name it in the "
                       f"tower function, e.g. tf.identity(x, name='{get_op_tensor_name(name)[0]}').")

    def get_tensors(self, names: Sequence[str]) -> list:
        return [self.get_tensor(n) for n in names]

    def __getitem__(self, name: str):
        return self.get_tensor(name)

    def _find_variable(self, name: str):
        op_name = get_op_tensor_name(name)[0]
        named = self._ctx.layer_store.named_variables()
        if op_name in named:
            return named[op_name]
        if self._graph is not None:
            for v in self._graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
                if getattr(v, "name", "").split(":")[0] == op_name:
                    return v
        return None

    def get_variable(self, name: str):
        """A variable this tower uses, by its name (``'gen/fc0/W'``)."""
        var = self._find_variable(name)
        if var is None:
            raise KeyError(f"No variable named {name!r} in tower '{self.ns_name}'.")
        return var

    def get_variables(self, names: Sequence[str]) -> list:
        return [self.get_variable(n) for n in names]

    def get_collection(self, key: str = None, name: str = None) -> list:
        """Items added to the graph collection ``key`` while the tower was built."""
        return self._ctx.get_collection_in_tower(key or name)


BaseTowerContext = TowerContext   # tensorpack's base of its tower contexts: one class here
