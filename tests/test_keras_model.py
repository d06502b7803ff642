"""KerasModel: a whole keras.Model trained by kerastrainer, checked against keras.Model.fit."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import keras
import tensorflow as tf

from _devices import cpus
from kerastrainer import (ModelDesc, ModelSaver, SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                          launch_train_with_config)
from kerastrainer.dataflow import DataFromList
from kerastrainer.input_source.base import InputSourceError
from kerastrainer.keras import KerasModel, KerasSignatureError
from kerastrainer.models import keras_layer
from kerastrainer.tfutils import add_moving_summary
from kerastrainer.utils import logger

QUIET = dict(extra_callbacks=[], monitors=[])


def _data(n=256, dim=8, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype("float32")
    w = np.random.RandomState(42).randn(dim, 3)
    y = np.argmax(x @ w, 1).astype("int32")
    return x, y


def _mlp(dim=8, seed=1, reg=0.0, input_layer=True):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((dim,))] if input_layer else []
    layers += [keras.layers.Dense(16, activation="relu",
                                  kernel_regularizer=keras.regularizers.L2(reg) if reg else None),
               keras.layers.Dense(3)]
    return keras.Sequential(layers)


def _xent():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _max_weight_diff(a, b):
    return max(float(np.abs(u - v).max()) for u, v in zip(a.get_weights(), b.get_weights()))


def test_sgd_matches_keras_fit_loss_curve_and_weights():
    x, y = _data()
    ref = _mlp(reg=1e-3)
    ref.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    href = ref.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0)

    model = _mlp(reg=1e-3)
    km = KerasModel(model, input=(x, y))
    km.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    hist = km.fit(max_epoch=3, batch_size=32, shuffle=False, **QUIET)

    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    np.testing.assert_allclose(hist.history["accuracy"], href.history["accuracy"], atol=1e-6)
    assert _max_weight_diff(ref, model) < 1e-5
    ev, ev_ref = km.evaluate((x, y), return_dict=True), ref.evaluate(x, y, verbose=0, return_dict=True)
    assert ev["loss"] == pytest.approx(ev_ref["loss"], rel=1e-5)
    assert ev["accuracy"] == pytest.approx(ev_ref["accuracy"])
    assert km.trainer.global_step == 3 * 8


def _bn_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(32), keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"), keras.layers.Dropout(0.3), keras.layers.Dense(3)])


def test_adam_batchnorm_dropout_reaches_the_same_accuracy_band_as_keras_fit():
    x, y = _data(n=1024)
    xt, yt = _data(n=512, seed=5)
    ref = _bn_model(3)
    ref.compile(keras.optimizers.Adam(3e-3), _xent(), metrics=["accuracy"])
    ref.fit(x, y, batch_size=32, epochs=4, verbose=0)
    ref_acc = ref.evaluate(xt, yt, verbose=0, return_dict=True)["accuracy"]

    model = _bn_model(3)
    km = KerasModel(lambda: model, input=(x, y))
    km.compile(keras.optimizers.Adam(3e-3), _xent(), metrics=["accuracy"])
    km.fit(max_epoch=4, batch_size=32, **QUIET)
    acc = km.evaluate((xt, yt), return_dict=True)["accuracy"]
    assert ref_acc > 0.85 and acc > 0.85
    assert abs(acc - ref_acc) < 0.05
    bn = model.layers[1]
    # BatchNorm's moving statistics were updated in training mode
    assert np.abs(bn.moving_mean.numpy()).max() > 1e-3
    # Dropout is active in training only: inference is deterministic
    np.testing.assert_array_equal(model.predict(xt[:8], verbose=0), model.predict(xt[:8], verbose=0))


def test_replicated_trainer_on_one_tower_trains_as_the_simple_trainer():
    """One tower of SyncMultiGPUTrainerReplicated (tensorpack's imagenet-resnet-keras.py on one GPU): the
    variables are a MirroredStrategy's, whose gradients Keras's step takes in a replica."""
    x, y = _data()
    weights = []
    for trainer in (SimpleTrainer(), SyncMultiGPUTrainerReplicated(cpus(1))):
        model = _mlp()
        km = KerasModel(model, input=(x, y), trainer=trainer)
        km.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
        km.fit(max_epoch=2, batch_size=32, shuffle=False, **QUIET)
        weights.append(model.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert _max_weight_diff(model, _mlp()) > 1e-2   # it trained


def test_saved_model_gives_the_same_predictions_in_a_fresh_process(tmp_path):
    x, y = _data()
    model = _bn_model(2)
    km = KerasModel(model, input=(x, y), trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile("adam", _xent(), metrics=["accuracy"])
    km.fit(max_epoch=1, batch_size=32, **QUIET)
    path = str(tmp_path / "m.keras")
    model.save(path)
    np.save(tmp_path / "x.npy", x[:16])
    expected = model.predict(x[:16], verbose=0)
    script = textwrap.dedent(f"""
        import numpy as np, keras
        m = keras.models.load_model({path!r})
        np.save({str(tmp_path / 'p.npy')!r}, m.predict(np.load({str(tmp_path / 'x.npy')!r}), verbose=0))
    """)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, env=env)
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), expected)


def _two_in_two_out(seed=4):
    keras.utils.set_random_seed(seed)
    a = keras.Input((8,), name="a")
    b = keras.Input((4,), name="b")
    h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([a, b]))
    cls = keras.layers.Dense(3, name="cls")(h)
    reg = keras.layers.Dense(1, name="reg")(h)
    return keras.Model({"a": a, "b": b}, {"cls": cls, "reg": reg})


def test_multi_input_multi_output_with_dict_losses_matches_keras_fit():
    x, y = _data(n=128)
    rng = np.random.RandomState(3)
    b = rng.randn(128, 4).astype("float32")
    r = (x[:, :1] + b[:, :1]).astype("float32")
    kw = dict(loss={"cls": _xent(), "reg": "mse"}, loss_weights={"cls": 1.0, "reg": 0.5},
              metrics={"cls": ["accuracy"], "reg": ["mae"]})
    ref = _two_in_two_out()
    ref.compile(keras.optimizers.SGD(0.05), **kw)
    href = ref.fit({"a": x, "b": b}, {"cls": y, "reg": r}, batch_size=32, epochs=2, shuffle=False, verbose=0)
    model = _two_in_two_out()
    km = KerasModel(model, input=({"a": x, "b": b}, {"cls": y, "reg": r}))
    km.compile(keras.optimizers.SGD(0.05), **kw)
    hist = km.fit(max_epoch=2, batch_size=32, shuffle=False, **QUIET)
    assert _max_weight_diff(ref, model) < 1e-5
    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    assert {"cls_loss", "reg_loss", "cls_accuracy", "reg_mae"} <= set(hist.history)
    assert km.evaluate(({"a": x, "b": b}, {"cls": y, "reg": r}), return_dict=True)["reg_mae"] > 0


def test_list_inputs_and_targets_and_an_unbuilt_model():
    x, y = _data(n=64)
    model = _mlp(input_layer=False)          # built on the first batch
    km = KerasModel(model, input=(x, y))
    km.compile(keras.optimizers.SGD(0.1), _xent())
    hist = km.fit(max_epoch=2, batch_size=16, **QUIET)
    assert model.built and len(hist.history["loss"]) == 2


def test_signature_mismatch_names_the_input_and_the_target():
    x, y = _data(n=64)
    km = KerasModel(_mlp(dim=6), input=(x, y))     # the model takes 6 features, the data has 8
    km.compile("sgd", _xent())
    with pytest.raises(KerasSignatureError, match="Input 'input'.*shape"):
        km.fit(max_epoch=1, batch_size=16, **QUIET)
    km = KerasModel(_mlp(), input=(x, y),
                    target_signature=[tf.TensorSpec((None, 3), tf.float32, "y")])
    km.compile("sgd", _xent())
    with pytest.raises(KerasSignatureError, match="Target of output"):
        km.fit(max_epoch=1, batch_size=16, **QUIET)
    km = KerasModel(_two_in_two_out(), input=({"a": x, "b": x[:, :4]}, {"cls": y}))
    km.compile("sgd", {"cls": _xent(), "reg": "mse"})
    with pytest.raises(KerasSignatureError, match=r"outputs \['reg'\] are missing"):
        km.fit(max_epoch=1, batch_size=16, **QUIET)
    with pytest.raises(ValueError, match="does not have"):
        km2 = KerasModel(_mlp(), input=(x, y))
        km2.compile("sgd", {"nope": "mse"})
        km2.fit(max_epoch=1, **QUIET)


class _PyData(keras.utils.PyDataset):
    def __init__(self, x, y, bs):
        super().__init__()
        self.x, self.y, self.bs = x, y, bs

    def __len__(self):
        return len(self.x) // self.bs

    def __getitem__(self, i):
        s = slice(i * self.bs, (i + 1) * self.bs)
        return self.x[s], self.y[s]


@pytest.mark.parametrize("kind", ["tfdata", "pydataset", "dataflow", "dataflow_flat"])
def test_each_data_kind_trains_like_numpy(kind):
    x, y = _data(n=128)
    base = _mlp()
    km = KerasModel(base, input=(x, y))
    km.compile(keras.optimizers.SGD(0.1), _xent())
    km.fit(max_epoch=2, batch_size=16, shuffle=False, **QUIET)

    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 128, 16)]
    data = {"tfdata": lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(16),
            "pydataset": lambda: _PyData(x, y, 16),
            "dataflow": lambda: DataFromList(batches, shuffle=False),
            "dataflow_flat": lambda: DataFromList([list(b) for b in batches], shuffle=False)}[kind]()
    model = _mlp()
    km2 = KerasModel(model, input=data)
    km2.compile(keras.optimizers.SGD(0.1), _xent())
    km2.fit(max_epoch=2, shuffle=False, **QUIET)   # (a PyDataset's batches are reordered by default, as Keras)
    assert km2.trainer.global_step == 16
    assert _max_weight_diff(base, model) < 1e-6


def test_validation_data_and_checkpoint_resume(logdir):
    logger.set_logger_dir(logdir, "d")
    x, y = _data()
    model = _mlp()
    km = KerasModel(model, input=(x, y))
    km.compile(keras.optimizers.Adam(1e-2), _xent(), metrics=["accuracy"])
    hist = km.fit(validation_data=(x[:64], y[:64]), max_epoch=2, batch_size=32, callbacks=[ModelSaver()])
    assert len(hist.history["val_loss"]) == 2 and "val_accuracy" in hist.history
    assert km.trainer.monitors.get_latest("val_accuracy") == hist.history["val_accuracy"][-1]

    fresh = _mlp(seed=9)
    assert _max_weight_diff(fresh, model) > 1e-3
    km2 = KerasModel(fresh, input=(x, y))
    km2.compile(keras.optimizers.Adam(1e-2), _xent())
    km2.fit(max_epoch=0, session_init=logdir, **QUIET)   # restore only
    assert _max_weight_diff(fresh, model) == 0.0


class _TowerWithKerasLayers(ModelDesc):
    """Seed flavour 1: Keras layers in a ModelDesc tower, one made in __init__."""

    def __init__(self):
        self.head = keras.layers.Dense(3, name="head")

    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        dense = keras_layer("hidden", lambda: keras.layers.Dense(
            16, activation="relu", kernel_regularizer=keras.regularizers.L2(0.01)))
        bn = keras_layer("bn", lambda: keras.layers.BatchNormalization())
        from kerastrainer.tfutils import get_current_tower_context
        h = bn(dense(x), training=get_current_tower_context().is_training)
        logits = self.head(h)
        xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        reg = tf.add_n(dense.losses, name="reg")
        add_moving_summary(reg)
        return tf.add(xent, reg, name="cost")

    def optimizer(self):
        return keras.optimizers.SGD(0.1)


@pytest.mark.parametrize("towers", [1, 2])
def test_keras_layers_in_a_tower_are_shared_saved_and_regularized(logdir, towers):
    logger.set_logger_dir(logdir, "d")
    x, y = _data()
    flow = DataFromList([[x[i:i + 32], y[i:i + 32]] for i in range(0, 256, 32)], shuffle=False)
    model = _TowerWithKerasLayers()
    trainer = SimpleTrainer() if towers == 1 else SyncMultiGPUTrainerReplicated(cpus(towers))
    launch_train_with_config(TrainConfig(model=model, dataflow=flow, callbacks=[ModelSaver()], max_epoch=2,
                                         extra_callbacks=[], monitors=[]), trainer)
    store = model.layer_store
    assert sorted(store.layers) == ["bn", "hidden"]
    named = trainer.named_variables()
    assert {"hidden/kernel", "bn/moving_mean", "head/kernel"} <= set(named)
    assert trainer.last_step_outputs["reg"] > 0
    assert np.abs(store.layers["bn"].moving_mean.numpy()).max() > 1e-3
    if towers == 2:   # the moving statistics are the first replica's on every replica
        mm = store.layers["bn"].moving_mean.value
        np.testing.assert_array_equal(mm.values[0].numpy(), mm.values[1].numpy())
    saved = {k: v.numpy().copy() for k, v in named.items()}
    model2 = _TowerWithKerasLayers()
    trainer2 = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=model2, dataflow=flow, max_epoch=0, session_init=logdir,
                                         extra_callbacks=[], monitors=[]), trainer2)
    for k, v in trainer2.named_variables().items():
        np.testing.assert_array_equal(v.numpy(), saved[k])


def test_evaluate_refuses_a_cast_that_changes_a_value():
    x, y = _data(n=8)
    km = KerasModel(_mlp())
    km.compile("sgd", _xent(), metrics=["accuracy"])
    km.evaluate((x, y))                      # the targets are int32 from here on
    big = y.astype("int64")
    big[3] = 2 ** 32 + 1                     # int32 would make it 1, a valid class
    with pytest.raises(InputSourceError, match=r"evaluate: target 'output_target': the value 4294967297 .*int32"):
        km.evaluate((x, big))
    frac = y.astype("float64")
    frac[5] = 1.7
    with pytest.raises(InputSourceError, match=r"evaluate: target 'output_target': the value 1.7 .*whole"):
        km.evaluate((x, frac))
    assert km.evaluate((x, y.astype("float64"))) == pytest.approx(km.evaluate((x, y)))


def test_a_metric_of_an_output_without_a_loss_is_computed_against_its_target():
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,))
    model = keras.Model(inp, [keras.layers.Dense(1, name="a")(inp), keras.layers.Dense(1, name="b")(inp)])
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    y = 2 * x[:, :1]
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.0), loss=["mse", None], metrics=["mae"])  # lr 0: fixed weights
    hist = km.fit(input=(x, [y, y]), batch_size=64, max_epoch=1, **QUIET)
    true_mae = float(np.abs(model.predict(x, verbose=0)[1] - y).mean())
    assert true_mae > 0.1
    assert hist.history["b_mae"][0] == pytest.approx(true_mae, rel=1e-5)
    assert km.evaluate((x, [y, y]), return_dict=True)["b_mae"] == pytest.approx(true_mae, rel=1e-5)
    with pytest.raises(KerasSignatureError, match=r"targets for the outputs \['b'\] are missing"):
        km.evaluate((x, {"a": y}))


def test_multi_replica_dataset_warns_of_a_dropped_batch_and_says_what_the_metrics_cover(kt_log):
    x, y = _data(n=65)                       # batches of 32, 32 and 1: the 1 cannot be split over 2
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
    km = KerasModel(_mlp(), input=ds, trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    km.fit(max_epoch=2, steps_per_epoch=2, **QUIET)
    logged = kt_log.messages
    dropped = [m for m in logged if "cannot be split across 2 replicas" in m]
    assert dropped == ["A batch of 1 samples cannot be split across 2 replicas; it is skipped."]
    assert any("['accuracy'] cover every replica's part" in m for m in logged)

