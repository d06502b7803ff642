"""tensorpack's ``callbacks.graph``: callbacks that run an op or look at tensors while training.

TF2 has no graph to fetch arbitrary tensors from between steps. Here:

- :class:`RunOp` calls a function (TF2 runs ops eagerly when called) before training, at each
  trigger and/or every step.
- :class:`ProcessTensors`, :class:`DumpTensors` read *named values the trainer has*: a model
  variable (``'conv0/W'``, from ``trainer.named_variables()``) or a value the training step
  returns (``'cost'`` and every ``add_moving_summary`` scalar, from ``trainer.last_step_outputs``).
  They ask for one step per call, so a step output is that step's value (tensorpack's). Any other
  tower tensor is an error at ``before_train`` naming how to make it a step output.
- :class:`CheckNumerics` checks the trainable variables for NaN/Inf.
- :class:`DumpParamAsImage` writes a variable as images each epoch.

Example::

    callbacks=[ProcessTensors(['cost'], lambda c: print('cost', c)), CheckNumerics()]
"""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Sequence

import numpy as np

from ..utils import logger
from .accepted import RunUpdateOps
from .base import Callback

__all__ = ["RunOp", "RunUpdateOps", "ProcessTensors", "DumpTensors", "DumpTensor", "CheckNumerics",
           "DumpTensorAsImage", "DumpParamAsImage"]


def _plain_name(name: str) -> str:
    name = name[:-2] if name.endswith(":0") else name
    return name


def read_named_values(trainer, names: Sequence[str], who: str) -> List[np.ndarray]:
    """Values of ``names``: model variables, or outputs of the last training step."""
    variables = trainer.named_variables() if hasattr(trainer, "named_variables") else {}
    outputs = trainer.last_step_outputs
    out = []
    for n in names:
        key = _plain_name(n)
        if key in variables:
            out.append(np.asarray(variables[key].numpy()))
        elif key in outputs:
            out.append(np.asarray(outputs[key]))
        else:
            raise KeyError(f"{who}: '{n}' is neither a model variable nor a value the training step returns "
                           f"(step outputs: {sorted(k for k in outputs if not k.startswith('_'))}). In TF2 a "
                           f"callback cannot fetch an arbitrary tower tensor: record a scalar with "
                           f"add_moving_summary(tf.identity(x, name='{key}')) in build_graph, or give a "
                           f"variable's name.")
    return out


class RunOp(Callback):
    """Run ``op`` (a function; TF2 runs its ops when called) before training, at every trigger
    (epoch end by default) and/or after every step.

    Args:
        op: a function of no arguments. tensorpack also took a ``tf.Operation``; TF2 has none to
            run later, so an operation or a string is a TypeError.
        run_before, run_as_trigger, run_step: when to run it (tensorpack's defaults).
        verbose: log each run.

    Example::

        # DQN's target network update, every epoch
        RunOp(lambda: [t.assign(s) for t, s in zip(target_vars, online_vars)], run_before=True)
    """

    _chief_only = False

    def __init__(self, op: Callable[[], object], run_before: bool = True, run_as_trigger: bool = True,
                 run_step: bool = False, verbose: bool = False):
        if not callable(op):
            raise TypeError(f"RunOp: op must be a function that runs the op (TF2 runs ops when called); "
                            f"got {type(op).__name__}. Wrap the update in a function: RunOp(lambda: var.assign(...)).")
        self.setup_func = op
        self.run_before = run_before
        self.run_as_trigger = run_as_trigger
        self.run_step = run_step
        self.verbose = verbose

    def _run(self):
        if self.verbose:
            logger.info("Running op %s ...", getattr(self.setup_func, "__name__", self.setup_func))
        self.setup_func()

    def _before_train(self):
        if self.run_before:
            self._run()

    def _trigger(self):
        if self.run_as_trigger:
            self._run()

    def steps_to_next_trigger(self) -> Optional[int]:
        return 1 if self.run_step else None

    def _trigger_step(self):
        if self.run_step:
            self._run()


class ProcessTensors(Callback):
    """After every training step, call ``fn(*values)`` on the values of ``names`` (model variables
    or values the step returns, see the module docstring).

    Example::

        ProcessTensors(['cost', 'accuracy'], lambda c, a: print(c, a))
    """

    def __init__(self, names: Sequence[str], fn: Callable[..., object]):
        if not isinstance(names, (list, tuple)):
            raise TypeError(f"{type(self).__name__}: names must be a list of names, got {names!r}")
        self._names = list(names)
        self._fn = fn

    def steps_to_next_trigger(self) -> Optional[int]:
        return 1  # a step output is one step's value only in one-step calls

    def _trigger_step(self):  # a name the trainer lacks raises at the first step
        self._fn(*read_named_values(self.trainer, self._names, type(self).__name__))


class DumpTensors(ProcessTensors):
    """After every step, write the values of ``names`` to ``<logger dir>/DumpTensor-<step>.npz``
    (load with ``dict(np.load(f))``).

    Example::

        DumpTensors(['conv0/W', 'cost'])
    """

    def __init__(self, names: Sequence[str]):
        super().__init__(names, self._dump)
        self._dir = None

    def _before_train(self):
        self._dir = logger.get_logger_dir()
        if not self._dir:
            raise RuntimeError("DumpTensors writes under the logger directory: call logger.set_logger_dir() first.")

    def _dump(self, *values):
        np.savez(os.path.join(self._dir, f"DumpTensor-{self.global_step}.npz"),
                 **{_plain_name(n): v for n, v in zip(self._names, values)})


DumpTensor = DumpTensors  # tensorpack's older name


class CheckNumerics(Callback):
    """Check every trainable variable for NaN/Inf at each trigger (and after every step with
    ``run_step``); raise ``FloatingPointError`` naming the first bad variables.

    Example::

        callbacks=[CheckNumerics(run_step=True)]
    """

    def __init__(self, run_as_trigger: bool = True, run_step: bool = False):
        self.run_as_trigger = run_as_trigger
        self.run_step = run_step

    def _check(self):
        bad = [n for n, v in self.trainer.named_variables().items()
               if getattr(v, "trainable", False) and not np.all(np.isfinite(v.numpy()))]
        if bad:
            raise FloatingPointError(f"CheckNumerics: NaN or Inf in {len(bad)} variable(s) at global step "
                                     f"{self.global_step}: {', '.join(bad[:10])}")

    def _trigger(self):
        if self.run_as_trigger:
            self._check()

    def steps_to_next_trigger(self) -> Optional[int]:
        return 1 if self.run_step else None

    def _trigger_step(self):
        if self.run_step:
            self._check()


class DumpParamAsImage(Callback):
    """At each trigger, write a variable as image(s) ``<prefix>-ep<NNN>[-<i>].png`` in the logger
    directory. A 2-D variable is one image; a 3-D one (``H, W, N``) gives N images, its last
    axis being the index (tensorpack's layout).

    Args:
        tensor_name: the variable's name (``'conv0/W'``).
        prefix: file-name prefix (the name with '/' replaced by default).
        map_func: applied to the array first (e.g. to reorder axes).
        scale: multiply the values by this before writing.
        clip: clip to [0, 255] (else the values must already lie there).

    Example::

        DumpParamAsImage('fc0/W', map_func=lambda w: w.reshape(28, 28, -1), scale=255)
    """

    def __init__(self, tensor_name: str, prefix: Optional[str] = None, map_func: Optional[Callable] = None,
                 scale: float = 255, clip: bool = False):
        self.tensor_name = _plain_name(tensor_name)
        self.prefix = prefix or self.tensor_name.replace("/", "-")
        self.map_func = map_func
        self.scale = scale
        self.clip = clip

    def _before_train(self):
        self.log_dir = logger.get_logger_dir()
        if not self.log_dir:
            raise RuntimeError("DumpParamAsImage writes under the logger directory: call logger.set_logger_dir().")
        if self.tensor_name not in self.trainer.named_variables():
            raise KeyError(f"DumpParamAsImage: no variable named '{self.tensor_name}'")

    def _trigger(self):
        import cv2
        val = self.trainer.named_variables()[self.tensor_name].numpy()
        if self.map_func is not None:
            val = self.map_func(val)
        val = np.asarray(val) * self.scale
        if self.clip:
            val = np.clip(val, 0, 255)
        if val.ndim == 2:
            imgs = [val]
        elif val.ndim == 3:
            imgs = [val[:, :, i] for i in range(val.shape[2])]
        else:
            raise ValueError(f"DumpParamAsImage: '{self.tensor_name}' gives an array of shape {val.shape}; "
                             f"give map_func that makes it (H, W) or (H, W, N)")
        for i, im in enumerate(imgs):
            suffix = f"-{i}" if len(imgs) > 1 else ""
            cv2.imwrite(os.path.join(self.log_dir, f"{self.prefix}-ep{self.epoch_num:03d}{suffix}.png"),
                        np.clip(im, 0, 255).astype(np.uint8))


DumpTensorAsImage = DumpParamAsImage  # tensorpack's other name
