"""The fit loop: the one place where a training run's epochs and calls happen, whatever the
trainer. It owns the counters (``epoch_num``, ``global_step``, ``local_step``,
``last_call_steps``, ``last_step_outputs``, which it writes on the trainer for callbacks to
read), the callbacks' step and epoch hooks, the stop signals (Ctrl-C, SIGTERM), publishing the
step's histograms and images, and the input's life while it runs (started before the first
callback hook, cancelled by a stop signal, closed when the loop ends).

It drives the trainer's :class:`~.step_runner.StepRunner` (``trainer.step_runner``) and leaves
to others: what a step computes (the runner), how many steps a call runs (the trainer's
``_choose_steps``, which a multi-process trainer agrees on with its peers), and setting up the
model, callbacks and weights (the trainer).

Example (what ``Trainer.main_loop`` does)::

    FitLoop(trainer).run_epochs(steps_per_epoch=100, starting_epoch=1, max_epoch=10)
"""
from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING, Dict, Mapping, Optional

import tensorflow as tf

from ..callbacks.base import StopTraining
from ..input_source.base import InputSourceError
from ..utils import logger
from .step_result import NO_STEP, StepResult
from .stop_signals import StopSignals, TrainingTerminated, stop_signal_scope

if TYPE_CHECKING:
    from .base import Trainer

__all__ = ["FitLoop"]


class FitLoop:
    """Runs a set-up trainer's epochs: calls of its step runner between the callbacks' hooks."""

    def __init__(self, trainer: "Trainer"):
        self.trainer = trainer

    # --- one call -------------------------------------------------------------------------
    def run_call(self, k: int) -> Dict[str, float]:
        """Run ``k`` training steps in one call; update the counters and ``last_step_outputs``."""
        t = self.trainer
        self._raise_if_stop_requested()   # a stop whose exception was lost between calls
        start = t.global_step
        t0 = time.perf_counter()
        t._call_started = time.monotonic()
        try:
            result = t.step_runner.run(k)
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError) as e:
            self._raise_for_closed_input(e)
        finally:
            t._call_started = None
        if result.timed:
            t.steps.update(result.steps, time.perf_counter() - t0)
        self._count(result, start)
        if result.histograms and t.local_step >= t.steps_per_epoch:
            self._publish(result.histograms)
        self._raise_if_stop_requested()   # the call finished: its steps are counted, then training stops
        return t.last_step_outputs

    def _count(self, result: StepResult, start: int) -> None:
        t = self.trainer
        t.global_step = start + result.global_steps
        t.local_step += result.steps
        t.last_call_steps = result.steps
        outs = dict(result.scalars)
        outs["_nonfinite_step"] = start + result.first_nonfinite if result.first_nonfinite != NO_STEP else NO_STEP
        outs["_nonfinite_grads_step"] = (start + result.first_nonfinite_grads
                                         if result.first_nonfinite_grads != NO_STEP else NO_STEP)
        t.last_step_outputs = outs

    def _publish(self, histograms: Mapping[str, object]) -> None:
        """The epoch's last step's histograms (vectors) and images (NHWC) go to the monitors."""
        monitors = self.trainer.monitors
        if monitors is None:
            return
        for name, values in histograms.items():
            arr = values.numpy() if hasattr(values, "numpy") else values
            if getattr(arr, "shape", None) and arr.shape[0]:
                (monitors.put_image if arr.ndim == 4 else monitors.put_histogram)(name, arr)

    def _raise_if_stop_requested(self) -> None:
        stop = self.trainer._stop
        if stop is not None and stop.requested:
            raise stop.exception()

    def _raise_for_closed_input(self, error: Exception) -> None:
        """A call failed because its input was closed: a stop signal's doing (its steps are counted,
        its exception raised), or the input's (its own error, else one that says so)."""
        t = self.trainer
        stop = t._stop
        if stop is not None and stop.requested:
            self._count_steps_done_in_graph()
            raise stop.exception() from None
        t.input.raise_pending_error()
        raise InputSourceError(f"The input of training ({type(t.input).__name__}) was closed while a step "
                               "waited for data.") from error

    def _count_steps_done_in_graph(self) -> None:
        """After a call cut short: count the steps it ran (the in-graph step counter has them),
        so that the end-of-training save is labelled with the step its weights are at."""
        t = self.trainer
        try:
            done = int(t.global_step_var.numpy()) - t.global_step
        except Exception:   # noqa: BLE001 (a broken runtime: keep the Python counters)
            return
        if done > 0:
            t.global_step += done
            t.local_step += done

    # --- the epochs -----------------------------------------------------------------------
    def run_epochs(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        """Epochs ``starting_epoch..max_epoch`` of ``steps_per_epoch`` steps, with the callbacks;
        the input is closed when the loop ends, however it ends."""
        t = self.trainer
        t.steps_per_epoch = int(steps_per_epoch)
        t.starting_epoch = int(starting_epoch)
        t.max_epoch = int(max_epoch)
        t.epoch_num = t.starting_epoch - 1
        with stop_signal_scope(t) as stop:
            terminated = self._run(stop, t._callbacks)
        if terminated is not None:
            logger.info("Exiting with status %d (SIGTERM). Run the same command again to resume "
                        "(AutoResumeTrainConfig).", terminated.code)
            raise terminated

    def _run(self, stop: StopSignals, cbs) -> Optional[TrainingTerminated]:
        t = self.trainer
        terminated: Optional[TrainingTerminated] = None
        t.loop_completed = False   # for after_train: the loop ended (all epochs, or a callback's stop)
        try:
            stop.setting_up = False   # from here on, a Ctrl-C between calls is raised at once
            t.input.start(t.strategy)   # producer threads; closed below, however the loop ends
            cbs.before_train()
            for t.epoch_num in range(t.starting_epoch, t.max_epoch + 1):
                logger.info("Start Epoch %d ...", t.epoch_num)
                t.local_step = 0
                start = time.time()
                cbs.before_epoch()
                while t.local_step < t.steps_per_epoch:
                    self.run_call(t._choose_steps())
                    cbs.trigger_step()
                cbs.after_epoch()
                logger.info("Epoch %d (global_step %d) finished, time: %.2f sec.",
                            t.epoch_num, t.global_step, time.time() - start)
                cbs.trigger_epoch()
            logger.info("Training has finished!")
            t.loop_completed = True
        except StopTraining as e:
            logger.info("Training was stopped by a callback: %s", e or type(e).__name__)
            t.loop_completed = True
        except KeyboardInterrupt:
            logger.info("Training interrupted (KeyboardInterrupt); cleaning up.")
            raise
        except TrainingTerminated as e:
            terminated = e
        except Exception as e:
            if stop.signum != signal.SIGTERM:
                raise
            # a group-wide SIGTERM also ends the DataFlow's workers: part of the same stop
            logger.info("While stopping on SIGTERM: %s: %s", type(e).__name__, e)
            terminated = TrainingTerminated()
            stop.raised = True
        finally:
            try:
                if terminated is not None:
                    logger.info("SIGTERM: training stopped at global step %d; ending it (callbacks save "
                                "the last step).", t.global_step)
                cbs.after_train()
            finally:   # whatever interrupts the above (a second Ctrl-C): no thread or worker is left
                t.input.close()
        return terminated
