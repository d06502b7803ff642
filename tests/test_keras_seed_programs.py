"""Ported keras_experiments / Keras 2 / tensorpack Keras programs (tests/seed_programs/) run and give
the right numbers.

Each program runs in its own process through ``seed_programs/_harness.py``, which
splits the CPU into N logical devices (the "GPUs": N=1 is the single-device path),
seeds every RNG and, where numbers are compared, turns Dropout off (a serial and a
data-parallel run draw different masks). The data are small arrays the test writes;
each epoch is one global batch, so the sample order does not change the numbers.
The reference is ``keras.Model.fit`` on one device with the program's own batch and
learning rate.
"""
import os
import subprocess
import sys

import numpy as np
import pytest
import keras

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "seed_programs")
HARNESS = os.path.join(PROGRAMS, "_harness.py")


def run(program, *args, devices=1, no_dropout=True, cifar10=None, cwd=None, env=None, timeout=600, launcher=()):
    cmd = list(launcher) + [sys.executable, HARNESS, "--devices", str(devices)]
    cmd += ["--no-dropout"] if no_dropout else []
    cmd += ["--cifar10", str(cifar10)] if cifar10 else []
    cmd += [os.path.join(PROGRAMS, program)] + [str(a) for a in args]
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    full_env.update(env or {})
    proc = subprocess.run(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:]
    return out


def _cifar(tmp_path, n_train, n_test=16, seed=0):
    rng = np.random.RandomState(seed)
    path = tmp_path / "cifar10.npz"
    np.savez(path, x_train=rng.randint(0, 256, (n_train, 32, 32, 3)).astype("uint8"),
             y_train=rng.randint(0, 10, (n_train, 1)).astype("uint8"),
             x_test=rng.randint(0, 256, (n_test, 32, 32, 3)).astype("uint8"),
             y_test=rng.randint(0, 10, (n_test, 1)).astype("uint8"))
    return path


def _cifar_reference(path, batch, lr, epochs):
    """The program's single-device training: make_model, RMSprop with Keras 2's decay, full batches."""
    sys.path.insert(0, PROGRAMS)
    try:
        from cifar_common import make_model
    finally:
        sys.path.remove(PROGRAMS)
    d = np.load(path)
    x = d["x_train"].astype("float32") / 255
    y = keras.utils.to_categorical(d["y_train"], 10)
    assert len(x) == batch  # one global batch an epoch: the order of the samples does not matter
    keras.utils.set_random_seed(0)
    orig = keras.layers.Dropout.call
    keras.layers.Dropout.call = lambda self, inputs, training=None: inputs
    try:
        model = make_model(x.shape[1:], 10)
        model.compile(loss="categorical_crossentropy", metrics=["accuracy"], optimizer=keras.optimizers.RMSprop(
            learning_rate=keras.optimizers.schedules.InverseTimeDecay(lr, 1, 1e-6)))
        model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    finally:
        keras.layers.Dropout.call = orig
    return model


def _assert_same_weights(model, reference, atol=2e-6):
    for a, b in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=atol)


@pytest.mark.slow
@pytest.mark.parametrize("mgpu_type", ["expmgpu", "kerasmgpu"])
def test_cifar10_cnn_mgpu_both_types_equal_serial_and_reload(tmp_path, mgpu_type):
    # 2 "GPUs", --batch_size 8: a global batch of 16, lr 2e-4 (the program scales both)
    data = _cifar(tmp_path, n_train=16)
    ckpt = tmp_path / "best.keras"
    out = run("cifar10_cnn_mgpu.py", "--mgpu", "--mgpu-type", mgpu_type, "--batch_size", 8, "--epochs", 2,
              "--checkpt", ckpt, devices=2, cifar10=data, cwd=tmp_path)
    assert "Using GPUs: /cpu:0, /cpu:1" in out and "MULTI-GPU MODEL" in out and "SUBMODEL SUMMARY" in out
    assert "Samples/sec:" in out and "Epoch timing" in out and "CIFAR VALIDATION LOSS, ACC" in out
    # the best model of ModelCheckpoint(save_best_only): the second epoch's when it improved
    best_epoch = 2 if "Epoch 2: val_accuracy improved" in out else 1
    reference = _cifar_reference(data, batch=16, lr=2e-4, epochs=best_epoch)
    trained = keras.models.load_model(str(ckpt))  # the template, saved by ModelCheckpoint
    _assert_same_weights(trained, reference)
    x = np.load(data)["x_test"].astype("float32") / 255
    np.testing.assert_allclose(trained.predict(x, verbose=0), reference.predict(x, verbose=0), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.slow
def test_cifar10_cnn_mgpu_serial_path_and_syncopt(tmp_path):
    data = _cifar(tmp_path, n_train=16)
    out = run("cifar10_cnn_mgpu.py", "--batch_size", 16, "--epochs", 1, devices=1, cifar10=data, cwd=tmp_path)
    assert "Using GPUs" not in out and "CIFAR VALIDATION LOSS, ACC" in out
    out = run("cifar10_cnn_mgpu.py", "--mgpu", "2", "--syncopt", "--batch_size", 8, "--epochs", 1,
              devices=3, cifar10=data, cwd=tmp_path)
    assert "Using GPUs: /cpu:0, /cpu:1" in out
    assert "RMSPropMGPU(gdev_list=..., usenccl=...) has no TF2 meaning" in out


@pytest.mark.slow
def test_cifar10_cnn_distrib_slurm_under_a_faked_two_task_srun(tmp_path):
    # make_parallel(model_init, wgdev_list) with every worker's devices: 2 workers x 1 device,
    # batch 32 * 2 = 64 global, lr 2e-4; each worker reads its 32 samples
    data = _cifar(tmp_path, n_train=64)
    out = run("cifar10_cnn_distrib_slurm.py", "--epochs", 2, "--save-weights", tmp_path / "trained-{rank}.keras",
              devices=1, cifar10=data, cwd=tmp_path,
              launcher=[sys.executable, os.path.join(PROGRAMS, "fake_srun.py"), "-n", "2"], timeout=600)
    assert "rank 0 of 2 (chief)" in out and "rank 1 of 2" in out
    assert "WGDEV_LIST: ['/job:worker/task:0/device:CPU:0', '/job:worker/task:1/device:CPU:0']" in out
    assert "MULTI-GPU MODEL" in out and "SUBMODEL SUMMARY" in out
    assert "worker 1 of 2 reads its shard of the data (32 samples a step)" in out
    assert "CIFAR VALIDATION LOSS, ACC" in out
    trained = [keras.models.load_model(str(tmp_path / f"trained-{r}.keras")) for r in range(2)]
    for a, b in zip(trained[0].get_weights(), trained[1].get_weights()):
        np.testing.assert_array_equal(a, b)  # the workers hold the same weights
    reference = _cifar_reference(data, batch=64, lr=2e-4, epochs=2)
    # two processes average two half-batch gradients (serial: one mean over 64), and RMSprop
    # divides by the root of small second moments: float32 rounding reaches ~4e-6 in 2 epochs
    _assert_same_weights(trained[0], reference, atol=1e-5)
    assert not np.allclose(trained[0].get_weights()[0], _cifar_reference(data, batch=64, lr=2e-4,
                                                                          epochs=0).get_weights()[0])


def _write_mnist_tfrecord(path, n, seed=0, kinds=10):
    """``n`` records of ``kinds`` distinct images (labels 0, 1, ...): a smooth problem, so that
    RMSprop's sign-like first steps do not turn float rounding into different weights."""
    import tensorflow as tf
    rng = np.random.RandomState(seed)
    images = rng.rand(kinds, 784)
    with tf.io.TFRecordWriter(str(path)) as w:
        for i in range(n):
            feats = {"image": tf.train.Feature(float_list=tf.train.FloatList(value=images[i % kinds].tolist())),
                     "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % kinds]))}
            w.write(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())


@pytest.mark.slow
def test_mnist_tfrecord_mgpu_equals_serial_and_reloads(tmp_path):
    import tensorflow as tf
    records = tmp_path / "mnist.tfrecord"
    _write_mnist_tfrecord(records, 256)
    # 2 "GPUs": batch 128 * 2 = 256 (the whole file: one step an epoch), lr 2e-3 * 2, 5 epochs
    out = run("mnist_tfrecord_mgpu.py", devices=2, cwd=tmp_path, env={"MNIST_TFRECORD": str(records)})
    assert "MULTI-GPU MODEL" in out and "Test accuracy" in out

    sys.path.insert(0, PROGRAMS)
    try:
        import mnist_tfrecord_mgpu as prog
    finally:
        sys.path.remove(PROGRAMS)
    data = [(img.numpy(), int(lab)) for img, lab in tf.data.TFRecordDataset(str(records)).map(prog._parse)]
    x = np.stack([d[0] for d in data]).reshape(-1, 28, 28, 1)
    y = keras.utils.to_categorical([d[1] for d in data], 10)
    keras.utils.set_random_seed(0)
    orig = keras.layers.Dropout.call
    keras.layers.Dropout.call = lambda self, inputs, training=None: inputs
    try:
        inp = keras.Input((28, 28, 1))
        reference = keras.Model(inp, prog.cnn_layers(inp, 10))
        reference.compile(optimizer=keras.optimizers.RMSprop(
            learning_rate=keras.optimizers.schedules.InverseTimeDecay(4e-3, 1, 1e-5)),
            loss="categorical_crossentropy")
        reference.fit(x, y, batch_size=256, epochs=5, shuffle=False, verbose=0)
    finally:
        keras.layers.Dropout.call = orig
    inp = keras.Input((28, 28, 1))
    reloaded = keras.Model(inp, prog.cnn_layers(inp, 10))
    reloaded.load_weights(str(tmp_path / "saved_wt.weights.h5"))  # what the program saved from the template
    _assert_same_weights(reloaded, reference)
    np.testing.assert_allclose(reloaded.predict(x[:32], verbose=0), reference.predict(x[:32], verbose=0),
                               rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_tensorpack_mnist_keras_v2(tmp_path):
    """tensorpack's whole-Keras-model example: get_model(image), signatures, QueueInput, fit() to
    TrainConfig's max_epoch (capped to 2 by tests/tensorpack_examples/_shorten.py)."""
    import json
    examples = os.path.join(HERE, "tensorpack_examples")
    sys.path.insert(0, examples)
    try:
        import _data
    finally:
        sys.path.remove(examples)
    _data.write_mnist(str(tmp_path / "data"))  # 256 training images: 2 batches of 128
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERASTRAINER_DATASET=str(tmp_path / "data"), TP_MAX_EPOCH="2")
    proc = subprocess.run([sys.executable, os.path.join(examples, "_shorten.py"),
                           os.path.join(examples, "mnist-keras-v2.py")], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:]
    assert "AdamOptimizer" in out  # the TF1 optimizer, translated (logged once)
    logdir = tmp_path / "train_log" / "mnist-keras-v2"
    with open(logdir / "stats.json") as f:
        stats = json.load(f)
    assert [s["epoch_num"] for s in stats] == [1, 2] and stats[-1]["global_step"] == 4
    assert "val_categorical_accuracy" in stats[-1] and np.isfinite(stats[-1]["val_loss"])
    assert os.path.isfile(logdir / "checkpoint")  # ModelSaver


# --- in this process: the test suite's 4 logical CPU devices are the "GPUs" ---------------------
def _gpus():
    from kerastrainer.keras import get_num_gpu
    return get_num_gpu()


def test_keras2436_wrapper_program_equals_serial_and_reloads(tmp_path, monkeypatch):
    if _gpus() == 1:
        pytest.skip("multi_gpu_model(gpus=2) needs 2 GPUs on a GPU machine")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(PROGRAMS)
    import keras2436_model_mgpu as prog
    keras.utils.set_random_seed(0)
    wrapped, serial_model, history = prog.main(gpus=2, path=str(tmp_path / "m.keras"))
    assert wrapped.layers[-2] is serial_model  # Keras 2's layout: input, 2 slices, template, merge
    assert [type(layer).__name__ for layer in wrapped.layers] == ["InputLayer", "Lambda", "Lambda",
                                                                  "Sequential", "Concatenate"]
    keras.utils.set_random_seed(0)
    reference = prog.make_serial_model()
    reference.compile(loss="binary_crossentropy", optimizer=keras.optimizers.SGD(0.1))
    x, y = prog.get_data()
    ref_hist = reference.fit(x, y, batch_size=93, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(history.history["loss"], ref_hist.history["loss"], rtol=1e-5)
    _assert_same_weights(serial_model, reference)
    reloaded = keras.models.load_model(str(tmp_path / "m.keras"))
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), serial_model.predict(x, verbose=0))
    fresh = prog.make_serial_model()
    fresh.load_weights(str(tmp_path / "m.weights.h5"))
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), serial_model.predict(x, verbose=0))


@pytest.mark.slow
def test_multi_gpu_model_docstring_example(tmp_path, monkeypatch):
    import runpy
    if _gpus() in (1, 2):
        pytest.skip("the example asks for 3 devices")
    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    g = runpy.run_path(os.path.join(PROGRAMS, "keras2_multi_gpu_model_example.py"), run_name="__main__")
    model, parallel_model, x = g["model"], g["parallel_model"], g["x"].astype("float32")
    assert parallel_model.layers[-2] is model and len(parallel_model.gdev_list) == 3
    assert parallel_model._km.trainer.global_step == 2  # 24 samples: batches of 16 and 8, split 6/5/5, 2/3/3
    reloaded = keras.models.load_model("my_model.h5")
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert np.isfinite(model.predict(x, verbose=0)).all()


@pytest.mark.slow
def test_slurm_example_under_a_faked_srun(tmp_path):
    logdir = tmp_path / "log"
    cmd = [sys.executable, os.path.join(PROGRAMS, "fake_srun.py"), "-n", "2", sys.executable,
           os.path.join(os.path.dirname(HERE), "examples", "cifar", "cifar10_cnn_slurm.py"), "--fake",
           "--epochs", "1", "--steps-per-epoch", "2", "--logdir", str(logdir)]
    proc = subprocess.run(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:]
    assert "rank 0 of 2 (chief)" in out and "reads its shard of the data (32 samples a step)" in out
    assert "rank 0 of 2: final loss" in out and (logdir / "final.keras").is_file()
