"""StagingInput: batches staged on the towers' devices ahead of their steps (forced on CPU devices)."""
import os
import signal
import threading

import numpy as np
import pytest

from _devices import cpus
from _models import MLP, LinearData, weights_of
from kerastrainer.callbacks import Callback
from kerastrainer.dataflow import DataFromGenerator
from kerastrainer.input_source import InputSourceError, QueueInput, StagingInput
from kerastrainer.train import SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config


def quiet_config(**kw):
    kw.setdefault("extra_callbacks", [])
    kw.setdefault("monitors", [])
    return TrainConfig(**kw)


def _input_threads():
    return [t.name for t in threading.enumerate()
            if t.is_alive() and (t.name.endswith("EnqueueThread") or t.name.startswith("kerastrainer_staging"))]


class SetWeights(Callback):
    _chief_only = False

    def __init__(self, init):
        self.init = init

    def _before_train(self):
        for k, v in self.trainer.named_variables().items():
            v.assign(self.init[k])


def _train(source, trainer=None, init=None, **kw):
    trainer = trainer or SimpleTrainer(steps_per_call=4)
    if init is not None:
        kw["callbacks"] = kw.get("callbacks", []) + [SetWeights(init)]
    launch_train_with_config(quiet_config(model=MLP(), data=source, **kw), trainer)
    return trainer


def test_thread_mode_trains_like_the_plain_queue_and_leaves_no_thread():
    from test_multigpu import _reference
    init = _reference()
    plain = _train(QueueInput(LinearData()), init=init, steps_per_epoch=10, max_epoch=2)
    staged_source = StagingInput(QueueInput(LinearData()), force=True)
    staged = _train(staged_source, init=init, steps_per_epoch=10, max_epoch=2)
    assert staged_source.mode == "thread" and staged_source._replica_devices == ["/device:CPU:0"]
    a, b = weights_of(plain), weights_of(staged)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-6, atol=1e-7, err_msg=k)
    assert not _input_threads()


def test_a_dataflow_error_reaches_the_trainer_through_the_staging_thread():
    def gen():
        for i, dp in enumerate(LinearData()):
            if i == 7:
                raise ZeroDivisionError("broken datapoint 7")
            yield dp

    with pytest.raises(InputSourceError, match="(?s)raised while producing data.*ZeroDivisionError: broken"):
        _train(StagingInput(QueueInput(DataFromGenerator(gen)), force=True), steps_per_epoch=50, max_epoch=1)
    assert not _input_threads()


def test_a_failed_copy_is_a_clear_error():
    class FailingCopy(StagingInput):
        copies = 0

        def _stage_batch(self, device, tensors):
            FailingCopy.copies += 1
            if FailingCopy.copies > 5:
                raise RuntimeError("out of device memory (injected)")
            super()._stage_batch(device, tensors)

    with pytest.raises(InputSourceError, match=r"(?s)StagingInput: staging a batch on /device:CPU:0 failed \(taking it from QueueInput, or "
                                               r"copying it there\).*"
                                               r"out of device memory \(injected\)"):
        _train(FailingCopy(QueueInput(LinearData()), force=True), steps_per_epoch=50, max_epoch=1)
    assert not _input_threads()


def test_ctrl_c_while_a_step_waits_for_a_staged_batch():
    # the DataFlow stops producing: the step waits on the staged input, and Ctrl-C must end that wait
    released = threading.Event()
    waited_out = []

    class StallsAfter13(LinearData):
        def __iter__(self):
            for i, dp in enumerate(super().__iter__()):
                if i == 13:
                    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
                    waited_out.append(not released.wait(30))
                    return
                yield dp

    class Release(Callback):
        def _after_train(self):
            released.set()

    with pytest.raises(KeyboardInterrupt):
        _train(StagingInput(QueueInput(StallsAfter13(num_batches=400)), force=True),
               trainer=SimpleTrainer(steps_per_call=8), callbacks=[Release()], max_epoch=1, steps_per_epoch=400)
    assert waited_out == [False]   # training stopped while the DataFlow was still stalled
    assert not _input_threads()


@pytest.mark.parametrize("nr_stage", [1, 3])
def test_towers_take_their_batches_in_turn(nr_stage):
    """Tower i gets the i-th batch of each round: two towers on the halves of a batch train exactly
    like one tower on the whole batch (the test of test_multigpu, with the thread staging)."""
    from test_multigpu import Halves, _reference
    init = _reference()
    results = []
    for towers in (1, 2):
        data = LinearData(num_batches=6, batch=32)
        source = StagingInput(QueueInput(Halves(data, towers) if towers > 1 else data), nr_stage=nr_stage, force=True)
        trainer = SyncMultiGPUTrainerReplicated(cpus(towers), steps_per_call=4)
        _train(source, trainer=trainer, init=init, steps_per_epoch=5, max_epoch=1)
        assert source._replica_devices == [f"/device:CPU:{i}" for i in range(towers)]
        results.append(weights_of(trainer))
    for k in results[0]:
        np.testing.assert_allclose(results[1][k], results[0][k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_device_argument_stages_every_tower_on_that_device():
    source = StagingInput(QueueInput(LinearData()), device="/cpu:1", force=True)
    _train(source, trainer=SyncMultiGPUTrainerReplicated(cpus(2), steps_per_call=3), steps_per_epoch=6, max_epoch=1)
    assert source._replica_devices == ["/device:CPU:1", "/device:CPU:1"]
    assert not _input_threads()


def test_a_gpu_named_on_a_machine_without_one_passes_the_input_through():
    source = StagingInput(QueueInput(LinearData()), device="/gpu:0")   # tensorpack's predictor argument
    t = _train(source, steps_per_epoch=6, max_epoch=1)
    assert source._replica_devices == [] and t.global_step == 6


def test_fill_level_counts_the_staged_batches():
    seen = []

    class Probe(Callback):
        def _trigger_epoch(self):
            seen.append(self.trainer.input.fill_level())

    _train(StagingInput(QueueInput(LinearData()), nr_stage=3, force=True), callbacks=[Probe()],
           steps_per_epoch=5, max_epoch=1)
    assert seen and seen[0] >= 1


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="mode"):
        StagingInput(QueueInput(LinearData()), mode="async")
    with pytest.raises(ValueError, match="nr_stage"):
        StagingInput(QueueInput(LinearData()), nr_stage=0)
    with pytest.raises(ValueError, match="cannot wrap another StagingInput"):
        StagingInput(StagingInput(QueueInput(LinearData())))


def test_gpu_machines_get_staging_by_default(monkeypatch):
    """With a GPU, a DataFlow given to TrainConfig or KerasModel is staged (here the GPU is faked,
    so the towers are CPU devices and the staging passes the batches through)."""
    import keras
    from kerastrainer import KerasModel
    from kerastrainer.train import interface
    monkeypatch.setattr(interface, "get_num_gpu", lambda: 1)
    trainer = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), steps_per_epoch=4, max_epoch=1),
                             trainer)
    assert isinstance(trainer.input, StagingInput) and trainer.global_step == 4

    inp = keras.Input((8,))
    model = keras.Model(inp, keras.layers.Dense(3)(inp))
    km = KerasModel(model, input=LinearData(num_batches=4), trainer=SimpleTrainer())
    km.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
    km.fit(max_epoch=1, extra_callbacks=[], monitors=[])
    assert isinstance(km.trainer.input, StagingInput) and km.trainer.global_step == 4


def test_feedfree_predictor_reads_through_staging():
    from kerastrainer.dataflow import DataFromList
    from kerastrainer.predict import FeedfreePredictor, OfflinePredictor, PredictConfig

    batches = list(LinearData(num_batches=3, batch=4))
    config = PredictConfig(model=MLP(), input_names=["x", "y"], output_names=["prob", "wrong"])
    want = [OfflinePredictor(config)(*b) for b in batches]
    for source in (StagingInput(QueueInput(DataFromList(batches, shuffle=False)), device="/gpu:0"),
                   StagingInput(QueueInput(DataFromList(batches, shuffle=False)), force=True)):
        with FeedfreePredictor(config, source) as pred:
            got = [pred() for _ in range(3)]
        for (p, w), (gp, gw) in zip(want, got):
            np.testing.assert_allclose(gp, p, rtol=1e-5)
            np.testing.assert_array_equal(gw, w)
    assert not _input_threads()


def test_tensorpack_eval_classification_runs_unchanged(capsys):
    """tensorpack's imagenet_utils.eval_classification (ported unchanged in tests/tensorpack_examples)
    predicts through ``StagingInput(QueueInput(df), device='/gpu:0')``."""
    import tensorflow as tf
    from kerastrainer.dataflow import DataFromList
    from kerastrainer.models import FullyConnected
    from kerastrainer.train import ModelDesc
    import importlib.util
    # by path: the examples' own imagenet_utils may already be imported under that name
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorpack_examples", "imagenet_utils.py")
    spec = importlib.util.spec_from_file_location("tensorpack_imagenet_utils", path)
    imagenet_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(imagenet_utils)

    class Classifier(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 8), tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, x, label):
            logits = FullyConnected("fc", x, 10)
            for k in (1, 5):
                tf.cast(tf.logical_not(tf.nn.in_top_k(label, logits, k)), tf.float32, name=f"wrong-top{k}")
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))

        def optimizer(self):
            return tf.keras.optimizers.SGD(0.1)

    import gc
    from kerastrainer.predict import OfflinePredictor, PredictConfig
    rng = np.random.RandomState(0)
    batches = [[rng.randn(5, 8).astype("float32"), rng.randint(0, 10, 5).astype("int32")] for _ in range(6)]
    model = Classifier()   # one instance: the program's predictor and the reference share its weights
    ref = OfflinePredictor(PredictConfig(model=model, input_names=["input", "label"],
                                         output_names=["wrong-top1", "wrong-top5"]))
    wrong = np.array([[w.sum() for w in ref(*b)] for b in batches]).sum(0) / 30
    imagenet_utils.eval_classification(model, None, DataFromList(batches, shuffle=False))
    out = capsys.readouterr().out
    assert f"Top1 Error: {wrong[0]}" in out and f"Top5 Error: {wrong[1]}" in out, (out, wrong)
    gc.collect()   # the program never closes its predictor: its queue stops once it is garbage
    assert not _input_threads()
