"""``keras.Model.fit``'s and ``compile``'s arguments read into kerastrainer's terms, for :class:`KerasModel`.

Each function checks one argument (or a group that must agree) the way Keras does and says what
kerastrainer makes of it: ``verbose``, ``initial_epoch`` (kerastrainer's 1-based
``starting_epoch``), the validation arguments, the default callbacks and monitors for a
``verbose`` level, the global batch of several workers (:func:`_shard`), the compile
arguments kerastrainer's trainer does not use, and the weights and validation split of the data
(:func:`_weighted_data`). :mod:`kerastrainer.keras.model` runs the training.

Example::

    _starting_epoch(initial_epoch=2, starting_epoch=None)        # 3
    _shard((x, y), batch_size=64, rank=1, size=2)                 # ((x[1::2], y[1::2]), 32, (0, 1))
"""
from __future__ import annotations

from typing import Optional

import keras
import numpy as np

from ..callbacks.base import Callback
from ..callbacks.monitor import ScalarPrinter
from ..callbacks.prog import ProgressBar
from ..callbacks.trigger import EnableCallbackIf
from ..dataflow.shard import ShardedDataFlow
from ..train.base import Trainer
from ..train.config import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from ..utils import logger
from .batch_flows import DEFAULT_BATCH_SIZE, _is_arrays, _map
from .data_arguments import apply_class_weight, class_weights_of, split_validation

__all__ = []  # KerasModel's helpers


def _worker_rank_size(trainer: Trainer) -> (int, int):
    """(rank, number of workers) of a multi-process trainer; (0, 1) for the others."""
    size = int(getattr(trainer, "size", 1) or 1)
    return (int(getattr(trainer, "rank", 0) or 0), size) if size > 1 else (0, 1)


def _shard(data_arg, batch_size: Optional[int], rank: int, size: int):
    """``(data, local batch size, worker)`` for worker ``rank`` of ``size``: ``batch_size`` and
    every batch of a batched source are global (Keras's rule, see :meth:`KerasModel.fit`).

    numpy arrays: every ``size``-th sample, ``batch_size / size`` of them a step (``worker``
    ``(0, 1)``: the local batch is split over the local replicas only); a batched source
    (``tf.data.Dataset``, ``PyDataset``, generator, DataFlow) is read whole and ``worker`` is
    ``(rank, size)``: ``make_input`` keeps this worker's part of each global batch. A
    ``ShardedDataFlow`` is this worker's already (the user sharded it): its batches are per worker.
    """
    if isinstance(data_arg, ShardedDataFlow):
        logger.info("KerasModel: the data is a ShardedDataFlow: its batches are this worker's own (the global "
                    "batch is %d of them).", size)
        return data_arg, batch_size, (0, 1)
    arrays = isinstance(data_arg, tuple) and len(data_arg) in (2, 3) and _is_arrays(data_arg[0])
    if not arrays:
        if isinstance(data_arg, tuple) and len(data_arg) == 1:
            arrays = _is_arrays(data_arg[0])
        elif _is_arrays(data_arg):
            data_arg, arrays = (data_arg,), True
    if not arrays:
        return data_arg, batch_size, (rank, size)
    global_batch = batch_size or DEFAULT_BATCH_SIZE
    if global_batch % size:
        raise ValueError(f"batch_size={global_batch} is the global batch of {size} workers: make it a multiple "
                         f"of {size} (each worker takes batch_size / {size} samples a step).")
    take = lambda a: np.asarray(a)[rank::size]  # noqa: E731
    sharded = tuple(None if part is None else _map(take, part) for part in data_arg)
    return (sharded[0] if len(sharded) == 1 else sharded), global_batch // size, (0, 1)


class _KerasDefault(int):
    """An int default that ``fit`` can tell from the same value given by the caller."""


#: ``fit(epochs=...)`` left out (it still reads as Keras's default, 1)
_KERAS_EPOCHS = _KerasDefault(1)
_IGNORED_COMPILE_ARGS = ("run_eagerly", "steps_per_execution", "auto_scale_loss", "jit_compile")


def _checked_compile_kwargs(kwargs: dict, source: str = "KerasModel.compile") -> dict:
    """Keras's other ``compile`` arguments, for the model's own compile: ``weighted_metrics`` (Keras's
    step computes them); the known others with a warning that kerastrainer's trainer does not use them.
    ``source``: who gave them (``KerasModel.compile``, or the model's own compile when adopted)."""
    unknown = sorted(set(kwargs) - set(_IGNORED_COMPILE_ARGS) - {"weighted_metrics"})
    if unknown:
        raise TypeError(f"{source} got unexpected arguments {unknown}.")
    ignored = sorted(k for k in kwargs if k != "weighted_metrics")
    if ignored:
        logger.warn("%s set %s, which only Keras's own fit uses: kerastrainer's trainer runs its steps in graph, "
                    "as many per call as it chooses (SimpleTrainer(steps_per_call=...) fixes them).",
                    source, ", ".join(f"{k}={kwargs[k]!r}" for k in ignored))
    return dict(kwargs)


def _compile_keras_model(model: keras.Model, optimizer, loss, metrics, loss_weights, kwargs: dict) -> None:
    """``model.compile`` with KerasModel's objects (tensorpack's bare metric name made a list):
    the compiled model's ``train_step`` is what ``fit`` runs, so a form Keras refuses is an error."""
    if metrics is not None and not isinstance(metrics, (list, tuple, dict)):
        metrics = [metrics]
    try:
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics, loss_weights=loss_weights, **kwargs)
    except (ValueError, TypeError) as e:
        raise type(e)(f"KerasModel.compile: keras.Model.compile refuses these arguments: {e}") from e


def _check_verbose(verbose) -> int:
    """Keras's ``verbose``: 'auto' (1), 0, 1 or 2."""
    if verbose == "auto":
        return 1
    if isinstance(verbose, bool) or verbose not in (0, 1, 2):
        raise ValueError(f"verbose must be 'auto', 0, 1 or 2 (as in Keras); got {verbose!r}.")
    return int(verbose)


def _default_callbacks(verbose: int) -> list:
    """kerastrainer's default callbacks; the progress bar only with ``verbose=1``."""
    cbs = DEFAULT_CALLBACKS()
    return cbs if verbose == 1 else [c for c in cbs if not isinstance(c, ProgressBar)]


def _default_monitors(verbose: int) -> list:
    """kerastrainer's default monitors; the epoch summaries printed unless ``verbose=0``."""
    mons = DEFAULT_MONITORS()
    return mons if verbose else [m for m in mons if not isinstance(m, ScalarPrinter)]


def _starting_epoch(initial_epoch: int, starting_epoch: Optional[int]) -> int:
    """kerastrainer's 1-based first epoch from Keras's 0-based ``initial_epoch``."""
    if isinstance(initial_epoch, bool) or not isinstance(initial_epoch, (int, np.integer)) or initial_epoch < 0:
        raise ValueError(f"initial_epoch must be an int >= 0; got {initial_epoch!r}.")
    if starting_epoch is not None and initial_epoch and starting_epoch != initial_epoch + 1:
        raise ValueError(f"initial_epoch={initial_epoch} and starting_epoch={starting_epoch} disagree "
                         "(starting_epoch = initial_epoch + 1); give one.")
    return starting_epoch if starting_epoch is not None else int(initial_epoch) + 1


def _check_validation(validation_steps, validation_data, validation_split, validation_freq) -> None:
    if validation_steps is not None and (isinstance(validation_steps, bool) or
                                         not isinstance(validation_steps, int) or validation_steps < 1):
        raise ValueError(f"validation_steps must be a positive int or None; got {validation_steps!r}.")
    if validation_steps is not None and validation_data is None and not validation_split:
        raise ValueError("validation_steps was given without validation_data.")
    if not 0.0 <= float(validation_split) < 1.0:
        raise ValueError(f"validation_split must be in [0, 1); got {validation_split!r}.")
    if isinstance(validation_freq, int) and not isinstance(validation_freq, bool):
        if validation_freq < 1:
            raise ValueError(f"validation_freq must be >= 1; got {validation_freq}.")
    elif not (isinstance(validation_freq, (list, tuple, set)) and all(isinstance(e, int) for e in validation_freq)):
        raise ValueError(f"validation_freq must be an int or a list of epochs (1-based); got {validation_freq!r}.")


def _every_validation_epoch(runner: Callback, freq) -> Callback:
    """The validation runner, on Keras's ``validation_freq`` epochs only (1-based epoch numbers)."""
    if freq == 1:
        return runner
    if isinstance(freq, int):
        return EnableCallbackIf(runner, lambda cb: cb.epoch_num % freq == 0)
    epochs = {int(e) for e in freq}
    return EnableCallbackIf(runner, lambda cb: cb.epoch_num in epochs)


def _weighted_data(data, sample_weight, class_weight, validation_split, validation_data):
    """The training data with its sample weights (``sample_weight``, ``class_weight``) and the
    validation data, after Keras's ``validation_split``."""
    if class_weight is not None and sample_weight is not None:
        raise ValueError("You cannot give class_weight and sample_weight at the same time (as in Keras).")
    if class_weight is not None and not isinstance(class_weight, dict):
        raise TypeError(f"class_weight must be a dict {{class index: weight}}; got {type(class_weight).__name__}.")
    packed = data
    arrays = isinstance(packed, tuple) and len(packed) in (2, 3) and _is_arrays(packed[0])
    if arrays:
        xa, ya = packed[0], packed[1]
        sw = packed[2] if len(packed) == 3 else sample_weight
        if len(packed) == 3 and sample_weight is not None:
            raise ValueError("sample_weight was given twice: in the data (x, y, sw) and as sample_weight=.")
    elif sample_weight is not None:
        raise ValueError(f"sample_weight= applies to numpy arrays (as in Keras); a {type(packed).__name__} "
                         "carries its own weights: yield (x, y, sample_weight) batches.")
    elif not isinstance(packed, tuple) and _is_arrays(packed):   # x alone (an add_loss model): no targets
        arrays, xa, ya, sw = True, packed, None, None
    if validation_split:
        if not arrays:
            split_validation(packed, None, None, validation_split)  # raises Keras's error
        train, held_out = split_validation(xa, ya, sw, validation_split)
        if validation_data is None:
            held = tuple(v for v in held_out if v is not None)
            validation_data = held[0] if len(held) == 1 else held
        else:
            logger.warn("KerasModel.fit: validation_split=%s is not used: validation_data was given "
                        "(Keras's rule).", validation_split)
        xa, ya, sw = train
    if not arrays:
        return (apply_class_weight(packed, class_weight) if class_weight is not None else packed), \
            validation_data
    if class_weight is not None:
        if ya is None:
            raise ValueError("class_weight weights the loss of each target's class: give fit targets (y).")
        if isinstance(ya, (list, tuple, dict)):
            raise ValueError("class_weight is not supported for a model with several targets (as in Keras): "
                             "give sample_weight instead.")
        sw = class_weights_of(ya, class_weight)
    if ya is None and sw is None:
        return xa, validation_data
    return ((xa, ya) if sw is None else (xa, ya, sw)), validation_data
