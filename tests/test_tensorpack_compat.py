"""kerastrainer.compat and tensorpack's paths: TF1 idioms in tower functions and optimizer()."""
import functools
import os
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerastrainer.callbacks import Callback, ScheduledHyperParamSetter
from kerastrainer.compat import get_global_step_value, get_global_step_var, tfv1, translate_optimizer
from kerastrainer.dataflow import DataFromList
from kerastrainer.models import FixedUnPooling, FullyConnected, Maxout
from kerastrainer.tfutils import add_moving_summary, get_default_layer_store
from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

from _models import LinearData


def _train(model, steps=4, callbacks=(), steps_per_call="auto", data=None):
    config = TrainConfig(model=model, dataflow=data or LinearData(num_batches=steps, batch=8),
                         callbacks=list(callbacks), monitors=[], extra_callbacks=[], max_epoch=1,
                         steps_per_epoch=steps)
    return launch_train_with_config(config, SimpleTrainer(steps_per_call=steps_per_call))


class _Base(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def logits_cost(self, x, y):
        logits = FullyConnected("fc", x, 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


# --- TF1 optimizers: same update rule as TF1 ----------------------------------------------------
_CASES = [
    ("GradientDescentOptimizer", {}),
    ("MomentumOptimizer", {"momentum": 0.9}),
    ("MomentumOptimizer", {"momentum": 0.9, "use_nesterov": True}),
    ("AdamOptimizer", {"beta1": 0.8, "epsilon": 1e-3}),
    ("RMSPropOptimizer", {"decay": 0.8, "momentum": 0.5, "epsilon": 1e-6}),
    ("RMSPropOptimizer", {"centered": True}),
    ("AdagradOptimizer", {"initial_accumulator_value": 0.2}),
    ("AdadeltaOptimizer", {"rho": 0.9, "epsilon": 1e-6}),
]
_GRADS = [np.array([0.5, -1.0, 2.0], np.float32), np.array([0.1, 0.3, -0.2], np.float32),
          np.array([-1.0, 0.5, 0.25], np.float32)]
_LRS = [0.1, 0.05, 0.2]  # the learning rate changes between steps, as a schedule would


def _tf1_reference(name, kwargs):
    with tf.Graph().as_default():
        var = tfv1.Variable(np.array([1.0, 2.0, 3.0], np.float32))
        lr = tfv1.Variable(0.1, trainable=False)
        g = tfv1.placeholder(tf.float32, [3])
        opt = getattr(tfv1.train, name)(lr, **kwargs)
        step = opt.apply_gradients([(g, var)])
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            for grad, rate in zip(_GRADS, _LRS):
                lr.load(rate, sess)
                sess.run(step, {g: grad})
            return sess.run(var)


@pytest.mark.parametrize("name,kwargs", _CASES)
def test_tf1_optimizer_translation_has_tf1_maths(name, kwargs):
    lr = tf.Variable(0.1, trainable=False)
    opt = translate_optimizer(getattr(tfv1.train, name)(lr, **kwargs))
    assert isinstance(opt, keras.optimizers.Optimizer)
    var = tf.Variable(np.array([1.0, 2.0, 3.0], np.float32))
    opt.build([var])
    for grad, rate in zip(_GRADS, _LRS):
        lr.assign(rate)
        opt.apply_gradients([(tf.constant(grad), var)])
    np.testing.assert_allclose(var.numpy(), _tf1_reference(name, kwargs), rtol=1e-5, atol=1e-6)


def test_untranslatable_tf1_optimizer_is_a_clear_error():
    with pytest.raises(TypeError, match="FtrlOptimizer.*keras.optimizers"):
        translate_optimizer(tfv1.train.FtrlOptimizer(0.1))


# --- the global step inside the tower and in optimizer() -----------------------------------------
class _DecayInTower(_Base):
    def build_graph(self, x, y):
        wd = tfv1.train.exponential_decay(1.0, get_global_step_var(), 1, 0.5, staircase=True)
        add_moving_summary(tf.identity(wd, name="wd"))
        return self.logits_cost(x, y) + 0.0 * wd

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


class _Record(Callback):
    def __init__(self, key):
        self.key, self.values, self.steps = key, [], []

    def _trigger_step(self):
        self.values.append(self.trainer.last_step_outputs[self.key])
        self.steps.append(get_global_step_value())


def test_global_step_moves_inside_the_tower_every_step():
    rec = _Record("wd")
    trainer = _train(_DecayInTower(), steps=4, callbacks=[rec], steps_per_call=1)
    np.testing.assert_allclose(rec.values, [1.0, 0.5, 0.25, 0.125])
    assert rec.steps == [1, 2, 3, 4] and int(trainer.global_step_var.numpy()) == 4


def test_global_step_moves_inside_a_multi_step_call():
    rec = _Record("wd")
    _train(_DecayInTower(), steps=4, callbacks=[rec], steps_per_call=4)
    # one call of 4 steps: the moving summary is the call's average over steps 0..3
    np.testing.assert_allclose(rec.values, [np.mean([1.0, 0.5, 0.25, 0.125])], rtol=1e-6)


class _DecayedLR(_Base):
    def build_graph(self, x, y):
        assert self.training
        return self.logits_cost(x, y)

    def optimizer(self):
        lr = tfv1.train.exponential_decay(0.1, get_global_step_var(), 2, 0.5, staircase=True, name="learning_rate")
        tfv1.summary.scalar("lr", lr)  # TF1 code in optimizer() runs as in TF1 (graph mode)
        return tfv1.train.MomentumOptimizer(lr, 0.9)


def test_learning_rate_expression_of_the_global_step_follows_training():
    trainer = _train(_DecayedLR(), steps=4, steps_per_call=1)
    assert float(trainer.optimizer.learning_rate) == pytest.approx(0.1 * 0.5 ** 2)


class _ScaledLRVariable(_Base):
    """FasterRCNN's form: the schedule sets the variable, the optimizer runs at a fraction of it."""

    def build_graph(self, x, y):
        return self.logits_cost(x, y)

    def optimizer(self):
        lr = tfv1.get_variable("learning_rate", initializer=0.08, trainable=False)
        return tfv1.train.MomentumOptimizer(lr / 8., 0.9)


def test_a_learning_rate_computed_from_a_variable_follows_the_variable():
    lrs = []

    class Seen(Callback):
        def _trigger_step(self):
            lrs.append(float(self.trainer.optimizer.learning_rate))

    trainer = _train(_ScaledLRVariable(), steps=4, steps_per_call=1,
                     callbacks=[ScheduledHyperParamSetter("learning_rate", [(0, 0.08), (2, 0.04)],
                                                          step_based=True), Seen()])
    assert trainer.get_hyperparam_var("learning_rate").name.startswith("learning_rate")
    # the optimizer always runs at the variable / 8 (it ran at the variable itself: 8x the rate)
    np.testing.assert_allclose(lrs, [0.01, 0.005, 0.005, 0.005], rtol=1e-6)


class _WarmUpLR(_Base):
    def build_graph(self, x, y):
        return self.logits_cost(x, y)

    def optimizer(self):
        step = tf.cast(get_global_step_var(), tf.float32)
        lr = tf.where(step < 4., step / 4. * 0.4, 0.4)   # warm-up: 0 at step 0, built before training
        return tfv1.train.GradientDescentOptimizer(lr)


def test_a_warm_up_learning_rate_of_the_global_step_moves_with_it():
    lrs = []

    class Seen(Callback):
        def _trigger_step(self):
            lrs.append(float(self.trainer.optimizer.learning_rate))

    _train(_WarmUpLR(), steps=5, steps_per_call=1, callbacks=[Seen()])
    # it was the constant of step 0: the whole run trained at learning rate 0
    np.testing.assert_allclose(lrs, [0.1, 0.2, 0.3, 0.4, 0.4], rtol=1e-6)


class _PiecewiseLR(_Base):
    def build_graph(self, x, y):
        return self.logits_cost(x, y)

    def optimizer(self):  # eager: translated to keras.optimizers.schedules.PiecewiseConstantDecay
        return tfv1.train.AdamOptimizer(tfv1.train.piecewise_constant(get_global_step_var(), [2], [0.1, 0.01]))


def test_tf1_schedule_becomes_the_keras_schedule_of_the_global_step():
    trainer = _train(_PiecewiseLR(), steps=2, steps_per_call=1)
    assert float(trainer.optimizer.learning_rate) == pytest.approx(0.1)  # global step 2: boundary not passed
    trainer.run_step_call(1)
    assert float(trainer.optimizer.learning_rate) == pytest.approx(0.01)


class _LRVariable(_Base):
    def build_graph(self, x, y):
        return self.logits_cost(x, y)

    def optimizer(self):
        lr = tfv1.get_variable("learning_rate", initializer=0.0, trainable=False)
        return tfv1.train.GradientDescentOptimizer(lr)


class _InitialWeights(Callback):
    def _before_train(self):
        self.w = self.trainer.named_variables()["fc/W"].numpy().copy()


def test_learning_rate_variable_is_set_by_scheduled_hyperparam_setter():
    rec = _InitialWeights()
    frozen = _train(_LRVariable(), steps=2, callbacks=[rec])  # lr 0: nothing moves
    assert float(frozen.get_hyperparam_var("learning_rate").numpy()) == 0.0
    np.testing.assert_array_equal(frozen.named_variables()["fc/W"].numpy(), rec.w)

    rec = _InitialWeights()
    trainer = _train(_LRVariable(), steps=2,
                     callbacks=[rec, ScheduledHyperParamSetter("learning_rate", [(0, 0.5)])])
    lr_var = trainer.get_hyperparam_var("learning_rate")
    assert lr_var is trainer.named_variables()["learning_rate"] and float(lr_var.numpy()) == 0.5
    assert not np.allclose(trainer.named_variables()["fc/W"].numpy(), rec.w)


# --- Keras models built inside build_graph --------------------------------------------------------
class _KerasInside(_Base):
    def __init__(self):
        self.get_model = functools.lru_cache(None)(lambda: keras.Sequential([
            keras.layers.Dense(8), keras.layers.BatchNormalization(), keras.layers.Dense(3)]))

    def build_graph(self, x, y):
        logits = self.get_model()(x)  # no training=: the tower's mode applies
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def optimizer(self):
        return tfv1.train.AdamOptimizer(1e-2)


def test_keras_model_built_in_build_graph_trains_and_updates_batchnorm():
    model = _KerasInside()
    trainer = _train(model, steps=3)
    names = trainer.named_variables()
    # (Keras numbers its auto-names per process: 'sequential_3/dense_7/kernel' after other tests)
    assert any(re.fullmatch(r"sequential(_\d+)?/dense(_\d+)?/kernel", n) for n in names)
    assert any(re.fullmatch(r"sequential(_\d+)?/batch_normalization(_\d+)?/moving_mean", n) for n in names)
    bn = model.get_model().layers[1]
    assert not np.allclose(bn.moving_mean.numpy(), 0.0)  # updated in the training tower
    assert len(trainer.trainable_variables) == 6


# --- tensorpack programs' other habits ------------------------------------------------------------
def test_training_inside_a_tf1_graph_block():
    with tfv1.Graph().as_default():
        trainer = _train(_LRVariable(), steps=2)
    assert trainer.global_step == 2


def test_default_layer_store_is_fresh_after_reset_default_graph():
    store = get_default_layer_store()
    assert get_default_layer_store() is store
    tfv1.reset_default_graph()
    assert get_default_layer_store() is not store


def test_fixed_unpooling_and_maxout():
    x = tf.reshape(tf.range(8, dtype=tf.float32), [1, 2, 2, 2])
    y = FixedUnPooling("unpool", x, 2).numpy()
    assert y.shape == (1, 4, 4, 2)
    np.testing.assert_array_equal(y[0, ::2, ::2], x.numpy()[0])
    assert y.sum() == x.numpy().sum()
    yc = FixedUnPooling("unpool_nchw", tf.transpose(x, [0, 3, 1, 2]), 2, data_format="channels_first").numpy()
    np.testing.assert_array_equal(yc, y.transpose(0, 3, 1, 2))
    m = Maxout("maxout", tf.constant([[1.0, 5.0, 3.0, 2.0]]), 2).numpy()
    np.testing.assert_array_equal(m, [[5.0, 3.0]])


def test_tensorpack_module_paths_and_star_import():
    import kerastrainer
    from kerastrainer.contrib.keras import KerasPhaseCallback
    from kerastrainer.tfutils.common import get_global_step_var as g2
    from kerastrainer.tfutils.export import ModelExporter  # noqa: F401
    from kerastrainer.utils.argtools import memoized, shape2d
    from kerastrainer.utils.gpu import get_num_gpu
    from kerastrainer.utils.stats import RatioCounter
    assert g2 is get_global_step_var and shape2d(3) == [3, 3] and get_num_gpu() >= 0
    assert memoized(lambda: object())
    c = RatioCounter()
    c.feed(1, 4)
    assert c.ratio == 0.25
    KerasPhaseCallback(True)
    ns = {}
    exec("from kerastrainer import *", ns)
    # TF's compat.v1 API (a program's `import tensorflow.compat.v1` makes a second module object of
    # it, with the same functions: compared by what it holds)
    assert ns["tfv1"].get_variable is tf.compat.v1.get_variable and ns["tfv1"].__file__ == tf.compat.v1.__file__
    assert ns["summary"].add_moving_summary is add_moving_summary
    assert ns["get_global_step_var"] is get_global_step_var and "NoOpTrainer" in ns
    assert kerastrainer.compat.is_tfv2()


def test_checkpoint_pointer_file_is_accepted(tmp_path):
    from kerastrainer.tfutils.sessinit import get_checkpoint_path
    ckpt = tf.train.Checkpoint(v=tf.Variable(1.0))
    prefix = ckpt.save(str(tmp_path / "checkpoint"))
    assert os.path.isfile(tmp_path / "checkpoint")
    assert get_checkpoint_path(str(tmp_path / "checkpoint")) == prefix


class _GradProc(_Base):
    def build_graph(self, x, y):
        return self.logits_cost(x, y)

    def optimizer(self):
        from kerastrainer.tfutils import gradproc, optimizer
        return optimizer.apply_grad_processors(tfv1.train.GradientDescentOptimizer(0.1), [
            gradproc.ScaleGradient(("fc/b", 0.0)), gradproc.GlobalNormClip(1e-3)])


def test_apply_grad_processors_scale_and_clip():
    rec = _InitialWeights()

    class _B(Callback):
        def _before_train(self):
            self.b = self.trainer.named_variables()["fc/b"].numpy().copy()
    recb = _B()
    trainer = _train(_GradProc(), steps=3, callbacks=[rec, recb])
    names = trainer.named_variables()
    np.testing.assert_array_equal(names["fc/b"].numpy(), recb.b)  # frozen by ScaleGradient(0)
    moved = np.linalg.norm(names["fc/W"].numpy() - rec.w)
    assert 0 < moved <= 3 * 0.1 * 1e-3 + 1e-7  # each step's gradient clipped to norm 1e-3


def test_batch_renorm_corrections_and_inference():
    from kerastrainer.models import BatchRenormalization
    from kerastrainer.tfutils import TowerContext
    from kerastrainer.models import BatchRenorm
    x = tf.constant(np.random.RandomState(0).randn(16, 4).astype("float32") * 3 + 2)
    # fresh renorm statistics (mean 0, stddev 1): with loose clipping r, d undo the batch
    # normalisation exactly; with rmax=1, dmax=0 it is plain batch normalisation
    loose = BatchRenormalization(rmax=100.0, dmax=100.0)
    np.testing.assert_allclose(loose(x, training=True).numpy(), x.numpy(), rtol=1e-4, atol=1e-4)
    tight = BatchRenormalization(rmax=1.0, dmax=0.0, epsilon=0.0)
    y = tight(x, training=True).numpy()
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(y.std(0), 1, atol=1e-4)
    assert not np.allclose(tight.moving_mean.numpy(), 0)  # the inference statistics moved
    with TowerContext("", is_training=False):
        out = BatchRenorm("brn", x, rmax=3.0, dmax=5.0)
    np.testing.assert_allclose(out.numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-5)  # fresh moving stats
