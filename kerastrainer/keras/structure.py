"""How a Keras model's inputs, outputs and targets map to a flat list of named tensors.

The trainers see a model as a flat, named ``input_signature`` (``ModelDesc.inputs()``).
A Keras model takes one tensor, a list or a dict, and returns one, a list or a dict;
its data comes as ``(x, y)`` pairs. :class:`ModelIO` describes both sides and
converts between them: ``flatten(datapoint)`` gives the flat list
``[inputs..., targets...]``; ``pack_inputs(flat)`` gives what ``model(...)`` takes.

Targets exist for the outputs that have a loss or a metric, in the model's output
order, and are named ``'<output name>_target'``.

Example::

    io = ModelIO.from_model(model, first_x=x[:1], first_y=y[:1])
    io.input_names      # ['image']
    io.target_names     # ['dense_target']
    io.flatten((x_batch, y_batch))   # [x_batch, y_batch]
"""
from __future__ import annotations

import copy
import re
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from .._internals import functional_input_structure
from ..utils.casting import _cast_limit
__all__ = ["ModelIO", "KerasSignatureError", "as_spec_list"]


class KerasSignatureError(ValueError):
    """The data, the signature and the Keras model do not agree."""


def _safe_name(name: str) -> str:
    """A name that is a valid TF op name (predictors find tensors by it)."""
    name = re.sub(r"[^A-Za-z0-9_.\-/]", "_", str(name)).strip("/")
    if not name or not re.match(r"[A-Za-z0-9.]", name[0]):
        name = "t_" + name
    return name


def _is_structure(x) -> bool:
    return isinstance(x, (list, tuple, dict))


def _shape_of(x) -> tuple:
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.asarray(x).shape
    return tuple(None if d is None else int(d) for d in tf.TensorShape(shape).as_list())


def _dtype_of(x) -> tf.DType:
    dt = getattr(x, "dtype", None)
    if dt is None:
        dt = np.asarray(x).dtype
    dt = tf.as_dtype(dt)
    # Keras computes in float32: float64 data is cast, as keras.Model.fit does
    return tf.float32 if dt == tf.float64 else dt


def _spec_from_data(x, name: str) -> tf.TensorSpec:
    shape = _shape_of(x)
    if not shape:
        raise KerasSignatureError(f"'{name}' of the data is a scalar; Keras data needs a batch dimension.")
    return tf.TensorSpec((None,) + shape[1:], _dtype_of(x), name=name)


def as_spec_list(sig, what: str) -> Optional[List[tf.TensorSpec]]:
    """A signature given by the user (one TensorSpec, a list, or a dict name -> spec) as a list."""
    if sig is None:
        return None
    if isinstance(sig, tf.TensorSpec):
        return [sig]
    if isinstance(sig, dict):
        sig = [tf.TensorSpec(s.shape, s.dtype, name=s.name or k) for k, s in sig.items()]
    sig = list(sig)
    for i, s in enumerate(sig):
        if not isinstance(s, tf.TensorSpec):
            raise TypeError(f"KerasModel({what}=...): item {i} is a {type(s).__name__}; give tf.TensorSpec "
                            "objects, e.g. tf.TensorSpec((None, 28, 28, 1), tf.float32, 'image').")
    return sig


class ModelIO:
    """The flat view of a Keras model's inputs, outputs and targets (see the module doc)."""

    def __init__(self, input_specs: List[tf.TensorSpec], input_keys: Optional[List[str]], input_kind: str,
                 output_names: List[str], output_kind: str, target_specs: List[tf.TensorSpec],
                 target_outputs: List[str]):
        self.input_specs = input_specs
        self.input_keys = input_keys          # dict keys the model takes, for input_kind 'dict'
        self.input_kind = input_kind          # 'single', 'list' or 'dict'
        self.output_names = output_names
        self.output_kind = output_kind
        self.target_specs = target_specs
        self.target_outputs = target_outputs  # the output each target belongs to
        self.weight_specs: List[tf.TensorSpec] = []  # one sample weight per target, when weighted

    @property
    def weighted(self) -> bool:
        """Whether the flat batches carry sample weights (``[inputs..., targets..., weights...]``)."""
        return bool(self.weight_specs)

    def with_sample_weights(self, first_sw=None) -> "ModelIO":
        """A copy whose flat batches end with one sample weight per target (Keras applies one
        ``sample_weight`` array to every output's loss; a list or dict gives one per output).

        Example::

            io.with_sample_weights(sw[:1]).signature[-1].name   # 'dense_sample_weight'
        """
        out = copy.copy(self)
        taken = set(self.input_names + self.target_names)
        specs = []
        per_output = self._flat_w(first_sw) if first_sw is not None else [None] * len(self.target_outputs)
        for o, w in zip(self.target_outputs, per_output):
            name = _safe_name(f"{o}_sample_weight")
            while name in taken:
                name += "_"
            taken.add(name)
            shape = (None,) + (_shape_of(w)[1:] if w is not None else ())
            specs.append(tf.TensorSpec(shape, tf.float32, name=name))
        out.weight_specs = specs
        return out

    def _flat_w(self, sw) -> list:
        """One sample-weight array per target: ``sw`` itself for all, or a list / dict per output."""
        n = len(self.target_outputs)
        if isinstance(sw, dict):
            return [sw.get(o) for o in self.target_outputs]
        if isinstance(sw, (list, tuple)):
            if len(sw) == n:
                return list(sw)
            if len(sw) == len(self.output_names):
                pos = {o: i for i, o in enumerate(self.output_names)}
                return [sw[pos[o]] for o in self.target_outputs]
            raise KerasSignatureError(f"sample_weight has {len(sw)} arrays; give one array for every output, "
                                      f"or one per output with a loss: {self.target_outputs}.")
        return [sw] * n

    # --- names -------------------------------------------------------------------------------
    @property
    def input_names(self) -> List[str]:
        return [s.name for s in self.input_specs]

    @property
    def target_names(self) -> List[str]:
        return [s.name for s in self.target_specs]

    @property
    def signature(self) -> List[tf.TensorSpec]:
        return list(self.input_specs) + list(self.target_specs) + list(self.weight_specs)

    # --- packing -----------------------------------------------------------------------------
    def pack_inputs(self, flat_inputs: Sequence):
        """What ``model(...)`` takes, from the flat input tensors."""
        if self.input_kind == "single":
            return flat_inputs[0]
        if self.input_kind == "dict":
            return dict(zip(self.input_keys, flat_inputs))
        return list(flat_inputs)

    def outputs_by_name(self, y_pred) -> Dict[str, object]:
        """``{output name: tensor}`` from what the model returned."""
        if isinstance(y_pred, dict):
            missing = [n for n in self.output_names if n not in y_pred]
            if missing:
                raise KerasSignatureError(f"The model returned a dict without the outputs {missing}.")
            return {n: y_pred[n] for n in self.output_names}
        ys = list(y_pred) if isinstance(y_pred, (list, tuple)) else [y_pred]
        if len(ys) != len(self.output_names):
            raise KerasSignatureError(f"The model returned {len(ys)} outputs; it was described with "
                                      f"{len(self.output_names)}: {self.output_names}.")
        return dict(zip(self.output_names, ys))

    # --- data ---------------------------------------------------------------------------------
    def _flat_x(self, x) -> list:
        n = len(self.input_specs)
        if isinstance(x, dict):
            keys = self.input_keys or self.input_names
            missing = [k for k in keys if k not in x]
            if missing:
                raise KerasSignatureError(f"The data's inputs are a dict with keys {sorted(x)}; the model's "
                                          f"inputs {missing} are missing.")
            return [x[k] for k in keys]
        if isinstance(x, (list, tuple)):
            if len(x) != n:
                raise KerasSignatureError(f"The data has {len(x)} inputs; the model takes {n}: "
                                          f"{self.input_names}.")
            return list(x)
        if n != 1:
            raise KerasSignatureError(f"The data has one input array; the model takes {n}: {self.input_names}. "
                                      "Give a list or a dict of arrays.")
        return [x]

    def _flat_y(self, y) -> list:
        n = len(self.target_outputs)
        if n == 0:
            return []
        if y is None:
            raise KerasSignatureError(f"The data has no targets; the model needs {n}, one for each output with a "
                                      f"loss or a metric: {self.target_outputs}. Give (x, y), or compile(loss=None) "
                                      "when the model's add_loss losses are the whole loss.")
        if isinstance(y, dict):
            missing = [o for o in self.target_outputs if o not in y]
            if missing:
                raise KerasSignatureError(f"The data's targets are a dict with keys {sorted(y)}; targets for the "
                                          f"outputs {missing} are missing.")
            return [y[o] for o in self.target_outputs]
        if isinstance(y, (list, tuple)):
            if len(y) == n:
                return list(y)
            if len(y) == len(self.output_names):  # one per output; keep those with a target
                pos = {o: i for i, o in enumerate(self.output_names)}
                return [y[pos[o]] for o in self.target_outputs]
            raise KerasSignatureError(f"The data has {len(y)} targets; the model needs {n}, one for each "
                                      f"output with a loss or a metric: {self.target_outputs}.")
        if n != 1:
            raise KerasSignatureError(f"The data has one target array; the model needs {n}, one for each "
                                      f"output with a loss or a metric: {self.target_outputs}.")
        return [y]

    def flatten(self, dp) -> list:
        """``[inputs..., targets...]`` from ``(x, y)``, a flat list, or a dict keyed by names."""
        return flatten_xy(dp, self)

    @classmethod
    def from_model(cls, model, first_x, first_y, output_names: List[str], output_kind: str,
                   has_target: Dict[str, bool], input_signature=None, target_signature=None) -> "ModelIO":
        """Describe ``model`` given one batch ``(first_x, first_y)`` and what the model returned;
        ``has_target``: the outputs with a loss or a metric (``Objectives.needs_target``)."""
        model_inputs = _model_inputs(model)
        x_struct = first_x
        if model_inputs is not None:
            kind, keys, tensors = model_inputs
        else:
            if isinstance(x_struct, dict):
                kind, keys = "dict", list(x_struct)
                tensors = None
            elif isinstance(x_struct, (list, tuple)):
                kind, keys, tensors = "list", None, None
            else:
                kind, keys, tensors = "single", None, None
        n_in = len(tensors) if tensors is not None else (len(keys) if keys else
                                                          len(x_struct) if kind == "list" else 1)
        if tensors is not None:
            auto = ["input"] if len(tensors) == 1 else [f"input_{i}" for i in range(len(tensors))]
            # Keras names unnamed inputs 'keras_tensor_<n>'; use stable names instead
            names = [_safe_name(keys[i] if keys else
                                (auto[i] if str(getattr(t, "name", "") or "keras_tensor").startswith("keras_tensor")
                                 else t.name)) for i, t in enumerate(tensors)]
        elif keys:
            names = [_safe_name(k) for k in keys]
        else:
            names = ["input"] if n_in == 1 else [f"input_{i}" for i in range(n_in)]
        proto = cls([tf.TensorSpec(None, tf.float32, name=n) for n in names], keys, kind, output_names,
                    output_kind, [], [o for o in output_names if has_target.get(o)])
        xs = proto._flat_x(first_x)

        given = as_spec_list(input_signature, "input_signature")
        if given is not None and len(given) != n_in:
            raise KerasSignatureError(f"input_signature has {len(given)} specs; the model takes {n_in} inputs: "
                                      f"{names}.")
        specs = []
        for i, (name, xd) in enumerate(zip(names, xs)):
            data_spec = _spec_from_data(xd, name)
            model_shape = (None,) + tuple(tensors[i].shape)[1:] if tensors is not None else None
            model_dtype = tf.as_dtype(tensors[i].dtype) if tensors is not None else None
            if given is not None:
                spec = tf.TensorSpec(given[i].shape, given[i].dtype, name=_safe_name(given[i].name or name))
            else:
                spec = tf.TensorSpec(model_shape if model_shape is not None else data_spec.shape,
                                     model_dtype or data_spec.dtype, name=name)
            if model_shape is not None and not tf.TensorShape(model_shape).is_compatible_with(spec.shape):
                raise KerasSignatureError(f"Input '{name}': the signature says shape {tuple(spec.shape.as_list())} "
                                          f"but the model takes {model_shape}.")
            data_shape = _shape_of(xd)
            fix = _keras_rank_fix(data_shape, spec.shape) if model_shape is not None else None
            if fix == "expand":   # as keras.Model's functional call: (16, 28, 28) into Input((28, 28, 1))
                data_shape = data_shape + (1,)
            elif fix == "squeeze":
                data_shape = data_shape[:-1]
            if not spec.shape.is_compatible_with(data_shape):
                raise KerasSignatureError(
                    f"Input '{name}': the model takes shape {tuple(spec.shape.as_list())} but the data gives "
                    f"batches of shape {_shape_of(xd)}. Reshape the data (e.g. add the channel axis) or "
                    "fix the model's Input.")
            specs.append(spec)

        proto.input_specs = specs
        ys = proto._flat_y(first_y)
        given_t = as_spec_list(target_signature, "target_signature")
        if given_t is not None and len(given_t) != len(ys):
            raise KerasSignatureError(f"target_signature has {len(given_t)} specs; the model needs {len(ys)} "
                                      f"targets, one for each output with a loss or a metric: "
                                      f"{proto.target_outputs}.")
        taken = set(names)
        tspecs = []
        for i, (out, yd) in enumerate(zip(proto.target_outputs, ys)):
            tname = _safe_name(f"{out}_target")
            while tname in taken:
                tname += "_"
            taken.add(tname)
            spec = _spec_from_data(yd, tname) if given_t is None else \
                tf.TensorSpec(given_t[i].shape, given_t[i].dtype, name=_safe_name(given_t[i].name or tname))
            if not spec.shape.is_compatible_with(_shape_of(yd)):
                raise KerasSignatureError(f"Target of output '{out}': the signature says shape "
                                          f"{tuple(spec.shape.as_list())} but the data gives {_shape_of(yd)}.")
            tspecs.append(spec)
        proto.target_specs = tspecs
        return proto


def _model_inputs(model):
    """``(kind, dict keys or None, input KerasTensors)`` of a model that declares its inputs, else None."""
    try:
        tensors = list(model.inputs) if getattr(model, "built", False) and model.inputs else None
    except (AttributeError, ValueError):
        tensors = None
    if not tensors:
        return None
    struct = functional_input_structure(model)
    if isinstance(struct, dict):
        keys = list(struct)
        return "dict", keys, [struct[k] for k in keys]
    if isinstance(struct, (list, tuple)) or len(tensors) > 1:
        return "list", None, tensors
    return "single", None, tensors


def _ones_for(batch):
    """Sample weights of 1 for a batch of numpy arrays or tensors (data without weights)."""
    if tf.is_tensor(batch):
        return tf.ones(tf.shape(batch)[:1], tf.float32)
    return np.ones(len(batch), np.float32)


def _weights(io: ModelIO, flat: list, sw) -> list:
    """``flat`` followed by one float32 weight per target when ``io`` is weighted."""
    if not io.weighted:
        if sw is not None:
            raise KerasSignatureError("A datapoint (x, y, sample_weight) was given to a model described "
                                      "without sample weights.")
        return flat
    per = io._flat_w(sw) if sw is not None else [None] * len(io.target_outputs)
    out = []
    for w in per:
        if w is None:
            w = _ones_for(flat[0])
        out.append(tf.cast(w, tf.float32) if tf.is_tensor(w) else np.asarray(w, np.float32))
    return flat + out


def _is_weighted_point(dp, io: ModelIO) -> bool:
    """Whether a 3-component datapoint is Keras's ``(x, y, sample_weight)`` (not a flat list)."""
    n_flat = len(io.input_specs) + len(io.target_outputs)
    return len(dp) == 3 and (n_flat != 3 or any(_is_structure(c) for c in dp))


def _keras_rank_fix(data_shape: tuple, model_shape) -> Optional[str]:
    """What a functional Keras model does to an input of another rank than its ``Input``: 'expand'
    (one axis short, the Input's last axis is 1), 'squeeze' (one axis more, of size 1), else None."""
    model_shape = tf.TensorShape(model_shape)
    if model_shape.rank is None:
        return None
    if len(data_shape) == model_shape.rank - 1 and model_shape[-1] == 1:
        return "expand"
    if len(data_shape) == model_shape.rank + 1 and data_shape[-1] == 1:
        return "squeeze"
    return None


def _cast_tensor(t, dtype: tf.DType, what: str):
    """``t`` cast to ``dtype`` (Keras's conversion of its inputs), with an assertion that no value
    changes (the house rule of :mod:`kerastrainer.utils.casting`: an int64 id beyond 2**24 in
    float32, a fraction made an int, a float64 beyond float32's range raise when the batch is read)."""
    src, dst = np.dtype(t.dtype.as_numpy_dtype), np.dtype(dtype.as_numpy_dtype)
    checks = []
    if src.kind in "biuf" and dst.kind in "biuf":
        if dst.kind in "iu" and src.kind == "f":
            checks.append(tf.reduce_all(tf.equal(t, tf.round(t))))
        limit = _cast_limit(src, dst) if src.kind != "b" else None
        if limit is not None:   # (NaN compares False: NaN stays NaN)
            low, high = limit
            checks.append(tf.logical_not(tf.reduce_any(tf.logical_or(t < tf.cast(low, t.dtype),
                                                                     t > tf.cast(high, t.dtype)))))
    if not checks:
        return tf.cast(t, dtype)
    ok = tf.reduce_all(tf.stack(checks))
    message = f"{what}: a value of the data changes in the cast from {src.name} to {dst.name}; fix the data"
    with tf.control_dependencies([tf.debugging.Assert(ok, [message])]):
        return tf.cast(t, dtype)


def _conform(c, spec: tf.TensorSpec, is_input: bool):
    """``c`` as a functional model converts its input: the ``Input``'s rank (see
    :func:`_keras_rank_fix`) and, for a tensor (a ``tf.data`` pipeline), its dtype (numpy arrays
    are cast, keeping every value, where they become tensors)."""
    tensor = tf.is_tensor(c)
    if not tensor:
        c = np.asarray(c)
    rank, c_rank = spec.shape.rank, (c.shape.rank if tensor else c.ndim)
    if is_input and rank is not None and c_rank is not None and c_rank != rank:
        fix = _keras_rank_fix(tuple(c.shape), spec.shape)
        if fix == "expand":
            c = tf.expand_dims(c, -1) if tensor else np.expand_dims(c, -1)
        elif fix == "squeeze":
            c = tf.squeeze(c, -1) if tensor else np.squeeze(c, -1)
    if tensor and c.dtype != spec.dtype:
        c = _cast_tensor(c, spec.dtype, f"{'input' if is_input else 'target'} {spec.name}")
    return c


def flatten_xy(dp, io: ModelIO) -> list:
    """The flat ``[inputs..., targets...(, weights...)]`` of one datapoint (numpy arrays or tensors):
    ``(x, y)``, ``(x, y, sample_weight)``, ``(x,)``, a flat list or a dict; a tensor in its spec's
    dtype, and an input of the rank its ``Input`` takes where Keras's functional model adjusts it
    (integer token ids into a float ``Input`` are cast, as Keras casts them)."""
    flat = _flatten_xy(dp, io)
    n_in, n_sig = len(io.input_specs), len(io.signature)
    return [_conform(c, spec, i < n_in) for i, (c, spec) in enumerate(zip(flat, io.signature))] + flat[n_sig:]


def _flatten_xy(dp, io: ModelIO) -> list:
    n_in, n_t = len(io.input_specs), len(io.target_outputs)
    if isinstance(dp, dict):
        keys = io.input_keys or io.input_names
        x = {k: dp[k] for k in keys if k in dp}
        y = {o: dp[o] for o in io.target_outputs if o in dp}
        y.update({o: dp[t] for o, t in zip(io.target_outputs, io.target_names) if t in dp})
        missing = [k for k in keys if k not in x] + [o for o in io.target_outputs if o not in y]
        if missing:
            raise KerasSignatureError(f"A dict datapoint with keys {sorted(dp)} lacks {missing}.")
        return _weights(io, io._flat_x(x) + io._flat_y(y), None)
    if not isinstance(dp, (list, tuple)):
        raise KerasSignatureError(f"A datapoint must be (x, y), (x, y, sample_weight), a flat list "
                                  f"[inputs..., targets...] or a dict; got a {type(dp).__name__}.")
    if len(dp) == 2 and (n_in + n_t != 2 or _is_structure(dp[0]) or _is_structure(dp[1])):
        return _weights(io, io._flat_x(dp[0]) + io._flat_y(dp[1]), None)
    if len(dp) == 1 and (n_in != 1 or _is_structure(dp[0])):  # (x,): inputs only
        return _weights(io, io._flat_x(dp[0]) + io._flat_y(None), None)
    if len(dp) == n_in + n_t and not any(_is_structure(c) for c in dp):
        return _weights(io, list(dp), None)
    if _is_weighted_point(dp, io):
        return _weights(io, io._flat_x(dp[0]) + io._flat_y(dp[1]), dp[2])
    if io.weighted and len(dp) == n_in + 2 * n_t and not any(_is_structure(c) for c in dp):
        return list(dp)  # flat, weights included
    raise KerasSignatureError(
        f"A datapoint has {len(dp)} components; expected (x, y), (x, y, sample_weight) or a flat list of "
        f"the {n_in} inputs {io.input_names} and the {n_t} targets {io.target_names}.")
