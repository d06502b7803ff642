"""KerasModel: train a whole ``keras.Model`` with kerastrainer's trainers.

The model is the user's ``keras.Model``: it is trained in place, so afterwards
``model.save('x.keras')``, ``model.predict`` and ``keras.models.load_model`` work
as after ``keras.Model.fit``. Behind ``fit``, the compiled model becomes a
:class:`~kerastrainer.keras.model_desc.KerasModelDesc`, whose step is the model's own
``train_step`` (compile's losses and Keras's metrics, as ``keras.Model.fit`` computes them), and runs
on any trainer (``SimpleTrainer`` by default, ``SyncMultiGPUTrainerReplicated(n)`` for several
devices): the multi-step ``tf.function``, the in-graph input queue, kerastrainer
callbacks and monitors, checkpoints.

**One batch rule: batches are global** (Keras' rule), on one device, several replicas
and several workers alike, for numpy arrays, ``tf.data``, generators, ``PyDataset`` and
DataFlows: ``batch_size`` (numpy) and every batch a batched source yields are the
batch of one step of the whole job. With N replicas in all (replicas of each process
times workers) each batch is split into N per-replica parts, and each replica's loss
is weighted by its share of the batch, so any batch size gives the single-device
numbers (a batch smaller than N is skipped, with a warning). With several workers
(``MultiWorkerTrainer``, ``HorovodTrainer``) numpy arrays are sharded by sample
(``batch_size`` must be a multiple of the workers: an error says so) and a batched
source is read whole by every worker, which trains on its own parts of each batch
(see :meth:`KerasModel.fit`). ModelDesc trainers instead give each tower its own
DataFlow batch (tensorpack's rule), and so do an ``InputSource`` given as ``input``
(tensorpack's ``KerasModel`` contract, below) and a ``ShardedDataFlow``.

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
from typing import Callable, List, Optional, Sequence, Union

import keras
import tensorflow as tf

from ..callbacks.base import ProxyCallback
from ..callbacks.inference_runner import InferenceRunner
from ..input_source.base import InputSource
from ..tfutils.extensions import translate_optimizer
from ..train.base import Trainer
from ..train.config import DEFAULT_CALLBACKS, DEFAULT_MONITORS, TrainConfig
from ..train.interface import launch_train_with_config, staged_on_gpus
from ..train.trainers import SimpleTrainer
from ..utils import logger
from .compile_spec import CompileSpec
from .desc_base import KerasDescBase
from .callbacks import KerasCallback, KerasTestHooks, backup_initial_epoch, wrap_keras_callbacks
from .data import SHARE_SPEC, KerasData, SpecSample, _FlatBatches, as_keras_data
from .evaluation import KerasEvaluation, _flattener
from .first_batch import (keras_inputs, output_names, probe_batch, split_xy, takes_inputs,
                          without_weights, zeros_like_specs)
from .fit_arguments import (_KERAS_EPOCHS, _check_validation, _check_verbose, _checked_compile_kwargs,  # noqa: F401
                            _compile_keras_model, _default_callbacks, _default_monitors, _every_validation_epoch,
                            _shard, _starting_epoch, _weighted_data, _worker_rank_size)
from .metric_logs import ModelMetricLogs
from .model_desc import KerasModelDesc, model_optimizers, overridden, runs_own_step
from .validation import KerasValidation
from .structure import KerasSignatureError, ModelIO, _is_weighted_point, as_spec_list
from .variables import place_off_strategy, rekey_optimizer

__all__ = ["KerasModel"]


class KerasModel(KerasEvaluation):
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
            if takes_inputs(get_model):
                if input_signature is None:
                    raise ValueError("get_model takes the input tensors (tensorpack's contract): give "
                                     "KerasModel(input_signature=[tf.TensorSpec(...), ...]) to make them from.")
                self._tensorpack_form = True
                model = get_model(*keras_inputs(as_spec_list(input_signature, "input_signature")))
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
        self._keras_compile_kwargs: dict = {}
        self._spec: Optional[CompileSpec] = None
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
            self._spec = None
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

    def _compile_standard(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                          jit_compile: Union[bool, str] = "auto", compile_keras: bool = True,
                          source: str = "KerasModel.compile", **keras_kwargs) -> None:
        """Like ``keras.Model.compile``: a Keras optimizer (or its name; a ``tf.compat.v1.train``
        optimizer, as tensorpack's ``KerasModel`` took, becomes the Keras optimizer with the
        same update rule; Keras's default ``'rmsprop'`` when left out), the loss(es), the metrics.
        The user's model is compiled with the same objects (``model.compile``), so after ``fit``
        ``model.evaluate``, ``model.fit`` and ``model.save`` (optimizer state included) work.
        Keras's other ``compile`` arguments: ``run_eagerly``, ``steps_per_execution`` and
        ``auto_scale_loss`` are passed to the model's own compile only (kerastrainer's trainer
        runs its own steps per call) and a warning says so; ``weighted_metrics`` are Keras's (weighted by
        ``sample_weight`` / ``class_weight``).

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
        keras_kwargs = _checked_compile_kwargs(keras_kwargs, source)
        if isinstance(metrics, str):   # tensorpack's bare metric name
            metrics = [metrics]
        if compile_keras:  # the model is compiled with these objects: its train_step is what fit runs
            _compile_keras_model(self.model, opt, loss, metrics, loss_weights, keras_kwargs)
        self._optimizer = opt
        self._compile_args = dict(loss=loss, metrics=metrics, loss_weights=loss_weights,
                                  weighted_metrics=keras_kwargs.get("weighted_metrics"))
        self._keras_compile_kwargs = keras_kwargs
        self._jit_compile = jit_compile
        self._spec = None
        self._io = None

    def _adopt_keras_compile(self) -> None:
        """A model compiled by Keras (``model.compile``, or ``keras.models.load_model``) and not by
        ``KerasModel.compile``: train with its optimizer (and its state), loss and metrics."""
        model = self.model
        if self._compile_args is not None or self._own_step_compiled or not getattr(model, "compiled", False):
            return
        if runs_own_step(model):   # its own compile ran (any signature): the step holds its optimizers
            self._own_step_compiled = bool(model_optimizers(model))
            return
        cfg = dict(getattr(getattr(model, "_compile_config", None), "config", None) or {})
        if getattr(model, "optimizer", None) is None:
            return
        # what its compile asked of Keras's own fit loop: named as not used by the trainer, and kept if
        # the model is compiled again (jit_compile is left out: Keras stores 'auto' resolved, so a default
        # is not told from a choice; the trainer's XLA policy decides)
        loop_args = {k: cfg[k] for k, default in (("steps_per_execution", 1), ("run_eagerly", False))
                     if cfg.get(k, default) != default}
        self._compile_standard(model.optimizer, cfg.get("loss"), cfg.get("metrics"), cfg.get("loss_weights"),
                               jit_compile="auto", compile_keras=False, source="the model's own compile",
                               **({"weighted_metrics": cfg["weighted_metrics"]} if cfg.get("weighted_metrics") else {}),
                               **loop_args)

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
            x = zeros_like_specs(as_spec_list(self.input_signature, "input_signature"))
            y = zeros_like_specs(as_spec_list(self.target_signature, "target_signature"))
        else:
            x, y = split_xy(without_weights(data.first, model, hint), hint)
        # the data against the model's declared inputs first: a clearer error than Keras' own
        check = ModelIO.from_model(model, x, None, ["output"], "single", {}, self.input_signature, None)
        x1 = probe_batch(x, check, data)
        if not model.built and isinstance(model, keras.Sequential) and not isinstance(x1, (list, dict)):
            shape = x.shape if isinstance(x, SpecSample) else x1.shape   # (a dataset's unknown sizes kept)
            model.build((None,) + tuple(shape[1:]))  # any batch size, not the probe's
        # one forward pass on one sample builds an unbuilt model and shows its outputs
        try:
            y_pred = model(x1, training=False)
        except (ValueError, TypeError) as e:
            raise KerasSignatureError(f"The model cannot be called on the data's inputs: {e}") from e
        out_names, out_kind = output_names(model, y_pred)
        spec = CompileSpec(output_names=out_names, **self._compile_args)
        if not spec.has_output_loss and not model.losses:  # the probe's call ran the add_loss calls
            raise ValueError(f"No loss to compute: compile(loss=...) gives no loss for the outputs {out_names} "
                             "and the model adds none (add_loss in a layer's call). Give compile a loss.")
        io = ModelIO.from_model(model, x, y, out_names, out_kind, spec.needs_target,
                                self.input_signature, self.target_signature)
        keras_metrics = spec.keras_metrics()
        if keras_metrics is not self._compile_args["metrics"]:
            # Keras 3 takes one list per output: the Keras-2 form (every metric on every output) made so
            _compile_keras_model(model, model.optimizer, self._compile_args["loss"], keras_metrics,
                                 self._compile_args["loss_weights"], self._keras_compile_kwargs)
        self._spec, self._io = spec, io
        return io

    def _make_desc(self, io: Optional[ModelIO] = None, global_batch: bool = True) -> KerasModelDesc:
        return KerasModelDesc(self.model, io=io or self._io, global_batch=global_batch)

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
    def fit(self, x=None, y=None, batch_size: Optional[int] = None, epochs: int = _KERAS_EPOCHS,
            verbose: Union[str, int] = "auto", callbacks: Optional[Sequence] = None,
            validation_split: float = 0.0, validation_data=None, shuffle: bool = True,
            class_weight: Optional[dict] = None, sample_weight=None, initial_epoch: int = 0,
            steps_per_epoch: Optional[int] = None, validation_steps: Optional[int] = None,
            validation_freq: Union[int, Sequence[int]] = 1, *, validation_batch_size: Optional[int] = None,
            max_epoch: Optional[int] = None, session_init=None, input=None,  # noqa: A002
            starting_epoch: Optional[int] = None, extra_callbacks: Optional[Sequence] = None,
            monitors: Optional[Sequence] = None, shard: bool = True) -> keras.callbacks.History:
        """Train, as ``keras.Model.fit``; returns a ``keras.callbacks.History`` (per-epoch means of
        the statistics, ``val_*``, and the ``learning_rate`` each epoch trained with).

        Keras's arguments mean what they mean in Keras: ``fit(x, y, batch_size, epochs, ...)``,
        ``sample_weight`` (numpy; or ``(x, y, sample_weight)`` batches of a dataset) and
        ``class_weight`` weight the loss exactly as Keras does (metrics stay unweighted);
        ``validation_split`` holds out the last fraction of numpy data; ``initial_epoch`` is
        the 0-based epoch to start at (kerastrainer's ``starting_epoch = initial_epoch + 1``);
        ``validation_freq`` an int or a list of 1-based epochs; ``verbose``: 0 silent, 1 or
        ``'auto'`` kerastrainer's progress bar and epoch summaries, 2 the epoch summaries only.

        **The first positional argument** is Keras's ``x``, except when the constructor got
        ``input=``: then it is tensorpack's ``validation_data`` (``fit(df_val)``), and a call
        that also gives ``y`` or ``validation_data`` is ambiguous and raises.

        tensorpack's keywords keep working beside Keras's: ``input`` (the data, as ``x``),
        ``max_epoch`` (``epochs``), ``starting_epoch`` (``initial_epoch + 1``), ``session_init``,
        ``extra_callbacks``, ``monitors``, ``shard``. ``epochs`` left out: 1, or ``TrainConfig``'s
        default when the model was given tensorpack's way (an ``InputSource``, or a
        ``get_model`` taking the inputs).

        Args:
            batch_size: the **global** batch for numpy inputs (default 32), split over the
                replicas and, with several workers, over the workers (Keras's rule; a
                multiple of the workers); batched sources (``tf.data``, ``PyDataset``,
                generators, DataFlow) give global batches too, on any number of workers.
            callbacks: kerastrainer callbacks and ``keras.callbacks`` objects, mixed.
            session_init: weights to start from: a kerastrainer checkpoint (or its log
                directory), or anything ``SmartInit`` takes.
            shard: with several workers, each trains on its own part of the data: every
                ``size``-th sample of numpy arrays (``batch_size / size`` a step), its
                ``1 / size`` of each batch of a ``tf.data.Dataset``, PyDataset, generator or
                DataFlow (every worker reads all of it, as ``tf.distribute``'s
                ``AutoShardPolicy.DATA``). ``shard=False``: the data each worker is given is
                its own already, its batches per worker (the global batch is ``size`` of them).
            validation_steps: validate on the first that many batches of ``validation_data``
                (a generator reads on: the next ones each epoch); default all of it.

        History's training statistics are the model's Keras metrics (compile's loss tracker and
        metrics, ``weighted_metrics``, its layers'), reset each epoch and read at its end across
        every replica and worker, as ``keras.Model.fit`` reads them; with several replicas the
        progress bar and monitors show the first replica's running values. ``val_*`` cover the
        whole validation data.

        Example::

            km = KerasModel(model)
            km.compile('adam', 'sparse_categorical_crossentropy', metrics=['accuracy'])
            history = km.fit(x_train, y_train, batch_size=64, epochs=5, validation_split=0.1,
                             class_weight={0: 1.0, 1: 5.0})
            history.history['learning_rate']
        """
        self._adopt_keras_compile()
        data_arg, validation_data = self._read_positional(x, y, input, validation_data)
        if data_arg is None:
            raise ValueError("KerasModel.fit has no data: give fit(x, y), or input= to KerasModel(...).")
        max_epoch = self._max_epoch(epochs, max_epoch)
        starting_epoch = _starting_epoch(initial_epoch, starting_epoch)
        backed_up = backup_initial_epoch(callbacks)
        if backed_up:   # Keras's rule: BackupAndRestore's epoch wins over initial_epoch
            logger.info("KerasModel.fit: keras.callbacks.BackupAndRestore resumes at epoch %d (0-based).", backed_up)
            starting_epoch = backed_up + 1
        verbose = _check_verbose(verbose)
        _check_validation(validation_steps, validation_data, validation_split, validation_freq)
        if extra_callbacks is None:
            extra_callbacks = _default_callbacks(verbose)
        if monitors is None:
            monitors = _default_monitors(verbose)
        data_arg, validation_data = _weighted_data(data_arg, sample_weight, class_weight,
                                                        validation_split, validation_data)
        trainer = self._new_trainer()
        rank, size = _worker_rank_size(trainer)
        run = dict(steps_per_epoch=steps_per_epoch, max_epoch=max_epoch, callbacks=callbacks,
                   session_init=session_init, starting_epoch=starting_epoch, extra_callbacks=extra_callbacks,
                   monitors=monitors, verbose=verbose, validation_freq=validation_freq)
        if isinstance(data_arg, InputSource):
            return self._fit_input_source(data_arg, trainer, validation_data, validation_batch_size or batch_size,
                                          validation_steps, **run)
        worker = (0, 1)
        if size > 1 and shard:
            data_arg, batch_size, worker = _shard(data_arg, batch_size, rank, size)
            logger.info("KerasModel: worker %d of %d %s.", rank, size,
                        f"trains on its part of each global batch ({worker[1] * self._replicas(trainer)} parts)"
                        if worker[1] > 1 else f"reads its shard of the data ({batch_size} samples a step)")
        if shuffle and worker[1] > 1 and isinstance(data_arg, keras.utils.PyDataset):
            logger.warn("KerasModel.fit: shuffle=True does not reorder the batches of a PyDataset on %d workers: "
                        "each reads every batch and trains on its part, so all read them in one order (give "
                        "each worker its own data with shard=False to shuffle).", worker[1])
            shuffle = False
        data = as_keras_data(data_arg, batch_size=batch_size, shuffle=shuffle, arrays_as_dataset=True)
        run["worker"] = worker
        if runs_own_step(self.model):
            return self._fit_own_step(trainer, data, validation_data, validation_batch_size or batch_size,
                                      validation_steps, **run)
        val = None
        if validation_data is not None:
            val = as_keras_data(validation_data, batch_size=validation_batch_size or batch_size, shuffle=False)
        io = self._weighted_io(self._prepare(data), data, val)
        flatten = _flattener(io)
        source, steps = data.make_input(flatten, self._replicas(trainer), run.pop("worker"), run["steps_per_epoch"])
        source = staged_on_gpus(source)
        if run["steps_per_epoch"] is None:
            if steps is None:
                raise ValueError("steps_per_epoch is unknown: the data does not know its length. Give "
                                 "fit(steps_per_epoch=...).")
            run["steps_per_epoch"] = steps
        desc = self._make_desc(io)
        validation = None
        if val is not None:
            validation = KerasValidation(lambda strategy: self._evaluate_compiled(val, io, validation_steps, strategy))
        return self._launch(trainer, desc, source, validation, **run)

    def _read_positional(self, x, y, input_kw, validation_data):  # noqa: A002
        """``(training data, validation data)`` from fit's first arguments (see :meth:`fit`)."""
        if x is not None and self.input is not None and input_kw is None:
            if y is not None or validation_data is not None:
                raise ValueError(
                    "KerasModel.fit(x, ...) is ambiguous: KerasModel(input=...) already holds the training data, "
                    "so fit's first positional argument is tensorpack's validation_data; yet y= or "
                    "validation_data= was given too. Give the data once: KerasModel(model).fit(x, y, "
                    "validation_data=...) (Keras's way) or KerasModel(model, input=...).fit(validation_data=...).")
            return self.input, x
        if x is not None and input_kw is not None:
            raise ValueError("KerasModel.fit got both x and input=: give the training data once.")
        if x is None and y is not None:
            raise ValueError("KerasModel.fit got y without x.")
        data = input_kw if input_kw is not None else (x if x is not None else self.input)
        if y is not None:
            data = (x, y)
        return data, validation_data

    def _max_epoch(self, epochs, max_epoch: Optional[int]) -> Optional[int]:
        """The last epoch: ``epochs`` (Keras) or ``max_epoch`` (tensorpack); None: TrainConfig's."""
        given = epochs is not _KERAS_EPOCHS
        if max_epoch is not None and given and max_epoch != epochs:
            raise ValueError(f"Give max_epoch or epochs, not both (got {max_epoch} and {epochs}).")
        if max_epoch is not None:
            return max_epoch
        if given:
            return int(epochs)
        return None if self._tensorpack_form else 1

    def _weighted_io(self, io: ModelIO, data: KerasData, val: Optional[KerasData]) -> ModelIO:
        """``io`` with sample-weight inputs when the training or validation data carries weights."""
        for kd in (data, val):
            first = None if kd is None else kd.first
            if isinstance(first, (list, tuple)) and _is_weighted_point(first, io):
                return io.with_sample_weights(first[2])
        return io

    def _fit_own_step(self, trainer, data: KerasData, validation_data, val_batch_size, validation_steps,
                      worker=(0, 1), **run) -> keras.callbacks.History:
        """A model that runs its own ``train_step`` on the data as given (see :mod:`.model_desc`); its
        own ``evaluate`` validates (:mod:`.validation`)."""
        model = self.model
        if not self._own_step_compiled:
            raise RuntimeError(f"{type(model).__name__} runs its own train_step: call KerasModel.compile(...) (its "
                               "arguments go to the model's own compile) before fit.")
        validation = None
        if validation_data is not None:
            if worker[1] > 1 or _worker_rank_size(trainer)[1] > 1:
                raise NotImplementedError(
                    f"KerasModel.fit(validation_data=...) for {type(model).__name__}, which runs its own "
                    "train_step, on several workers is not supported: its test_step's metrics would be read "
                    "across the workers at every batch. Validate with KerasModel.evaluate(data) after fit, or "
                    "on one worker.")
            validation = KerasValidation(
                lambda strategy: self._evaluate_with_keras(validation_data, val_batch_size, validation_steps), model)
        # (an unbuilt model builds in the trainer's first trace of its step, on the trainer's strategy)
        desc = KerasModelDesc(model, first=data.step_first)
        source, steps = data.make_input(desc.flatten, self._replicas(trainer), worker, run["steps_per_epoch"])
        if run["steps_per_epoch"] is None:
            if steps is None:
                raise ValueError("steps_per_epoch is unknown: the data does not know its length. Give "
                                 "fit(steps_per_epoch=...).")
            run["steps_per_epoch"] = steps
        source = staged_on_gpus(source)
        return self._launch(trainer, desc, source, validation, **run)

    def _fit_input_source(self, source: InputSource, trainer, validation_data, val_batch_size,
                          validation_steps=None, **run):
        """tensorpack's contract: the InputSource feeds each replica its own flat batch."""
        self._prepare(None)
        io = self._io
        desc = self._make_desc(io, global_batch=False)
        validation = None
        if validation_data is not None:
            if isinstance(validation_data, InputSource):
                raise TypeError("validation_data must be data (a DataFlow, arrays, a tf.data.Dataset), not an "
                                "InputSource: the validation reads it in Python.")
            val = as_keras_data(validation_data, batch_size=val_batch_size, shuffle=False)
            validation = KerasValidation(lambda strategy: self._evaluate_compiled(val, io, validation_steps, strategy))
        # steps_per_epoch None: TrainConfig takes the InputSource's size per tower
        return self._launch(trainer, desc, source, validation, **run)

    def _launch(self, trainer, desc, source, validation, steps_per_epoch, max_epoch, callbacks, session_init,
                starting_epoch, extra_callbacks, monitors, verbose: int = 0,
                validation_freq=1) -> keras.callbacks.History:
        """Train ``desc`` on ``source``; ``validation`` is the callback validating at an epoch's end."""
        replicas = self._replicas(trainer) * _worker_rank_size(trainer)[1]
        metrics = self._spec.metric_names if self._spec is not None else []
        if replicas > 1 and metrics:  # the step's values are the main replica's; History's are not
            logger.info("KerasModel.fit: History's training metrics %s cover every replica's part of each batch; "
                        "the progress bar and monitors show the first replica's (1 of %d replicas).",
                        metrics, replicas)
        cbs: List = []
        history = keras.callbacks.History()
        user = wrap_keras_callbacks(callbacks, self.model, verbose=verbose)
        # the epoch's logs are the model's metrics (every replica's and worker's), reset at its start and
        # read at its end before validation resets or runs them, as fit reads them
        reader = ModelMetricLogs(self.model)
        cbs.append(reader)
        extra_logs = reader.logs
        for c in user:
            if isinstance(c, KerasCallback):
                c.extra_logs = extra_logs
        if validation is not None:
            # Keras's on_test_begin / on_test_end around the validation (SwapEMAWeights validates the EMA)
            cbs += [_every_validation_epoch(c, validation_freq)
                    for c in (KerasTestHooks(user, "begin"), validation, KerasTestHooks(user, "end"))]
        if SHARE_SPEC.name in desc.input_names and self._io is not None:
            _share_for_runners(user, _flattener(getattr(desc, "io", None) or self._io))
        # Keras callbacks after the validation so that their logs hold val_* statistics
        cbs += [c for c in user if not isinstance(c, KerasCallback)]
        cbs += [c for c in user if isinstance(c, KerasCallback)]
        cbs.append(KerasCallback(history, self.model, log_learning_rate=True, verbose=verbose, extra_logs=extra_logs))

        config = TrainConfig(model=desc, data=source, callbacks=cbs,
                             extra_callbacks=extra_callbacks if extra_callbacks is not None else DEFAULT_CALLBACKS(),
                             monitors=monitors if monitors is not None else DEFAULT_MONITORS(),
                             session_init=session_init, steps_per_epoch=steps_per_epoch,
                             starting_epoch=starting_epoch,
                             **({} if max_epoch is None else {"max_epoch": max_epoch}))  # None: TrainConfig's
        self.trainer = trainer
        try:
            launch_train_with_config(config, trainer)
            self._finalize_ema(desc)
        finally:
            self._release_strategy(desc)
        self.history = history
        self.model.history = history  # as after keras.Model.fit
        return history

    def _finalize_ema(self, desc: KerasDescBase) -> None:
        """As at the end of ``keras.Model.fit``: an optimizer with ``use_ema=True`` overwrites the
        trained variables with their moving averages."""
        for opt in desc.keras_optimizers():
            inner = getattr(opt, "inner_optimizer", opt)
            if getattr(inner, "use_ema", False):
                opt.finalize_variable_values(self.model.trainable_weights)

    def _release_strategy(self, desc: KerasDescBase) -> None:
        """Make the model plain Keras again (variables off the trainer's strategy)."""
        if place_off_strategy(desc.all_variables()):
            for opt in desc.keras_optimizers():
                rekey_optimizer(opt)
            # functions Keras traced on the trainer's variables (a validation's test function)
            for attr in ("train_function", "test_function", "predict_function"):
                if getattr(self.model, attr, None) is not None:
                    setattr(self.model, attr, None)


def _share_for_runners(callbacks: Sequence, flatten: Callable) -> None:
    """Let the user's InferenceRunners (tensorpack's ``DataParallelInferenceRunner(df_val, ...)``
    beside a KerasModel) feed ``[inputs..., targets...]`` datapoints to a global-batch model,
    whose signature ends with the replica share: each datapoint is flattened and gets the
    share of a whole batch, 1.0, as ``validation_data`` does; a runner inside a ``PeriodicTrigger``
    or another proxy alike."""
    for cb in callbacks:
        while isinstance(cb, ProxyCallback):
            cb = cb.cb
        if isinstance(cb, InferenceRunner) and not isinstance(cb._input, _FlatBatches):
            cb._input = _FlatBatches(cb._input, flatten, with_share=True)
