"""tensorpack's TF1 training mechanisms with tensorpack 0.11's meaning: AccumGradOptimizer,
SessionRunTimeout, the session config, graph collections, Keras optimizers in the custom
trainers, SmartInit of nothing, and tensorpack's 4-argument setup_graph on every trainer."""
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from _devices import cpus
from kerastrainer import (FullyConnected, ModelDesc, SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                          launch_train_with_config)
from kerastrainer.callbacks import Callback
from kerastrainer.dataflow import DataFlow
from kerastrainer.tfutils.optimizer import AccumGradOptimizer, apply_grad_processors
from kerastrainer.tfutils import gradproc

tfv1 = tf.compat.v1
LR, MOMENTUM = 0.1, 0.9


class Batches(DataFlow):
    """``n`` batches of a linear regression, each split in ``parts`` (one per tower, in dequeue order)."""

    def __init__(self, n=6, batch=8, parts=1, seed=0):
        rng = np.random.RandomState(seed)
        self.batches = [(rng.randn(batch, 3).astype("float32"), rng.randn(batch, 1).astype("float32"))
                        for _ in range(n)]
        self.parts = parts

    def __len__(self):
        return len(self.batches) * self.parts

    def __iter__(self):
        for x, y in self.batches:
            for xx, yy in zip(np.array_split(x, self.parts), np.array_split(y, self.parts)):
                yield [xx, yy]


class Linear(ModelDesc):
    def __init__(self, make_opt):
        self.make_opt = make_opt

    def inputs(self):
        return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None, 1), tf.float32, "y")]

    def build_graph(self, x, y):
        pred = FullyConnected("fc", x, 1)
        return tf.reduce_mean(tf.square(pred - y), name="cost")

    def optimizer(self):
        return self.make_opt()


W0 = {"fc/W": np.array([[0.3], [-0.2], [0.5]], "float32"), "fc/b": np.array([0.1], "float32")}


class SetWeights(Callback):
    _chief_only = False

    def _before_train(self):
        for k, v in self.trainer.named_variables().items():
            v.assign(W0[k])


class RecordWeights(Callback):
    """The weights after every call."""
    _chief_only = False

    def __init__(self):
        self.seen = []

    def _trigger_step(self):
        self.seen.append((self.trainer.global_step,
                          {k: v.numpy().copy() for k, v in self.trainer.named_variables().items()}))


def _momentum_reference(batches, k):
    """tensorpack's rule by hand: the sum of k steps' gradients, then w -= lr * (m * a + sum)."""
    w = {n: tf.Variable(v) for n, v in W0.items()}
    acc = {n: np.zeros_like(v) for n, v in W0.items()}
    slot = {n: np.zeros_like(v) for n, v in W0.items()}
    after = []
    for i, (x, y) in enumerate(batches):
        with tf.GradientTape() as tape:
            cost = tf.reduce_mean(tf.square(x @ w["fc/W"] + w["fc/b"] - y))
        grads = tape.gradient(cost, [w["fc/W"], w["fc/b"]])
        for n, g in zip(["fc/W", "fc/b"], grads):
            acc[n] = acc[n] + g.numpy()
        if (i + 1) % k == 0:
            for n in acc:
                slot[n] = MOMENTUM * slot[n] + acc[n]
                w[n].assign(w[n].numpy() - LR * slot[n])
                acc[n] = np.zeros_like(acc[n])
        after.append({n: v.numpy() for n, v in w.items()})
    return after


def _tf1_momentum():
    return tfv1.train.MomentumOptimizer(LR, MOMENTUM)


def _keras_momentum():
    return keras.optimizers.SGD(LR, momentum=MOMENTUM)


@pytest.mark.parametrize("make_inner", [_tf1_momentum, _keras_momentum], ids=["tf1", "keras"])
@pytest.mark.parametrize("towers,steps_per_call", [(1, 1), (1, 4), (2, 3)])
def test_accum_grad_applies_the_sum_of_k_steps_through_the_optimizer_every_kth_step(make_inner, towers,
                                                                                      steps_per_call):
    k = 3
    data = Batches(n=6, parts=towers)

    def make_opt():
        return AccumGradOptimizer(make_inner(), k)

    rec = RecordWeights()
    trainer = (SimpleTrainer(steps_per_call=steps_per_call) if towers == 1
               else SyncMultiGPUTrainerReplicated(cpus(towers), steps_per_call=steps_per_call))
    cfg = TrainConfig(model=Linear(make_opt), dataflow=data, callbacks=[SetWeights(), rec], extra_callbacks=[],
                      monitors=[], max_epoch=2, steps_per_epoch=3)
    launch_train_with_config(cfg, trainer)
    expected = _momentum_reference(data.batches, k)
    assert rec.seen and rec.seen[-1][0] == 6
    for step, weights in rec.seen:
        for n in W0:
            np.testing.assert_allclose(weights[n], expected[step - 1][n], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{n} after step {step}")
    # a step that does not apply leaves the variables exactly as they were
    by_step = dict(rec.seen)
    if steps_per_call == 1:
        np.testing.assert_array_equal(by_step[1]["fc/W"], W0["fc/W"])
        np.testing.assert_array_equal(by_step[2]["fc/W"], W0["fc/W"])
        assert not np.array_equal(by_step[3]["fc/W"], W0["fc/W"])
    inner = trainer.optimizer.inner_optimizer
    assert int(inner.iterations.numpy()) == 2   # the wrapped optimizer ran twice in 6 steps


def test_accum_grad_in_an_xla_compiled_step():
    data, rec = Batches(n=6), RecordWeights()
    trainer = SimpleTrainer(steps_per_call=3, jit_compile=True)
    cfg = TrainConfig(model=Linear(lambda: AccumGradOptimizer(_keras_momentum(), 3)), dataflow=data,
                      callbacks=[SetWeights(), rec], extra_callbacks=[], monitors=[], max_epoch=1)
    launch_train_with_config(cfg, trainer)
    assert trainer.use_xla and trainer.xla_region == "step"
    expected = _momentum_reference(data.batches, 3)
    assert [s for s, _ in rec.seen] == [3, 6]
    for step, weights in rec.seen:
        for n in W0:
            np.testing.assert_allclose(weights[n], expected[step - 1][n], rtol=1e-5, atol=1e-6)


def test_accum_grad_with_adam_advances_adam_only_on_applying_steps():
    k = 2
    data = Batches(n=4)
    trainer = SimpleTrainer(steps_per_call=1)
    cfg = TrainConfig(model=Linear(lambda: AccumGradOptimizer(keras.optimizers.Adam(0.05), k)), dataflow=data,
                      callbacks=[SetWeights()], extra_callbacks=[], monitors=[], max_epoch=1)
    launch_train_with_config(cfg, trainer)
    # Adam on the two sums, by hand (its own step counter: 1 and 2, not 2 and 4)
    w = {n: tf.Variable(v) for n, v in W0.items()}
    ref = keras.optimizers.Adam(0.05)
    variables = [w["fc/W"], w["fc/b"]]
    acc = [tf.zeros_like(v) for v in variables]
    for i, (x, y) in enumerate(data.batches):
        with tf.GradientTape() as tape:
            cost = tf.reduce_mean(tf.square(x @ w["fc/W"] + w["fc/b"] - y))
        acc = [a + g for a, g in zip(acc, tape.gradient(cost, variables))]
        if (i + 1) % k == 0:
            ref.apply_gradients(zip(acc, variables))
            acc = [tf.zeros_like(v) for v in variables]
    got = {n: v.numpy() for n, v in trainer.named_variables().items()}
    for n in W0:
        np.testing.assert_allclose(got[n], w[n].numpy(), rtol=1e-5, atol=1e-6)
    assert int(trainer.optimizer.iterations.numpy()) == 2


def test_accum_grad_in_a_tf1_graph_applies_the_sum_every_kth_run():
    g = tf.Graph()
    with g.as_default():
        x = tfv1.get_variable("x", initializer=tf.constant([1.0, -2.0, 3.0]))
        cost = tf.reduce_sum(tf.abs(x))
        op = AccumGradOptimizer(tfv1.train.GradientDescentOptimizer(0.01), 3).minimize(cost)
        with tfv1.Session(graph=g) as sess:
            sess.run(tfv1.global_variables_initializer())
            seen = []
            for _ in range(6):
                sess.run(op)
                seen.append(sess.run(x))
    np.testing.assert_array_equal(seen[0], [1.0, -2.0, 3.0])
    np.testing.assert_array_equal(seen[1], [1.0, -2.0, 3.0])
    np.testing.assert_allclose(seen[2], [0.97, -1.97, 2.97], rtol=1e-6)   # the sum: 3 * 0.01 * sign
    np.testing.assert_allclose(seen[5], [0.94, -1.94, 2.94], rtol=1e-6)


def test_accum_grad_with_processors_inside_runs_them_on_the_sums():
    # clipping inside the accumulation clips the k-step sum (tensorpack's order)
    clip = gradproc.MapGradient(lambda g: tf.clip_by_value(g, -0.5, 0.5))
    opt = AccumGradOptimizer(apply_grad_processors(tfv1.train.GradientDescentOptimizer(1.0), [clip]), 2)
    trainer = SimpleTrainer(steps_per_call=2)
    cfg = TrainConfig(model=Linear(lambda: opt), dataflow=Batches(n=2), callbacks=[SetWeights()],
                      extra_callbacks=[], monitors=[], max_epoch=1)
    launch_train_with_config(cfg, trainer)
    data = Batches(n=2)
    w = {n: tf.Variable(v) for n, v in W0.items()}
    total = None
    for x, y in data.batches:
        with tf.GradientTape() as tape:
            cost = tf.reduce_mean(tf.square(x @ w["fc/W"] + w["fc/b"] - y))
        gs = tape.gradient(cost, [w["fc/W"], w["fc/b"]])
        total = gs if total is None else [a + b for a, b in zip(total, gs)]
    expected = {n: W0[n] - np.clip(g.numpy(), -0.5, 0.5) for n, g in zip(["fc/W", "fc/b"], total)}
    got = {n: v.numpy() for n, v in trainer.named_variables().items()}
    for n in W0:
        np.testing.assert_allclose(got[n], expected[n], rtol=1e-5, atol=1e-6)


def test_accum_grad_checks_its_arguments():
    with pytest.raises(ValueError, match="niter must be >= 1"):
        AccumGradOptimizer(keras.optimizers.SGD(0.1), 0)
    with pytest.raises(TypeError, match="niter must be an int"):
        AccumGradOptimizer(keras.optimizers.SGD(0.1), 2.5)


@pytest.mark.parametrize("nothing", ["", None, []])
def test_smart_init_of_nothing_loads_nothing_and_training_starts(nothing):
    from kerastrainer import SmartInit
    from kerastrainer.tfutils.sessinit import JustCurrentSession
    assert isinstance(SmartInit(nothing), JustCurrentSession)
    trainer = SimpleTrainer(steps_per_call=1)
    cfg = TrainConfig(model=Linear(lambda: keras.optimizers.SGD(0.1)), dataflow=Batches(n=2), callbacks=[],
                      extra_callbacks=[], monitors=[], max_epoch=1, session_init=SmartInit(nothing))
    launch_train_with_config(cfg, trainer)
    assert trainer.global_step == 2


class Hangs(Batches):
    """Gives ``after`` batches, then blocks until ``release`` is set (a stuck worker; 60 s at most)."""

    def __init__(self, after, **kw):
        super().__init__(**kw)
        self.after = after
        self.release = threading.Event()
        self.timed_out = False

    def __iter__(self):
        for i, dp in enumerate(super().__iter__()):
            if i == self.after:
                self.timed_out = not self.release.wait(60)
            yield dp


class Release(Callback):
    """Lets the stuck DataFlow go when training ends (the input is closed faster)."""
    _chief_only = False

    def __init__(self, data):
        self.data = data

    def _after_train(self):
        self.data.release.set()


def test_session_run_timeout_stops_a_call_that_waits_past_its_deadline():
    from kerastrainer.callbacks import SessionRunTimeout
    from kerastrainer.callbacks.timeout import SessionRunTimeoutError
    trainer = SimpleTrainer(steps_per_call=1)
    data = Hangs(after=3, n=6)
    cfg = TrainConfig(model=Linear(lambda: keras.optimizers.SGD(0.1)), dataflow=data,
                      callbacks=[SessionRunTimeout(500), Release(data)], extra_callbacks=[], monitors=[], max_epoch=1)
    with pytest.raises(tf.errors.DeadlineExceededError, match=r"SessionRunTimeout\(500\).*500 ms per step") as e:
        launch_train_with_config(cfg, trainer)
    assert isinstance(e.value, SessionRunTimeoutError)
    assert not data.timed_out   # stopped at the deadline, not when the DataFlow gave up waiting
    assert trainer.global_step == 3


def test_session_run_timeout_lets_calls_within_the_deadline_train():
    from kerastrainer.callbacks import SessionRunTimeout
    trainer = SimpleTrainer(steps_per_call=2)
    cfg = TrainConfig(model=Linear(lambda: keras.optimizers.SGD(0.1)), dataflow=Batches(n=6),
                      callbacks=[SessionRunTimeout(60000)], extra_callbacks=[], monitors=[], max_epoch=1)
    launch_train_with_config(cfg, trainer)
    assert trainer.global_step == 6
    with pytest.raises(ValueError, match="timeout_in_ms must be positive"):
        SessionRunTimeout(0)


def test_get_default_sess_config_is_tensorpacks_config_proto():
    from kerastrainer.tfutils import get_default_sess_config
    conf = get_default_sess_config(0.5)
    assert isinstance(conf, tfv1.ConfigProto)
    assert conf.allow_soft_placement and conf.gpu_options.allow_growth
    assert conf.intra_op_parallelism_threads == 1 and conf.inter_op_parallelism_threads == 0
    assert conf.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.5)


@pytest.fixture
def restore_tf_config():
    jit = tf.config.optimizer.get_jit()
    options = tf.config.optimizer.get_experimental_options()
    yield
    tf.debugging.set_log_device_placement(False)
    tf.config.optimizer.set_jit(jit or False)
    tf.config.optimizer.set_experimental_options({"layout_optimizer": options.get("layout_optimizer", True)})


def test_train_config_session_config_is_mapped_to_tf_config_and_the_rest_named(kt_log, restore_tf_config):
    tf.constant(1.0) + 1.0   # this process's runtime has started (threads are fixed from here on)
    conf = tfv1.ConfigProto()
    conf.log_device_placement = True
    conf.graph_options.optimizer_options.global_jit_level = tfv1.OptimizerOptions.ON_1
    conf.graph_options.rewrite_options.layout_optimizer = 2   # OFF
    conf.operation_timeout_in_ms = 5000
    conf.gpu_options.per_process_gpu_memory_fraction = 0.5
    conf.intra_op_parallelism_threads = tf.config.threading.get_intra_op_parallelism_threads() + 3
    cfg = TrainConfig(model=Linear(lambda: keras.optimizers.SGD(0.1)), dataflow=Batches(n=2), session_config=conf)
    assert cfg.session_config is conf
    assert tf.debugging.get_log_device_placement() is True
    assert tf.config.optimizer.get_jit() == "autoclustering"
    assert tf.config.optimizer.get_experimental_options()["layout_optimizer"] is False
    warned = kt_log.warnings()
    assert "operation_timeout_in_ms=5000" in warned and "per_process_gpu_memory_fraction=0.5" in warned
    assert "no counterpart" in warned
    # the runtime of this process has started: the thread count is named, not silently dropped
    assert "intra_op_parallelism_threads" in warned and "runtime has started" in warned
    with pytest.raises(TypeError, match="ConfigProto"):
        TrainConfig(model=Linear(lambda: None), dataflow=Batches(n=2), session_config={"allow_growth": True})


_THREADS_PROGRAM = r"""
import sys
sys.path.insert(0, {tests!r})
import numpy as np, keras, tensorflow as tf
from kerastrainer import TrainConfig
from kerastrainer.tfutils import get_default_sess_config
from test_tf1_mechanisms import Linear, Batches
conf = get_default_sess_config()
conf.inter_op_parallelism_threads = 2
cfg = TrainConfig(model=Linear(lambda: keras.optimizers.SGD(0.1)), dataflow=Batches(n=2), session_config=conf)
tf.constant(1.0) + 1.0   # the runtime starts with them
print("THREADS", tf.config.threading.get_intra_op_parallelism_threads(),
      tf.config.threading.get_inter_op_parallelism_threads(), tf.config.get_soft_device_placement())
"""


@pytest.mark.slow   # a fresh interpreter importing TensorFlow: ~25 s on 2 busy cores
def test_session_config_given_before_tensorflow_starts_sets_its_threads(tmp_path):
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _THREADS_PROGRAM.format(tests=tests)], capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "THREADS 1 2 True" in out.stdout
    assert "per_process_gpu_memory_fraction=0.99" in out.stderr + out.stdout   # named: no counterpart


class TwoPasses(Linear):
    """A second pass in a frozen block (tensorpack's adversarial towers): its summaries are dropped."""

    def build_graph(self, x, y):
        from kerastrainer.tfutils import add_moving_summary
        from kerastrainer.tfutils.collection import freeze_collection
        cost = super().build_graph(x, y)
        add_moving_summary(tf.identity(cost, name="kept_cost"))
        with freeze_collection([tfv1.GraphKeys.SUMMARIES, "my_key"]):
            again = tf.reduce_mean(tf.square(FullyConnected("fc", x * 2.0, 1) - y))
            add_moving_summary(tf.identity(again, name="frozen_cost"))
            tf.summary.histogram("frozen_hist", again)
            tfv1.add_to_collection("my_key", again)
        assert tfv1.get_collection("my_key") == []
        return cost


def test_freeze_collection_of_summaries_drops_the_summaries_of_the_block():
    trainer = SimpleTrainer(steps_per_call=1)
    cfg = TrainConfig(model=TwoPasses(lambda: keras.optimizers.SGD(0.1)), dataflow=Batches(n=2), callbacks=[],
                      extra_callbacks=[], monitors=[], max_epoch=1)
    launch_train_with_config(cfg, trainer)
    outs = trainer.last_step_outputs
    assert "kept_cost" in outs
    assert not [k for k in outs if "frozen" in k]
    assert not [n for n in trainer.tower_func.histogram_names if "frozen" in n]


def test_backup_and_restore_collection_in_a_tf1_graph():
    from kerastrainer.tfutils.collection import backup_collection, freeze_collection, restore_collection
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0)
        tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, a.op)
        saved = backup_collection([tfv1.GraphKeys.UPDATE_OPS])
        with freeze_collection([tfv1.GraphKeys.UPDATE_OPS, "other"]):
            tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tf.constant(2.0).op)
            tfv1.add_to_collection("other", 3)
            assert len(tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS)) == 2
        assert tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS) == [a.op]
        assert tfv1.get_collection("other") == []
        tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tf.constant(4.0).op)
        restore_collection(saved)
        assert tfv1.get_collection(tfv1.GraphKeys.UPDATE_OPS) == [a.op]
        everything = backup_collection()
        assert tfv1.GraphKeys.UPDATE_OPS in everything
    with pytest.raises(TypeError, match="list, tuple or set"):
        backup_collection(tfv1.GraphKeys.UPDATE_OPS)


def _gan_modules():
    import importlib
    import os
    import sys
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tensorpack_examples")
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("GAN")


def _tiny_gan(GAN, make_opt):
    class TinyGAN(GAN.GANModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 4), tf.float32, "real"), tf.TensorSpec((None, 2), tf.float32, "z")]

        def build_graph(self, real, z):
            with tfv1.variable_scope("gen"):
                fake = FullyConnected("fc", z, 4)
            with tfv1.variable_scope("discrim"):
                logits_real = FullyConnected("fc", real, 1)
                logits_fake = FullyConnected("fc", fake, 1)
            self.build_losses(logits_real, logits_fake)
            self.collect_variables()

        def optimizer(self):
            return make_opt()
    return TinyGAN()


class GANData(DataFlow):
    def __init__(self, n=4):
        rng = np.random.RandomState(0)
        self.dps = [[rng.randn(8, 4).astype("float32") + 2, rng.randn(8, 2).astype("float32")] for _ in range(n)]

    def __len__(self):
        return len(self.dps)

    def __iter__(self):
        return iter(self.dps)


KERAS_OPTS = [lambda: keras.optimizers.Adam(0.01, beta_1=0.5), lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9)]


@pytest.mark.parametrize("make_opt", KERAS_OPTS, ids=["adam", "sgd"])
def test_a_keras_optimizer_minimizes_in_a_custom_trainers_tf1_graph_as_by_hand(make_opt):
    from kerastrainer import QueueInput, TowerContext, TowerTrainer
    from kerastrainer.tfutils.tower import TowerFunc

    class OneCost(TowerTrainer):
        def __init__(self, input, model):
            super().__init__()
            self.register_callback(input.setup(model.get_input_signature()))
            self.tower_func = TowerFunc(model.build_graph, model.get_input_signature())
            with TowerContext("", is_training=True):
                cost = self.tower_func(*input.get_input_tensors())
            self.train_op = make_opt().minimize(cost, name="train_op")

    data = Batches(n=3)
    trainer = OneCost(QueueInput(data), Linear(None))
    for k, v in trainer.named_variables().items():
        if k in W0:
            v.assign(W0[k])
    trainer.train_with_defaults(steps_per_epoch=3, max_epoch=1, extra_callbacks=[], monitors=[])
    w = {n: tf.Variable(v) for n, v in W0.items()}
    ref, variables = make_opt(), [w["fc/W"], w["fc/b"]]
    for x, y in data.batches:
        with tf.GradientTape() as tape:
            cost = tf.reduce_mean(tf.square(x @ w["fc/W"] + w["fc/b"] - y))
        ref.apply_gradients(zip(tape.gradient(cost, variables), variables))
    for n in W0:
        np.testing.assert_allclose(trainer.named_variables()[n].numpy(), w[n].numpy(), rtol=1e-5, atol=1e-6)
    assert not hasattr(keras.optimizers.Adam(0.1), "minimize")   # only while a TF1 graph is built


@pytest.mark.parametrize("make_opt", KERAS_OPTS, ids=["adam", "sgd"])
def test_tensorpack_gan_trainer_trains_with_a_keras_optimizer(make_opt):
    from kerastrainer import QueueInput
    GAN = _gan_modules()
    opts = []
    trainer = GAN.GANTrainer(QueueInput(GANData()), _tiny_gan(GAN, lambda: opts.append(make_opt()) or opts[-1]))
    named = trainer.named_variables()
    gen, dis = ["gen/fc/W", "gen/fc/b"], ["discrim/fc/W", "discrim/fc/b"]
    before = {k: named[k].numpy().copy() for k in gen + dis}
    trainer.train_with_defaults(steps_per_epoch=3, max_epoch=1, extra_callbacks=[], monitors=[])
    after = {k: named[k].numpy().copy() for k in gen + dis}
    assert all(not np.array_equal(before[k], after[k]) for k in gen + dis)
    assert int(opts[0].iterations.numpy()) == 6   # one optimizer, two updates a step (TF1's shared counters)
    trainer.sess.run("optimize/g_op")   # the generator's op alone moves only the generator
    last = {k: named[k].numpy() for k in gen + dis}
    assert all(not np.array_equal(after[k], last[k]) for k in gen)
    assert all(np.array_equal(after[k], last[k]) for k in dis)


def _two_updates(make_opt, chained):
    """A TF1 graph whose one Keras optimizer updates `a`, then `b` (GAN.py's d_min under
    tf.control_dependencies([g_min])); each cost reads only its own variable."""
    from kerastrainer.tfutils.layer_store import LayerStore
    from kerastrainer.train.tf1_graph import TF1Graph
    g, opt = TF1Graph(LayerStore()), make_opt()
    x = np.random.RandomState(0).rand(16, 16).astype("float32")
    with g.building():
        a = tfv1.get_variable("a", initializer=np.full([16, 16], 0.01, np.float32))
        b = tfv1.get_variable("b", initializer=np.full([16, 16], 0.02, np.float32))
        la = tf.reduce_mean(tf.square(tf.matmul(tf.matmul(x, a), a) - 1))
        lb = tf.reduce_mean(tf.square(tf.matmul(tf.matmul(x, b), b) + 1))
        a_min = opt.minimize(la, var_list=[a], name="a_op")
        if chained:
            with tf.control_dependencies([a_min]):
                b_min = opt.minimize(lb, var_list=[b], name="b_op")
        else:
            b_min = opt.minimize(lb, var_list=[b], name="b_op")
    return g, opt, a_min, b_min


@pytest.mark.parametrize("make_opt", KERAS_OPTS, ids=["adam", "sgd"])
def test_keras_optimizer_updates_in_a_tf1_graph_run_in_the_programs_order(make_opt):
    # The trainer runs many steps in one tf.range loop, and each Keras update is a function call
    # inlined there: an op of the second update that reads no gradient (`iterations`) must still wait
    # for the first. Reference: each update in a call of its own, one after the other.
    n = 60
    g, opt, _, b_min = _two_updates(make_opt, chained=True)
    step = g.function([b_min])

    @tf.function
    def steps(k):
        for _ in tf.range(k):
            step()
        return 0
    steps(tf.constant(n))
    ref, ref_opt, a_op, b_op = _two_updates(make_opt, chained=False)
    run_a, run_b = ref.function([a_op]), ref.function([b_op])
    for _ in range(n):
        run_a()
        run_b()
    assert int(opt.iterations.numpy()) == int(ref_opt.iterations.numpy()) == 2 * n
    got, want = g.named_variables(), ref.named_variables()
    for name in ("a", "b"):
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-6, atol=1e-7)


def _linear_cost(x, y):
    return tf.reduce_mean(tf.square(FullyConnected("fc", x, 1) - y), name="cost")


def _sgd_reference(batches, lr=0.1):
    w = dict(W0)
    for x, y in batches:
        err = x @ w["fc/W"] + w["fc/b"] - y
        w = {"fc/W": w["fc/W"] - lr * 2 * x.T @ err / len(x), "fc/b": w["fc/b"] - lr * 2 * err.mean(0)}
    return w


SIGNATURE = [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None, 1), tf.float32, "y")]


@pytest.mark.parametrize("make_trainer,towers", [
    (lambda: SimpleTrainer(), 1),
    (lambda: SyncMultiGPUTrainerReplicated(cpus(2)), 2),
    (lambda: __import__("kerastrainer").SyncMultiGPUTrainerParameterServer(cpus(2)), 2),
], ids=["simple", "replicated", "parameter_server"])
def test_tensorpacks_four_argument_setup_graph_then_train_with_defaults(make_trainer, towers):
    from kerastrainer import QueueInput
    data = Batches(n=3, parts=towers)
    trainer = make_trainer()
    trainer.setup_graph(SIGNATURE, QueueInput(data), _linear_cost,
                        lambda: tfv1.train.GradientDescentOptimizer(0.1))
    trainer.train_with_defaults(callbacks=[SetWeights()], extra_callbacks=[], monitors=[], steps_per_epoch=3,
                                max_epoch=1)
    expected = _sgd_reference(data.batches)
    for n in W0:
        np.testing.assert_allclose(trainer.named_variables()[n].numpy(), expected[n], rtol=1e-5, atol=1e-6)


def test_four_argument_setup_graph_on_horovod_trainer():
    pytest.importorskip("horovod.tensorflow")
    from kerastrainer import HorovodTrainer, QueueInput
    data = Batches(n=3)
    trainer = HorovodTrainer()
    trainer.setup_graph(SIGNATURE, QueueInput(data), _linear_cost, lambda: tfv1.train.GradientDescentOptimizer(0.1))
    trainer.train_with_defaults(callbacks=[SetWeights()], extra_callbacks=[], monitors=[], steps_per_epoch=3,
                                max_epoch=1)
    expected = _sgd_reference(data.batches)
    for n in W0:
        np.testing.assert_allclose(trainer.named_variables()[n].numpy(), expected[n], rtol=1e-5, atol=1e-6)


_MULTIWORKER_PROGRAM = r"""
import sys
sys.path.insert(0, {tests!r})
from kerastrainer import MultiWorkerTrainer
trainer = MultiWorkerTrainer()   # first: before any TF op
import numpy as np, tensorflow as tf
from kerastrainer import QueueInput
from test_tf1_mechanisms import Batches, SetWeights, SIGNATURE, W0, _linear_cost, _sgd_reference
data = Batches(n=3)
trainer.setup_graph(SIGNATURE, QueueInput(data), _linear_cost,
                    lambda: tf.compat.v1.train.GradientDescentOptimizer(0.1))
trainer.train_with_defaults(callbacks=[SetWeights()], extra_callbacks=[], monitors=[], steps_per_epoch=3, max_epoch=1)
expected = _sgd_reference(data.batches)
for n in W0:
    np.testing.assert_allclose(trainer.named_variables()[n].numpy(), expected[n], rtol=1e-5, atol=1e-6)
print("MULTIWORKER-OK", trainer.global_step)
"""


@pytest.mark.slow   # a fresh interpreter with TF's collective runtime: ~30 s on 2 busy cores
def test_four_argument_setup_graph_on_multiworker_trainer(tmp_path):
    import os
    import subprocess
    import sys
    tests = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run([sys.executable, "-c", _MULTIWORKER_PROGRAM.format(tests=tests)], capture_output=True,
                         text=True, timeout=300, cwd=str(tmp_path), env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "MULTIWORKER-OK 3" in out.stdout


def test_dependency_of_targets_and_fetches_walk_data_and_control_inputs():
    from kerastrainer.tfutils.dependency import dependency_of_fetches, dependency_of_targets
    g = tf.Graph()
    with g.as_default():
        a = tf.constant(1.0, name="a")
        b = tf.identity(a * 2.0, name="b")
        c = tf.constant(3.0, name="c")
        with tf.control_dependencies([c]):
            d = tf.identity(b, name="d")
        e = tf.constant(5.0, name="e")
    assert dependency_of_targets([d], a) and dependency_of_targets([d], c.op)   # data, control
    assert not dependency_of_targets([d], e) and not dependency_of_targets([b], c)
    assert dependency_of_fetches({"x": ["d:0"], "y": e}, a) and dependency_of_fetches(("b",), a.op)
    assert not dependency_of_fetches([b, e], c)
    with pytest.raises(TypeError, match="eager values have no graph"):
        dependency_of_targets([tf.constant(1.0)], tf.constant(2.0))


def _clip_w(v):
    return tf.clip_by_value(v, -0.2, 0.2) if v.op.name == "fc/W" else None


def test_variable_assignment_optimizer_in_a_tf1_graph_assigns_after_the_update():
    from kerastrainer.tfutils.optimizer import ProxyOptimizer, VariableAssignmentOptimizer
    g = tf.Graph()
    with g.as_default():
        w = tfv1.get_variable("fc/W", initializer=tf.constant([0.5, -0.1, 0.05]))
        op = VariableAssignmentOptimizer(tfv1.train.GradientDescentOptimizer(0.1), _clip_w).minimize(
            tf.reduce_sum(w * tf.constant([1.0, 1.0, -1.0])))
        plain = ProxyOptimizer(tfv1.train.GradientDescentOptimizer(0.1)).minimize(tf.reduce_sum(w))
        with tfv1.Session(graph=g) as sess:
            sess.run(tfv1.global_variables_initializer())
            sess.run(op)
            np.testing.assert_allclose(sess.run(w), [0.2, -0.2, 0.15], rtol=1e-6)
            sess.run(plain)
            np.testing.assert_allclose(sess.run(w), [0.1, -0.3, 0.05], rtol=1e-6)


@pytest.mark.parametrize("towers", [1, 2])
def test_variable_assignment_optimizer_from_model_optimizer_clips_after_each_update(towers):
    from kerastrainer.tfutils.optimizer import VariableAssignmentOptimizer
    data = Batches(n=3, parts=towers)
    trainer = SimpleTrainer(steps_per_call=2) if towers == 1 else SyncMultiGPUTrainerReplicated(cpus(2))
    make = lambda: VariableAssignmentOptimizer(tfv1.train.GradientDescentOptimizer(0.1), _clip_w)  # noqa: E731
    cfg = TrainConfig(model=Linear(make), dataflow=data, callbacks=[SetWeights()], extra_callbacks=[], monitors=[],
                      max_epoch=1, steps_per_epoch=3)
    launch_train_with_config(cfg, trainer)
    w = dict(W0)
    for x, y in data.batches:
        err = x @ w["fc/W"] + w["fc/b"] - y
        w = {"fc/W": np.clip(w["fc/W"] - 0.1 * 2 * x.T @ err / len(x), -0.2, 0.2),
             "fc/b": w["fc/b"] - 0.1 * 2 * err.mean(0)}
    for n in W0:
        np.testing.assert_allclose(trainer.named_variables()[n].numpy(), w[n], rtol=1e-5, atol=1e-6)
    assert np.abs(trainer.named_variables()["fc/W"].numpy()).max() <= 0.2 + 1e-7


def test_session_creators_make_and_reuse_tf1_sessions():
    from kerastrainer.tfutils import get_default_sess_config
    from kerastrainer.tfutils.sesscreate import NewSessionCreator, ReuseSessionCreator, SessionCreatorAdapter
    g = tf.Graph()
    with g.as_default():
        v = tfv1.get_variable("v", initializer=3.0)
        local = tfv1.Variable(4.0, collections=[tfv1.GraphKeys.LOCAL_VARIABLES], name="local")
        creator = NewSessionCreator(config=get_default_sess_config())
        sess = creator.create_session()
        assert creator.user_provided_config and sess.run([v, local]) == [3.0, 4.0]
        assert ReuseSessionCreator(sess).create_session() is sess
        wrapped = SessionCreatorAdapter(ReuseSessionCreator(sess), lambda s: ("wrapped", s)).create_session()
        assert wrapped == ("wrapped", sess)
        assert not NewSessionCreator().user_provided_config
        sess.close()


def test_session_update_assigns_by_name_in_a_session_and_eagerly(kt_log):
    from kerastrainer.tfutils.varmanip import SessionUpdate
    g = tf.Graph()
    with g.as_default():
        w = tfv1.get_variable("fc/W", shape=[2, 2], initializer=tfv1.zeros_initializer())
        with tfv1.Session(graph=g) as sess:
            sess.run(tfv1.global_variables_initializer())
            SessionUpdate(sess, [w]).update({"fc/W:0": np.arange(4, dtype="float64")})   # reshaped, cast
            np.testing.assert_array_equal(sess.run(w), [[0, 1], [2, 3]])
    assert "reshaped" in kt_log.warnings()
    e = tf.Variable(np.zeros(3, "float32"), name="e")
    SessionUpdate(None, [e]).update({e.name: [1, 2, 3]})
    np.testing.assert_array_equal(e.numpy(), [1, 2, 3])
    with pytest.raises(ValueError, match="has shape"):
        SessionUpdate(None, [e]).update({e.name: [1, 2]})
    with pytest.raises(KeyError, match="not among the variables"):
        SessionUpdate(None, [e]).update({"nope:0": 1})
