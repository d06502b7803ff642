"""Run a ported tensorpack example briefly and small: ``python _shorten_batch.py SCRIPT [ARGS...]``.

A test harness, not part of the ports. On top of ``_shorten.py``'s caps (``TP_MAX_EPOCH``,
``TP_STEPS_PER_EPOCH``, ``TP_PRETEND_GPU``) it caps every ``BatchData``'s batch size at
``TP_BATCH_SIZE`` and makes ``get_num_gpu()`` return ``TP_NUM_GPU`` (a script that computes
``TOTAL_BATCH_SIZE // get_num_gpu()`` then runs on CPU towers, as many logical CPU devices), so that ImageNet-sized
scripts keep their own numbers and still train a few steps on a CPU.
"""
import os
import runpy
import sys

import _shorten


def _cap_batch_size():
    from kerastrainer.dataflow import common

    init = common.BatchData.__init__

    def capped(self, ds, batch_size, *args, **kwargs):
        init(self, ds, min(int(batch_size), int(os.environ["TP_BATCH_SIZE"])), *args, **kwargs)

    common.BatchData.__init__ = capped


def _pretend_num_gpu(n):
    from kerastrainer.utils import devices, gpu
    devices.get_num_gpu = gpu.get_num_gpu = lambda: n
    if n > 1:   # the towers then run on n logical CPU devices (made before TF starts)
        devices.ensure_tower_devices(n)


if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` would
    _shorten._cap_train_config()
    if os.environ.get("TP_PRETEND_GPU"):
        _shorten._pretend_gpu()
    if os.environ.get("TP_BATCH_SIZE"):
        _cap_batch_size()
    if os.environ.get("TP_NUM_GPU"):
        _pretend_num_gpu(int(os.environ["TP_NUM_GPU"]))
    runpy.run_path(script, run_name="__main__")
