"""keras_experiments / Keras 2 multi_gpu_model parity, uneven splits, tensorpack's KerasModel contract.

Logical CPU devices (conftest makes 4) stand in for GPUs.
"""
import logging

import numpy as np
import pytest
import keras
import tensorflow as tf

from _devices import cpus
from kerastrainer import QueueInput, SyncMultiGPUTrainerReplicated, TrainConfig
from kerastrainer.callbacks import Callback, StopTraining
from kerastrainer.dataflow import DataFromList
from kerastrainer.keras import KerasModel, get_num_gpu, make_parallel, multi_gpu_model
from kerastrainer.keras.callbacks.timing import BatchTiming, SamplesPerSec
from kerastrainer.keras.multigpu import (GPUListType, ModelKerasMGPU, ModelMGPU, get_available_gpus,
                                        print_mgpu_modelsummary)
from kerastrainer.keras.multigpu.optimizers import RMSPropMGPU, SgdMGPU

one_gpu = pytest.mark.skipif(get_num_gpu() == 1, reason="multi_gpu_model(gpus=2) needs 2 GPUs on a GPU machine")


def _data(n, dim=8, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype("float32")
    y = np.argmax(x @ np.random.RandomState(42).randn(dim, 3), 1).astype("int32")
    return x, y


def _model(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])


def _xent():
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


class _Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        logging.getLogger("kerastrainer").addHandler(self)
        return self.messages

    def __exit__(self, *exc):
        logging.getLogger("kerastrainer").removeHandler(self)


@pytest.mark.parametrize("kind", ["make_parallel", "KerasModel"])
def test_uneven_split_gives_the_serial_numbers(kind):
    # 93 = 47 + 46 on 2 replicas; 11 steps (the last global batch is 93 too)
    x, y = _data(93 * 11)
    serial = _model()
    serial.compile(keras.optimizers.SGD(0.1), _xent())
    ref = serial.fit(x, y, batch_size=93, epochs=1, shuffle=False, verbose=0)

    model = _model()
    if kind == "make_parallel":
        pmodel = make_parallel(model, cpus(2))
        pmodel.compile(keras.optimizers.SGD(0.1), _xent())
        hist = pmodel.fit(x, y, batch_size=93, epochs=1, shuffle=False)
    else:
        km = KerasModel(model, input=(x, y), trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
        km.compile(keras.optimizers.SGD(0.1), _xent())
        hist = km.fit(batch_size=93, shuffle=False)
    for a, b in zip(serial.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hist.history["loss"], ref.history["loss"], rtol=1e-5)


@one_gpu
def test_multi_gpu_model_layers_and_keras2_errors():
    model = _model()
    pmodel = multi_gpu_model(model, gpus=None)
    n = len(get_available_gpus())
    assert [type(layer).__name__ for layer in pmodel.layers] == \
        ["InputLayer"] + ["Lambda"] * n + ["Sequential", "Concatenate"]
    assert pmodel.layers[-2] is model
    assert pmodel.layers[-1].name == model.layers[-1].name  # merged outputs are named after the outputs
    x = _data(13)[0]
    # the slices go through other matmul blockings than the whole batch: float32 rounding differs
    np.testing.assert_allclose(np.asarray(pmodel(x)), np.asarray(model(x)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"^For multi-gpu usage to be effective, call `multi_gpu_model` with "
                                         r"`gpus >= 2`\. Received: `gpus=1`$"):
        multi_gpu_model(model, gpus=1)
    with pytest.raises(ValueError, match=r"^To call `multi_gpu_model` with `gpus=64`, we expect the following "
                                         r"devices to be available: \['/cpu:0', .*\]\. However this machine only "
                                         r"has: \[.*\]\. Try reducing `gpus`\.$"):
        multi_gpu_model(model, gpus=64)
    with _Warnings() as warned:
        multi_gpu_model(model, gpus=[0, 1], cpu_merge=False, cpu_relocation=True)
    assert any("cpu_relocation=True" in m for m in warned)


@one_gpu
def test_keras2436_wrapper_trains_saves_and_reloads(tmp_path):
    class ModelMGPUWrapper(keras.Model):  # the keras#2436 idiom, verbatim but for the imports
        def __init__(self, ser_model, gpus):
            pmodel = multi_gpu_model(ser_model, gpus)
            self.__dict__.update(pmodel.__dict__)
            self._smodel = ser_model

        def __getattribute__(self, attrname):
            if 'load' in attrname or 'save' in attrname:
                return getattr(self._smodel, attrname)
            return super(ModelMGPUWrapper, self).__getattribute__(attrname)

    x, y = _data(96 * 3)
    serial = _model()
    serial.compile(keras.optimizers.SGD(0.1), _xent())
    ref = serial.fit(x, y, batch_size=96, epochs=2, shuffle=False, verbose=0)
    model = _model()
    wrapped = ModelMGPUWrapper(model, 3)
    assert wrapped.layers[-2] is model and len(wrapped.layers) == 6
    wrapped.compile(keras.optimizers.SGD(0.1), _xent())
    hist = wrapped.fit(x, y, batch_size=96, epochs=2, shuffle=False)
    np.testing.assert_allclose(hist.history["loss"], ref.history["loss"], rtol=1e-5)
    path = str(tmp_path / "template.keras")
    wrapped.save(path)
    reloaded = keras.models.load_model(path)
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), model.predict(x, verbose=0))
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), serial.predict(x, verbose=0), rtol=1e-5, atol=1e-6)
    wrapped.save_weights(str(tmp_path / "w.weights.h5"))
    fresh = _model(seed=7)
    fresh.load_weights(str(tmp_path / "w.weights.h5"))
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), model.predict(x, verbose=0))


def test_keras_exp_helpers_devices_and_knobs(capsys):
    pool = get_available_gpus()
    assert pool == (["/gpu:%d" % i for i in range(get_num_gpu())] if get_num_gpu() else cpus(4))
    assert get_available_gpus(2) == pool[:2] and get_available_gpus(-1) == pool
    assert get_available_gpus(2, list_type=GPUListType.int_id) == [0, 1]
    specs = get_available_gpus(2, list_type=GPUListType.dspec)
    assert all(isinstance(s, tf.DeviceSpec) for s in specs)

    model = _model()
    pmodel = make_parallel(model, [tf.DeviceSpec.from_string(d) for d in cpus(2)])
    assert isinstance(pmodel, ModelMGPU) and pmodel.gdev_list == cpus(2)
    with _Warnings() as warned:
        make_parallel(model, cpus(2), initsync=False, syncopt=True, enqueue=True)
    for knob in ("initsync=False", "syncopt=True", "enqueue=True"):
        assert any(knob in m for m in warned), (knob, warned)
    with _Warnings() as warned:
        make_parallel(model, cpus(2), usenccl=True)  # has a meaning: no warning
    assert not warned
    # the SLURM example's device list: every worker's devices
    wgdev = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
    with pytest.raises(ValueError, match=r"devices of 2 workers.*KerasModel\(model, "
                                         r"trainer=MultiWorkerTrainer\(\)\)"):
        make_parallel(model, wgdev)

    print_mgpu_modelsummary(pmodel)
    out = capsys.readouterr().out
    assert f"MULTI-GPU MODEL: {pmodel.name}" in out and f"SUBMODEL SUMMARY: {model.name}" in out
    assert "slice_in0_dev1" in out and "\t" in out

    class Mixin(ModelMGPU):  # model_class: a user's subclass
        pass
    assert type(make_parallel(model, cpus(2), model_class=Mixin)) is Mixin


def test_model_keras_mgpu_optimizers_and_timing_callbacks(capsys):
    x, y = _data(64 * 4)
    model = _model()
    pmodel = ModelKerasMGPU(model, get_available_gpus(2, list_type=GPUListType.int_id)) if get_num_gpu() != 1 \
        else make_parallel(model, cpus(2))
    with _Warnings() as warned:
        opt = RMSPropMGPU(lr=0.01, decay=0.5, gdev_list=cpus(2))
    assert any("gdev_list" in m for m in warned)
    # Keras 2's decay: lr / (1 + decay * iterations)
    assert abs(float(opt._learning_rate(tf.constant(2))) - 0.01 / (1 + 0.5 * 2)) < 1e-9
    assert float(SgdMGPU(lr=0.3).learning_rate) == pytest.approx(0.3)
    pmodel.compile(loss=_xent(), optimizer=opt, metrics=["accuracy"])
    timing, sps = BatchTiming(), SamplesPerSec(64)
    pmodel.fit(x, y, batch_size=64, epochs=2, callbacks=[timing, sps])
    assert len(timing.all_epoch_times) == 2 and len(timing.all_batch_times) == 8
    assert len(sps.all_samples_per_sec) == 8 and all(v > 0 for v in sps.all_samples_per_sec)
    out = capsys.readouterr().out
    assert "Epoch timing - batch (median)" in out and "Samples/sec:" in out and "Overall - batch" in out


class _StopAfter(Callback):
    def __init__(self, epochs):
        self.epochs = epochs
        self.seen_max_epoch = None

    def _trigger_epoch(self):
        self.seen_max_epoch = self.trainer.max_epoch
        if self.epoch_num >= self.epochs:
            raise StopTraining()


def test_tensorpack_keras_model_contract():
    # tensorpack's mnist-keras-v2: get_model(*input_tensors), signatures, input=QueueInput(df)
    rng = np.random.RandomState(0)
    batches = [[rng.rand(16, 6, 6, 1).astype("float32"), np.eye(4, dtype="float32")[rng.randint(0, 4, 16)]]
               for _ in range(4)]
    seen = []

    def model_func(image):
        seen.append(image)
        m = keras.models.Sequential()
        m.add(keras.layers.InputLayer(input_tensor=image))
        m.add(keras.layers.Flatten())
        m.add(keras.layers.Dense(4, activation="softmax", kernel_regularizer=keras.regularizers.l2(1e-5)))
        return m

    df = DataFromList(batches, shuffle=False)
    km = KerasModel(model_func,
                    input_signature=[tf.TensorSpec([None, 6, 6, 1], tf.float32, "images")],
                    target_signature=[tf.TensorSpec([None, 4], tf.float32, "labels")],
                    input=QueueInput(df))
    assert len(seen) == 1 and tuple(seen[0].shape) == (None, 6, 6, 1)
    km.compile(optimizer=keras.optimizers.Adam(1e-2), loss="categorical_crossentropy",
               metrics="categorical_accuracy")
    stop = _StopAfter(3)
    hist = km.fit(validation_data=DataFromList(batches[:2], shuffle=False), steps_per_epoch=len(df),
                  callbacks=[stop])
    assert stop.seen_max_epoch == _default_max_epoch()  # fit() runs to TrainConfig's max_epoch
    assert len(hist.history["loss"]) == 3 and "val_categorical_accuracy" in hist.history
    assert hist.history["loss"][-1] < hist.history["loss"][0]

    with pytest.raises(ValueError, match="input_signature"):
        KerasModel(model_func, input=QueueInput(df))


def _default_max_epoch():
    import inspect
    return inspect.signature(TrainConfig.__init__).parameters["max_epoch"].default


def test_tensorpack_input_source_feeds_each_replica_its_own_batch():
    rng = np.random.RandomState(0)
    batches = [[rng.rand(8, 8).astype("float32"), rng.randint(0, 3, 8).astype("int32")] for _ in range(6)]
    model = _model()
    km = KerasModel(model, input_signature=[tf.TensorSpec([None, 8], tf.float32, "x")],
                    target_signature=[tf.TensorSpec([None], tf.int32, "y")],
                    input=QueueInput(DataFromList(batches, shuffle=False)),
                    trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile(keras.optimizers.SGD(0.1), _xent())
    km.fit(max_epoch=1)
    assert km.trainer.global_step == 3  # 6 batches, 2 a step (tensorpack's per-tower rule)


def test_one_batch_epochs_restart_the_data():
    # a DataFlow of one datapoint per pass (one global batch an epoch) is read again each epoch
    x, y = _data(32)
    km = KerasModel(_model(), input=(x, y))
    km.compile(keras.optimizers.SGD(0.1), _xent())
    hist = km.fit(batch_size=32, max_epoch=3)
    assert len(hist.history["loss"]) == 3 and km.trainer.global_step == 3


def test_fit_generator_takes_a_python_generator():
    # Keras 2's fit_generator(gen, steps_per_epoch, epochs) with an endless generator of global batches
    x, y = _data(64 * 3)

    def gen():
        while True:
            for i in range(0, len(x), 64):
                yield x[i:i + 64], y[i:i + 64]

    serial = _model()
    serial.compile(keras.optimizers.SGD(0.1), _xent())
    ref = serial.fit(x, y, batch_size=64, epochs=2, shuffle=False, verbose=0)
    model = _model()
    pmodel = make_parallel(model, cpus(3))
    pmodel.compile(keras.optimizers.SGD(0.1), _xent())
    hist = pmodel.fit_generator(gen(), steps_per_epoch=3, epochs=2)
    np.testing.assert_allclose(hist.history["loss"], ref.history["loss"], rtol=1e-5)
    assert pmodel._km.trainer.global_step == 6


def test_keras2_arguments_without_a_meaning_are_named_in_a_warning():
    x, y = _data(64)
    with _Warnings() as warned:
        pmodel = make_parallel(_model(), cpus(2), ps_device="/gpu:1")
    assert any("ps_device='/gpu:1'" in m and "on '/cpu:0', not on '/gpu:1'" in m for m in warned)
    with _Warnings() as warned:
        make_parallel(_model(), cpus(2), ps_device="/cpu:0")
    assert warned == []
    pmodel.compile(keras.optimizers.SGD(0.1), _xent())

    def batches():
        while True:
            for i in (0, 32):
                yield x[i:i + 32], y[i:i + 32]

    with _Warnings() as warned:
        pmodel.fit_generator(batches(), steps_per_epoch=2, epochs=1, workers=4, use_multiprocessing=True, verbose=0)
        pmodel.evaluate(x, y, callbacks=[keras.callbacks.History()])
        pmodel.evaluate_generator(iter([(x, y)]), steps=1, max_queue_size=20)
        pmodel.predict(x, callbacks=[keras.callbacks.History()])
    assert any("fit_generator ignores ['use_multiprocessing', 'workers']" in m and "input pipeline" in m
               for m in warned)
    assert any("fit_generator ignores ['verbose']" in m for m in warned)
    assert any("evaluate ignores ['callbacks']" in m for m in warned)
    assert any("evaluate_generator ignores ['max_queue_size']" in m for m in warned)
    assert any("predict ignores ['callbacks']" in m for m in warned)
    with _Warnings() as warned:   # Keras' defaults change nothing: no warning
        pmodel.fit_generator(batches(), steps_per_epoch=2, epochs=1, workers=1, verbose=1)
    assert not any("ignores" in m for m in warned)
