"""launch_train_with_config: give a checked TrainConfig its input, and train.

Every check of a config lives in config.py (its arguments when made, ``check_launchable`` when
launched, ``resolve_steps_per_epoch`` once the input is known); this module only wires them."""
from __future__ import annotations

from .._internals import all_reduce_gradients_released
from ..input_source.base import InputSource
from ..input_source.queue import QueueInput
from ..input_source.staging import StagingInput
from ..tfutils.extensions import launch_contexts
from ..utils import logger
from ..utils.devices import get_num_gpu
from ..utils.interrupt import finalizer_interrupts_kept
from .base import Trainer
from .config import TrainConfig, check_optimizer_values, resolve_steps_per_epoch
from .stop_signals import stop_signal_scope

__all__ = ["launch_train_with_config", "apply_default_input", "staged_on_gpus"]


def apply_default_input(config: TrainConfig) -> InputSource:
    """The InputSource of a config: ``data`` as given, or QueueInput over ``dataflow``
    (with StagingInput around it when there are GPUs)."""
    if config.data is not None:
        return config.data
    config.check_has_data()
    return staged_on_gpus(QueueInput(config.dataflow))


def staged_on_gpus(source: InputSource) -> InputSource:
    """``source`` inside a StagingInput when there are GPUs (the batches are copied to them
    ahead of their steps, by a thread outside the train function), else as it is."""
    if get_num_gpu() > 0 and not isinstance(source, StagingInput):
        return StagingInput(source)
    return source


def launch_train_with_config(config: TrainConfig, trainer: Trainer) -> Trainer:
    """Train ``config.model`` with ``trainer``. Returns the trainer (its weights are trained).

    Example::

        launch_train_with_config(TrainConfig(model=M(), dataflow=df, max_epoch=5), SimpleTrainer())
    """
    config.check_launchable(trainer)
    config.resolve_resume()   # the log directory of this launch decides
    # from set-up on, a Ctrl-C swallowed by a finalizer is sent again (until the launch ends);
    # compat: tensorpack programs may train inside `with tf.Graph().as_default()`
    # TF keeps every trace's all-reduce gradient (and with it the traced graph) for the whole
    # process: released at the end, so that a process running many trainings does not grow
    with finalizer_interrupts_kept(), launch_contexts(), stop_signal_scope(trainer, setting_up=True), \
            all_reduce_gradients_released():
        return _launch(config, trainer)


def _launch(config: TrainConfig, trainer: Trainer) -> Trainer:
    source = apply_default_input(config)
    if logger.get_logger_dir() is None:
        logger.warning("No log directory is set (logger.set_logger_dir): checkpoints and stats files "
                       "will not be written.")
    trainer.setup_graph(config.model, source)
    try:
        check_optimizer_values(trainer)
    except BaseException:
        source.close()   # set up by setup_graph; its threads never started
        raise
    # each process's DataFlow feeds only its own towers (multi-worker trainers have fewer local ones)
    steps = resolve_steps_per_epoch(config, source, getattr(trainer, "num_local_replicas", trainer.num_replicas))
    trainer.train(config.callbacks + config.extra_callbacks, config.monitors, config.session_init,
                  steps, config.starting_epoch, config.max_epoch)
    return trainer
