"""Run a ported tensorpack example that calls ``trainer.train_with_defaults(...)`` itself (the GAN
examples) briefly: ``python _shorten_trainer.py SCRIPT [ARGS...]``.

A test harness, not part of the ports: it caps ``train_with_defaults(max_epoch=, steps_per_epoch=)``
from ``TP_MAX_EPOCH`` / ``TP_STEPS_PER_EPOCH`` (as ``_shorten.py`` caps ``TrainConfig``; with
``TP_PRETEND_GPU`` / ``TP_BATCH_SIZE`` as ``_shorten_batch.py``), puts the
script's directory first on ``sys.path`` (as ``python SCRIPT`` would), and runs SCRIPT as ``__main__``,
so the scripts keep tensorpack's numbers.
"""
import os
import runpy
import sys


def _cap_train_with_defaults():
    from kerastrainer.train import base

    train_with_defaults = base.Trainer.train_with_defaults

    def capped(self, *args, **kwargs):
        if os.environ.get("TP_MAX_EPOCH"):
            kwargs["max_epoch"] = min(int(os.environ["TP_MAX_EPOCH"]), kwargs.get("max_epoch") or 10 ** 9)
        if os.environ.get("TP_STEPS_PER_EPOCH"):
            cap = int(os.environ["TP_STEPS_PER_EPOCH"])
            kwargs["steps_per_epoch"] = min(cap, kwargs.get("steps_per_epoch") or cap)
        return train_with_defaults(self, *args, **kwargs)

    base.Trainer.train_with_defaults = capped


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    _cap_train_with_defaults()
    if os.environ.get("TP_PRETEND_GPU") or os.environ.get("TP_BATCH_SIZE"):
        import _shorten
        import _shorten_batch
        if os.environ.get("TP_PRETEND_GPU"):
            _shorten._pretend_gpu()
        if os.environ.get("TP_BATCH_SIZE"):
            _shorten_batch._cap_batch_size()
    runpy.run_path(script, run_name="__main__")
