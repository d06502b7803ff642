"""make_parallel / ModelMGPU / multi_gpu_model on logical CPU devices (conftest makes 4)."""
import numpy as np
import pytest
import keras
import tensorflow as tf

from _devices import cpus
from kerastrainer import SyncMultiGPUTrainerReplicated
from kerastrainer.keras import KerasModel, ModelMGPU, get_num_gpu, make_parallel, multi_gpu_model

QUIET = dict()


def _data(n=256, dim=8, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype("float32")
    y = np.argmax(x @ np.random.RandomState(42).randn(dim, 3), 1).astype("int32")
    return x, y


def _model(seed=1, bn=False):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((8,)), keras.layers.Dense(16, activation="relu")]
    if bn:
        layers.append(keras.layers.BatchNormalization())
    return keras.Sequential(layers + [keras.layers.Dense(3)])


def _xent():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


@pytest.mark.parametrize("ndev", [2, 4])
def test_make_parallel_fit_equals_serial_fit(ndev):
    x, y = _data()
    with tf.device("/cpu:0"):  # the reference on a CPU device too: a GPU's matmuls (TF32) differ
        serial = _model()
        serial.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
        href = serial.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)

    model = _model()
    pmodel = make_parallel(model, [f"/cpu:{i}" for i in range(ndev)])
    assert isinstance(pmodel, ModelMGPU) and isinstance(pmodel, keras.Model)
    pmodel.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    hist = pmodel.fit(x, y, batch_size=32, epochs=2, shuffle=False, validation_data=(x[:64], y[:64]))
    for a, b in zip(serial.get_weights(), model.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(hist.history["loss"], href.history["loss"], rtol=1e-5)
    assert len(hist.history["val_loss"]) == 2
    trainer = pmodel._km.trainer
    assert trainer.num_replicas == ndev and trainer.global_step == 16


def test_weights_are_shared_with_the_serial_model(tmp_path):
    x, y = _data(n=128)
    model = _model(bn=True)
    before = model.get_weights()
    pmodel = make_parallel(model, cpus(2))
    pmodel.compile(keras.optimizers.Adam(1e-2), _xent())
    loss0 = pmodel.evaluate(x, y)
    pmodel.fit(x, y, batch_size=32, epochs=1)
    after = model.get_weights()
    assert all(np.abs(a - b).max() > 0 for a, b in zip(before, after) if a.ndim)
    for a, b in zip(pmodel.get_weights(), after):
        np.testing.assert_array_equal(a, b)
    # the serial model is plain Keras again: save/load and Keras' own fit work
    pmodel.save(str(tmp_path / "p.keras"))
    loaded = keras.models.load_model(str(tmp_path / "p.keras"))
    np.testing.assert_allclose(loaded.predict(x[:8], verbose=0), model.predict(x[:8], verbose=0), atol=1e-6)
    model.compile("sgd", _xent())
    model.fit(x, y, epochs=1, verbose=0)
    # a second parallel fit continues from the trained weights
    pmodel.fit(x, y, batch_size=32, epochs=1)
    assert pmodel._km.trainer.global_step == 4
    assert pmodel.evaluate(x, y) < loss0


def test_multi_gpu_model_counts_gpus_else_logical_cpus():
    if get_num_gpu() == 1:
        pytest.skip("multi_gpu_model(gpus=2) means two GPUs; this machine has one")
    pmodel = multi_gpu_model(_model(), gpus=2)
    want = ["/gpu:0", "/gpu:1"] if get_num_gpu() else cpus(2)
    assert [d.lower().replace("device:", "") for d in pmodel._gdev_list] == want


def test_errors_and_single_device_fallback():
    model = _model()
    with pytest.raises(ValueError, match="gpus >= 2"):
        multi_gpu_model(model, 1)
    with pytest.raises(ValueError, match=r"`len\(gpus\) >= 2`"):
        multi_gpu_model(model, [0])
    with pytest.raises(ValueError, match=r"we expect the following devices to be available.*Try reducing `gpus`"):
        multi_gpu_model(model, 8)
    with pytest.raises(ValueError, match=r"Device '/gpu:7' does not exist.*Available devices: \["):
        make_parallel(model, ["/gpu:7", "/cpu:0"])
    with pytest.raises(ValueError, match="more than once"):
        make_parallel(model, ["/cpu:0", "/cpu:0"])
    assert make_parallel(model, ["/cpu:0"]) is model
    assert make_parallel(model, []) is model
    assert get_num_gpu() == len(tf.config.list_logical_devices("GPU"))
    with pytest.raises(RuntimeError, match="compile"):
        make_parallel(model, ["/cpu:0", "/cpu:1"]).fit(*_data(n=32))


def test_keras_fit_with_steps_per_execution_under_mirrored_strategy_vs_ours():
    x, y = _data(n=256)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        ref = _model()
        ref.compile(keras.optimizers.SGD(0.1), _xent(), steps_per_execution=4)
    # Keras 3.15: the multi-step loop under MirroredStrategy fails when it runs
    with pytest.raises(tf.errors.InvalidArgumentError):
        ref.fit(x, y, batch_size=32, epochs=2, verbose=0)

    model = _model()
    km = KerasModel(model, input=(x, y), trainer=SyncMultiGPUTrainerReplicated(cpus(2), steps_per_call=4))
    km.compile(keras.optimizers.SGD(0.1), _xent())
    hist = km.fit(max_epoch=2, batch_size=32)
    assert km.trainer.last_call_steps == 4 and km.trainer.num_replicas == 2
    assert hist.history["loss"][1] < hist.history["loss"][0]


def test_fit_refuses_class_and_sample_weight_and_multi_gpu_model_refuses_no_gpus():
    x, y = _data(n=64)
    pmodel = make_parallel(_model(), cpus(2))
    pmodel.compile(keras.optimizers.SGD(0.1), _xent())
    with pytest.raises(ValueError, match="class_weight is not supported"):
        pmodel.fit(x, y, class_weight={0: 1.0, 1: 2.0, 2: 1.0})
    with pytest.raises(ValueError, match="sample_weight is not supported"):
        pmodel.fit(x, y, sample_weight=np.ones(64))
    with pytest.raises(ValueError, match=r"gpus=\[\]"):
        multi_gpu_model(_model(), gpus=[])


def test_fit_generator_validates_on_validation_steps_batches():
    x, y = _data(n=256)
    read = []

    def val_batches():  # endless, as Keras 2 generators are: validation_steps bounds each validation
        while True:
            read.append(1)
            yield x[:32], y[:32]

    def train_batches():
        while True:
            for i in range(0, 256, 32):
                yield x[i:i + 32], y[i:i + 32]

    pmodel = make_parallel(_model(), cpus(2))
    pmodel.compile(keras.optimizers.SGD(0.1), _xent(), metrics=["accuracy"])
    hist = pmodel.fit_generator(train_batches(), steps_per_epoch=4, epochs=2, validation_data=val_batches(),
                                validation_steps=3)
    assert len(hist.history["val_loss"]) == 2 and len(read) == 6


class _IdiomModelMGPU(keras.Model):
    """The keras#2436 / keras_experiments idiom found in many repositories, verbatim but for the import
    of ``multi_gpu_model`` (``keras.utils`` -> ``kerastrainer.keras``) and ``Model`` -> ``keras.Model``."""

    def __init__(self, ser_model, gpus):
        pmodel = multi_gpu_model(ser_model, gpus)
        self.__dict__.update(pmodel.__dict__)
        self._smodel = ser_model

    def __getattribute__(self, attrname):
        '''Override load and save methods to be used from the serial-model. The
        serial-model holds references to the weights in the multi-gpu model.
        '''
        if 'load' in attrname or 'save' in attrname:
            return getattr(self._smodel, attrname)
        return super(_IdiomModelMGPU, self).__getattribute__(attrname)


def test_modelmgpu_idiom_compiles_fits_checkpoints_and_saves(tmp_path):
    x, y = _data(128)
    serial = _model()
    pmodel = _IdiomModelMGPU(serial, 2)   # 2 of conftest's logical CPU devices (no GPU here)
    pmodel.compile(optimizer=keras.optimizers.SGD(0.1), loss=_xent(), metrics=["accuracy"])
    best = str(tmp_path / "best.keras")
    weights = str(tmp_path / "ep{epoch:02d}.weights.h5")
    callbacks = [keras.callbacks.ModelCheckpoint(best, monitor="val_loss", save_best_only=True),
                 keras.callbacks.ModelCheckpoint(weights, save_weights_only=True)]
    before = serial.get_weights()
    hist = pmodel.fit(x, y, batch_size=32, epochs=3, validation_data=(x, y), callbacks=callbacks)
    assert len(hist.history["loss"]) == 3 and hist.history["val_loss"][-1] < hist.history["val_loss"][0]
    assert not all(np.array_equal(a, b) for a, b in zip(before, serial.get_weights()))  # the template trained
    final = str(tmp_path / "final.keras")
    pmodel.save(final)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "best.keras", "ep01.weights.h5", "ep02.weights.h5", "ep03.weights.h5", "final.keras"]
    reloaded = keras.models.load_model(final)
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), serial.predict(x, verbose=0), rtol=1e-6)
    # the best checkpoint is the serial model (not the parallel graph), and so is the last weights file
    assert len(keras.models.load_model(best).layers) == len(serial.layers)
    fresh = _model(seed=7)
    pmodel.load_weights(str(tmp_path / "ep03.weights.h5"))   # routed to the template as well
    fresh.load_weights(str(tmp_path / "ep03.weights.h5"))
    np.testing.assert_allclose(fresh.predict(x, verbose=0), serial.predict(x, verbose=0), rtol=1e-6)


def test_modelmgpu_errors_are_runtime_errors_as_in_keras_experiments():
    model = _model()
    with pytest.raises(RuntimeError, match="serial_model"):
        ModelMGPU(gdev_list=cpus(2))
    with pytest.raises(RuntimeError, match="gdev_list"):
        ModelMGPU(serial_model=model)
    with pytest.raises(RuntimeError, match="at least 2 devices"):
        ModelMGPU(serial_model=model, gdev_list=cpus(1))
