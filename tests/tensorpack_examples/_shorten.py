"""Run a ported tensorpack example briefly: ``python _shorten.py SCRIPT [ARGS...]``.

A test harness, not part of the ports: it caps ``TrainConfig(max_epoch=, steps_per_epoch=)``
from ``TP_MAX_EPOCH`` / ``TP_STEPS_PER_EPOCH`` (and with ``TP_PRETEND_GPU=1`` makes
``tf.compat.v1.test.is_gpu_available()`` say True), and then runs SCRIPT as ``__main__``, so the
scripts themselves keep tensorpack's numbers.
"""
import os
import runpy
import sys


def _cap_train_config():
    from kerastrainer.train import config as cfg_mod

    init = cfg_mod.TrainConfig.__init__

    def capped(self, *args, **kwargs):
        if os.environ.get("TP_MAX_EPOCH"):
            kwargs["max_epoch"] = min(int(os.environ["TP_MAX_EPOCH"]), kwargs.get("max_epoch") or 10 ** 9)
        if os.environ.get("TP_STEPS_PER_EPOCH"):
            cap = int(os.environ["TP_STEPS_PER_EPOCH"])
            kwargs["steps_per_epoch"] = min(cap, kwargs.get("steps_per_epoch") or cap)
        init(self, *args, **kwargs)

    cfg_mod.TrainConfig.__init__ = capped


def _pretend_gpu():
    # scripts that insist on a GPU (`assert tf.test.is_gpu_available()`) run on the CPU here
    import tensorflow as tf
    tf.compat.v1.test.is_gpu_available = lambda *a, **k: True


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    _cap_train_config()
    if os.environ.get("TP_PRETEND_GPU"):
        _pretend_gpu()
    runpy.run_path(script, run_name="__main__")
