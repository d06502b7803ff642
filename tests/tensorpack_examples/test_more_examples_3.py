"""More of tensorpack 0.11's examples, ported strictly: the import change, the edits TF2
forces, and where tensorpack 0.11's own program cannot run, a minimal repair (each listed in the
script's header). Each runs in its own process on tiny generated data (nothing is downloaded):

- GAN/: WGAN, ConditionalGAN-mnist, InfoGAN-mnist, BEGAN (with GAN.py and DCGAN.py, ported
  earlier), Image2Image, CycleGAN, DiscoGAN-CelebA (``_shorten_trainer.py`` caps
  ``train_with_defaults``);
- SpatialTransformer/mnist-addition, DynamicFilterNetwork/steering-filter, HED/hed,
  ImageNetModels/alexnet, shufflenet and vgg16 (``_shorten_batch.py`` caps ``TrainConfig``, batches
  and the GPU count). inception-bn.py is ported but not run (see docs/tensorpack-migration.md).

The focused tests at the end check the kerastrainer fixes these programs needed, in this process.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _data  # noqa: E402
from test_gan_examples import separate_gan_global_steps, write_jpegs  # noqa: E402
from test_more_examples import event_tags  # noqa: E402


def run(harness, script, *args, cwd, env=None, timeout=600):
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    r = subprocess.run([sys.executable, os.path.join(HERE, harness), os.path.join(HERE, script), *args],
                       cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{script} {args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


def stats_of(logdir):
    with open(os.path.join(str(logdir), "stats.json")) as f:
        return json.load(f)


def checkpoint_arrays(path):
    from kerastrainer.tfutils.varmanip import load_chkpt_vars
    return load_chkpt_vars(str(path))


def finite(stats, *keys):
    for k in keys:
        assert np.isfinite(stats[k]), (k, stats[k])


# --- GAN/ --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_wgan_clips_the_critic_every_step(tmp_path):
    data = write_jpegs(str(tmp_path / "data"))
    out = run("_shorten_trainer.py", "WGAN.py", "--data", data, "--batch", "4", cwd=tmp_path,
              env={"TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "3"})
    # ClipCallback._setup_graph ran in the trainer's graph: tf.trainable_variables() there, v.op.name
    assert "Clip discrim/conv0/W" in out and "Clip gen/" not in out
    logdir = tmp_path / "train_log" / "WGAN"
    stats = stats_of(logdir)
    # SeparateGANTrainer(d_period=3): every hooked run counts a global step, as in tensorpack
    assert [s["global_step"] for s in stats] == [separate_gan_global_steps(3, d_period=3, g_period=1),
                                                 separate_gan_global_steps(6, d_period=3, g_period=1)]
    finite(stats[-1], "d_loss", "g_loss")
    ckpt = checkpoint_arrays(logdir / f"checkpoint-{stats[-1]['global_step']}")
    critic = [k for k in ckpt if k.startswith("discrim/") and k.split("/")[-1] in ("W", "b", "gamma", "beta")]
    gen_w = [k for k in ckpt if k.startswith("gen/") and k.endswith("/W")]
    assert critic and gen_w
    # its `op.run()` in _trigger_step ran the clip after every step: the critic is within +-0.01
    for k in critic:
        assert np.abs(ckpt[k]).max() <= 0.01 + 1e-7, k
    assert max(np.abs(ckpt[k]).max() for k in gen_w) > 0.01   # the generator is not clipped


@pytest.mark.slow
def test_conditional_gan_mnist(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    run("_shorten_trainer.py", "ConditionalGAN-mnist.py", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "3"})
    logdir = tmp_path / "train_log" / "ConditionalGAN-mnist"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6]
    finite(stats[-1], "GAN_loss/gen/loss", "GAN_loss/discrim/loss")
    assert 0 <= stats[-1]["GAN_loss/discrim/accuracy"] <= 1
    # tf.summary.image('gen', image_gen, 30) in variable_scope('gen')
    assert event_tags(logdir)["gen/gen"] == ("images", [3, 6])
    ckpt = checkpoint_arrays(logdir / "checkpoint-6")
    assert ckpt["gen/fc0/W"].shape == (110, 1024)              # z (100) + one-hot label (10)
    assert ckpt["discrim/conv0/W"].shape == (5, 5, 11, 11)      # image + 10 label planes, 11 filters


@pytest.mark.slow
def test_infogan_mnist(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    run("_shorten_trainer.py", "InfoGAN-mnist.py", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "3"})
    logdir = tmp_path / "train_log" / "InfoGAN-mnist"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6]
    s = stats[-1]
    finite(s, "total_g_loss", "total_d_loss", "mutual_information/mutual_information")
    # the prior's entropy is fixed: 10-way uniform categorical + 2 uniforms on [-1, 1] seen as N(0, 1)
    # ... as the program computes it; the conditional entropy is what the Q-net learns
    assert s["mutual_information/prior_entropy/total_entropy"] > s["mutual_information/mutual_information"]
    # apply_grad_processors(AdamOptimizer, [ScaleGradient]) minimized both losses (GANTrainer's opt.minimize)
    ckpt = checkpoint_arrays(logdir / "checkpoint-6")
    assert "gen/fc0/W/Adam" in ckpt and "discrim/fc1/W/Adam" in ckpt


@pytest.mark.slow
def test_began(tmp_path):
    data = write_jpegs(str(tmp_path / "data"))
    run("_shorten_trainer.py", "BEGAN.py", "--data", data, "--batch", "4", cwd=tmp_path,
        env={"TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "2"})
    logdir = tmp_path / "train_log" / "BEGAN"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [2, 4]
    finite(stats[-1], "losses/measure", "losses/loss_D", "kt")
    # StatMonitorParamSetter('learning_rate', 'losses/measure', ...) reads the tfv1 learning-rate variable
    assert stats[-1]["learning_rate"] == pytest.approx(1e-4)
    ckpt = checkpoint_arrays(logdir / "checkpoint-4")
    # the decoder's `.tf.image.resize_nearest_neighbor` (TF1's name) in a LinearWrap chain built
    assert ckpt["gen/conv4.3/W"].shape[-1] == 3 and int(ckpt["global_step"]) == 4


@pytest.mark.slow
def test_image2image(tmp_path):
    data = _data.write_jpeg_dir(str(tmp_path / "data"), n=3, shape=(64, 128))   # A|B side by side
    run("_shorten_trainer.py", "Image2Image.py", "--data", data, cwd=tmp_path, timeout=900,
        env={"TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2"})
    logdir = tmp_path / "train_log" / "Image2Image"
    s = stats_of(logdir)[-1]
    assert s["global_step"] == 2 and s["learning_rate"] == pytest.approx(2e-4)
    finite(s, "L1_loss", "total_g_loss", "GAN_loss/discrim/loss")
    ckpt = checkpoint_arrays(logdir / "checkpoint-2")     # ModelSaver's save when training ends
    assert ckpt["gen/conv1/W"].shape == (4, 4, 3, 64)          # the U-Net encoder's first conv
    assert ckpt["discrim/conv0/W"].shape == (4, 4, 6, 64)      # input and output, stacked


@pytest.mark.slow
def test_cyclegan(tmp_path):
    root = tmp_path / "data"
    for d, n in (("trainA", 3), ("trainB", 3), ("testA", 32), ("testB", 32)):   # TEST_BATCH is 32
        _data.write_jpeg_dir(str(root / d), n=n, shape=(32, 32), seed=len(d) + n)
    run("_shorten_trainer.py", "CycleGAN.py", "--data", str(root), cwd=tmp_path, timeout=1200,
        env={"TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2"})
    logdir = tmp_path / "train_log" / "CycleGAN"
    s = stats_of(logdir)[-1]
    assert s["global_step"] == 2
    finite(s, "losses/G_loss_total", "losses/D_loss_total", "losses/LossA/recon_loss")
    # VisualizeTestSet (under PeriodicTrigger) got its predictor in _setup_graph: epoch 1 is not a
    # multiple of 3, so it has not triggered; the checkpoint has both generators
    ckpt = checkpoint_arrays(logdir / "checkpoint-2")
    assert any(k.startswith("gen/A/") for k in ckpt) and any(k.startswith("gen/B/") for k in ckpt)


@pytest.mark.slow
def test_discogan_celeba(tmp_path):
    data = _data.write_celeba(str(tmp_path / "celeba"))
    run("_shorten_trainer.py", "DiscoGAN-CelebA.py", "--data", data, cwd=tmp_path, timeout=900,
        env={"TP_PRETEND_GPU": "1", "TP_BATCH_SIZE": "4", "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "3"})
    logdir = tmp_path / "train_log" / "DiscoGAN-CelebA"
    s = stats_of(logdir)[-1]
    assert s["global_step"] == separate_gan_global_steps(3, d_period=3, g_period=1)
    # the recon/GAN mix follows tf.train.piecewise_constant of the in-graph global step (< 10000)
    assert s["rate"] == pytest.approx(0.01)
    finite(s, "G_loss_total", "D_loss_total", "G_regularize", "LossA/recon_loss")
    assert s["G_regularize"] > 0 and s["D_regularize"] > 0   # regularize_cost('gen/.*/W', ...) found weights


# --- SpatialTransformer/, ImageNetModels/ ------------------------------------------------------------

@pytest.mark.slow   # ~45 s on 2 cores
def test_spatial_transformer_mnist_addition(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    env = {"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_BATCH_SIZE": "16", "TP_MAX_EPOCH": "2",
           "TP_STEPS_PER_EPOCH": "3"}
    run("_shorten_batch.py", "mnist-addition.py", cwd=tmp_path, env=env)
    logdir = tmp_path / "train_log" / "mnist-addition"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6]
    s = stats[-1]
    finite(s, "cost", "validation_cost")
    assert 0 <= s["validation_error"] <= 1 and s["regularize_loss"] > 0
    # --view: an OfflinePredictor of the program's own GridSample layer, from the checkpoint
    (tmp_path / "view").mkdir()
    run("_shorten_batch.py", "mnist-addition.py", "--view", "--load", str(logdir / "checkpoint"),
        cwd=tmp_path / "view", env=env)
    import cv2
    img = cv2.imread(str(tmp_path / "view" / "000.png"))
    # 'visualization/viz': both 42x42 digits stacked (84 rows), beside their two 28x28 warps padded to 42
    assert img is not None and img.shape[:2] == (84, 126) and img.std() > 1


# A program's own TF ops in NCHW (shufflenet's tf.nn.depthwise_conv2d, HED's tf.nn.conv2d_transpose,
# written for GPUs) run on a CPU only with oneDNN, which TensorFlow turns on by default on some CPUs
# only: on for those (as for imagenet-resnet-keras in tests/test_more_ports_2.py).
ONEDNN = {"TF_ENABLE_ONEDNN_OPTS": "1"}


def _imagenet_run(tmp_path, script, *args, steps=2, env=None):
    data = tmp_path / "data"
    _data.write_ilsvrc12(str(data / "ilsvrc"), meta_dir=str(data / "ilsvrc_metadata"))
    return run("_shorten_batch.py", script, "--data", str(data / "ilsvrc"), *args, cwd=tmp_path, timeout=1200,
               env={"KERASTRAINER_DATASET": str(data), "TP_NUM_GPU": "1", "TP_BATCH_SIZE": "4",
                    "TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": str(steps), **(env or {})})


@pytest.mark.slow
def test_imagenet_alexnet(tmp_path):
    _imagenet_run(tmp_path, "alexnet.py", "--batch", "4")
    stats = stats_of(tmp_path / "train_log" / "AlexNet")
    assert [s["global_step"] for s in stats] == [2, 4]
    finite(stats[-1], "cost", "xentropy-loss", "l2_regularize_loss")
    # DataParallelInferenceRunner with ClassificationError('wrong-top1', 'val-error-top1')
    assert 0 <= stats[-1]["val-error-top1"] <= 1 and 0 <= stats[-1]["val-error-top5"] <= 1
    assert stats[-1]["learning_rate"] == pytest.approx(0.01 * 4 / 128)


@pytest.mark.slow
def test_imagenet_shufflenet(tmp_path):
    _imagenet_run(tmp_path, "shufflenet.py", "--batch", "4", env=ONEDNN)
    logdir = tmp_path / "train_log" / "ShuffleNetV1-0.5x-g8"
    stats = stats_of(logdir)
    # --batch is the total batch: 1280000 // 4 steps an epoch, so its max_epoch is 1
    assert [s["global_step"] for s in stats] == [2]
    finite(stats[-1], "cost", "xentropy-loss")
    assert 0 <= stats[-1]["val-error-top1"] <= 1      # InferenceRunner(QueueInput(dataset_val), ...)
    ckpt = checkpoint_arrays(logdir / "checkpoint-2")
    # the program's own layer DepthConv makes `tf.get_variable('W', ...)` in its layer's variable scope
    assert ckpt["stage2/block0/dconv/W"].shape == (3, 3, 48, 1)
    assert ckpt["stage2/block1/dconv/W"].shape == (3, 3, 48, 1)


@pytest.mark.slow
def test_dynamic_filter_network_steering_filter(tmp_path):
    _data.write_bsds500(str(tmp_path / "data"))
    run("_shorten_batch.py", "steering-filter.py", "--gpu", "0", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "3"})
    logdir = tmp_path / "train_log" / "steering-filter"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6]
    finite(stats[-1], "cost")
    # OnlineTensorboardExport: trainer.get_predictor(['theta'], ['pred_filter']) each epoch, its canvas
    # of the 8 true and predicted 9x9 filters put as an image
    assert event_tags(logdir)["filter_export"] == ("images", [3, 6])
    ckpt = checkpoint_arrays(logdir / "checkpoint-6")
    assert any(k.endswith("/W") for k in ckpt)


@pytest.mark.slow
def test_imagenet_vgg16(tmp_path):
    # --batch 256 passes its `total_batch >= 256` check; the batches are capped at 2. One step: VGG-16
    # writes a 1.1 GB checkpoint
    data = tmp_path / "data"
    _data.write_ilsvrc12(str(data / "ilsvrc"), meta_dir=str(data / "ilsvrc_metadata"))
    run("_shorten_batch.py", "vgg16.py", "--data", str(data / "ilsvrc"), "--batch", "256", cwd=tmp_path,
        timeout=1200, env={"KERASTRAINER_DATASET": str(data), "TP_NUM_GPU": "1", "TP_BATCH_SIZE": "2",
                           "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "1"})
    logdir = tmp_path / "train_log" / "vgg16-norm=none"
    s = stats_of(logdir)[-1]
    assert s["global_step"] == 1
    finite(s, "cost", "l2_regularize_loss", "param-summary/fc6/W/rms")
    # add_param_summary(('.*', ['histogram', 'rms'])): fc6/W's 103M values, as a histogram
    assert event_tags(logdir)["param-summary/fc6/W"] == ("histograms", [1])


@pytest.mark.slow
def test_hed(tmp_path):
    _data.write_bsds500(str(tmp_path / "data"))
    # VGG-16 at BSDS500's size, without the pretrained weights; BatchDataByShape(ds, 8) capped at 2
    run("_shorten_batch.py", "hed.py", cwd=tmp_path, timeout=1200,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_NUM_GPU": "1", "TP_BATCH_SIZE": "2",
             "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2", **ONEDNN})
    logdir = tmp_path / "train_log" / "hed"
    s = stats_of(logdir)[-1]
    assert s["global_step"] == 2 and s["learning_rate"] == pytest.approx(3e-5)
    finite(s, "cost", "wd_cost", "xentropy6")
    # InferenceRunner(dataset_val, BinaryClassificationStats('prediction', 'edgemap4d')) on val/
    assert 0 <= s["val_precision"] <= 1 and 0 <= s["val_recall"] <= 1
    ckpt = checkpoint_arrays(logdir / "checkpoint-2")
    assert ckpt["conv1_1/W"].shape == (3, 3, 3, 64)


# --- the fixes, each on its own --------------------------------------------------------------------

def test_program_callback_sets_up_in_the_trainer_graph_and_runs_ops():
    """WGAN's ClipCallback: `_setup_graph` builds TF1 ops of the trainer's graph (tf.trainable_variables,
    v.op.name, tf.assign, tf.group) and `_trigger_step` runs them with `op.run()` / `tensor.eval()`, as
    tensorpack's main loop ran under `with sess.as_default()`."""
    import tensorflow as tf
    from kerastrainer import Callback, FakeData, FullyConnected, ModelDesc, QueueInput, TowerContext, TowerFunc
    from kerastrainer import TowerTrainer
    tf1 = tf.compat.v1

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x")]

        def build_graph(self, x):
            return tf.reduce_mean(tf.square(FullyConnected("fc", x, 1) - 1.0), name="cost")

    class Trainer(TowerTrainer):
        def __init__(self, input, model):
            super().__init__(steps_per_call=1)   # the callback sees every step
            input.setup(model.get_input_signature())
            self.tower_func = TowerFunc(model.build_graph, model.inputs())
            with TowerContext("", is_training=True):
                cost = self.tower_func(*input.get_input_tensors())
            self.train_op = tf1.train.GradientDescentOptimizer(0.1).minimize(cost)

    seen = {"names": [], "norms": []}

    class ZeroW(Callback):
        def _setup_graph(self):
            assert not tf.executing_eagerly()
            ops = []
            for v in tf1.trainable_variables():
                seen["names"].append(v.op.name)
                if v.op.name.endswith("/W"):
                    ops.append(tf1.assign(v, tf.zeros_like(v)))
                    self._norm = tf.reduce_sum(tf.abs(v))
            self._op = tf.group(*ops, name="zero")

        def _trigger_step(self):
            self._op.run()
            seen["norms"].append(float(self._norm.eval()))

    trainer = Trainer(QueueInput(FakeData([[4, 3]], size=4, random=True)), Model())
    w = trainer.named_variables()["fc/W"]
    trainer.train_with_defaults(callbacks=[ZeroW()], steps_per_epoch=3, max_epoch=1, extra_callbacks=[],
                                monitors=[])
    assert sorted(seen["names"]) == ["fc/W", "fc/b"]          # the variables' tensorpack names
    assert seen["norms"] == [0.0, 0.0, 0.0]
    assert not np.any(w.numpy()) and trainer.global_step == 3
    assert tf1.get_default_session() is None                   # only while the main loop runs


def test_linearwrap_tf_chain_reaches_tf1_names():
    import tensorflow as tf
    from kerastrainer import LinearWrap
    x = tf.ones([1, 2, 2, 3])
    y = LinearWrap(x).tf.image.resize_nearest_neighbor([4, 4], align_corners=True).tf.nn.relu()()
    assert y.shape == (1, 4, 4, 3) and float(tf.reduce_min(y)) == 1.0
    with pytest.raises(AttributeError, match=r"tf\.image\.no_such_op .*tf\.compat\.v1"):
        LinearWrap(x).tf.image.no_such_op


def test_apply_grad_processors_minimize_on_a_tf1_optimizer():
    """InfoGAN's `apply_grad_processors(tf.train.AdamOptimizer(...), [ScaleGradient(('gen/.*', 5))])`,
    then GANTrainer's `opt.minimize(loss, var_list=...)`: the processors run on the gradients."""
    import tensorflow as tf
    from kerastrainer.tfutils import gradproc, optimizer
    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        gen = tf1.get_variable("gen/w", initializer=1.0)
        dis = tf1.get_variable("discrim/w", initializer=1.0)
        opt = optimizer.apply_grad_processors(tf1.train.GradientDescentOptimizer(0.1),
                                              [gradproc.ScaleGradient(("gen/.*", 5))])
        step = opt.minimize(2.0 * gen + 3.0 * dis, var_list=[gen, dis])
        with tf1.Session(graph=g) as sess:
            sess.run(tf1.global_variables_initializer())
            sess.run(step)
            assert sess.run([gen, dis]) == pytest.approx([1 - 0.1 * 2 * 5, 1 - 0.1 * 3])
        with pytest.raises(ValueError, match="No gradients"):
            opt.minimize(tf.constant(1.0), var_list=[gen])
    with pytest.raises(TypeError, match="only a wrapped TF1"):
        optimizer.apply_grad_processors(tf.keras.optimizers.SGD(0.1), []).minimize(None)


def test_batch_data_by_shape_under_a_runner_waits_for_full_groups():
    """HED's `MultiProcessRunnerZMQ(BatchDataByShape(ds, 8, idx=0), 1)`: a pass may make no batch (its
    groups carry over); the worker iterates again, as tensorpack's did, and `len()` is BatchData's."""
    from kerastrainer.dataflow import BatchDataByShape, DataFromList, MultiProcessRunnerZMQ
    ds = BatchDataByShape(DataFromList([[np.zeros(s)] for s in [(2,), (3,), (4,)]], shuffle=False), 2, idx=0)
    assert len(ds) == 1
    runner = MultiProcessRunnerZMQ(ds, 1)
    runner.reset_state()
    try:
        # the runner's pass is len(ds) == 1 batch; the worker's first pass over ds made none
        shapes = sorted(dp[0].shape for _ in range(3) for dp in runner)
        assert shapes == [(2, 2), (2, 3), (2, 4)]
    finally:
        runner.close()


def test_tf1_get_variable_in_a_program_layer_is_scoped_by_the_layer():
    """shufflenet's DepthConv: `tf.get_variable('W', ...)` in the program's own `@layer_register` layer,
    used by several layers of different shapes (tensorpack ran each in a variable scope of its name)."""
    import tensorflow as tf
    from kerastrainer import FakeData, ModelDesc, QueueInput, SimpleTrainer, layer_register
    tf1 = tf.compat.v1

    @layer_register(log_shape=False)
    def ScaleChannels(x, init=1.0):
        w = tf1.get_variable("W", [x.shape[-1]], initializer=tf1.constant_initializer(init))
        return x * w

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32, "x")]

        def build_graph(self, x):
            with tf1.variable_scope("block"):
                y = ScaleChannels("a", x, init=2.0)
            z = ScaleChannels("b", tf.concat([y, y], 1))
            return tf.reduce_mean(tf.square(z), name="cost")

        def optimizer(self):
            return tf.keras.optimizers.SGD(0.1)

    trainer = SimpleTrainer()
    trainer.setup_graph(Model(), QueueInput(FakeData([[2, 3]], size=2, random=True)))
    named = trainer.named_variables()
    assert named["block/a/W"].shape == (3,) and float(named["block/a/W"][0]) == 2.0
    assert named["b/W"].shape == (6,)


def test_histogram_of_a_huge_tensor_is_counted_without_tensorboards_one_hot(tmp_path):
    """vgg16's add_param_summary(('.*', ['histogram', 'rms'])) on fc6/W (103M values): TensorBoard's
    tf.summary.histogram one-hot encodes every value (25 GB there). Past a size the monitor counts the
    same 30 buckets itself; below it, TensorBoard's own histogram is written. Both read back alike."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
    from kerastrainer.callbacks.monitor import Monitors, TFEventWriter

    from kerastrainer.callbacks.trainer_view import TrainerView

    class Stub(TrainerView):
        global_step, epoch_num, is_chief = 7, 1, True

    values = np.random.RandomState(0).normal(size=5000).astype("float32")
    d = str(tmp_path / "tb")
    small = TFEventWriter(logdir=d, flush_secs=1)
    mons = Monitors([small])
    mons.setup_graph(Stub())
    mons.put_histogram("tb", values)
    small.HISTOGRAM_IN_NUMPY_ABOVE = 100     # this instance counts in numpy from 100 values on
    mons.put_histogram("numpy", values)
    mons.after_train()
    got = {}
    for path in os.listdir(d):
        for rec in tf.data.TFRecordDataset(os.path.join(d, path)):
            for v in event_pb2.Event.FromString(rec.numpy()).summary.value:
                got[v.tag] = (v.metadata.plugin_data.plugin_name, tf.make_ndarray(v.tensor))
    assert got["numpy"][0] == got["tb"][0] == "histograms"
    assert got["numpy"][1].shape == got["tb"][1].shape == (30, 3)
    assert got["numpy"][1][:, 2].sum() == 5000
    np.testing.assert_allclose(got["numpy"][1][:, :2], got["tb"][1][:, :2], rtol=1e-5, atol=1e-6)
    assert np.abs(got["numpy"][1][:, 2] - got["tb"][1][:, 2]).max() <= 1   # edge values may move a bucket


def test_ilsvrc_meta_per_pixel_mean_reads_caffes_blobproto(tmp_path):
    """inception-bn's `dataset.ILSVRCMeta().get_per_pixel_mean()` (tensorpack read it with Caffe's protobufs)."""
    from kerastrainer.dataflow.dataset import ILSVRCMeta
    from kerastrainer.dataflow.dataset.files import DatasetFilesNotFound
    meta = ILSVRCMeta(str(tmp_path))
    with pytest.raises(DatasetFilesNotFound, match="imagenet_mean.binaryproto"):
        meta.get_per_pixel_mean()
    want = _data.write_imagenet_mean(str(tmp_path))
    got = meta.get_per_pixel_mean()
    assert got.shape == (256, 256, 3) and got.dtype == np.float32 and np.array_equal(got, want)
    assert meta.get_per_pixel_mean((224, 200)).shape == (224, 200, 3)
