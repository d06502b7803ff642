"""A step with several costs and optimizers (kerastrainer.Objective): what each update sees, the
data-parallel rule, `every`, checkpoints keyed by objective, schedules per optimizer, fp16, XLA,
predictors, and the errors for programs that do not fit."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from _devices import cpus
from kerastrainer import (FullyConnected, ModelDesc, ModelSaver, Objective, ScheduledHyperParamSetter, SimpleTrainer,
                          SmartInit, StagingInput, QueueInput, SyncMultiGPUTrainerParameterServer,
                          SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)
from kerastrainer.callbacks import Callback
from kerastrainer.dataflow import DataFlow, DataFromList
from kerastrainer.tfutils.varmanip import load_chkpt_vars
from kerastrainer.utils import logger


class TinyGAN(ModelDesc):
    """A 2-D generator against a linear critic: two costs from one forward pass."""

    def __init__(self, d_lr=0.05, g_lr=0.05, g_every=1, d_opt="sgd", d_repeat=1):
        self.d_lr, self.g_lr, self.g_every, self.d_opt, self.d_repeat = d_lr, g_lr, g_every, d_opt, d_repeat

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "real"), tf.TensorSpec((None, 2), tf.float32, "z")]

    def build_graph(self, real, z):
        fake = FullyConnected("gen/fc", z, 4)
        tf.identity(fake, name="fake")
        critic = FullyConnected("discrim/fc", tf.concat([tf.cast(real, fake.dtype), fake], 0), 1)
        d_real, d_fake = tf.split(critic, 2)
        d_loss = tf.reduce_mean(tf.nn.softplus(-d_real)) + tf.reduce_mean(tf.nn.softplus(d_fake))
        g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
        tf.identity(d_loss, name="critic_loss")
        return {"d_loss": d_loss, "g_loss": g_loss}

    def optimizer(self):
        d = keras.optimizers.Adam(self.d_lr) if self.d_opt == "adam" else keras.optimizers.SGD(self.d_lr)
        return [Objective("d_loss", d, variables="discrim/", repeat=self.d_repeat),
                Objective("g_loss", keras.optimizers.SGD(self.g_lr), variables="gen/", every=self.g_every)]


def _batches(n=6, batch=8, seed=0):
    rng = np.random.RandomState(seed)
    return [[rng.randn(batch, 4).astype("float32") + 2.0, rng.randn(batch, 2).astype("float32")] for _ in range(n)]


class Halves(DataFlow):
    """Each batch split in ``parts``, in the order the towers dequeue them."""

    def __init__(self, batches, parts):
        self.batches, self.parts = batches, parts

    def __len__(self):
        return len(self.batches) * self.parts

    def __iter__(self):
        for real, z in self.batches:
            for r, zz in zip(np.array_split(real, self.parts), np.array_split(z, self.parts)):
                yield [r, zz]


def _init_weights():
    rng = np.random.RandomState(1)
    return {"gen/fc/W": rng.randn(2, 4).astype("float32") * 0.3, "gen/fc/b": np.zeros(4, "float32"),
            "discrim/fc/W": rng.randn(4, 1).astype("float32") * 0.3, "discrim/fc/b": np.zeros(1, "float32")}


class SetWeights(Callback):
    _chief_only = False

    def __init__(self, values):
        self.values = values

    def _before_train(self):
        for k, v in self.trainer.named_variables().items():
            v.assign(self.values[k])


def _train(trainer, data, model=None, callbacks=(), max_epoch=1, **kw):
    source = {"data": data} if isinstance(data, StagingInput) else {"dataflow": data}
    cfg = TrainConfig(model=model or TinyGAN(), callbacks=list(callbacks), extra_callbacks=[],
                      monitors=[], max_epoch=max_epoch, **source, **kw)
    launch_train_with_config(cfg, trainer)
    return trainer


def _weights(trainer):
    return {k: v.numpy() for k, v in trainer.named_variables().items()}


def _reference_step(w, batches, d_lr=0.05, g_lr=0.05, g_every=1, d_repeat=1):
    """The rule, written out: the critic's extra updates (repeat) each from a pass of its own,
    then one forward pass, both gradients from it, then both SGD updates."""
    w = {k: tf.Variable(v) for k, v in w.items()}
    dv = [w["discrim/fc/W"], w["discrim/fc/b"]]
    gv = [w["gen/fc/W"], w["gen/fc/b"]]

    def losses(real, z):
        fake = z @ w["gen/fc/W"] + w["gen/fc/b"]
        critic = tf.concat([real, fake], 0) @ w["discrim/fc/W"] + w["discrim/fc/b"]
        d_real, d_fake = tf.split(critic, 2)
        return (tf.reduce_mean(tf.nn.softplus(-d_real)) + tf.reduce_mean(tf.nn.softplus(d_fake)),
                tf.reduce_mean(tf.nn.softplus(-d_fake)))

    for i, (real, z) in enumerate(batches):
        for _ in range(d_repeat - 1):
            with tf.GradientTape() as tape:
                d_loss, _ = losses(real, z)
            for v, g in zip(dv, tape.gradient(d_loss, dv)):
                v.assign_sub(d_lr * g)
        with tf.GradientTape(persistent=True) as tape:
            d_loss, g_loss = losses(real, z)
        dg, gg = tape.gradient(d_loss, dv), tape.gradient(g_loss, gv)
        for v, g in zip(dv, dg):
            v.assign_sub(d_lr * g)
        if i % g_every == 0:
            for v, g in zip(gv, gg):
                v.assign_sub(g_lr * g)
    return {k: v.numpy() for k, v in w.items()}


@pytest.mark.parametrize("steps_per_call,g_every,d_repeat", [(1, 1, 1), (3, 2, 1), (2, 1, 3), (3, 3, 2)])
def test_each_objective_takes_its_gradients_from_one_forward_pass_and_updates_its_variables(steps_per_call, g_every,
                                                                                            d_repeat):
    batches = _batches(6)
    t = _train(SimpleTrainer(steps_per_call=steps_per_call), DataFromList(batches, shuffle=False),
               model=TinyGAN(g_every=g_every, d_repeat=d_repeat), callbacks=[SetWeights(_init_weights())])
    expected = _reference_step(_init_weights(), batches, g_every=g_every, d_repeat=d_repeat)
    got = _weights(t)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-5, atol=1e-6, err_msg=k)
    iters = {o.name: int(o.optimizer.iterations.numpy()) for o in t.objectives}
    assert iters == {"d_loss": 6 * d_repeat, "g_loss": 6 // g_every}
    assert set(t.last_step_outputs) >= {"d_loss", "g_loss"} and np.isfinite(t.last_step_outputs["g_loss"])


@pytest.mark.parametrize("trainer_cls", [SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer])
def test_two_replicas_equal_one_on_the_concatenated_batch(trainer_cls):
    batches = _batches(6)
    single = _train(SyncMultiGPUTrainerReplicated(cpus(1), steps_per_call=3), DataFromList(batches, shuffle=False),
                    model=TinyGAN(g_every=2, d_repeat=2), callbacks=[SetWeights(_init_weights())], steps_per_epoch=6)
    multi = _train(trainer_cls(cpus(2), steps_per_call=3), Halves(batches, 2), model=TinyGAN(g_every=2, d_repeat=2),
                   callbacks=[SetWeights(_init_weights())], steps_per_epoch=6)
    assert multi.num_replicas == 2 and multi.global_step == 6
    ws, wm = _weights(single), _weights(multi)
    for k in ws:
        np.testing.assert_allclose(wm[k], ws[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for n in ("d_loss", "g_loss"):
        assert multi.last_step_outputs[n] == pytest.approx(single.last_step_outputs[n], rel=1e-4)


def test_checkpoint_keys_each_optimizer_by_objective_and_a_resume_restores_both(logdir, kt_log):
    logger.set_logger_dir(logdir)
    first = _train(SimpleTrainer(steps_per_call=2), DataFromList(_batches(4), shuffle=False),
                   model=TinyGAN(d_opt="adam", g_every=2), callbacks=[ModelSaver()], max_epoch=2)
    ckpt = tf.train.latest_checkpoint(logdir)
    keys = set(load_chkpt_vars(ckpt))
    assert {"optimizer/d_loss/iteration", "optimizer/g_loss/iteration", "optimizer/g_loss/learning_rate",
            "optimizer/d_loss/discrim/fc/W/momentums", "optimizer/d_loss/discrim/fc/W/velocities"} <= keys, sorted(keys)
    assert not any(k.startswith("optimizer/gen") or k.startswith("optimizer/discrim") for k in keys)

    # resumed with a changed learning rate for the generator: both optimizers' state comes back,
    # and the changed hyper-parameter is named with its objective
    resumed = _train(SimpleTrainer(steps_per_call=2), DataFromList(_batches(4), shuffle=False),
                     model=TinyGAN(d_opt="adam", g_every=2, g_lr=0.01), session_init=SmartInit(ckpt),
                     starting_epoch=3, max_epoch=3)
    iters = {o.name: int(o.optimizer.iterations.numpy()) for o in resumed.objectives}
    assert iters == {"d_loss": 8 + 4, "g_loss": 4 + 2}
    assert any("optimizer 'g_loss'" in m and "learning_rate" in m for m in kt_log.messages), kt_log.messages
    assert first.global_step == 8


def test_a_schedule_sets_one_objectives_learning_rate_and_plain_learning_rate_asks_which():
    t = _train(SimpleTrainer(), DataFromList(_batches(2), shuffle=False),
               callbacks=[ScheduledHyperParamSetter("g_loss/learning_rate", [(1, 0.01)])], max_epoch=2)
    lrs = {o.name: float(o.optimizer.learning_rate.numpy()) for o in t.objectives}
    assert lrs == pytest.approx({"d_loss": 0.05, "g_loss": 0.01})
    with pytest.raises(KeyError, match="several optimizers.*'d_loss/learning_rate', 'g_loss/learning_rate'"):
        t.get_hyperparam_var("learning_rate")


def test_mixed_float16_gives_each_optimizer_its_own_loss_scale():
    t = _train(SimpleTrainer(precision="mixed_float16"), DataFromList(_batches(3), shuffle=False))
    opts = [o.optimizer for o in t.objectives]
    assert all(isinstance(o, keras.optimizers.LossScaleOptimizer) for o in opts) and opts[0] is not opts[1]
    assert np.isfinite(t.last_step_outputs["d_loss"]) and np.isfinite(t.last_step_outputs["g_loss"])


def test_xla_staging_and_a_predictor_by_tensor_name():
    batches = _batches(4)
    t = _train(SimpleTrainer(steps_per_call=2, jit_compile=True),
               StagingInput(QueueInput(DataFromList(batches, shuffle=False)), force=True),
               model=TinyGAN(), callbacks=[SetWeights(_init_weights())])
    expected = _reference_step(_init_weights(), batches)
    got = _weights(t)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=1e-4, atol=1e-5, err_msg=k)
    predict = t.get_predictor(["z"], ["fake"])
    z = np.ones((3, 2), "float32")
    (fake,) = predict(z)
    np.testing.assert_allclose(fake, z @ got["gen/fc/W"] + got["gen/fc/b"], rtol=1e-5, atol=1e-6)


class _Returns(TinyGAN):
    def __init__(self, costs="dict", opt="objectives", **kw):
        super().__init__(**kw)
        self.costs, self.opt = costs, opt

    def build_graph(self, real, z):
        out = super().build_graph(real, z)
        return out if self.costs == "dict" else out["d_loss"] + out["g_loss"]

    def optimizer(self):
        objs = super().optimizer()
        if self.opt == "one":
            return keras.optimizers.SGD(0.1)
        if self.opt == "missing":
            return [objs[0], Objective("gan_loss", keras.optimizers.SGD(0.1), variables="gen/")]
        if self.opt == "no_vars":
            return [objs[0], Objective("g_loss", keras.optimizers.SGD(0.1), variables="generator/")]
        if self.opt == "dup":
            return [objs[0], Objective("g_loss", keras.optimizers.SGD(0.1), variables="gen/", name="d_loss")]
        if self.opt == "shared":
            return [objs[0], Objective("g_loss", objs[0].optimizer, variables="gen/")]
        return objs


@pytest.mark.parametrize("costs,opt,error", [
    ("dict", "one", r"build_graph returned a dict of costs \(d_loss, g_loss\): optimizer\(\) must then return a "
                    r"list of kerastrainer.Objective"),
    ("one", "objectives", r"optimizer\(\) returned Objectives \(d_loss, g_loss\) but build_graph returned one cost"),
    ("dict", "missing", r"Objective cost\(s\) \['gan_loss'\] are not among the costs build_graph returns "
                        r"\(d_loss, g_loss\)"),
    ("dict", "no_vars", r"Objective\('g_loss'\): variables='generator/' selects no trainable variable.*gen/fc/W"),
    ("dict", "dup", r"several objectives are named \['d_loss'\]"),
    ("dict", "shared", r"two Objectives share one optimizer object"),
])
def test_programs_that_do_not_fit_get_an_error_naming_what_to_change(costs, opt, error):
    with pytest.raises((ValueError, TypeError), match=error):
        _train(SimpleTrainer(), DataFromList(_batches(2), shuffle=False), model=_Returns(costs, opt))


def test_objective_arguments_are_checked():
    with pytest.raises(ValueError, match="every must be a whole number >= 1; got 0"):
        Objective("d_loss", keras.optimizers.SGD(0.1), every=0)
    with pytest.raises(ValueError, match="every must be a whole number >= 1; got 2.5"):
        Objective("d_loss", keras.optimizers.SGD(0.1), every=2.5)
    with pytest.raises(ValueError, match="repeat must be a whole number >= 1; got 0"):
        Objective("d_loss", keras.optimizers.SGD(0.1), repeat=0)
    with pytest.raises(ValueError, match="name 'a b' must be letters"):
        Objective("d_loss", keras.optimizers.SGD(0.1), name="a b")
    with pytest.raises(TypeError, match="cost must be the key"):
        Objective(None, keras.optimizers.SGD(0.1))


def test_inference_runner_fetches_a_named_tensor_of_a_model_with_objectives():
    from kerastrainer import InferenceRunner, ScalarStats
    batches = _batches(3)
    t = _train(SimpleTrainer(), DataFromList(batches, shuffle=False), max_epoch=1,
               callbacks=[InferenceRunner(DataFromList(batches, shuffle=False), ScalarStats("critic_loss"))])
    predict = t.get_predictor(["real", "z"], ["critic_loss"])
    expected = np.mean([predict(real, z)[0] for real, z in batches])
    assert t.monitors.get_latest("validation_critic_loss") == pytest.approx(float(expected), rel=1e-5)
