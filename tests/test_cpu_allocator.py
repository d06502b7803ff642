"""The CPU allocator asked for at import (TF's BFC allocator): set when unset, the user's value kept,
TensorFlow really using it (its allocator keeps statistics; malloc has none), and a log line when
TensorFlow started first."""
import os
import subprocess
import sys

from kerastrainer.utils import cpu_allocator
from kerastrainer.utils.cpu_allocator import apply_default_cpu_allocator

STATS = ("import tensorflow as tf\n"
         "x = tf.ones([256, 256]) * 2\n"
         "try:\n"
         "    print('STATS', tf.config.experimental.get_memory_info('CPU:0')['peak'] > 0)\n"
         "except ValueError:\n"
         "    print('STATS none')\n")


def _python(code, **env):
    full = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    # with oneDNN on, TF's CPU allocator is oneDNN's (it keeps statistics too): the plain one here
    full["TF_ENABLE_ONEDNN_OPTS"] = "0"
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_apply_sets_when_unset_and_keeps_a_value():
    env = {}
    assert apply_default_cpu_allocator(env) == "set"
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
    assert apply_default_cpu_allocator(env) == "present"
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "false"


def test_import_gives_tensorflow_the_bfc_allocator():
    out = _python("import os, kerastrainer\nprint('ENV', os.environ['TF_CPU_ALLOCATOR_USE_BFC'])\n" + STATS +
                  "print('STATE', kerastrainer.utils.cpu_allocator.default_allocator_state())")
    assert "ENV true" in out
    assert "STATS True" in out
    assert "'result': 'set', 'tf_started': False" in out


def test_users_false_is_kept():
    out = _python("import kerastrainer\n" + STATS, TF_CPU_ALLOCATOR_USE_BFC="false")
    assert "STATS none" in out


def test_tf_started_first_is_not_said_with_onednn_on():
    # TensorFlow then allocates through oneDNN's pool whatever the variable says
    out = _python("import tensorflow as tf\nx = tf.ones([2]) * 2\nimport kerastrainer\n"
                  "print('LATE', kerastrainer.utils.cpu_allocator.bfc_may_be_late())\n", TF_ENABLE_ONEDNN_OPTS="1")
    assert "LATE False" in out


def test_tf_started_first_is_noticed_and_logged_at_training(monkeypatch, kt_log):
    out = _python("import tensorflow as tf\nx = tf.ones([2]) * 2\nimport kerastrainer\n"
                  "print('LATE', kerastrainer.utils.cpu_allocator.bfc_may_be_late())\n" + STATS.split("\n", 1)[1])
    assert "LATE True" in out
    assert "STATS none" in out   # TF kept malloc: the line below tells the user how to get BFC
    import numpy as np
    import tensorflow as tf

    from kerastrainer import DataFromList, ModelDesc, QueueInput, SimpleTrainer, TrainConfig, launch_train_with_config
    from kerastrainer.utils import argtools

    class Linear(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 2), tf.float32, "x")]

        def build_graph(self, x):
            self.dense = getattr(self, "dense", None) or tf.keras.layers.Dense(1)
            return tf.reduce_mean(tf.square(self.dense(x)))

        def optimizer(self):
            return tf.keras.optimizers.SGD(0.1)

    monkeypatch.setattr(cpu_allocator, "_state", {"result": "set", "tf_started": True})
    monkeypatch.setattr(cpu_allocator, "_onednn_enabled", lambda: False)   # this process may run either
    argtools.log_once.cache_clear()   # (once per process)
    data = DataFromList([[np.ones((4, 2), np.float32)]] * 2, shuffle=False)
    launch_train_with_config(TrainConfig(model=Linear(), data=QueueInput(data), steps_per_epoch=1, max_epoch=1,
                                         callbacks=[], extra_callbacks=[], monitors=[]), SimpleTrainer())
    assert any("TF_CPU_ALLOCATOR_USE_BFC=true" in m for m in kt_log.messages)
