"""KerasModel: train a whole ``keras.Model`` with kerastrainer's trainers.

The model is the user's ``keras.Model``: it is trained in place, so afterwards
``model.save('x.keras')``, ``model.predict`` and ``keras.models.load_model`` work
as after ``keras.Model.fit``. Behind ``fit``, the compiled model becomes a
:class:`~kerastrainer.keras.adapter.KerasModelDesc` and runs on any trainer
(``SimpleTrainer`` by default, ``SyncMultiGPUTrainerReplicated(n)`` for several
devices): the multi-step ``tf.function``, the in-graph input queue, kerastrainer
callbacks and monitors, checkpoints.

**Batches are global** (Keras' rule): with N replicas each batch of the data is
split into N per-replica batches, and each replica's loss is weighted by its share
of the batch, so any batch size gives the single-device numbers. With several
workers (``MultiWorkerTrainer``, ``HorovodTrainer``) ``batch_size`` is the global
batch of all workers and each worker reads its own shard of the data (see
:meth:`KerasModel.fit`). ModelDesc trainers instead give each tower its own
DataFlow batch (tensorpack's rule), and so does an ``InputSource`` given as
``input`` (tensorpack's ``KerasModel`` contract, below).

Example::

    def get_model():
        return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Conv2D(32, 3),
                                 keras.layers.Flatten(), keras.layers.Dense(10)])

    km = KerasModel(get_model, input=(x_train, y_train), trainer=SyncMultiGPUTrainerReplicated(2))
    km.compile(keras.optimizers.Adam(1e-3),
               keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=['accuracy'])
    history = km.fit(validation_data=(x_test, y_test), max_epoch=5, batch_size=64,
                     callbacks=[ModelSaver(), keras.callbacks.EarlyStopping('val_loss')])
    km.model.save('mnist.keras')

tensorpack's contract (``tensorpack.contrib.keras.KerasModel``) works too: ``get_model``
takes the input tensors (``keras.Input`` s made from ``input_signature``), ``input`` is
an ``InputSource`` (or a DataFlow), and ``fit()`` runs to ``TrainConfig``'s default
``max_epoch`` unless told otherwise::

    def get_model(image):
        return keras.Sequential([keras.layers.InputLayer(input_tensor=image), keras.layers.Flatten(),
                                 keras.layers.Dense(10, activation='softmax')])

    km = KerasModel(get_model,
                    input_signature=[tf.TensorSpec([None, 28, 28, 1], tf.float32, 'images')],
                    target_signature=[tf.TensorSpec([None, 10], tf.float32, 'labels')],
                    input=QueueInput(train_df))
    km.compile(optimizer=keras.optimizers.Adam(1e-3), loss='categorical_crossentropy',
               metrics='categorical_accuracy')
    km.fit(validation_data=test_df, steps_per_epoch=len(train_df), max_epoch=5, callbacks=[ModelSaver()])
"""
from __future__ import annotations

import copy
import inspect
from typing import Callable, List, Optional, Sequence, Union

import keras
import numpy as np
import tensorflow as tf

from ..callbacks.inference import ScalarStats
from ..callbacks.inference_runner import InferenceRunner
from ..dataflow.base import is_dataflow
from ..dataflow.shard import ShardedDataFlow, shard_dataflow
from ..input_source.base import InputSource, InputSourceError
from ..tfutils.extensions import translate_optimizer
from ..train.base import Trainer
from ..train.config import DEFAULT_CALLBACKS, DEFAULT_MONITORS, TrainConfig
from ..train.interface import launch_train_with_config, staged_on_gpus
from ..train.trainers import SimpleTrainer
from ..utils import logger
from ..utils.casting import cast_exactly
from .adapter import KerasModelDesc
from .callbacks import KerasCallback, wrap_keras_callbacks
from .data import DEFAULT_BATCH_SIZE, SHARE_SPEC, KerasData, _FirstBatches, _FlatBatches, _map, as_keras_data
from .objectives import Objectives
from .own_step import KerasOwnStepDesc, ResetKerasMetrics, model_optimizers, overridden, runs_own_step
from .structure import KerasSignatureError, ModelIO, as_spec_list, flatten_xy
from .variables import place_off_strategy, rekey_optimizer, unique_variables

__all__ = ["KerasModel"]


def _first_sample_batch(struct):
    """The first sample of every array of a batch, keeping the batch axis."""
    if isinstance(struct, dict):
        return {k: _first_sample_batch(v) for k, v in struct.items()}
    if isinstance(struct, (list, tuple)):
        return [_first_sample_batch(v) for v in struct]
    arr = np.asarray(struct)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    return arr[:1]


def _split_xy(first, n_inputs_hint: Optional[int] = None):
    """``(x, y)`` of a first datapoint that is ``(x, y)``, a flat list (``n_inputs_hint`` inputs),
    or ``x`` alone (``(x,)`` or an array: y is None, for a model whose loss is its ``add_loss``).

    Example::

        _split_xy((x, y))   # (x, y)
        _split_xy((x,))     # (x, None)
    """
    if isinstance(first, (list, tuple)) and len(first) == 2:
        return first[0], first[1]
    if isinstance(first, (list, tuple)) and len(first) == 1:
        return first[0], None
    if not isinstance(first, (list, tuple, dict)):
        return first, None
    if isinstance(first, (list, tuple)) and n_inputs_hint is not None and len(first) > n_inputs_hint:
        x = first[:n_inputs_hint]
        y = first[n_inputs_hint:]
        return (x[0] if len(x) == 1 else list(x)), (y[0] if len(y) == 1 else list(y))
    raise KerasSignatureError(
        f"Cannot tell inputs from targets in a datapoint of {len(first) if hasattr(first, '__len__') else '?'} "
        "components: give (x, y) pairs, or a model whose inputs are declared (keras.Input) so that a flat "
        "[inputs..., targets...] list can be split.")


def _output_names(model: keras.Model, y_pred) -> (List[str], str):
    if isinstance(y_pred, dict):
        return list(y_pred), "dict"
    if isinstance(y_pred, (list, tuple)):
        names = list(getattr(model, "output_names", None) or [])
        if len(names) != len(y_pred) or len(set(names)) != len(names):
            names = [f"output_{i}" for i in range(len(y_pred))]
        return names, "list"
    names = list(getattr(model, "output_names", None) or [])
    return ([names[0]] if len(names) == 1 else ["output"]), "single"


def _takes_inputs(fn) -> bool:
    """Whether ``get_model`` takes the input tensors (tensorpack's contract) rather than nothing."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == p.VAR_POSITIONAL or (p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                              and p.default is p.empty) for p in params)


def _keras_inputs(specs: List[tf.TensorSpec]) -> list:
    """One ``keras.Input`` per spec (the batch axis left out), named after the spec."""
    out = []
    for i, s in enumerate(specs):
        shape = tf.TensorShape(s.shape)
        if shape.rank is None or shape.rank < 1:
            raise KerasSignatureError(f"input_signature[{i}] has shape {shape}; a Keras input needs a batch axis "
                                      "first, e.g. tf.TensorSpec([None, 28, 28, 1], tf.float32, 'image').")
        out.append(keras.Input(shape=tuple(shape.as_list()[1:]), dtype=s.dtype.name, name=s.name or None))
    return out


def _zeros_like_specs(specs: List[tf.TensorSpec]):
    """A one-sample batch of zeros per spec (unknown sizes become 1): a stand-in first datapoint."""
    arrays = [np.zeros([1] + [d if d is not None else 1 for d in tf.TensorShape(s.shape).as_list()[1:]],
                       dtype=s.dtype.as_numpy_dtype) for s in specs]
    return arrays[0] if len(arrays) == 1 else arrays


def _worker_rank_size(trainer: Trainer) -> (int, int):
    """(rank, number of workers) of a multi-process trainer; (0, 1) for the others."""
    size = int(getattr(trainer, "size", 1) or 1)
    return (int(getattr(trainer, "rank", 0) or 0), size) if size > 1 else (0, 1)


def _shard(data_arg, batch_size: Optional[int], rank: int, size: int):
    """This worker's part of ``data_arg`` and its local batch size (``batch_size`` is global).

    numpy arrays: every ``size``-th sample, ``batch_size / size`` of them a step; a
    ``tf.data.Dataset``: ``Dataset.shard``; a DataFlow: every ``size``-th batch (its
    batches are per worker). A ``KerasData``, a ``ShardedDataFlow`` or a PyDataset
    (sharded after conversion) are returned as they are.
    """
    if isinstance(data_arg, (KerasData, ShardedDataFlow, keras.utils.PyDataset)):
        return data_arg, batch_size
    if isinstance(data_arg, tf.data.Dataset):
        return data_arg.shard(size, rank), batch_size
    if is_dataflow(data_arg):
        return shard_dataflow(data_arg, rank, size), batch_size
    if not (isinstance(data_arg, tuple) and len(data_arg) == 2):
        return data_arg, batch_size  # as_keras_data explains what it takes
    x, y = data_arg
    global_batch = batch_size or DEFAULT_BATCH_SIZE
    if global_batch % size:
        raise ValueError(f"batch_size={global_batch} is the global batch of {size} workers: make it a multiple "
                         f"of {size} (each worker takes batch_size / {size} samples a step).")
    take = lambda a: np.asarray(a)[rank::size]  # noqa: E731
    return (_map(take, x), _map(take, y)), global_batch // size


class KerasModel:
    """Train a ``keras.Model`` with a kerastrainer trainer (see the module doc).

    Args:
        get_model: the model itself, a callable returning it, or (tensorpack's contract)
            a callable taking the input tensors, ``get_model(*inputs)``: it is called once
            with one ``keras.Input`` per ``input_signature`` spec.
        input_signature: ``tf.TensorSpec`` (s) of the model's inputs; inferred from the
            model and the first batch when left out.
        target_signature: ``tf.TensorSpec`` (s) of the targets, one per output with a
            loss or a metric; inferred from the first batch when left out.
        input: the training data: ``(x, y)`` numpy arrays, a ``tf.data.Dataset``, a
            ``keras.utils.PyDataset`` or a DataFlow of ``(x, y)`` (or flat
            ``[inputs..., targets...]``) batches: global batches. Or an ``InputSource``
            (``QueueInput(df)``...) of flat ``[inputs..., targets...]`` batches, which,
            as in tensorpack, feeds each replica its own batch; it needs both signatures.
            The data can also be given to :meth:`fit`.
        trainer: a kerastrainer Trainer (default ``SimpleTrainer()``). A trainer runs
            one ``fit``: the first uses the one given, later ones a fresh copy of it.
    """

    def __init__(self, get_model: Union[Callable[[], keras.Model], keras.Model], input_signature=None,
                 target_signature=None, input=None, trainer: Optional[Trainer] = None):  # noqa: A002
        self._tensorpack_form = isinstance(input, InputSource)
        if isinstance(get_model, keras.Model):
            model = get_model
        elif callable(get_model):
            if _takes_inputs(get_model):
                if input_signature is None:
                    raise ValueError("get_model takes the input tensors (tensorpack's contract): give "
                                     "KerasModel(input_signature=[tf.TensorSpec(...), ...]) to make them from.")
                self._tensorpack_form = True
                model = get_model(*_keras_inputs(as_spec_list(input_signature, "input_signature")))
            else:
                model = get_model()
            if not isinstance(model, keras.Model):
                raise TypeError(f"get_model must return a keras.Model; it returned {type(model).__name__}.")
        else:
            raise TypeError(f"KerasModel needs a keras.Model or a function returning one; got "
                            f"{type(get_model).__name__}.")
        if trainer is not None and not isinstance(trainer, Trainer):
            raise TypeError(f"trainer must be a kerastrainer Trainer instance (e.g. SimpleTrainer()); got "
                            f"{type(trainer).__name__}.")
        if isinstance(input, InputSource) and (input_signature is None or target_signature is None):
            raise ValueError(f"input={type(input).__name__}(...) is an InputSource: give input_signature= and "
                             "target_signature= too (the specs of its flat [inputs..., targets...] batches).")
        self.model = model
        self.input_signature = input_signature
        self.target_signature = target_signature
        self.input = input
        self._fresh_trainer = trainer
        try:  # a pristine copy for later fits (a trainer holding a live cluster cannot be copied)
            self._trainer_template = copy.deepcopy(trainer) if trainer is not None else None
        except Exception:  # noqa: BLE001
            self._trainer_template = None
        self._compile_args = None
        self._own_step_compiled = False
        self._jit_compile: Union[bool, str] = "auto"
        self._optimizer = None
        self._objectives = None
        self._io = None
        self.trainer: Optional[Trainer] = None
        self.history: Optional[keras.callbacks.History] = None

    # --- compile ------------------------------------------------------------------------------
    def compile(self, *args, jit_compile: Union[bool, str] = "auto", **kwargs) -> None:
        """``compile(optimizer, loss=None, metrics=None, loss_weights=None, jit_compile='auto')``
        (see :meth:`_compile_standard`). For a model that runs its own step (its class overrides
        ``train_step``, ``compute_loss`` or ``compute_metrics``) every argument goes to the model's
        own ``compile``, whatever its signature (keras-io's GAN: ``compile(d_optimizer=...,
        g_optimizer=..., loss_fn=...)``), and its ``train_step`` is what ``fit`` runs."""
        if isinstance(jit_compile, str) and jit_compile != "auto" or jit_compile not in (True, False, "auto"):
            raise ValueError(f"jit_compile must be True, False or 'auto'; got {jit_compile!r}")
        if runs_own_step(self.model):
            self.model.compile(*args, **kwargs)
            self._own_step_compiled = True
            self._jit_compile = jit_compile
            self._compile_args = {}
            self._objectives = None
            self._io = None
            return
        if overridden(self.model, "test_step"):
            # evaluate() runs the model's own evaluate, which needs the model compiled; fit trains
            # with compile()'s loss as usual, when an optimizer is given
            self.model.compile(*args, **kwargs)
            if not args and kwargs.get("optimizer") is None:
                self._jit_compile = jit_compile
                return
        self._compile_standard(*args, jit_compile=jit_compile, **kwargs)

    def _compile_standard(self, optimizer, loss=None, metrics=None, loss_weights=None,
                          jit_compile: Union[bool, str] = "auto") -> None:
        """Like ``keras.Model.compile``: a Keras optimizer (or its name; a ``tf.compat.v1.train``
        optimizer, as tensorpack's ``KerasModel`` took, becomes the Keras optimizer with the
        same update rule), the loss(es), the metrics.

        Losses and metrics may be Keras objects, functions or strings; a list or dict
        gives one per output. ``loss=None``, as in Keras 3: the model's own losses
        (``add_loss`` in a layer's ``call``) are the loss, and the data need no targets
        (``fit(input=x)``); ``fit`` raises an error when the model adds none.
        ``jit_compile``: XLA, as the trainer's argument: ``'auto'`` (on GPUs, with a
        fallback when XLA cannot compile the model) leaves the trainer's own setting;
        True or False overrides it.
        """
        opt = keras.optimizers.get(optimizer) if isinstance(optimizer, (str, dict)) else optimizer
        if isinstance(opt, tf.compat.v1.train.Optimizer):  # tensorpack's KerasModel took TF1 optimizers
            opt = translate_optimizer(opt)
        if not isinstance(opt, keras.optimizers.Optimizer):
            raise TypeError(f"compile(optimizer=...) needs a Keras optimizer or its name; got {type(optimizer).__name__}.")
        self._optimizer = opt
        self._compile_args = dict(loss=loss, metrics=metrics, loss_weights=loss_weights)
        self._jit_compile = jit_compile
        self._objectives = None
        self._io = None

    # --- describing the model -----------------------------------------------------------------
    def _prepare(self, data: KerasData) -> ModelIO:
        """Build the model on one sample, learn its outputs, resolve losses, infer the signature."""
        if self._compile_args is None:
            raise RuntimeError("Call KerasModel.compile(optimizer, loss, ...) before fit/evaluate.")
        if self._io is not None:
            return self._io
        model = self.model
        hint = len(model.inputs) if getattr(model, "built", False) and getattr(model, "inputs", None) else None
        if data is None:  # an InputSource: a stand-in batch from the signatures
            x = _zeros_like_specs(as_spec_list(self.input_signature, "input_signature"))
            y = _zeros_like_specs(as_spec_list(self.target_signature, "target_signature"))
        else:
            x, y = _split_xy(data.first, hint)
        x1 = _first_sample_batch(x)
        # the data against the model's declared inputs first: a clearer error than Keras' own
        ModelIO.from_model(model, x, None, ["output"], "single", {}, self.input_signature, None)
        if not model.built and isinstance(model, keras.Sequential) and not isinstance(x1, (list, dict)):
            model.build((None,) + tuple(x1.shape[1:]))  # any batch size, not the probe's
        # one forward pass on one sample builds an unbuilt model and shows its outputs
        try:
            y_pred = model(x1, training=False)
        except (ValueError, TypeError) as e:
            raise KerasSignatureError(f"The model cannot be called on the data's inputs: {e}") from e
        out_names, out_kind = _output_names(model, y_pred)
        objectives = Objectives(output_names=out_names, **self._compile_args)
        if not objectives.has_output_loss and not model.losses:  # the probe's call ran the add_loss calls
            raise ValueError(f"No loss to compute: compile(loss=...) gives no loss for the outputs {out_names} "
                             "and the model adds none (add_loss in a layer's call). Give compile a loss.")
        io = ModelIO.from_model(model, x, y, out_names, out_kind, objectives.needs_target,
                                self.input_signature, self.target_signature)
        y_flat = io._flat_y(y)
        y_true = {o: tf.convert_to_tensor(_first_sample_batch(t), dtype=s.dtype)
                  for o, t, s in zip(io.target_outputs, y_flat, io.target_specs)}
        objectives.resolve(y_true, io.outputs_by_name(y_pred))
        self._objectives, self._io = objectives, io
        return io

    def _make_desc(self, global_batch: bool = True) -> KerasModelDesc:
        return KerasModelDesc(self.model, self._io, self._objectives, self._optimizer, global_batch=global_batch)

    def _new_trainer(self) -> Trainer:
        if self._fresh_trainer is not None:
            trainer, self._fresh_trainer = self._fresh_trainer, None
        elif self._trainer_template is not None:
            trainer = copy.deepcopy(self._trainer_template)
        elif self.trainer is not None and not isinstance(self.trainer, SimpleTrainer):
            raise RuntimeError(f"The {type(self.trainer).__name__} given to KerasModel ran one fit and cannot be "
                               "copied for another: give a new one, KerasModel(model, trainer=...).")
        else:
            trainer = SimpleTrainer()
        if self._jit_compile != "auto":
            trainer.jit_compile = bool(self._jit_compile)
        return trainer

    @staticmethod
    def _replicas(trainer: Trainer) -> int:
        """Replicas in this process: each global (or worker's) batch is split into that many."""
        local = getattr(trainer, "num_local_replicas", None)
        if local:
            return int(local)
        devices = getattr(trainer, "devices", None)
        return len(devices) if devices else 1

    # --- fit ---------------------------------------------------------------------------------
    def fit(self, validation_data=None, steps_per_epoch: Optional[int] = None, max_epoch: Optional[int] = None,
            callbacks: Optional[Sequence] = None, session_init=None, batch_size: Optional[int] = None,
            epochs: Optional[int] = None, input=None, shuffle: bool = True,  # noqa: A002
            validation_batch_size: Optional[int] = None, starting_epoch: int = 1,
            extra_callbacks: Optional[Sequence] = None, monitors: Optional[Sequence] = None,
            shard: bool = True, validation_steps: Optional[int] = None) -> keras.callbacks.History:
        """Train; returns a ``keras.callbacks.History`` (per-epoch means of the statistics).

        Args:
            validation_data: evaluated after every epoch (``val_loss``, ``val_<metric>``),
                in any form ``input`` takes.
            steps_per_epoch: defaults to one pass over the data (when its length is known).
            max_epoch: the last epoch (``epochs`` is the Keras name); default 1, or
                ``TrainConfig``'s default when the model was given tensorpack's way (an
                ``InputSource``, or a ``get_model`` taking the inputs).
            callbacks: kerastrainer callbacks and ``keras.callbacks`` objects, mixed.
            session_init: weights to start from: a kerastrainer checkpoint (or its log
                directory), or anything ``SmartInit`` takes.
            batch_size: the global batch for numpy inputs (default 32), split over the
                replicas and, with several workers, over the workers.
            input: the training data, if not given to the constructor.
            starting_epoch: the number of the first epoch (``initial_epoch + 1`` in Keras).
            shard: with several workers, each reads its own part of the data: every
                ``size``-th sample of numpy arrays (``batch_size / size`` a step),
                ``Dataset.shard`` of a ``tf.data.Dataset``, every ``size``-th batch of a
                DataFlow or PyDataset. ``shard=False``: every worker reads all the data
                (shard it yourself, e.g. with ``shard_dataflow``).
            validation_steps: validate on the first that many batches of ``validation_data``
                (a generator reads on: the next ones each epoch); default all of it.

        With several replicas the training metrics (``accuracy``...; not the loss) are
        computed on the first replica's part of each step's batches; ``val_*`` cover the
        whole validation data.
        """
        if validation_steps is not None and (isinstance(validation_steps, bool) or
                                             not isinstance(validation_steps, int) or validation_steps < 1):
            raise ValueError(f"validation_steps must be a positive int or None; got {validation_steps!r}.")
        if validation_steps is not None and validation_data is None:
            raise ValueError("validation_steps was given without validation_data.")
        if max_epoch is not None and epochs is not None and max_epoch != epochs:
            raise ValueError("Give max_epoch or epochs, not both.")
        if max_epoch is None:
            max_epoch = epochs if epochs is not None else (None if self._tensorpack_form else 1)
        data_arg = input if input is not None else self.input
        if data_arg is None:
            raise ValueError("KerasModel.fit has no data: give input= to KerasModel(...) or to fit().")
        trainer = self._new_trainer()
        rank, size = _worker_rank_size(trainer)
        if isinstance(data_arg, InputSource):
            return self._fit_input_source(data_arg, trainer, validation_data, steps_per_epoch, max_epoch,
                                          callbacks, session_init, starting_epoch, extra_callbacks, monitors,
                                          validation_batch_size or batch_size, validation_steps)
        if size > 1 and shard:
            data_arg, batch_size = _shard(data_arg, batch_size, rank, size)
            logger.info("KerasModel: worker %d of %d reads its shard of the data%s.", rank, size,
                        f" ({batch_size} samples a step)" if batch_size else "")
        data = as_keras_data(data_arg, batch_size=batch_size, shuffle=shuffle)
        if size > 1 and shard and isinstance(data_arg, keras.utils.PyDataset):
            data = KerasData(data.kind, shard_dataflow(data.source, rank, size), data.first,
                             None if data.steps is None else data.steps // size)
        if runs_own_step(self.model):
            return self._fit_own_step(trainer, data, validation_data, steps_per_epoch, max_epoch, callbacks,
                                      session_init, starting_epoch, extra_callbacks, monitors)
        io = self._prepare(data)
        n_rep = self._replicas(trainer)
        flatten = _flattener(io)
        source, steps = data.make_input(flatten, n_rep)
        source = staged_on_gpus(source)
        if steps_per_epoch is None:
            if steps is None:
                raise ValueError("steps_per_epoch is unknown: the data does not know its length. Give "
                                 "fit(steps_per_epoch=...).")
            steps_per_epoch = steps
        desc = self._make_desc()
        val_flow = None
        if validation_data is not None:
            val = as_keras_data(validation_data, batch_size=validation_batch_size or batch_size, shuffle=False)
            val_flow = val.flat_dataflow(flatten, with_share=True)
            if validation_steps is not None:
                val_flow = _FirstBatches(val_flow, validation_steps)
        return self._launch(trainer, desc, source, val_flow, steps_per_epoch, max_epoch, callbacks, session_init,
                            starting_epoch, extra_callbacks, monitors)

    def _fit_own_step(self, trainer, data: KerasData, validation_data, steps_per_epoch, max_epoch, callbacks,
                      session_init, starting_epoch, extra_callbacks, monitors) -> keras.callbacks.History:
        """A model that runs its own ``train_step`` (see :mod:`.own_step`)."""
        model = self.model
        if not self._own_step_compiled:
            raise RuntimeError(f"{type(model).__name__} runs its own train_step: call KerasModel.compile(...) (its "
                               "arguments go to the model's own compile) before fit.")
        if validation_data is not None:
            raise NotImplementedError(
                f"KerasModel.fit(validation_data=...) for {type(model).__name__}, which runs its own train_step, "
                "is not supported: validation would have to run its test_step inside the trainer. Call "
                "KerasModel.evaluate(data) after fit (it runs the model's own evaluate).")
        # (an unbuilt model builds in the trainer's first trace of its step, on the trainer's strategy)
        desc = KerasOwnStepDesc(model, data.first)
        source, steps = data.make_input(desc.flatten, self._replicas(trainer))
        if steps_per_epoch is None:
            if steps is None:
                raise ValueError("steps_per_epoch is unknown: the data does not know its length. Give "
                                 "fit(steps_per_epoch=...).")
            steps_per_epoch = steps
        source = staged_on_gpus(source)
        self._own_desc = desc
        cbs = [ResetKerasMetrics(model)] + list(callbacks or [])
        return self._launch(trainer, desc, source, None, steps_per_epoch, max_epoch, cbs, session_init,
                            starting_epoch, extra_callbacks, monitors)

    def _fit_input_source(self, source: InputSource, trainer, validation_data, steps_per_epoch, max_epoch,
                          callbacks, session_init, starting_epoch, extra_callbacks, monitors, val_batch_size,
                          validation_steps=None):
        """tensorpack's contract: the InputSource feeds each replica its own flat batch."""
        self._prepare(None)
        desc = self._make_desc(global_batch=False)
        val_flow = None
        if validation_data is not None:
            if isinstance(validation_data, InputSource):
                raise TypeError("validation_data must be data (a DataFlow, arrays, a tf.data.Dataset), not an "
                                "InputSource: InferenceRunner reads it in Python.")
            val = as_keras_data(validation_data, batch_size=val_batch_size, shuffle=False)
            val_flow = val.flat_dataflow(_flattener(self._io))
            if validation_steps is not None:
                val_flow = _FirstBatches(val_flow, validation_steps)
        # steps_per_epoch None: TrainConfig takes the InputSource's size per tower
        return self._launch(trainer, desc, source, val_flow, steps_per_epoch, max_epoch, callbacks, session_init,
                            starting_epoch, extra_callbacks, monitors)

    def _launch(self, trainer, desc, source, val_flow, steps_per_epoch, max_epoch, callbacks, session_init,
                starting_epoch, extra_callbacks, monitors) -> keras.callbacks.History:
        replicas = self._replicas(trainer) * _worker_rank_size(trainer)[1]
        metrics = [n for ms in self._objectives.metrics.values() for n, _ in ms] if self._objectives else []
        if replicas > 1 and metrics:  # the loss is averaged over the replicas; the metrics are not
            logger.info("KerasModel.fit: the training metrics %s cover the first replica's batch of each step "
                        "(1 of %d replicas); the loss covers all of them, val_* the whole validation data.",
                        metrics, replicas)
        cbs: List = []
        if val_flow is not None:
            cbs.append(InferenceRunner(val_flow, ScalarStats(desc.stat_names, prefix="val")))
        history = keras.callbacks.History()
        user = wrap_keras_callbacks(callbacks, self.model)
        if SHARE_SPEC.name in desc.input_names and self._io is not None:
            _share_for_runners(user, _flattener(self._io))
        # Keras callbacks after the validation so that their logs hold val_* statistics
        cbs += [c for c in user if not isinstance(c, KerasCallback)]
        cbs += [c for c in user if isinstance(c, KerasCallback)] + [KerasCallback(history, self.model)]

        config = TrainConfig(model=desc, data=source, callbacks=cbs,
                             extra_callbacks=extra_callbacks if extra_callbacks is not None else DEFAULT_CALLBACKS(),
                             monitors=monitors if monitors is not None else DEFAULT_MONITORS(),
                             session_init=session_init, steps_per_epoch=steps_per_epoch,
                             starting_epoch=starting_epoch,
                             **({} if max_epoch is None else {"max_epoch": max_epoch}))  # None: TrainConfig's
        self.trainer = trainer
        try:
            launch_train_with_config(config, trainer)
        finally:
            self._release_strategy()
        self.history = history
        return history

    def _release_strategy(self) -> None:
        """Make the model plain Keras again (variables off the trainer's strategy)."""
        own = getattr(self, "_own_desc", None)
        if own is not None and own.keras_model is self.model:
            optimizers = list(model_optimizers(self.model).values())
            variables = unique_variables(list(self.model.variables) + own.state_variables())
        else:
            optimizers = [self._optimizer]
            variables = unique_variables(list(self.model.variables) + list(getattr(self._optimizer, "variables", [])))
        if place_off_strategy(variables):
            for opt in optimizers:
                rekey_optimizer(opt)

    # --- evaluate / predict --------------------------------------------------------------------
    def evaluate(self, data=None, batch_size: Optional[int] = None, steps: Optional[int] = None) -> dict:
        """Mean loss and metrics over the data (``{'loss': ..., 'accuracy': ...}``), in inference mode.

        ``data`` takes the forms ``input`` does. Batches are weighted by their size, so a
        short last batch does not skew the means.
        """
        data_arg = data if data is not None else self.input
        if data_arg is None:
            raise ValueError("KerasModel.evaluate needs data.")
        if overridden(self.model, "test_step") or runs_own_step(self.model):
            return self._evaluate_with_keras(data_arg, batch_size, steps)
        if isinstance(data_arg, InputSource):
            raise TypeError("evaluate needs data it can read in Python (arrays, a DataFlow, a tf.data.Dataset), "
                            f"not a {type(data_arg).__name__}.")
        kd = as_keras_data(data_arg, batch_size=batch_size, shuffle=False)
        io = self._prepare(kd)
        desc = self._make_desc()
        signature = desc.inputs()
        names = desc.stat_names

        @tf.function(input_signature=signature)
        def batch_stats(*tensors):
            loss, stats, _ = desc.compute(tensors, training=False)
            return [loss] + [stats[n] for n in names[1:]]

        sums = np.zeros(len(names))
        count = 0
        flow = kd.flat_dataflow(_flattener(io), with_share=True)
        flow.reset_state()
        for i, dp in enumerate(flow):
            if steps is not None and i >= steps:
                break
            values = batch_stats(*[_to_spec(c, s, k, len(io.input_specs))
                                   for k, (c, s) in enumerate(zip(dp, signature))])
            n = len(dp[0])
            sums += np.array([float(v) for v in values]) * n
            count += n
        if count == 0:
            raise ValueError("evaluate: the data produced no batch.")
        return {n: float(s / count) for n, s in zip(names, sums)}

    def _evaluate_with_keras(self, data, batch_size: Optional[int], steps: Optional[int]) -> dict:
        """The model's own ``evaluate`` (its ``test_step``), on the data forms ``evaluate`` takes."""
        if isinstance(data, InputSource):
            raise TypeError("evaluate needs data it can read in Python (arrays, a DataFlow, a tf.data.Dataset), "
                            f"not a {type(data).__name__}.")
        kw = dict(steps=steps, verbose=0, return_dict=True)
        if is_dataflow(data):
            data.reset_state()
            gen = (tuple(dp) if isinstance(dp, list) else dp for dp in data)
            return self.model.evaluate(gen, **kw)
        if isinstance(data, tuple) and len(data) in (2, 3) and not isinstance(data[0], tf.data.Dataset):
            return self.model.evaluate(data[0], data[1], batch_size=batch_size,
                                       sample_weight=data[2] if len(data) == 3 else None, **kw)
        return self.model.evaluate(data, batch_size=batch_size, **kw)

    def predict(self, x, batch_size: Optional[int] = None):
        """The model's outputs on ``x``: ``keras.Model.predict`` on the trained model."""
        return self.model.predict(x, batch_size=batch_size, verbose=0)


def _to_spec(c, spec: tf.TensorSpec, index: int, n_inputs: int) -> tf.Tensor:
    """Component ``index`` of an evaluate batch as a tensor of the signature's dtype; a cast that
    would change a value (an int64 label beyond int32, a float 1.7 made an int) is an error."""
    what = f"evaluate: {'input' if index < n_inputs else 'target'} '{spec.name}'"
    want = spec.dtype.as_numpy_dtype if spec.dtype != tf.string else None
    arr = cast_exactly(c, want, what, InputSourceError) if want is not None else c
    return tf.convert_to_tensor(arr, dtype=spec.dtype)


def _share_for_runners(callbacks: Sequence, flatten: Callable) -> None:
    """Let the user's InferenceRunners (tensorpack's ``DataParallelInferenceRunner(df_val, ...)``
    beside a KerasModel) feed ``[inputs..., targets...]`` datapoints to a global-batch model,
    whose signature ends with the replica share: each datapoint is flattened and gets the
    share of a whole batch, 1.0, as ``validation_data`` does."""
    for cb in callbacks:
        if isinstance(cb, InferenceRunner) and not isinstance(cb._input, _FlatBatches):
            cb._input = _FlatBatches(cb._input, flatten, with_share=True)


def _flattener(io: ModelIO) -> Callable:
    def flatten(dp):
        return flatten_xy(dp, io)
    return flatten
