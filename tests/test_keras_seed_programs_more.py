"""More ported keras_experiments programs: the variational autoencoders (tests/seed_programs/vae_*.py).

A VAE's loss is its own: a custom layer calls ``add_loss`` (reconstruction + KL) and the
model is compiled with ``loss=None`` and trained on ``x`` alone. The first tests check the
kerastrainer pieces this needs, in this process (the suite's 4 logical CPU devices are the
"GPUs"), against ``keras.Model.fit``; the last ones run the ported programs the way their
docstrings say, through ``seed_programs/_harness.py`` on 2 logical devices, on MNIST-like
IDX files the test writes.
"""
import os
import re
import sys
import threading

import numpy as np
import pytest
import keras
import tensorflow as tf

from _devices import cpus
from kerastrainer.keras import KerasModel, KerasSignatureError, make_parallel

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "seed_programs")
QUIET = dict(extra_callbacks=[], monitors=[])


class _ReconstructionLoss(keras.layers.Layer):
    """vae_common's CustomVariationalLayer in small: ``add_loss`` of the inputs' error, returns x."""

    def call(self, inputs):
        x, x_hat = inputs
        self.add_loss(keras.ops.mean(keras.ops.square(x - x_hat)) * 10.0)
        return x


def _autoencoder(seed=1, noise=False):
    keras.utils.set_random_seed(seed)
    x = keras.Input((6,))
    h = keras.layers.Dense(3, activation="tanh")(x)
    if noise:  # an unseeded Keras random op, as the VAE's sampling Lambda
        h = keras.layers.Lambda(lambda t: t + 0.01 * keras.random.normal(keras.ops.shape(t)))(h)
    y = _ReconstructionLoss()([x, keras.layers.Dense(6)(h)])
    return keras.Model(x, y)


def _x(n=64, seed=0):
    rng = np.random.RandomState(seed)
    return (rng.randn(n, 3) @ rng.randn(3, 6)).astype("float32")


def _max_weight_diff(a, b):
    return max(float(np.abs(u - v).max()) for u, v in zip(a.get_weights(), b.get_weights()))


def _keras_reference(x, batch, epochs, lr=0.05):
    ref = _autoencoder()
    ref.compile(keras.optimizers.SGD(lr), loss=None)
    hist = ref.fit(x, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    return ref, hist


# --- the pieces, in this process ---------------------------------------------------------------
def test_add_loss_model_compiled_with_loss_none_trains_on_x_alone_like_keras_fit():
    """compile(loss=None) (kerastrainer/keras/objectives.py, model.py), fit on x without targets
    (data.py, structure.py), and add_loss losses of earlier traces not kept (adapter.py)."""
    x = _x()
    ref, href = _keras_reference(x, batch=16, epochs=3)
    model = _autoencoder()
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.05))  # loss=None: Keras 3's default
    hist = km.fit(input=x, batch_size=16, max_epoch=3, shuffle=False, **QUIET)
    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
    assert _max_weight_diff(ref, model) < 1e-5
    # evaluate traces the model again: the loss is this call's add_loss only
    assert km.evaluate(x, batch_size=16) == pytest.approx(ref.evaluate(x, batch_size=16, verbose=0),
                                                                  rel=1e-5)


@pytest.mark.parametrize("kind", ["numpy", "dataset"])
def test_add_loss_model_on_two_replicas_equals_the_serial_keras_fit(kind):
    """make_parallel(...).fit(x) (the VAE programs' call) and fit(dataset of x) (the tf.data one):
    the global batch split over 2 devices gives keras.Model.fit's numbers."""
    x = _x()
    ref, href = _keras_reference(x, batch=32, epochs=3)
    model = _autoencoder()
    pmodel = make_parallel(model, cpus(2))
    pmodel.compile(optimizer=keras.optimizers.SGD(0.05), loss=None)
    if kind == "numpy":
        hist = pmodel.fit(x, shuffle=False, epochs=3, batch_size=32)
    else:
        hist = pmodel.fit(tf.data.Dataset.from_tensor_slices(x).batch(32), epochs=3)
    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    assert _max_weight_diff(ref, model) < 1e-5


def test_activity_regularizer_with_a_compiled_loss_matches_keras_fit():
    """Keras' own add_loss users (activity regularizers) beside a compiled loss: each trace of the
    tower counts its own regularization once (adapter.py clears the last trace's losses)."""
    rng = np.random.RandomState(0)
    x, y = rng.randn(64, 6).astype("float32"), rng.randn(64, 2).astype("float32")

    def make():
        keras.utils.set_random_seed(3)
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(
            4, activation="relu", activity_regularizer=keras.regularizers.L2(0.1)), keras.layers.Dense(2)])

    ref = make()
    ref.compile(keras.optimizers.SGD(0.05), "mse")
    href = ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    model = make()
    km = KerasModel(model, input=(x, y))
    km.compile(keras.optimizers.SGD(0.05), "mse")
    hist = km.fit(batch_size=16, max_epoch=2, shuffle=False, **QUIET)
    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    assert _max_weight_diff(ref, model) < 1e-5


def test_loss_none_without_add_loss_and_missing_targets_say_what_to_give():
    x = _x(16)
    plain = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    km = KerasModel(plain)
    km.compile("sgd")
    with pytest.raises(ValueError, match="No loss to compute.*add_loss"):
        km.fit(input=x, **QUIET)
    km = KerasModel(keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)]))
    km.compile("sgd", "mse")
    with pytest.raises(KerasSignatureError, match=r"no targets.*compile\(loss=None\)"):
        km.fit(input=x, **QUIET)


def test_replica_threads_draw_from_the_callers_keras_seed_generator():
    """with_keras_random_state (kerastrainer/_internals/keras_calls.py): tf.distribute traces replicas in
    threads of their own, where Keras 3 has no global seed generator (it is per thread)."""
    from keras.src.random.seed_generator import global_seed_generator
    from kerastrainer._internals import with_keras_random_state

    gen = global_seed_generator()
    seen = {}

    def replica():
        seen["with"] = global_seed_generator()

    t = threading.Thread(target=with_keras_random_state(replica))
    t.start()
    t.join()
    assert seen["with"] is gen


def test_unseeded_keras_random_op_trains_on_two_replicas():
    """The VAE's sampling ``keras.random.normal(shape)`` in a replicated step: without the
    caller's seed generator each replica thread made a variable mid-trace (UnliftableError)."""
    x = _x()
    model = _autoencoder(noise=True)
    model(x[:1])  # as a program does before training (predict, summary...): Keras makes its generator
    pmodel = make_parallel(model, cpus(2))
    pmodel.compile(optimizer=keras.optimizers.SGD(0.05), loss=None)
    hist = pmodel.fit(x, shuffle=False, epochs=4, batch_size=32)
    losses = hist.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


# --- the ported programs ---------------------------------------------------------------------------
def _write_mnist(root, n_train=512, n_test=64, seed=0):
    """IDX files like MNIST's (``{train,t10k}-{images-idx3,labels-idx1}-ubyte``): digit-like bars."""
    sys.path.insert(0, os.path.join(HERE, "tensorpack_examples"))
    try:
        import _data
    finally:
        sys.path.pop(0)
    return _data.write_mnist(str(root), n_train=n_train, n_test=n_test, seed=seed)


def _run_vae(program, tmp_path, *args, devices=2):
    sys.path.insert(0, HERE)
    try:
        from test_keras_seed_programs import run
    finally:
        sys.path.pop(0)
    mnist = _write_mnist(tmp_path)
    return run(program, *args, devices=devices, no_dropout=False, cwd=tmp_path, env={"MNIST_DIR": mnist})


def _check_vae_run(out, tmp_path):
    assert "MULTI-GPU MODEL" in out and "SUBMODEL SUMMARY" in out
    assert "SyncMultiGPUTrainerParameterServer: 2 towers on ['/cpu:0', '/cpu:1']" in out
    assert "Samples/sec:" in out and "Epoch timing" in out
    # the epoch's mean loss: KerasModel trains through Keras's train_step, whose statistic is 'loss'
    costs = [float(c) for c in re.findall(r"^loss\s+([0-9.]+)$", out, re.M)]
    assert len(costs) == 6, out[-3000:]  # one per epoch
    val = float(re.search(r"VAE VALIDATION LOSS: ([0-9.]+)", out).group(1))
    # an untrained VAE's loss is ~784 * ln 2 = 543 (every pixel 0.5): the first epoch's mean is near
    # it, the trained one (serial model, test images) well below
    assert 450 < costs[0] < 600 and val < 0.8 * costs[0]
    for name in ("vae_scatter.ps", "vae_digit.ps"):
        assert os.path.getsize(tmp_path / name) > 1000


@pytest.mark.slow
def test_vae_deconv_mgpu_trains_on_two_devices_and_plots(tmp_path):
    # 2 "GPUs": batch 128 * 2 = 256 (2 steps an epoch), lr 0.001 * 2, 6 epochs
    out = _run_vae("vae_deconv_mgpu.py", tmp_path, "--mgpu", "--epochs=6")
    _check_vae_run(out, tmp_path)


@pytest.mark.slow
def test_vae_deconv_tfdataset_mgpu_trains_on_two_devices_and_plots(tmp_path):
    # the tf.data pipeline (repeat, shuffle, batch 256) given to fit, steps_per_epoch = 2
    out = _run_vae("vae_deconv_tfdataset_mgpu.py", tmp_path, "--mgpu", "--epochs=6")
    _check_vae_run(out, tmp_path)
