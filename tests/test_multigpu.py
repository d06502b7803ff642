"""Synchronous data parallelism on logical CPU devices (conftest makes 4)."""
import numpy as np
import pytest
import tensorflow as tf

from _devices import cpus
from _models import MLP, LinearData, weights_of
from kerastrainer.callbacks import Callback
from kerastrainer.dataflow.base import DataFlow
from kerastrainer.tfutils import get_current_tower_context
from kerastrainer.train import (SimpleTrainer, SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated,
                                TrainConfig, launch_train_with_config)


class Halves(DataFlow):
    """Batches of B, in the order that N towers dequeue them: the 2B batch split in halves."""

    def __init__(self, data: LinearData, parts: int):
        self.data, self.parts = data, parts

    def __len__(self):
        return len(self.data) * self.parts

    def __iter__(self):
        for x, y in self.data:
            for xs, ys in zip(np.array_split(x, self.parts), np.array_split(y, self.parts)):
                yield [xs, ys]


def _train(trainer, data, init=None, **kw):
    model = MLP(lr=0.2)
    cfg = TrainConfig(model=model, dataflow=data, extra_callbacks=[], monitors=[],
                      steps_per_epoch=kw.pop("steps_per_epoch", None), max_epoch=kw.pop("max_epoch", 1),
                      callbacks=kw.pop("callbacks", []))
    if init is not None:
        class SetWeights(Callback):
            _chief_only = False

            def _before_train(self):
                for k, v in self.trainer.named_variables().items():
                    v.assign(init[k])
        cfg.callbacks.append(SetWeights())
    launch_train_with_config(cfg, trainer)
    return trainer


def _reference(num_batches=6):
    t = _train(SimpleTrainer(steps_per_call=1), LinearData(num_batches=num_batches, batch=32), max_epoch=0)
    return weights_of(t)


@pytest.mark.parametrize("towers,trainer_cls", [
    (2, SyncMultiGPUTrainerReplicated), (2, SyncMultiGPUTrainerParameterServer), (4, SyncMultiGPUTrainerReplicated),
])
def test_n_towers_equal_one_tower_on_the_concatenated_batch(towers, trainer_cls):
    """N towers on batches of B/N give the weights of 1 tower on the batch B (several steps per call)."""
    init = _reference()
    data = LinearData(num_batches=6, batch=32)
    # the one tower on a CPU device too: a GPU's matmuls (TF32) would not match to 1e-5
    single = _train(SyncMultiGPUTrainerReplicated(cpus(1), steps_per_call=3), data, init=init, steps_per_epoch=6)
    multi = _train(trainer_cls(cpus(towers), steps_per_call=3), Halves(data, towers), init=init, steps_per_epoch=6)
    assert multi.num_replicas == towers and multi.global_step == 6 and multi.last_call_steps == 3
    ws, wm = weights_of(single), weights_of(multi)
    for k in ws:
        np.testing.assert_allclose(wm[k], ws[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert multi.last_step_outputs["cost"] == pytest.approx(single.last_step_outputs["cost"], rel=1e-4)


def test_towers_see_their_index_and_only_tower0_records():
    seen = []

    class Spy(MLP):
        def build_graph(self, x, y):
            ctx = get_current_tower_context()
            seen.append((ctx.name, ctx.index, ctx.total, ctx.is_main_training_tower))
            return super().build_graph(x, y)

    t = SyncMultiGPUTrainerReplicated(cpus(2))
    launch_train_with_config(TrainConfig(model=Spy(), dataflow=LinearData(), extra_callbacks=[], monitors=[],
                                         max_epoch=1), t)
    assert ("tower1", 1, 2, False) in seen and ("tower0", 0, 2, True) in seen
    # accuracy is tower 0's own value, not a sum over towers
    assert 0.0 <= t.last_step_outputs["accuracy"] <= 1.0


def test_more_towers_than_devices_is_a_clear_error():
    with pytest.raises(ValueError, match=r"only \d+ (GPU|logical CPU device)"):
        SyncMultiGPUTrainerReplicated(8)       # GPUs when the machine has any, else logical CPU devices
    with pytest.raises(ValueError, match=r"\['/cpu:4', '/cpu:5'\] do not exist"):
        SyncMultiGPUTrainerReplicated(cpus(6))
    with pytest.raises(ValueError, match="names one twice"):
        SyncMultiGPUTrainerReplicated(["/cpu:0", "/CPU:0"])
    with pytest.raises(ValueError, match="positive"):
        SyncMultiGPUTrainerReplicated(0)


def test_steps_per_epoch_counts_batches_per_tower():
    t = _train(SyncMultiGPUTrainerReplicated(cpus(2)), LinearData(num_batches=10), max_epoch=1)
    assert t.steps_per_epoch == 5


@pytest.mark.parametrize("towers,nr_stage,mode", [(1, 2, "thread"), (1, 2, "step"), (2, 1, "step")])
def test_staging_input_keeps_the_batch_sequence(towers, nr_stage, mode):
    """StagingInput (forced on CPU devices) trains exactly like the queue it wraps.

    (In mode 'step' with several towers and nr_stage > 1 the batches a step groups differ,
    so equality holds for nr_stage=1 there; mode 'thread' with towers: test_staging.py.)"""
    from kerastrainer.input_source import QueueInput, StagingInput

    init = _reference()
    results = []
    for staged in (False, True):
        data = LinearData(num_batches=6, batch=32)
        source = QueueInput(Halves(data, towers) if towers > 1 else data)
        if staged:
            source = StagingInput(source, nr_stage=nr_stage, force=True, mode=mode)
        trainer = SimpleTrainer(steps_per_call=4) if towers == 1 else SyncMultiGPUTrainerReplicated(cpus(towers),
                                                                                                      steps_per_call=4)
        model = MLP(lr=0.2)

        class SetWeights(Callback):
            _chief_only = False

            def _before_train(self):
                for k, v in self.trainer.named_variables().items():
                    v.assign(init[k])

        launch_train_with_config(TrainConfig(model=model, data=source, callbacks=[SetWeights()], extra_callbacks=[],
                                             monitors=[], steps_per_epoch=5, max_epoch=1), trainer)
        results.append(weights_of(trainer))
    for k in results[0]:
        np.testing.assert_allclose(results[1][k], results[0][k], rtol=1e-5, atol=1e-6)


def test_data_parallel_inference_runner_equals_inference_runner():
    from kerastrainer.callbacks import (ClassificationError, DataParallelInferenceRunner, InferenceRunner,
                                        ScalarStats)
    from kerastrainer.dataflow import DataFromList

    val = LinearData(num_batches=7, batch=16, seed=5)
    batches = DataFromList(list(val), shuffle=False)
    runners = [InferenceRunner(batches, [ScalarStats("cost"), ClassificationError("wrong", "err")]),
               DataParallelInferenceRunner(batches, [ScalarStats("cost", prefix="dp"), ClassificationError("wrong", "err2")],
                                           gpus=cpus(2))]
    t = SyncMultiGPUTrainerReplicated(cpus(2))
    launch_train_with_config(TrainConfig(model=MLP(), dataflow=LinearData(), callbacks=runners,
                                         extra_callbacks=[], monitors=[], max_epoch=1), t)
    assert t.monitors.get_latest("dp_cost") == pytest.approx(t.monitors.get_latest("validation_cost"), rel=1e-6)
    assert t.monitors.get_latest("err2") == pytest.approx(t.monitors.get_latest("err"), rel=1e-6)
    with pytest.raises(ValueError, match=r"only \d+ (GPU|logical CPU)"):
        DataParallelInferenceRunner(batches, [ScalarStats("cost")], gpus=6)


def test_named_cpu_towers_on_a_machine_with_one_gpu(monkeypatch):
    """What a one-GPU machine sees (the GPU is faked): a number of towers means GPUs and two is
    too many; towers named on logical CPU devices stay there and reduce on the host, not NCCL."""
    from kerastrainer.utils import devices
    monkeypatch.setattr(devices, "get_available_gpus", lambda: ["/gpu:0"])
    with pytest.raises(ValueError, match=r"\[0, 1\] were asked for, but only 1 GPU\(s\) exist"):
        SyncMultiGPUTrainerReplicated(2)
    t = _train(SyncMultiGPUTrainerReplicated(cpus(2)), LinearData(num_batches=4), max_epoch=1)
    assert t.devices == cpus(2) and t.num_replicas == 2 and t.global_step == 2
    assert type(t._cross_device_ops()).__name__ == "ReductionToOneDevice"


def test_a_summary_every_tower_records_is_their_mean():
    """add_tensor_summary(..., main_tower_only=False) on 2 towers reported twice the value."""
    from kerastrainer.tfutils.summary import add_tensor_summary
    seen = []

    class Everywhere(MLP):
        def build_graph(self, x, y):
            add_tensor_summary(tf.reduce_mean(x) * 0.0 + 1.5, ["scalar"], name="const", main_tower_only=False)
            add_tensor_summary(tf.reduce_mean(x) * 0.0 + 2.5, ["scalar"], name="main_only")
            return super().build_graph(x, y)

    class Record(Callback):
        def _trigger_step(self):
            seen.append(dict(self.trainer.last_step_outputs))

    for towers in (1, 2):
        seen.clear()
        launch_train_with_config(TrainConfig(model=Everywhere(), dataflow=LinearData(num_batches=8),
                                             extra_callbacks=[], monitors=[], callbacks=[Record()], max_epoch=1),
                                 SyncMultiGPUTrainerReplicated(cpus(towers), steps_per_call=2))
        assert seen[-1]["const/scalar"] == pytest.approx(1.5), (towers, seen[-1])
        assert seen[-1]["main_only/scalar"] == pytest.approx(2.5), (towers, seen[-1])
