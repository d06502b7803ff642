"""More outside programs ported as tests, and focused tests of the fixes they needed.

- tensorpack's examples/keras/imagenet-resnet-keras.py (+ the imagenet_utils.py it imports),
  run through ``_shorten_batch.py`` on a tiny ILSVRC12 directory of real JPEGs;
- the kerastrainer names and behaviour that port needed: ``FeedfreePredictor``,
  ``AccumGradOptimizer`` (imports; wraps), ``GPUUtilizationTracker``,
  a top-level ``tfv1.get_variable('learning_rate')`` behind a KerasModel's TF1 optimizer set by
  ``ScheduledHyperParamSetter``, and a user's ``InferenceRunner`` beside a global-batch KerasModel.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from kerastrainer.callbacks.trainer_view import TrainerView

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "tensorpack_examples")
sys.path.insert(0, HERE)
sys.path.insert(0, EXAMPLES)
import _data  # noqa: E402
from _models import MLP, LinearData  # noqa: E402


def run_small(script, *args, cwd, env, timeout=600):
    """Run a tensorpack port through ``_shorten_batch.py`` (caps epochs, steps, batch, GPUs)."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **env)
    r = subprocess.run([sys.executable, os.path.join(EXAMPLES, "_shorten_batch.py"),
                        os.path.join(EXAMPLES, script), *args],
                       cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{script} {args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


# --- the port ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_imagenet_resnet_keras(tmp_path):
    pytest.importorskip("cv2")
    data = tmp_path / "data"
    _data.write_ilsvrc12(str(data / "ilsvrc"), meta_dir=str(data / "ilsvrc_metadata"))
    # ResNet-50 at the script's 224 px on 1 CPU tower (TOTAL_BATCH_SIZE // get_num_gpu()),
    # batches of 4, 3 epochs of 3 steps. The script builds its Keras layers channels_first (it was
    # written for GPUs); a CPU has NCHW kernels for Keras's own layers only with oneDNN, which
    # TensorFlow turns on by default on some CPUs only: on here.
    out = run_small("imagenet-resnet-keras.py", "--data", str(data / "ilsvrc"), cwd=tmp_path,
                    env={"KERASTRAINER_DATASET": str(data), "TP_NUM_GPU": "1", "TP_BATCH_SIZE": "4",
                         "TP_MAX_EPOCH": "3", "TP_STEPS_PER_EPOCH": "3", "TF_ENABLE_ONEDNN_OPTS": "1"})
    assert "MomentumOptimizer translated to kerastrainer.compat.MomentumV1" in out
    assert "GPUUtilizationTracker: cannot read GPU utilization" in out  # warned, not silent
    logdir = tmp_path / "train_log" / "imagenet-resnet-keras"
    with open(logdir / "stats.json") as f:
        stats = json.load(f)
    assert [s["global_step"] for s in stats] == [3, 6, 9]
    # the warm-up ScheduledHyperParamSetter [(0, 0.1), (3, 0.2)], interp='linear', moved the
    # script's own tfv1 learning-rate variable, which the optimizer reads
    assert [s["learning_rate"] for s in stats] == pytest.approx([0.4 / 3, 0.5 / 3, 0.2])
    # DataParallelInferenceRunner(df_val, ScalarStats(['categorical_accuracy'])) ran on val/:
    # a 1000-way classifier that picks one of the 3 classes present learned something
    # (chance is 1/1000)
    assert all("validation_categorical_accuracy" in s for s in stats)
    assert max(s["validation_categorical_accuracy"] for s in stats) >= 1 / 3
    assert stats[-1]["categorical_accuracy"] > stats[0]["categorical_accuracy"] > 0.001
    assert all(np.isfinite(s["loss"]) for s in stats)   # Keras's name of the compiled loss, as in fit's History
    assert os.path.isfile(logdir / "checkpoint") and os.path.isfile(logdir / "checkpoint-9.index")


# --- focused tests of the fixes ---------------------------------------------------------------
def test_accum_grad_optimizer_imports_and_wraps_a_tf1_optimizer():
    # what it does in training: tests/test_tf1_mechanisms.py
    from kerastrainer.tfutils.optimizer import AccumGradOptimizer
    opt = AccumGradOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), 4)
    assert opt.niter == 4 and isinstance(opt.opt, tf.compat.v1.train.GradientDescentOptimizer)


def test_feedfree_predictor_reads_batches_from_a_queue():
    from kerastrainer import QueueInput
    from kerastrainer.dataflow import DataFromList
    from kerastrainer.predict import FeedfreePredictor, OfflinePredictor, PredictConfig

    df = LinearData(num_batches=3, batch=4)
    batches = list(df)
    config = PredictConfig(model=MLP(), input_names=["x", "y"], output_names=["prob", "wrong"])
    want = [OfflinePredictor(config)(*b) for b in batches]
    with FeedfreePredictor(config, QueueInput(DataFromList(batches, shuffle=False))) as pred:
        got = [pred() for _ in range(3)]
    for (p, w), (gp, gw) in zip(want, got):
        np.testing.assert_allclose(gp, p, rtol=1e-5)
        np.testing.assert_array_equal(gw, w)
    with pytest.raises(TypeError, match="InputSource"):
        FeedfreePredictor(config, df)


class _Monitors:
    def __init__(self):
        self.scalars = {}

    def put_scalar(self, name, value):
        self.scalars[name] = value


class _Trainer(TrainerView):
    def __init__(self):
        self.monitors = _Monitors()


def test_gpu_utilization_tracker_averages_samples_per_device(monkeypatch):
    from kerastrainer.callbacks import GPUUtilizationTracker

    readings = iter([[10.0, 50.0], [30.0, 70.0]] + [[20.0, 60.0]] * 100)
    cb = GPUUtilizationTracker(devices=[0, 3])
    monkeypatch.setattr(cb, "_utilization_reader", lambda: lambda: next(readings))
    cb.interval = 0.01
    cb.setup_graph(_Trainer())
    cb.before_train()  # takes the first reading as its check
    cb.before_epoch()
    import time
    time.sleep(0.2)
    cb.after_epoch()
    cb.trigger_epoch()
    cb.after_train()
    got = cb.trainer.monitors.scalars
    assert sorted(got) == ["GPUUtil/0", "GPUUtil/3"]
    assert 20.0 <= got["GPUUtil/0"] <= 30.0 and 60.0 <= got["GPUUtil/3"] <= 70.0


def test_gpu_utilization_tracker_without_gpus_warns_and_records_nothing(monkeypatch):
    from kerastrainer.callbacks import GPUUtilizationTracker
    from kerastrainer.callbacks import prog
    from kerastrainer.utils import devices

    warnings = []
    monkeypatch.setattr(prog.logger, "warning", lambda msg, *a: warnings.append(msg % a))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(devices, "get_num_gpu", lambda: 0)
    cb = GPUUtilizationTracker()
    cb.setup_graph(_Trainer())
    cb.before_train()
    assert warnings == ["GPUUtilizationTracker: cannot read GPU utilization (no GPU is visible); "
                        "it records nothing."]
    cb.before_epoch()
    cb.after_epoch()
    cb.trigger_epoch()
    assert cb.trainer.monitors.scalars == {}


def test_keras_model_tf1_lr_variable_and_user_inference_runner(tmp_path):
    """imagenet-resnet-keras's pattern on a tiny model: a tfv1 learning-rate variable made at
    the top of the program, a TF1 optimizer on it, a ScheduledHyperParamSetter, and the user's
    own InferenceRunner on [x, onehot] batches beside a DataFlow-fed (global-batch) KerasModel."""
    import keras
    from kerastrainer.callbacks import InferenceRunner, ScalarStats, ScheduledHyperParamSetter
    from kerastrainer.contrib.keras import KerasModel
    from kerastrainer.dataflow import MapDataComponent
    from kerastrainer.utils import logger

    logger.set_logger_dir(str(tmp_path / "log"), action="d")
    onehot = lambda y: np.eye(3, dtype="float32")[y]  # noqa: E731
    train = MapDataComponent(LinearData(num_batches=4, batch=16), onehot, 1)
    val = MapDataComponent(LinearData(num_batches=2, batch=16, seed=1), onehot, 1)

    def model_func(x):
        inp = keras.Input(tensor=x)
        return keras.Model(inp, keras.layers.Dense(3, activation="softmax")(inp))

    M = KerasModel(model_func,
                   input_signature=[tf.TensorSpec([None, 8], tf.float32, "x")],
                   target_signature=[tf.TensorSpec([None, 3], tf.float32, "y")],
                   input=train)
    lr = tf.compat.v1.get_variable("learning_rate", initializer=0.1, trainable=False)
    M.compile(optimizer=tf.compat.v1.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
              loss="categorical_crossentropy", metrics="categorical_accuracy")
    M.fit(steps_per_epoch=4, max_epoch=2,
          callbacks=[ScheduledHyperParamSetter("learning_rate", [(1, 0.05)]),
                     InferenceRunner(val, ScalarStats(["categorical_accuracy"]))])
    with open(tmp_path / "log" / "stats.json") as f:
        stats = json.load(f)
    assert [s["learning_rate"] for s in stats] == pytest.approx([0.1, 0.05])  # set after epoch 1
    assert float(lr.numpy()) == pytest.approx(0.05)  # the program's own variable was set
    assert all(0.0 <= s["validation_categorical_accuracy"] <= 1.0 for s in stats)
