"""Run a ported third-party program briefly: ``python _run.py SCRIPT [ARGS...]``.

A test harness, not part of the ports. It reuses tests/tensorpack_examples' caps: ``TP_MAX_EPOCH`` /
``TP_STEPS_PER_EPOCH`` cap ``TrainConfig`` and ``Trainer.train_with_defaults``, ``TP_PRETEND_GPU=1``
makes ``tf.test.is_gpu_available()`` say True, ``TP_BATCH_SIZE`` caps every ``BatchData``. With
``TP_FAKE_HOROVOD=1`` a one-process stand-in of Horovod's TF API (``_fake_horovod/``) is importable
as ``horovod.tensorflow`` (Horovod does not build against TF 2.21). The script's directory goes first
on ``sys.path`` (as ``python SCRIPT`` would) and SCRIPT runs as ``__main__``, keeping its own numbers.
"""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tensorpack_examples"))

import _shorten  # noqa: E402
import _shorten_batch  # noqa: E402
import _shorten_trainer  # noqa: E402

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    if os.environ.get("TP_FAKE_HOROVOD"):
        sys.path.insert(1, os.path.join(HERE, "_fake_horovod"))
    _shorten._cap_train_config()
    _shorten_trainer._cap_train_with_defaults()
    if os.environ.get("TP_PRETEND_GPU"):
        _shorten._pretend_gpu()
    if os.environ.get("TP_BATCH_SIZE"):
        _shorten_batch._cap_batch_size()
    runpy.run_path(script, run_name="__main__")
