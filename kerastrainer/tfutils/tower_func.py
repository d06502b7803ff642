"""A tower function with its signature: build its variables, and find its tensors by name.

``TowerFunction(fn, input_signature, layer_store)`` is what trainers and predictors
share: ``build()`` creates every variable by tracing the function once (no
compute, no side effects such as BatchNorm statistics updates), and
``predict_function(input_names, output_names)`` traces it for inference and prunes
the graph to the named tensors, as tensorpack's predictors did.

Example::

    tf_ = TowerFunction(model.build_graph, model.get_input_signature(), store)
    tf_.build()
    predict = tf_.predict_function(['input'], ['prob'])
    prob, = predict(images)
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import tensorflow as tf

from .._internals import keras_training_phase, sublayers, tf_variable_of
from ..utils.casting import cast_exactly
from .extensions import code_names_tf1, tower_contexts
from .layer_store import LayerStore, log_layer_shapes
from .summary import tower_summaries_routed
from .tower import TowerContext, variables_named_by_variable_scope
from .variable_replay import VariableReplay

__all__ = ["TowerFunction", "ModelVariables"]


class ModelVariables(tf.Module):
    """The trackable root of a model's variables: the layer store and any Keras layers or
    ``tf.Variable``s the user kept as attributes of the model object."""

    def __init__(self, store: LayerStore, extra: dict):
        super().__init__(name="model_variables")
        self.store = store
        self.extra = dict(extra)

    def named_variables(self):
        extra = {}
        for attr, obj in sorted(self.extra.items()):
            if isinstance(obj, tf.Variable):
                extra[attr] = obj
            else:
                for rel, v in _structural_names(obj).items():
                    extra[f"{attr}/{rel}"] = v
        out = dict(self.store.named_variables())
        out.update(extra)
        return out

    @property
    def all_variables(self):
        # de-duplicate: a layer may be both in the store and an attribute
        seen, out = set(), []
        for v in self.named_variables().values():
            if id(v) not in seen:
                seen.add(id(v))
                out.append(v)
        return out

    @property
    def trainable_list(self):
        return [v for v in self.all_variables if v.trainable]

    @property
    def extra_losses(self):
        losses = list(self.store.layer_losses)
        for obj in self.extra.values():
            losses.extend(getattr(obj, "losses", []) or [])
        return losses


def _snake_case(name: str) -> str:
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def _stable_layer_names(layers) -> Dict[str, str]:
    """``{layer.name: name to save under}`` for sibling Keras layers (a model's ``layers``).

    Keras numbers automatic layer names per process (``dense_17``), so the same model built
    twice names its layers differently. A layer whose name is automatic is saved as its kind
    and its rank among the siblings automatically named of that kind (``dense``,
    ``dense_1``, ...), as Keras' own weight files do; a layer named by the user keeps its name.
    """
    counts: Dict[str, int] = {}
    out: Dict[str, str] = {}
    for layer in layers:
        name = getattr(layer, "name", None)
        if not name:
            continue
        base = _snake_case(type(layer).__name__)
        if re.fullmatch(re.escape(base) + r"(_\d+)?", name):
            k = counts.get(base, 0)
            counts[base] = k + 1
            out[name] = base if k == 0 else f"{base}_{k}"
    users = {getattr(layer, "name", None) for layer in layers} - set(out)
    # never the name of a layer the user named (a Conv2D called 'dense_1'): then keep Keras' own
    return {n: (n if st in users else st) for n, st in out.items()}


def _structural_names(obj) -> Dict[str, object]:
    """``{name: variable}`` for every weight of a Keras layer or model, named by where it sits in the
    layer tree: ``<stable child name>/.../<variable name>`` (see :func:`_stable_layer_names`).

    Not by the variable's ``path``: that is the name scope at creation, which a nested model does
    not enter (an outer ``dense_1`` and the inner model's ``dense`` would both become ``dense``)
    and which holds per-process numbers below the first level. A layer reached twice (shared) is
    named where it is first met; names that still collide get ``_1``, ``_2``... in weight order."""
    weights = list(getattr(obj, "weights", None) or [])
    if not weights:
        return {}
    try:
        children = [c for c in sublayers(obj, recursive=False) if c is not obj]
    except (AttributeError, TypeError):  # not a Keras layer: its weights by their own names
        children = []
    stable = _stable_layer_names(children)
    owner: Dict[int, str] = {}
    for child in children:
        prefix = stable.get(child.name, child.name)
        for rel, v in _structural_names(child).items():
            owner.setdefault(id(v), f"{prefix}/{rel}")
    out: Dict[str, object] = {}
    seen = set()
    for v in weights:
        if id(v) in seen:
            continue
        seen.add(id(v))
        name = owner.get(id(v))
        if name is None:  # the layer's own weight (a Dense's kernel, a subclassed model's add_weight)
            name = (getattr(v, "name", None) or "variable").split(":")[0].rsplit("/", 1)[-1]
        unique, k = name, 0
        while unique in out:
            k += 1
            unique = f"{name}_{k}"
        out[unique] = v
    return out


def _placeholder_spec(spec: tf.TensorSpec, name: str) -> tf.TensorSpec:
    return tf.TensorSpec(spec.shape, spec.dtype, name=name)


SCALAR_COST_CHECK = "build_graph_cost_must_be_a_scalar"


def scalar_cost_error(error: Exception) -> Optional[ValueError]:
    """The clear error for a train step that failed because build_graph's cost (of unknown
    rank when traced) was not a scalar when run; None for any other error."""
    text = str(error)
    if SCALAR_COST_CHECK not in text:
        return None
    found = re.search(r"Input to reshape is a tensor with (\d+) values", text)
    values = f"{found.group(1)} values" if found else "more than one value"
    return ValueError(f"build_graph must return a scalar cost; when run, it returned {values} (its shape was "
                      "unknown when traced, e.g. after tf.squeeze). A per-example cost would train on the "
                      "gradient of its sum: reduce it, e.g. with tf.reduce_mean.")


def _scalar_when_run(cost):
    """A cost of unknown rank (tf.squeeze, a py_function) reshaped to a scalar: a per-example cost
    would train on the gradient of its sum; the step fails instead (see scalar_cost_error)."""
    if isinstance(cost, tf.Tensor) and cost.shape.rank is None:
        return tf.reshape(cost, [], name=SCALAR_COST_CHECK)
    return cost


class TowerFunction:
    """A tower function ``fn(*inputs) -> cost`` (or a dict of costs, one per
    :class:`~kerastrainer.tfutils.objective.Objective`) with its input signature and layer store."""

    def __init__(self, fn: Callable, input_signature: Sequence[tf.TensorSpec], layer_store: LayerStore,
                 owned_variables: Optional[Callable[[], list]] = None):
        self.fn = fn
        # variables with another owner than the tower (Keras layers kept by the model object)
        self._owned_variables = owned_variables or (lambda: [])
        self.input_signature = list(input_signature)
        self.layer_store = layer_store
        self.summary_names: List[str] = []
        self.histogram_names: List[str] = []
        self.cost_names: Optional[List[str]] = None   # the keys of a dict of costs (objectives)
        self._built = False
        self.created_variables: list = []
        self.variable_replay = VariableReplay()   # Keras layers made anew in every call
        # TF1 code keys its layers by variable scope (a tf.name_scope or loop body makes none new)
        self.tf1_naming = code_names_tf1(fn)

    def __call__(self, *inputs, name: str = "tower0", is_training: bool = True, index: int = 0,
                 total: int = 1):
        """Run the tower in a TowerContext; returns ``(cost, context)``."""
        with tower_summaries_routed(), \
                TowerContext(name, is_training=is_training, index=index, total=total,
                             layer_store=self.layer_store) as ctx, tower_contexts(self.layer_store), \
                keras_training_phase(is_training), variables_named_by_variable_scope(self.tf1_naming), \
                self.variable_replay.scope() as first_call:
            # Tower code runs as written (graph semantics, as in tensorpack), not rewritten
            # by AutoGraph: use tf.cond / tf.while_loop for data-dependent control flow.
            cost = tf.autograph.experimental.do_not_convert(self.fn)(*inputs)
            if is_training:
                if isinstance(cost, Mapping):   # several costs (objectives): each checked alike
                    cost = {k: _scalar_when_run(c) for k, c in cost.items()}
                else:
                    cost = _scalar_when_run(cost)
        if first_call:
            # layers made in the call are made again by later calls, which get these variables back:
            # named in the store from now on (regularize_cost, param summaries, checkpoints)
            self.adopt_variables(self._owned_variables(), candidates=self.variable_replay.recorded)
        return cost, ctx

    def build(self, total: int = 1, require_cost: bool = True) -> None:
        """Create all variables by tracing the training tower once (call in the strategy's scope).

        ``require_cost=False`` (predictors, exporters) accepts an inference-only tower
        function that returns nothing, as tensorpack did.
        """
        if self._built:
            return
        found = {}
        created = []

        def trace(*inputs):
            cost, ctx = self(*inputs, name="tower0", is_training=True, index=0, total=total)
            found["cost"] = cost
            found["summaries"] = list(ctx.moving_summaries)
            found["histograms"] = list(ctx.tensor_summaries)
            return cost

        def create_eagerly(next_creator, **kwargs):
            # Variables made while tracing would be lifted out of the graph, which fails
            # for mirrored variables; make them eagerly instead (initial values are callables).
            if not kwargs.get("trainable", True) and kwargs.get("aggregation") in (
                    None, tf.VariableAggregation.NONE):
                # e.g. a Keras BatchNormalization's moving statistics: every replica keeps the
                # first replica's update (the main-tower rule), so mirrored copies never drift
                kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
            with tf.init_scope():
                var = next_creator(**kwargs)
            created.append(var)
            return var

        self.layer_store.allow_create = True
        try:
            with tf.variable_creator_scope(create_eagerly):
                tf.function(trace, autograph=False).get_concrete_function(*self.input_signature)
        finally:
            self.layer_store.allow_create = False
        log_layer_shapes(self.layer_store)
        cost = found["cost"]
        if cost is None and not require_cost:
            cost = tf.constant(0.0)
        if isinstance(cost, Mapping):
            if not cost:
                raise ValueError("build_graph returned an empty dict: return the cost, or a dict of costs "
                                 "(one per Objective).")
            bad = [k for k in cost if not isinstance(k, str)]
            if bad:
                raise TypeError(f"build_graph returned a dict of costs with keys {bad!r}: the keys must be strings "
                                "(the names Objective(cost=...) refers to).")
            self.cost_names = list(cost)
        else:
            self.cost_names = None
        costs = cost if isinstance(cost, Mapping) else {None: cost}
        for key, c in costs.items():
            if not isinstance(c, (tf.Tensor, tf.Variable)) and not hasattr(c, "dtype"):
                raise TypeError("build_graph must return the cost tensor (or a dict of them); " +
                                (f"it returned {type(c).__name__}." if key is None
                                 else f"cost '{key}' is a {type(c).__name__}."))
            if c.shape.rank not in (0, None):
                raise ValueError("build_graph must return a scalar cost; " +
                                 (f"it returned shape {c.shape}. " if key is None else f"cost '{key}' has shape "
                                  f"{c.shape}. ") + "Reduce it, e.g. with tf.reduce_mean.")
        if any(getattr(getattr(c, "op", None), "name", "").endswith(SCALAR_COST_CHECK) for c in costs.values()):
            self._check_cost_with_a_known_batch(total)
        self.created_variables = created
        self.summary_names = found["summaries"]
        self.histogram_names = found["histograms"]
        self._built = True

    def _check_cost_with_a_known_batch(self, total: int) -> None:
        """The cost's rank was unknown with an unknown batch: trace once more with a batch of 2,
        where shapes are usually known, and refuse a per-example cost now rather than at the first
        step (any other trouble of that trace is left to the step's own check)."""
        specs = []
        for spec in self.input_signature:
            if spec.shape.rank is None:
                return
            specs.append(tf.TensorSpec([2 if d is None else d for d in spec.shape.as_list()], spec.dtype))

        def trace(*inputs):
            return self(*inputs, name="tower0", is_training=True, index=0, total=total)[0]

        try:
            out = tf.function(trace, autograph=False).get_concrete_function(*specs).structured_outputs
        except Exception:  # noqa: BLE001 - any trouble of this extra trace is left to the step's check
            return
        for key, c in (out.items() if isinstance(out, Mapping) else [(None, out)]):
            if c.shape.rank not in (0, None):
                what = "it returned" if key is None else f"cost '{key}' has"
                raise ValueError(f"build_graph must return a scalar cost; with a batch of 2 {what} shape {c.shape} "
                                 "(its shape is unknown with an unknown batch, e.g. after tf.squeeze). A per-example "
                                 "cost would train on the gradient of its sum: reduce it, e.g. with tf.reduce_mean.")

    def adopt_variables(self, exclude=(), candidates=None) -> None:
        """Keep variables the tower made outside the store (a Keras model built in build_graph)
        in the store, under their scoped names without the tower prefix
        (``'sequential/dense/kernel'``), so that they are trained and saved.

        ``exclude``: variables with another owner (Keras layers kept as model attributes).
        ``candidates``: the variables to consider (default: those the build created).
        """
        known = {id(tf_variable_of(v)) for v in self.layer_store.named_variables().values()}
        known.update(id(tf_variable_of(v)) for v in exclude)
        for var in self.created_variables if candidates is None else candidates:
            if id(var) in known:
                continue
            name = var.name.split(":")[0]
            if name.startswith("tower0/"):
                name = name[len("tower0/"):]
            base, k = name, 1
            while name in self.layer_store.raw_variables:
                name, k = f"{base}_{k}", k + 1
            self.layer_store.raw_variables[name] = var
            known.add(id(var))

    def predict_function(self, input_names: Sequence[str], output_names: Sequence[str],
                         is_training: bool = False) -> Callable:
        """A callable: numpy arrays (in the order of ``input_names``) -> list of numpy arrays.

        Outputs are tensors named in the tower (``tf.identity(x, name='prob')``) or inputs.
        Inputs that the outputs do not need may be left out.
        """
        specs = {s.name: s for s in self.input_signature}
        unknown = [n for n in input_names if n not in specs]
        if unknown:
            raise KeyError(f"Unknown input names {unknown}; inputs() declares {sorted(specs)}.")

        def infer(*inputs):
            self(*inputs, name="", is_training=is_training, index=0, total=1)

        wrapped = tf.compat.v1.wrap_function(
            infer, [_placeholder_spec(s, s.name) for s in self.input_signature])
        graph = wrapped.graph

        def find(name):
            tname = name if ":" in name else name + ":0"
            try:
                return graph.get_tensor_by_name(tname)
            except (KeyError, ValueError):
                pass
            candidates = sorted(op.name for op in graph.get_operations()
                                if op.name.split("/")[-1] == name.split(":")[0] and op.outputs)
            hint = f" Tensors with that last name component: {candidates[:5]}." if candidates else ""
            raise KeyError(f"No tensor named '{name}' in the tower function. Name it in build_graph with "
                           f"tf.identity(x, name='{name.split(':')[0]}').{hint}")

        feeds = [find(n) for n in input_names]
        fetches = [find(n) for n in output_names]
        try:
            pruned = wrapped.prune(feeds=feeds, fetches=fetches)
        except ValueError as e:
            raise ValueError(f"Outputs {list(output_names)} need inputs that are not among "
                             f"{list(input_names)}: {e}") from e
        feed_dtypes = [specs[n].dtype for n in input_names]

        def predict(*arrays):
            if len(arrays) == 1 and len(input_names) != 1 and isinstance(arrays[0], (list, tuple)):
                arrays = arrays[0]
            if len(arrays) != len(input_names):
                raise ValueError(f"The predictor takes {len(input_names)} inputs {list(input_names)}; "
                                 f"got {len(arrays)}.")
            # the predictor's feeds are cast like training's datapoints: never changing a value
            tensors = [tf.convert_to_tensor(cast_exactly(a, d.as_numpy_dtype, f"predictor input '{n}'"))
                       for a, d, n in zip(arrays, feed_dtypes, input_names)]
            outs = pruned(*tensors)
            return [o.numpy() for o in outs]

        predict.input_names = list(input_names)
        predict.output_names = list(output_names)
        predict.concrete_function = pruned
        return predict
