"""tensorpack 0.11's GAN examples (GAN.py's GANTrainer, its multi-GPU form and SeparateGANTrainer;
DCGAN.py, Improved-WGAN.py), ported with the import change and the TF2-forced edits (see each
script's header), train on kerastrainer's TowerTrainer.

The programs run as written in their own processes on tiny random JPEGs (``_shorten_trainer.py``
caps ``train_with_defaults``' epochs and steps): they train, write checkpoints and resume from them
with ``--load``. In this process (4 logical CPU devices, tests/conftest.py) the trainers are built
from the ported modules to check what a step does: which variables change, the hooked session's
global step, the towers' devices, predictors.
"""
import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

BATCH = 4


def run(script, *args, cwd, env=None, timeout=300):
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    r = subprocess.run([sys.executable, os.path.join(HERE, "_shorten_trainer.py"), os.path.join(HERE, script), *args],
                       cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{script} {args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


def write_jpegs(d, n=12, size=72):
    import cv2
    os.makedirs(d, exist_ok=True)
    rng = np.random.RandomState(0)
    for i in range(n):
        cv2.imwrite(os.path.join(d, f"{i}.jpg"), rng.randint(0, 255, (size, size, 3)).astype(np.uint8))
    return d


def stats_of(logdir):
    with open(os.path.join(logdir, "stats.json")) as f:
        return json.load(f)


def checkpoint_arrays(path):
    from kerastrainer.tfutils.varmanip import load_chkpt_vars
    return load_chkpt_vars(path)


def separate_gan_global_steps(steps, d_period=1, g_period=5, start=0):
    """tensorpack's SeparateGANTrainer.run_step: each hooked run counts one global step."""
    gs = start
    for _ in range(steps):
        if gs % d_period == 0:
            gs += 1
        if gs % g_period == 0:
            gs += 1
    return gs


def _changed(before, after, names):
    return {n for n in names if not np.array_equal(before[n], after[n])}


# --- the programs, as written -----------------------------------------------------------------

@pytest.mark.slow   # ~45 s on 2 cores
def test_dcgan_trains_saves_and_resumes(tmp_path):
    data = write_jpegs(str(tmp_path / "data"))
    (tmp_path / "run1").mkdir()
    run("DCGAN.py", "--data", data, "--batch", str(BATCH), cwd=tmp_path / "run1",
        env={"TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "2"})
    log1 = tmp_path / "run1" / "train_log" / "DCGAN"
    stats = stats_of(log1)
    assert [s["global_step"] for s in stats] == [2, 4]
    for key in ("GAN_loss/gen/loss", "GAN_loss/discrim/loss", "GAN_loss/discrim/accuracy"):
        assert np.isfinite(stats[-1][key]), key
    first = checkpoint_arrays(str(log1 / "checkpoint-4"))
    # one discriminator, shared by the real and the fake branch (auto_reuse_variable_scope)
    assert "discrim/conv0/W" in first and not any("discrim_1" in k for k in first)
    assert "gen/fc0/W/Adam" in first and "learning_rate" in first and int(first["global_step"]) == 4

    (tmp_path / "run2").mkdir()
    out = run("DCGAN.py", "--data", data, "--batch", str(BATCH), "--load", str(log1 / "checkpoint"),
              cwd=tmp_path / "run2", env={"TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2"})
    assert "Restored" in out and "not in the checkpoint" not in out
    log2 = tmp_path / "run2" / "train_log" / "DCGAN"
    resumed = checkpoint_arrays(str(log2 / "checkpoint-6"))   # the global step went on from 4
    assert set(resumed) == set(first)
    gen = [k for k in first if k.startswith("gen/") and k.endswith("/W")]
    dis = [k for k in first if k.startswith("discrim/") and k.endswith("/W")]
    assert gen and dis and _changed(first, resumed, gen) == set(gen) and _changed(first, resumed, dis) == set(dis)


@pytest.mark.slow   # ~45 s on 2 cores
def test_improved_wgan_trains_saves_and_resumes(tmp_path):
    data = write_jpegs(str(tmp_path / "data"))
    (tmp_path / "run1").mkdir()
    run("Improved-WGAN.py", "--data", data, "--batch", str(BATCH), cwd=tmp_path / "run1",
        env={"TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "3"})
    log1 = tmp_path / "run1" / "train_log" / "Improved-WGAN"
    stats = stats_of(log1)
    # SeparateGANTrainer(g_period=5): every hooked_sess.run counts a global step, as in tensorpack
    assert [s["global_step"] for s in stats] == [separate_gan_global_steps(3), separate_gan_global_steps(6)]
    for key in ("d_loss", "g_loss", "gradient_penalty", "gradient_rms"):
        assert np.isfinite(stats[-1][key]), key
    gs = stats[-1]["global_step"]
    first = checkpoint_arrays(str(log1 / f"checkpoint-{gs}"))
    assert "discrim/ln1/gamma" in first and "gen/deconv1/W/Adam_1" in first

    (tmp_path / "run2").mkdir()
    out = run("Improved-WGAN.py", "--data", data, "--batch", str(BATCH), "--load", str(log1 / "checkpoint"),
              cwd=tmp_path / "run2", env={"TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "3"})
    assert "Restored" in out
    stats2 = stats_of(tmp_path / "run2" / "train_log" / "Improved-WGAN")
    assert stats2[-1]["global_step"] == separate_gan_global_steps(3, start=gs)


# --- the trainers, built here from the ported modules --------------------------------------------

@pytest.fixture(scope="module")
def gan_modules():
    GAN = importlib.import_module("GAN")
    DCGAN = importlib.import_module("DCGAN")
    WGAN = importlib.import_module("Improved-WGAN")
    return GAN, DCGAN, WGAN


def _input():
    from kerastrainer import FakeData, QueueInput
    return QueueInput(FakeData([[BATCH, 64, 64, 3]], size=8, random=True, dtype="float32"))


def _train(trainer, steps, epochs=1):
    trainer.train_with_defaults(steps_per_epoch=steps, max_epoch=epochs, extra_callbacks=[], monitors=[])


def _values(trainer, names):
    named = trainer.named_variables()
    return {n: np.array(named[n].numpy()) for n in names}


def _trainable_names(trainer, scope):
    return sorted(n for n, v in trainer.named_variables().items() if n.startswith(scope + "/") and v.trainable)


def test_gan_trainer_step_updates_both_and_each_op_only_its_own(gan_modules):
    GAN, DCGAN, _ = gan_modules
    trainer = GAN.GANTrainer(_input(), DCGAN.Model(shape=64, batch=BATCH, z_dim=100))
    gen, dis = _trainable_names(trainer, "gen"), _trainable_names(trainer, "discrim")
    assert gen and dis and not set(gen) & set(dis)
    ema = ["discrim/bn1/mean/EMA", "gen/deconv1/bn/variance/EMA"]
    before = _values(trainer, gen + dis + ema)
    _train(trainer, steps=2)
    after = _values(trainer, gen + dis + ema)
    assert _changed(before, after, gen) == set(gen) and _changed(before, after, dis) == set(dis)
    # BatchNorm's moving statistics are updated every step (tensorpack ran UPDATE_OPS with each step)
    assert _changed(before, after, ema) == set(ema)
    outs = trainer.last_step_outputs
    assert all(np.isfinite(outs[k]) for k in ("GAN_loss/gen/loss", "GAN_loss/discrim/loss"))
    assert trainer.global_step == 2 and int(trainer.global_step_var.numpy()) == 2

    # the generator's op alone (TF1 semantics: nothing else runs) moves only the generator
    trainer.sess.run("optimize/g_op")
    last = _values(trainer, gen + dis)
    assert _changed(after, last, gen) == set(gen) and not _changed(after, last, dis)
    assert trainer.global_step == 2   # the plain session counts no step

    # an inference tower of the same tower function, on the trained weights
    pred = trainer.get_predictor(["z"], ["gen/gen"])
    images, = pred(np.random.uniform(-1, 1, (3, 100)).astype("float32"))
    assert images.shape == (3, 64, 64, 3) and np.abs(images).max() <= 1.0
    assert trainer.towers.training()[0].get_tensor("GAN_loss/gen/loss").shape == ()


def test_separate_gan_trainer_runs_each_op_on_its_own_net(gan_modules):
    from kerastrainer import Callback
    GAN, _, WGAN = gan_modules
    trainer = GAN.SeparateGANTrainer(_input(), WGAN.Model(shape=64, batch=BATCH, z_dim=128), g_period=5)
    gen, dis = _trainable_names(trainer, "gen"), _trainable_names(trainer, "discrim")
    # every kernel moves (the WGAN loss has no gradient for the critic's last bias: it cancels out)
    gen_w, dis_w = {n for n in gen if n.endswith("/W")}, {n for n in dis if n.endswith("/W")}
    seen = {}

    class RunEachOp(Callback):   # at the epoch's end, while the input still runs
        def _trigger_epoch(self):
            tr = self.trainer
            seen["global_step"] = tr.global_step
            v0 = _values(tr, gen + dis)
            tr.hooked_sess.run(tr.d_min)
            v1 = _values(tr, gen + dis)
            tr.hooked_sess.run(tr.g_min)
            v2 = _values(tr, gen + dis)
            seen["d"] = (_changed(v0, v1, dis), _changed(v0, v1, gen))
            seen["g"] = (_changed(v1, v2, gen), _changed(v1, v2, dis))
            seen["after"] = tr.global_step

    trainer.train_with_defaults(callbacks=[RunEachOp()], steps_per_epoch=6, max_epoch=1, extra_callbacks=[],
                                monitors=[])
    assert seen["global_step"] == separate_gan_global_steps(6)
    assert trainer.local_step == 6
    assert all(np.isfinite(trainer.last_step_outputs[k]) for k in ("d_loss", "g_loss", "gradient_penalty"))
    assert seen["d"][0] >= dis_w and not seen["d"][1]   # d_min moves the critic only
    assert seen["g"][0] >= gen_w and not seen["g"][1]   # g_min moves the generator only
    assert seen["after"] == seen["global_step"] + 2 == int(trainer.global_step_var.numpy())   # a step per run


def test_multigpu_gan_trainer_places_towers_on_two_devices(gan_modules):
    import tensorflow as tf
    GAN, DCGAN, _ = gan_modules
    assert len(tf.config.list_logical_devices("CPU")) >= 2 and not tf.config.list_logical_devices("GPU")
    trainer = GAN.GANTrainer(_input(), DCGAN.Model(shape=64, batch=BATCH, z_dim=100), num_gpu=2)
    convs = {}
    for op in trainer.graph.get_operations():
        if op.type in ("Conv2D", "Conv2DBackpropInput") and op.name.startswith("tower"):
            convs.setdefault(op.name.split("/")[0], set()).add(tf.DeviceSpec.from_string(op.device).device_index)
    assert convs == {"tower0": {0}, "tower1": {1}}
    assert trainer.num_replicas == 2
    gen, dis = _trainable_names(trainer, "gen"), _trainable_names(trainer, "discrim")
    before = _values(trainer, gen + dis)
    _train(trainer, steps=2)
    after = _values(trainer, gen + dis)
    assert _changed(before, after, gen) == set(gen) and _changed(before, after, dis) == set(dis)
    assert all(np.isfinite(v) for k, v in trainer.last_step_outputs.items() if not k.startswith("_"))


# --- the pieces on their own ---------------------------------------------------------------------

def test_single_cost_trainer_builds_a_tensorpack_style_trainer(tmp_path):
    import tensorflow as tf
    from kerastrainer import FakeData, FullyConnected, ModelDesc, QueueInput, SingleCostTrainer, TowerContext

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.float32, "y")]

        def build_graph(self, x, y):
            pred = tf.squeeze(FullyConnected("fc", x, 1), 1)
            return tf.reduce_mean(tf.square(pred - y), name="cost")

        def optimizer(self):
            return tf.compat.v1.train.GradientDescentOptimizer(0.1)

    class TPSimpleTrainer(SingleCostTrainer):   # tensorpack's SimpleTrainer._setup_graph
        def _setup_graph(self, input, get_cost_fn, get_opt_fn):
            with TowerContext("", is_training=True):
                grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
                self.train_op = get_opt_fn().apply_gradients(grads, name="train_op")
            return []

    trainer = TPSimpleTrainer()
    model = Model()
    trainer.setup_graph(model.get_input_signature(), QueueInput(FakeData([[8, 3], [8]], size=4, random=True)),
                        model.build_graph, model.optimizer)
    w0 = _values(trainer, ["fc/W"])
    _train(trainer, steps=3)
    assert _changed(w0, _values(trainer, ["fc/W"]), ["fc/W"]) == {"fc/W"}
    assert trainer.global_step == 3


def test_tower_func_handles_and_clear_errors():
    import tensorflow as tf
    from kerastrainer import TowerTrainer
    from kerastrainer.graph_builder import DataParallelBuilder, allreduce_grads
    from kerastrainer.tfutils.tower import TowerContext, TowerFunc, TowerFuncWrapper

    g = tf.Graph()
    with g.as_default():
        f = TowerFunc(lambda x: tf.identity(x * 2, name="out"), [tf.TensorSpec([None], tf.float32, "x")])
        assert TowerFunc(f, None) is f and TowerFuncWrapper is TowerFunc
        x = tf.compat.v1.placeholder(tf.float32, [None], name="inp")
        with TowerContext("tower0", is_training=True):
            f(x)
        h = f.towers["tower0"]
        assert h.get_tensor("out").name == "tower0/out:0" and h.get_tensor("x") is x
        with pytest.raises(KeyError, match="nope"):
            h.get_tensor("nope")
        a, b = tf.constant([1.0]), tf.constant([3.0])
        (ra,), (rb,) = allreduce_grads([[a], [b]], average=True)
    with tf.compat.v1.Session(graph=g) as sess:
        assert [v.tolist() for v in sess.run([ra, rb])] == [[2.0], [2.0]]
    with pytest.raises(RuntimeError, match="TowerContext"):
        f(tf.constant([1.0]))
    with pytest.raises(ValueError, match="SyncMultiGPUTrainerReplicated"):
        TowerContext("tower1", is_training=True, vs_name="tower1")
    with pytest.raises(ValueError, match="SyncMultiGPUTrainerReplicated"):
        DataParallelBuilder.call_for_each_tower([0, 1], lambda: None, use_vs=[False, True])
    with pytest.raises(ValueError, match="XLA"):
        TowerTrainer(jit_compile=True)


def test_single_cost_trainer_under_launch_train_with_config_resumes(tmp_path):
    import tensorflow as tf
    from kerastrainer import (AutoResumeTrainConfig, BatchNorm, FakeData, FullyConnected, ModelDesc, ModelSaver,
                              ScheduledHyperParamSetter, SingleCostTrainer, TowerContext, add_moving_summary,
                              launch_train_with_config)
    from kerastrainer.utils import logger

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.float32, "y")]

        def build_graph(self, x, y):
            pred = tf.squeeze(FullyConnected("fc", BatchNorm("bn", x), 1), 1)
            cost = tf.reduce_mean(tf.square(pred - y), name="cost")
            add_moving_summary(cost)
            return cost

        def optimizer(self):
            lr = tf.compat.v1.get_variable("learning_rate", initializer=0.1, trainable=False)
            return tf.compat.v1.train.MomentumOptimizer(lr, 0.9)

    class TPSimpleTrainer(SingleCostTrainer):
        def _setup_graph(self, input, get_cost_fn, get_opt_fn):
            with TowerContext("", is_training=True):
                grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
                self.train_op = get_opt_fn().apply_gradients(grads, name="train_op")
            return []

    results = []
    try:
        for run_index in range(2):
            logger.set_logger_dir(str(tmp_path / "log"), action="k")
            config = AutoResumeTrainConfig(
                model=Model(), dataflow=FakeData([[8, 3], [8]], size=4, random=True), steps_per_epoch=3,
                max_epoch=2 + 2 * run_index,
                callbacks=[ModelSaver(), ScheduledHyperParamSetter("learning_rate", [(1, 0.1), (2, 0.01)])])
            trainer = launch_train_with_config(config, TPSimpleTrainer())
            named = trainer.named_variables()
            results.append((trainer.global_step, trainer.epoch_num, float(named["learning_rate"].numpy()),
                            named["fc/W/Momentum"].numpy().copy()))
            logger.unset_logger_dir()
    finally:
        logger.unset_logger_dir()
    assert [r[:2] for r in results] == [(6, 2), (12, 4)]   # the second run resumed at epoch 3
    assert results[1][2] == pytest.approx(0.01)
    assert np.isfinite(results[1][3]).all() and np.abs(results[1][3]).sum() > 0


def test_stack_patches_of_utils_viz():
    from kerastrainer.utils.viz import gen_stack_patches, stack_patches
    patches = np.arange(4 * 2 * 2 * 3, dtype=np.uint8).reshape(4, 2, 2, 3)
    grid = stack_patches(patches, nr_row=2, nr_col=2, border=1, bgcolor=255)
    assert grid.shape == (5, 5, 3) and (grid[2] == 255).all() and (grid[:, 2] == 255).all()
    assert (grid[3:, 3:] == patches[3]).all()
    with pytest.raises(ValueError, match="pad=True"):
        stack_patches(patches[:3], nr_row=2, nr_col=2)
    grids = list(gen_stack_patches(patches, nr_row=1, nr_col=3, border=0))
    assert [g.shape for g in grids] == [(2, 6, 3), (2, 6, 3)] and (grids[1][:, 2:] == 255).all()
