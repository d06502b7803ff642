"""``KerasModel`` is a drop-in for ``keras.Model.fit``, and the model stays the user's.

Every check trains the same model (same initial weights) on the same data with ``keras.Model.fit``
/ ``evaluate`` and with ``KerasModel``, and compares the numbers.
"""
import os
import sys

import numpy as np
import pytest
import keras
import tensorflow as tf

from kerastrainer.keras import KerasModel

QUIET = dict(extra_callbacks=[], monitors=[])
TOL = 1e-5


def _data(n=96, dim=6, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype("float32")
    y = np.argmax(x @ np.random.RandomState(42).randn(dim, 3), 1).astype("int32")
    return x, y


def _pair(dim=6, seed=1):
    """Two models with the same architecture and the same initial weights."""
    def build():
        return keras.Sequential([keras.Input((dim,)), keras.layers.Dense(8, activation="relu"),
                                 keras.layers.Dense(3)])
    keras.utils.set_random_seed(seed)
    a = build()
    b = build()
    b.set_weights(a.get_weights())
    return a, b


def _xent():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _compile_both(ref, km, opt=lambda: keras.optimizers.SGD(0.1), metrics=("accuracy",)):
    ref.compile(opt(), _xent(), metrics=list(metrics))
    km.compile(opt(), _xent(), metrics=list(metrics))


def _close(a, b, tol=TOL):
    assert np.allclose(a, b, atol=tol, rtol=0), (a, b)


# --- fit: Keras's signature -----------------------------------------------------------------------
def test_fit_x_y_matches_keras_and_logs_learning_rate():
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    h = km.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])
    _close(h.history["accuracy"], h_ref.history["accuracy"])
    assert h.history["learning_rate"] == pytest.approx([0.1] * 3)
    assert h.epoch == [0, 1, 2] and h.params["epochs"] == 3


def test_sample_weight_numpy_matches_keras():
    x, y = _data()
    sw = np.random.RandomState(3).rand(len(x)).astype("float32") * 2
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, sample_weight=sw, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h = km.fit(x, y, sample_weight=sw, batch_size=16, epochs=2, shuffle=False, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])
    _close(km.evaluate(x, y, sample_weight=sw, verbose=0), ref.evaluate(x, y, sample_weight=sw, verbose=0))


def test_sample_weight_dataset_matches_keras():
    x, y = _data()
    sw = np.random.RandomState(4).rand(len(x)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(16)
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(ds, epochs=2, verbose=0)
    h = km.fit(ds, epochs=2, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])


def test_class_weight_matches_keras():
    x, y = _data()
    cw = {0: 0.5, 1: 2.0, 2: 1.0}
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, class_weight=cw, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h = km.fit(x, y, class_weight=cw, batch_size=16, epochs=2, shuffle=False, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])
    with pytest.raises(ValueError, match="class_weight"):
        km.fit(x, y, class_weight=cw, sample_weight=np.ones(len(x)), verbose=0)


def test_validation_split_takes_the_last_fraction_as_keras():
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, validation_split=1 / 3, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h = km.fit(x, y, validation_split=1 / 3, batch_size=16, epochs=2, shuffle=False, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])
    _close(h.history["val_loss"], h_ref.history["val_loss"])
    _close(h.history["val_accuracy"], h_ref.history["val_accuracy"])


def test_validation_freq_as_keras():
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, validation_data=(x[:32], y[:32]), validation_freq=2, batch_size=16, epochs=4,
                    shuffle=False, verbose=0)
    h = km.fit(x, y, validation_data=(x[:32], y[:32]), validation_freq=2, batch_size=16, epochs=4,
               shuffle=False, verbose=0)
    _close(h.history["val_loss"], h_ref.history["val_loss"])
    assert len(h.history["val_loss"]) == 2


def test_initial_epoch_maps_to_starting_epoch():
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    h_ref = ref.fit(x, y, batch_size=16, epochs=3, initial_epoch=1, shuffle=False, verbose=0)
    h = km.fit(x, y, batch_size=16, epochs=3, initial_epoch=1, shuffle=False, verbose=0)
    assert h.epoch == h_ref.epoch == [1, 2]
    _close(h.history["loss"], h_ref.history["loss"])


def test_verbose_is_checked():
    x, y = _data(32)
    km = KerasModel(_pair()[1])
    km.compile("sgd", _xent())
    with pytest.raises(ValueError, match="verbose"):
        km.fit(x, y, verbose=3)


def test_compile_without_optimizer_is_rmsprop_as_keras():
    x, y = _data()
    ref, model = _pair()
    ref.compile(loss=_xent())
    km = KerasModel(model)
    km.compile(loss=_xent())
    h_ref = ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h = km.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert isinstance(model.optimizer, keras.optimizers.RMSprop)
    _close(h.history["loss"], h_ref.history["loss"])


# --- the first positional argument --------------------------------------------------------------
def test_first_positional_with_constructor_input_is_validation_data():
    x, y = _data()
    km = KerasModel(_pair()[1], input=(x, y))
    km.compile("sgd", _xent())
    h = km.fit((x[:32], y[:32]), batch_size=16, verbose=0)   # tensorpack's fit(validation_data)
    assert "val_loss" in h.history
    with pytest.raises(ValueError, match="ambiguous"):
        km.fit(x, y, verbose=0)
    with pytest.raises(ValueError, match="ambiguous"):
        km.fit((x[:32], y[:32]), validation_data=(x[:32], y[:32]), verbose=0)


# --- evaluate -----------------------------------------------------------------------------------
def test_evaluate_returns_what_keras_returns():
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    _compile_both(ref, km)
    got, want = km.evaluate(x, y, verbose=0), ref.evaluate(x, y, verbose=0)
    assert isinstance(got, list) and len(got) == len(want) == 2
    _close(got, want)
    d = km.evaluate(x, y, return_dict=True, verbose=0)
    assert set(d) == {"loss", "accuracy"}
    km2 = KerasModel(_pair()[1])
    km2.compile("sgd", _xent())
    assert isinstance(km2.evaluate(x, y, verbose=0), float)
    assert km.evaluate((x, y)) == pytest.approx(km.evaluate(x, y))   # one rule for every form
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    _close(km.evaluate(ds, return_dict=True)["loss"], ref.evaluate(ds, verbose=0)[0])


# --- the model stays the user's -----------------------------------------------------------------
def test_trained_model_is_the_users_compiled_keras_model(tmp_path):
    x, y = _data()
    ref, model = _pair()
    km = KerasModel(model)
    opt = keras.optimizers.Adam(1e-2)
    km.compile(opt, _xent(), metrics=["accuracy"])
    km.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert model.optimizer is opt and int(opt.iterations) == 12
    ev = model.evaluate(x, y, verbose=0, return_dict=True)
    _close(ev["loss"], km.evaluate(x, y, return_dict=True, verbose=0)["loss"])
    assert model.predict(x, verbose=0).shape == (len(x), 3)
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert int(loaded.optimizer.iterations) == 12
    for a, b in zip(loaded.optimizer.variables, opt.variables):
        _close(np.asarray(a), np.asarray(b))
    # Keras's resume path and ours continue from the same optimizer state
    again = keras.models.load_model(path)
    h1 = loaded.fit(x, y, batch_size=16, epochs=3, initial_epoch=2, shuffle=False, verbose=0)
    h2 = KerasModel(again).fit(x, y, batch_size=16, epochs=3, initial_epoch=2, shuffle=False, verbose=0)
    _close(h2.history["loss"], h1.history["loss"])
    assert int(again.optimizer.iterations) == int(loaded.optimizer.iterations) == 18
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)    # Keras's own fit on the same model


def test_a_model_compiled_by_keras_needs_no_kerasmodel_compile():
    x, y = _data()
    ref, model = _pair()
    ref.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    model.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    h_ref = ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    h = KerasModel(model).fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    _close(h.history["loss"], h_ref.history["loss"])


def test_a_keras_compiles_loop_arguments_are_named_as_not_used(kt_log):
    x, y = _data()
    model = _pair()[1]
    model.compile(keras.optimizers.SGD(0.1), _xent(), steps_per_execution=8, run_eagerly=True)
    KerasModel(model).fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert any("steps_per_execution=8" in m and "run_eagerly=True" in m and "only Keras's own fit" in m
               for m in kt_log.messages)
    n = len(kt_log.messages)
    model = _pair()[1]
    model.compile(keras.optimizers.SGD(0.1), _xent())
    KerasModel(model).fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert not any("only Keras's own fit" in m for m in kt_log.messages[n:])


# --- keras.callbacks ----------------------------------------------------------------------------
def test_tensorboard_callback_writes_its_logs(tmp_path):
    x, y = _data()
    km = KerasModel(_pair()[1])
    km.compile("sgd", _xent(), metrics=["accuracy"])
    logdir = str(tmp_path / "tb")
    km.fit(x, y, validation_data=(x[:32], y[:32]), batch_size=16, epochs=2, verbose=0,
           callbacks=[keras.callbacks.TensorBoard(logdir, histogram_freq=1)])
    train = os.path.join(logdir, "train")
    val = os.path.join(logdir, "validation")
    assert any(f.startswith("events") for f in os.listdir(train))
    assert any(f.startswith("events") for f in os.listdir(val))


def test_progbar_logger_and_lambda_callback_run():
    x, y = _data()
    km = KerasModel(_pair()[1])
    km.compile("sgd", _xent())
    seen = []
    km.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[
        keras.callbacks.ProgbarLogger(),
        keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(type(seen).__name__))])
    assert len(seen) == 2


# --- one batch rule: the global batch, for every input kind, on 1 device, 2 replicas, 2 workers ----
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_programs import batch_rule  # noqa: E402


def _close_to_keras(weights, what):
    for got, want in zip(weights, batch_rule.keras_reference()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("kind", batch_rule.KINDS)
def test_global_batch_on_one_device_and_two_replicas_for_every_input_kind(kind):
    from kerastrainer.train import SyncMultiGPUTrainerReplicated
    _close_to_keras(batch_rule.train(kind), f"{kind}, one device")
    trainer = SyncMultiGPUTrainerReplicated(["/cpu:0", "/cpu:1"], steps_per_call=1)
    _close_to_keras(batch_rule.train(kind, trainer), f"{kind}, two replicas")


def _two_workers(tmp_path, kinds):
    import subprocess
    cmd = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5", sys.executable,
           batch_rule.__file__, str(tmp_path), *kinds]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for kind in kinds:
        with np.load(tmp_path / f"{kind}.npz") as z:
            yield kind, [z[f"arr_{i}"] for i in range(len(z.files))]


@pytest.mark.slow
def test_global_batch_on_two_workers_tf_data_and_numpy(tmp_path):
    # the case: a tf.data batch was per worker (twice Keras's global batch)
    for kind, weights in _two_workers(tmp_path, ["tfdata", "numpy"]):
        _close_to_keras(weights, f"{kind}, two workers")


@pytest.mark.slow
def test_global_batch_on_two_workers_generator_pydataset_dataflow(tmp_path):
    for kind, weights in _two_workers(tmp_path, ["generator", "pydataset", "dataflow"]):
        _close_to_keras(weights, f"{kind}, two workers")


def test_global_batch_that_workers_cannot_share_is_an_error():
    from kerastrainer.keras.model import _shard
    x, y = batch_rule.make_data()
    with pytest.raises(ValueError, match="batch_size=7 is the global batch of 2 workers: make it a multiple of 2"):
        _shard((x, y), 7, 0, 2)
    (xs, ys), local, worker = _shard((x, y), 8, 1, 2)
    assert local == 4 and worker == (0, 1) and np.array_equal(xs, x[1::2]) and np.array_equal(ys, y[1::2])
    ds, local, worker = _shard(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None, 1, 2)
    assert worker == (1, 2) and local is None


def test_worker_takes_its_parts_of_each_global_batch():
    from kerastrainer.keras.batch_flows import SplitBatches
    from kerastrainer.keras.data import as_keras_data
    x, y = batch_rule.make_data()
    for data in [(x, y), tf.data.Dataset.from_tensor_slices((x, y)).batch(10)]:
        kd = as_keras_data(data, batch_size=10 if isinstance(data, tuple) else None, shuffle=False)
        source, steps = kd.make_input(lambda dp: list(dp), num_replicas=2, worker=(1, 2))
        assert steps == 4
    # a global batch of 10 on 2 workers x 2 replicas: parts of 2, 3, 2, 3; worker 1 takes the last two
    parts = list(SplitBatches([[x[:10], y[:10]]], 4, with_share=True, parts=range(2, 4)))
    assert [len(p[0]) for p in parts] == [2, 3]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), x[5:10])
    assert [float(p[-1]) for p in parts] == pytest.approx([0.8, 1.2])
    with pytest.raises(ValueError, match="must be a range inside range"):
        SplitBatches([], 2, parts=range(1, 3))
