"""XLA (``jit_compile``) on CPU, XLA's CPU backend: each input source, N towers, several
processes, bf16 and fp16 give the numbers of the run without XLA; ``'auto'`` and its
fallback; the train function is traced once.

The multi-worker test runs this file as a script (``python test_xla.py worker ...``),
launched by ``kerastrainer-run -np 2`` as in tests/test_multiworker.py.
"""
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def _train(make_trainer, jit, make_model=None, make_data=None, steps_per_epoch=10, max_epoch=2, seed=1):
    import keras
    from _models import MLP, LinearData
    from kerastrainer.train import TrainConfig, launch_train_with_config

    keras.utils.set_random_seed(seed)
    model = make_model() if make_model else MLP(opt="adam", lr=0.01)
    data = make_data() if make_data else LinearData()
    kwargs = {"data": data} if not hasattr(data, "reset_state") else {"dataflow": data}
    trainer = make_trainer(jit)
    launch_train_with_config(TrainConfig(model=model, extra_callbacks=[], monitors=[], steps_per_epoch=steps_per_epoch,
                                         max_epoch=max_epoch, **kwargs), trainer)
    return trainer


def _assert_same_training(make_trainer, rtol=1e-4, atol=1e-5, region="step", **kw):
    from _models import weights_of

    plain = _train(make_trainer, False, **kw)
    xla = _train(make_trainer, True, **kw)
    assert (plain.use_xla, xla.use_xla) == (False, True)
    assert xla.xla_region == region
    assert xla.step_runner.function.experimental_get_tracing_count() == 1
    a, b = weights_of(plain), weights_of(xla)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=rtol, atol=atol, err_msg=k)
    np.testing.assert_allclose(xla.last_step_outputs["cost"], plain.last_step_outputs["cost"], rtol=rtol * 10,
                               atol=atol * 10)
    return plain, xla


# --- input sources, one device --------------------------------------------------------------
@pytest.mark.parametrize("source", ["queue", "staging", "staging-step", "tfdata", "dummy"])
def test_xla_equals_no_xla_for_each_input_source(source):
    import tensorflow as tf
    from _models import LinearData
    from kerastrainer.input_source import DummyConstantInput, QueueInput, StagingInput, TFDatasetInput
    from kerastrainer.train import SimpleTrainer

    def data():
        d = LinearData()
        if source == "queue":
            return QueueInput(d)
        if source.startswith("staging"):  # really staged, on the CPU
            return StagingInput(QueueInput(d), force=True, mode="step" if source.endswith("step") else "thread")
        if source == "tfdata":
            return TFDatasetInput(tf.data.Dataset.from_tensor_slices((d.x, d.y)).batch(32).repeat())
        return DummyConstantInput([[32, 8], [32]])

    _assert_same_training(lambda jit: SimpleTrainer(steps_per_call=3, jit_compile=jit), make_data=data)


# --- towers on 2 logical CPU devices ----------------------------------------------------------
def _bn_model():
    import keras
    import tensorflow as tf
    from kerastrainer.models import BatchNorm, FullyConnected
    from kerastrainer.train import ModelDesc

    class WithBatchNorm(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

        def build_graph(self, x, y):
            # BatchNorm's statistics: updates of mirrored variables in the tower
            h = BatchNorm("bn", FullyConnected("fc1", x, 16, activation=tf.nn.relu))
            logits = FullyConnected("fc2", h, 3)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                                  name="cost")

        def optimizer(self):
            return keras.optimizers.SGD(0.1, momentum=0.9)

    return WithBatchNorm()


@pytest.mark.parametrize("kind", ["replicated", "ps"])
def test_xla_equals_no_xla_with_two_towers(kind):
    from kerastrainer.train import SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated

    cls = SyncMultiGPUTrainerReplicated if kind == "replicated" else SyncMultiGPUTrainerParameterServer
    plain, xla = _assert_same_training(lambda jit: cls(["/cpu:0", "/cpu:1"], steps_per_call=3, jit_compile=jit),
                                       region="forward_backward", steps_per_epoch=5, make_model=_bn_model)
    assert xla.num_replicas == 2
    # the moving statistics were updated (outside the XLA cluster), as without XLA
    assert np.abs(xla.named_variables()["bn/mean/EMA"].numpy()).max() > 1e-3


def test_auto_falls_back_when_a_tower_updates_a_mirrored_tf_variable(kt_log):
    import tensorflow as tf
    from _models import MLP
    from kerastrainer.tfutils import get_variable
    from kerastrainer.train import SyncMultiGPUTrainerReplicated

    class CountsBatches(MLP):
        def build_graph(self, x, y):
            seen = get_variable("seen", shape=[], trainable=False)
            seen.assign_add(tf.cast(tf.shape(x)[0], tf.float32))
            return super().build_graph(x, y)

    class XlaOnCpu(SyncMultiGPUTrainerReplicated):
        auto_xla_on_cpu = True

    t = _train(lambda jit: XlaOnCpu(["/cpu:0", "/cpu:1"], steps_per_call=2), None, make_model=lambda: CountsBatches(opt="adam"),
               steps_per_epoch=4, max_epoch=1)
    assert t.use_xla is False and t.global_step == 4
    assert any("an update of a mirrored tf.Variable in the tower" in m
               for m in kt_log.at_level(logging.WARNING))
    with pytest.raises(ValueError, match="an update of a mirrored tf.Variable in the tower"):
        _train(lambda jit: SyncMultiGPUTrainerReplicated(["/cpu:0", "/cpu:1"], jit_compile=True), None,
               make_model=lambda: CountsBatches(opt="adam"), steps_per_epoch=2, max_epoch=1)


# --- mixed precision ------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_xla_equals_no_xla_in_mixed_precision(precision):
    import keras
    from kerastrainer.train import SimpleTrainer

    # XLA may fuse and round a half-precision intermediate differently: a looser tolerance
    plain, xla = _assert_same_training(lambda jit: SimpleTrainer(steps_per_call=3, precision=precision,
                                                                 jit_compile=jit),
                                       rtol=0.05, atol=0.02, steps_per_epoch=6)
    if precision == "fp16":
        assert isinstance(xla.optimizer, keras.optimizers.LossScaleOptimizer)
        # the loss scale evolved identically (no overflow skipped in one run only)
        assert float(xla.optimizer.dynamic_scale.numpy()) == float(plain.optimizer.dynamic_scale.numpy())


# --- KerasModel -----------------------------------------------------------------------------------
@pytest.mark.parametrize("towers", [1, 2])
def test_keras_model_compile_jit_compile_overrides_the_trainer(towers):
    import keras
    from _models import LinearData
    from kerastrainer.keras import KerasModel
    from kerastrainer.train import SimpleTrainer, SyncMultiGPUTrainerReplicated

    data = LinearData()
    runs = {}
    for jit in (False, True):
        keras.utils.set_random_seed(2)
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.BatchNormalization(), keras.layers.Dense(3)])
        trainer = SimpleTrainer(steps_per_call=4) if towers == 1 else \
            SyncMultiGPUTrainerReplicated(["/cpu:0", "/cpu:1"], steps_per_call=4)
        km = KerasModel(model, input=(data.x, data.y), trainer=trainer)
        km.compile(keras.optimizers.Adam(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                   metrics=["accuracy"], jit_compile=jit)
        km.fit(batch_size=32, max_epoch=2, shuffle=False, extra_callbacks=[], monitors=[])
        # Keras's train_step merges the replicas' gradients inside the step: no XLA on several towers
        assert km.trainer.use_xla is (jit and towers == 1)
        if towers == 1:
            assert km.trainer.xla_region == (None if not jit else "step")
        assert km.trainer.step_runner.function.experimental_get_tracing_count() == 1
        runs[jit] = [np.array(v) for v in model.get_weights()]
    for a, b in zip(runs[False], runs[True]):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="jit_compile must be True, False or 'auto'"):
        KerasModel(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])).compile("sgd", "mse",
                                                                                        jit_compile="yes")


# --- 'auto' ---------------------------------------------------------------------------------------
def _py_func_model():
    import tensorflow as tf
    from _models import MLP

    class WithPyFunc(MLP):
        def build_graph(self, x, y):
            # a host op inside the tower: no XLA kernel
            x = tf.py_function(lambda a: a, [x], tf.float32)
            x.set_shape([None, self.dim])
            return super().build_graph(x, y)

    return WithPyFunc(opt="adam", lr=0.01)


def test_auto_is_off_on_cpu_devices_and_on_where_asked(kt_log):
    from kerastrainer.train import SimpleTrainer

    t = _train(lambda jit: SimpleTrainer(steps_per_call=2), None, steps_per_epoch=4, max_epoch=1)
    assert t.jit_compile == "auto" and t.use_xla is False
    assert any("Traced the train function in" in m for m in kt_log.at_level(logging.INFO))

    class XlaOnCpu(SimpleTrainer):
        auto_xla_on_cpu = True

    t = _train(lambda jit: XlaOnCpu(steps_per_call=2), None, steps_per_epoch=4, max_epoch=1)
    assert t.use_xla is True and t.xla_region == "step"
    assert any(m.startswith("XLA: compiled the train step (forward, backward and update) in ")
               for m in kt_log.at_level(logging.INFO))
    with pytest.raises(ValueError, match="jit_compile must be True, False or 'auto'"):
        SimpleTrainer(jit_compile="on")


def test_auto_falls_back_once_with_a_warning_naming_the_op(kt_log):
    from _models import weights_of
    from kerastrainer.train import SimpleTrainer

    class XlaOnCpu(SimpleTrainer):
        auto_xla_on_cpu = True

    t = _train(lambda jit: XlaOnCpu(steps_per_call=3), None, make_model=_py_func_model)
    assert t.use_xla is False and t.global_step == 20 and np.isfinite(t.last_step_outputs["cost"])
    warnings = kt_log.at_level(logging.WARNING)
    assert sum("XLA cannot compile the train step" in m for m in warnings) == 1, warnings
    assert any("EagerPyFunc" in m and "Training without XLA" in m for m in warnings), warnings
    # no batch was lost to the attempt: the same weights as a run without XLA
    ref = _train(lambda jit: SimpleTrainer(steps_per_call=3, jit_compile=False), None, make_model=_py_func_model)
    for k, v in weights_of(ref).items():
        np.testing.assert_allclose(weights_of(t)[k], v, rtol=1e-5, atol=1e-6)


def test_a_callback_can_turn_auto_xla_off_before_the_first_step(kt_log):
    from kerastrainer.callbacks import Callback
    from kerastrainer.train import SimpleTrainer

    class NeedsNoXla(Callback):
        def _setup_graph(self):
            self.trainer.disable_xla("the test says so")

    class XlaOnCpu(SimpleTrainer):
        auto_xla_on_cpu = True

    def train(trainer):
        from _models import MLP, LinearData
        from kerastrainer.train import TrainConfig, launch_train_with_config
        launch_train_with_config(TrainConfig(model=MLP(), dataflow=LinearData(), callbacks=[NeedsNoXla()],
                                             extra_callbacks=[], monitors=[], steps_per_epoch=3, max_epoch=1), trainer)
        return trainer

    assert train(XlaOnCpu()).use_xla is False
    assert "XLA off (jit_compile='auto'): the test says so." in kt_log.at_level(logging.INFO)
    assert train(SimpleTrainer(jit_compile=True)).use_xla is True  # True is kept, with a warning
    assert any("XLA stays on although the test says so" in m for m in kt_log.at_level(logging.WARNING))


def test_jit_compile_true_is_strict_and_names_the_op():
    from kerastrainer.train import SimpleTrainer

    trainers = []

    def make(jit):
        trainers.append(SimpleTrainer(jit_compile=True))
        return trainers[-1]

    with pytest.raises(ValueError, match=r"jit_compile=True, but XLA cannot compile the train step: EagerPyFunc"):
        _train(make, True, make_model=_py_func_model)
    assert trainers[0].global_step == 0


def test_unsupported_ops_are_found_in_nested_functions():
    import tensorflow as tf
    from kerastrainer.train.base import xla_unsupported_ops

    @tf.function(jit_compile=True)
    def inner(x):
        y = tf.cond(x[0] > 0, lambda: tf.strings.length(tf.strings.as_string(x[0])), lambda: tf.constant(1))
        return x * tf.cast(y, tf.float32)

    @tf.function
    def outer(x):
        return inner(x + 1.0)

    bad = xla_unsupported_ops(outer.get_concrete_function(tf.TensorSpec([2], tf.float32)), "CPU")
    assert [b.split()[0] for b in bad] == ["AsString", "StringLength"]

    @tf.function
    def fine(x):
        return tf.function(lambda a: tf.nn.relu(a) * 2, jit_compile=True)(x)

    assert xla_unsupported_ops(fine.get_concrete_function(tf.TensorSpec([2], tf.float32)), "GPU") == []


# --- devices --------------------------------------------------------------------------------------
def test_logical_devices_map_to_their_physical_device():
    from kerastrainer.train.trainers import _share_a_physical_gpu, physical_device_index

    # conftest splits the one CPU into 4 logical devices
    assert [physical_device_index(f"/device:CPU:{i}") for i in range(4)] == [0, 0, 0, 0]
    assert not _share_a_physical_gpu(["/device:CPU:0", "/device:CPU:1"])  # only GPUs matter to NCCL
    with pytest.raises(ValueError, match="not a logical CPU device"):
        physical_device_index("/device:CPU:9")


# --- several processes --------------------------------------------------------------------------
def worker_main(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--jit", choices=["true", "false"], required=True)
    args = p.parse_args(argv)
    from kerastrainer.train.multiworker import MultiWorkerTrainer
    trainer = MultiWorkerTrainer(steps_per_call=2, jit_compile=args.jit == "true")  # first: before any TF op
    import keras
    from test_multiworker import BATCH, NUM_BATCHES, _weights, make_data, make_model
    from kerastrainer.callbacks import Callback
    from kerastrainer.train import TrainConfig, launch_train_with_config
    from kerastrainer.utils.cluster import shard_dataflow

    rank = trainer.rank
    keras.utils.set_random_seed(100 + rank)

    class Record(Callback):
        _chief_only = False

        def _before_train(self):
            np.savez(os.path.join(args.out, f"init-{rank}.npz"), **_weights(self.trainer))

    config = TrainConfig(model=make_model(), dataflow=shard_dataflow(make_data(BATCH, NUM_BATCHES)),
                         callbacks=[Record()], extra_callbacks=[], monitors=[], max_epoch=2)
    launch_train_with_config(config, trainer)
    np.savez(os.path.join(args.out, f"final-{rank}.npz"), **_weights(trainer))
    with open(os.path.join(args.out, f"record-{rank}.json"), "w") as f:
        json.dump({"use_xla": trainer.use_xla, "region": trainer.xla_region, "step": trainer.global_step}, f)
    print("WORKER-DONE", rank, flush=True)


@pytest.mark.slow
def test_xla_with_two_worker_processes_equals_one_process_without(tmp_path):
    from test_multiworker import NUM_BATCHES, _kill_group, load, reference_training

    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5", sys.executable, __file__, "worker",
           "--out", str(out), "--jit", "true"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE), HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        output = proc.communicate(timeout=300)[0].decode(errors="replace")
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, output
    records = [json.loads((out / f"record-{r}.json").read_text()) for r in range(2)]
    spe = NUM_BATCHES // 2
    assert records == [{"use_xla": True, "region": "forward_backward", "step": 2 * spe}] * 2
    init, final = load(out / "init-0.npz"), [load(out / f"final-{r}.npz") for r in range(2)]
    for k in final[0]:
        np.testing.assert_array_equal(final[0][k], final[1][k])
    expected = reference_training(init, 2 * spe)  # one process, no XLA, the concatenated batches
    for k, v in expected.items():
        np.testing.assert_allclose(final[0][k], v, rtol=1e-4, atol=1e-5)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
