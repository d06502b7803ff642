"""What a training run leaves in the process: a Keras program and a TF2-native ModelDesc never
load the TF1 layer (kerastrainer.compat), and after the run TensorFlow's and Python's state is
their own again (tf.summary, tf.compat.v1, sys.unraisablehook, the signal handlers).

Each program runs in a fresh interpreter (the suite itself loads the TF1 layer: its own test
files use TF1 APIs). The programs name what they use, as a Keras user writes them.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent('''
    import json, signal, sys
    import tensorflow as tf
    _v1 = getattr(tf.compat, "v" + "1")          # (the probe's own look; the program never names it)
    BEFORE = {"scalar": tf.summary.scalar, "histogram": tf.summary.histogram, "image": tf.summary.image,
              "v1_scalar": _v1.summary.scalar, "v1_disable_eager": getattr(_v1, "disable_eager_" + "execution"),
              "hook": sys.unraisablehook, "sigint": signal.getsignal(signal.SIGINT),
              "sigterm": signal.getsignal(signal.SIGTERM)}

    def report(**extra):
        after = {"scalar": tf.summary.scalar, "histogram": tf.summary.histogram, "image": tf.summary.image,
                 "v1_scalar": _v1.summary.scalar, "v1_disable_eager": getattr(_v1, "disable_eager_" + "execution"),
                 "hook": sys.unraisablehook, "sigint": signal.getsignal(signal.SIGINT),
                 "sigterm": signal.getsignal(signal.SIGTERM)}
        print("REPORT " + json.dumps(dict(
            tf1_layer=sorted(m for m in sys.modules if m.startswith("kerastrainer.compat")),
            changed=sorted(k for k in BEFORE if after[k] is not BEFORE[k]), **extra)))
''')

KERAS_PROGRAM = PROBE + textwrap.dedent('''
    import numpy as np
    import keras
    from kerastrainer import KerasModel, SimpleTrainer

    keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).normal(size=(64, 8)).astype("float32")
    y = (x.sum(1) > 0).astype("int64")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(2, activation="softmax")])
    km = KerasModel(model, input=(x, y), trainer=SimpleTrainer(steps_per_call=2))
    km.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy", metrics=["accuracy"])
    km.fit(batch_size=16, max_epoch=2, extra_callbacks=[], monitors=[])
    report(steps=int(km.trainer.global_step))
''')

MODELDESC_PROGRAM = PROBE + textwrap.dedent('''
    import numpy as np
    import keras
    from kerastrainer import (BatchData, DataFromList, ModelDesc, SimpleTrainer, TrainConfig,
                              add_moving_summary, launch_train_with_config)

    class Model(ModelDesc):
        def __init__(self):
            self.hidden = keras.layers.Dense(16, activation="relu")
            self.out = keras.layers.Dense(2)

        def inputs(self):
            return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int64, "y")]

        def build_graph(self, x, y):
            logits = self.out(self.hidden(x))
            cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                                  name="xent")
            add_moving_summary(cost)
            tf.summary.scalar("logit_mean", tf.reduce_mean(logits))
            tf.summary.histogram("logits", logits)
            return cost

        def optimizer(self):
            return keras.optimizers.SGD(0.1)

    rng = np.random.RandomState(0)
    points = [[rng.normal(size=8).astype("float32"), np.int64(i % 2)] for i in range(64)]
    trainer = SimpleTrainer(steps_per_call=2)
    launch_train_with_config(TrainConfig(model=Model(), dataflow=BatchData(DataFromList(points, shuffle=False), 16),
                                         max_epoch=2, extra_callbacks=[], monitors=[]), trainer)
    report(steps=int(trainer.global_step), outputs=sorted(trainer.last_step_outputs))
''')


def _run(tmp_path, source: str) -> dict:
    path = tmp_path / "program.py"
    path.write_text(source)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, str(path)], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("REPORT "))
    return json.loads(line[len("REPORT "):])


def test_a_keras_program_leaves_no_trace_and_never_loads_the_tf1_layer(tmp_path):
    got = _run(tmp_path, KERAS_PROGRAM)
    assert got["steps"] == 8
    assert got["tf1_layer"] == [], got
    assert got["changed"] == [], got


def test_a_tf2_modeldesc_leaves_no_trace_and_its_tower_summaries_still_arrive(tmp_path):
    got = _run(tmp_path, MODELDESC_PROGRAM)
    assert got["steps"] == 8
    assert "xent" in got["outputs"] and "logit_mean" in got["outputs"], got   # routed while the tower ran
    assert got["tf1_layer"] == [], got
    assert got["changed"] == [], got


def test_a_program_that_names_tf1_apis_gets_the_tf1_layer(tmp_path):
    program = MODELDESC_PROGRAM.replace("tf.reduce_mean(logits))", "tf.reduce_mean(logits))  # tf.compat.v1 style")
    got = _run(tmp_path, program)
    assert got["tf1_layer"], got    # loaded: its translations are there if the tower needs them


def test_the_tf1_layers_own_names_are_listed_where_the_package_loads_it_on_demand():
    import kerastrainer
    import kerastrainer.compat as compat

    core = kerastrainer._tf_name_map()
    assert set(kerastrainer._COMPAT_NAMES) == {n for n in compat.__all__ if n not in core}
    assert kerastrainer.tfv1 is compat.tfv1
