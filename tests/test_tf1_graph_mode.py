"""TF1 graph mode keeps its meaning: after ``disable_eager_execution()`` /
``disable_v2_behavior()`` a program's own TF1 code (placeholders, ``tf.Session``, kerastrainer's
layers in its graph) runs as on plain TF 2.21, kerastrainer's trainers launched in it train (the
same weights as plain numpy gradient descent says), and the program is back in its own mode, with
its own settings, after each training. ``ModelDesc.inputs()`` may return placeholders and
tensorpack's ``InputDesc`` (read as their ``tf.TensorSpec``).

The mode is process-wide, so each graph-mode program runs in a process of its own."""
import json
import os
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
import tensorflow as tf

import kerastrainer
from kerastrainer import BatchData, DataFromList, FullyConnected, ModelDesc, SimpleTrainer, TrainConfig, \
    launch_train_with_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kerastrainer.__file__)))
v1 = tf.compat.v1

# 8 points, batches of 4 (per tower), 2 epochs of 2 steps; the model is p = x.W + b, W = 0.1, b = 0
X = np.arange(24, dtype="float32").reshape(8, 3) / 24.0
Y = np.array([1, -1, 2, 0, 1, 3, -2, 1], dtype="float32")
LR, BATCH, STEPS = 0.1, 4, 4


def _reference(towers: int):
    """Plain gradient descent on the mean squared error; each step averages ``towers`` batches
    taken in turn from the list (tensorpack's rule: the batch is per tower)."""
    w, b = np.full(3, 0.1, "float64"), 0.0
    batches = [(X[i:i + BATCH], Y[i:i + BATCH]) for i in range(0, len(X), BATCH)]
    k = 0
    for _ in range(STEPS):
        gw, gb = np.zeros(3), 0.0
        for _ in range(towers):
            x, y = batches[k % len(batches)]
            k += 1
            err = x @ w + b - y
            gw += 2 * x.T @ err / len(y) / towers
            gb += 2 * err.mean() / towers
        w, b = w - LR * gw, b - LR * gb
    return w, b


_PROGRAM = r'''
import json, sys, threading
import numpy as np
import tensorflow as tf
cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)
{before}
from kerastrainer import *
{after}
v1 = tf.compat.v1
X = np.arange(24, dtype="float32").reshape(8, 3) / 24.0
Y = np.array([1, -1, 2, 0, 1, 3, -2, 1], dtype="float32")


def program_tf1_code(tag):
    """The program's own TF1 code: a placeholder, a kerastrainer layer in its graph, a Session."""
    x = v1.placeholder(tf.float32, [None, 3], name="x_" + tag)
    y = FullyConnected("fc_" + tag, x, 2, kernel_initializer=v1.constant_initializer(1.0))
    with v1.Session() as sess:
        sess.run(v1.global_variables_initializer())
        return sess.run(y, feed_dict={{x: np.ones((1, 3), "float32")}}).tolist()


def mode():
    fresh = []
    t = threading.Thread(target=lambda: fresh.append(tf.executing_eagerly()))
    t.start(); t.join()
    return dict(eager=tf.executing_eagerly(), eager_new_thread=fresh[0], tf2=tf.__internal__.tf2.enabled(),
                resource=v1.resource_variables_enabled(), cfv2=v1.control_flow_v2_enabled(),
                shape_dim=type(tf.TensorShape([3])[0]).__name__)


class M(ModelDesc):
    def inputs(self):
        if {placeholders}:   # tensorpack's older form
            return [v1.placeholder(tf.float32, (None, 3), "x"), v1.placeholder(tf.float32, (None,), "y")]
        return [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.float32, "y")]

    def build_graph(self, x, y):
        p = tf.squeeze(FullyConnected("fc", x, 1, kernel_initializer=tf.constant_initializer(0.1)), 1)
        return tf.reduce_mean(tf.square(p - y), name="cost")

    def optimizer(self):
        return tf.keras.optimizers.SGD(0.1)


class Weights(Callback):
    """Reads the trained weights where kerastrainer runs (a program in graph mode cannot read the
    eager variables itself: .numpy() needs eager execution)."""
    def _after_train(self):
        self.values = {{k: v.numpy().tolist() for k, v in self.trainer.named_variables().items()}}


out = dict(mode_before=mode())
if not out["mode_before"]["eager"]:
    out["tf1_before"] = program_tf1_code("before")
for name, trainer in [("simple", SimpleTrainer()), ("replicated", SyncMultiGPUTrainerReplicated(2))]:
    df = BatchData(DataFromList([[a, b] for a, b in zip(X, Y)], shuffle=False), 4)
    weights = Weights()
    t = launch_train_with_config(TrainConfig(model=M(), dataflow=df, max_epoch=2, steps_per_epoch=2,
                                             callbacks=[weights]), trainer)
    out[name] = dict(global_step=t.global_step, weights=weights.values)
    out["mode_after_" + name] = mode()
if not out["mode_before"]["eager"]:
    out["tf1_after"] = program_tf1_code("after")


class GANModel(ModelDesc):
    def inputs(self):
        return [v1.placeholder(tf.float32, (None, 3), "x")]

    def build_graph(self, x):
        with v1.variable_scope("gen"):
            g = FullyConnected("fc", x, 3)
        with v1.variable_scope("discrim"):
            d = FullyConnected("fc", g, 1)
        self.g_loss = tf.reduce_mean(tf.square(d - 1), name="g_loss")
        self.d_loss = tf.reduce_mean(tf.square(d), name="d_loss")
        self.g_vars = v1.trainable_variables("gen")
        self.d_vars = v1.trainable_variables("discrim")

    def optimizer(self):
        return v1.train.AdamOptimizer(1e-3)


class GANTrainer(TowerTrainer):   # tensorpack's custom trainer form (GAN.py's)
    def __init__(self, input, model):
        super().__init__()
        self.register_callback(input.setup(model.get_input_signature()))
        self.tower_func = TowerFunc(model.build_graph, model.get_input_signature())
        with TowerContext("", is_training=True):
            self.tower_func(*input.get_input_tensors())
        opt = model.get_optimizer()
        g_min = opt.minimize(model.g_loss, var_list=model.g_vars)
        with tf.control_dependencies([g_min]):
            self.train_op = opt.minimize(model.d_loss, var_list=model.d_vars)


gan = GANTrainer(QueueInput(BatchData(DataFromList([[a] for a in X], shuffle=False), 4)), GANModel())
gan.train_with_defaults(steps_per_epoch=3, max_epoch=2)
out["gan_global_step"] = gan.global_step
out["mode_after_gan"] = mode()


class P(ModelDesc):   # an inference-only model, as an inference script has
    def inputs(self):
        return [v1.placeholder(tf.float32, (None, 3), "x")]

    def build_graph(self, x):
        tf.identity(FullyConnected("fc", x, 2, kernel_initializer=tf.constant_initializer(1.0)), name="y")


pred = OfflinePredictor(PredictConfig(model=P(), input_names=["x"], output_names=["y"]))
out["predicted"] = [pred(np.ones((1, 3), "float32"))[0].tolist() for _ in range(2)]
out["mode_after_predictor"] = mode()
print("RESULT " + json.dumps(out), flush=True)
'''

# where the program turns TF1 mode on: (code before `from kerastrainer import *`, code after it)
VARIANTS = {
    "eager": ("", ""),
    "v2_off_after_import": ("", "import tensorflow.compat.v1 as tf1\ntf1.disable_v2_behavior()"),
    "eager_off_before_import": ("tf.compat.v1.disable_eager_execution()", ""),
}
EAGER_MODE = dict(eager=True, eager_new_thread=True, tf2=True, resource=True, cfv2=True, shape_dim="int")
GRAPH_MODE = {
    "v2_off_after_import": dict(eager=False, eager_new_thread=False, tf2=False, resource=False, cfv2=False,
                                shape_dim="Dimension"),
    "eager_off_before_import": dict(EAGER_MODE, eager=False, eager_new_thread=False),
}


def _run_program(tmp_path, variant, placeholders):
    before, after = VARIANTS[variant]
    path = tmp_path / "prog.py"
    path.write_text(_PROGRAM.format(before=before, after=after, placeholders=placeholders))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, str(path)], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, out[-4000:]
    return json.loads(line[-1][len("RESULT "):]), out


def _check_trained_as_reference(result):
    for name, towers in [("simple", 1), ("replicated", 2)]:
        w, b = _reference(towers)
        got = result[name]
        assert got["global_step"] == STEPS
        np.testing.assert_allclose(np.ravel(got["weights"]["fc/W"]), w, rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(got["weights"]["fc/b"], [b], rtol=1e-5, atol=1e-6, err_msg=name)


def _check_graph_mode_program(result, variant):
    mode = GRAPH_MODE[variant]
    assert result["mode_before"] == mode
    # the program's mode and settings, as it set them, after each training
    assert result["mode_after_simple"] == mode and result["mode_after_replicated"] == mode
    # its own TF1 code before and after: a kerastrainer layer on a placeholder, run by a Session
    assert result["tf1_before"] == [[3.0, 3.0]] and result["tf1_after"] == [[3.0, 3.0]]
    # a tensorpack custom trainer (TowerTrainer subclass) made and trained in that program
    assert result["gan_global_step"] == 6 and result["mode_after_gan"] == mode
    # an OfflinePredictor built and called in that program, which stays in its mode
    assert result["predicted"] == [[[3.0, 3.0]]] * 2 and result["mode_after_predictor"] == mode
    _check_trained_as_reference(result)


def test_tf1_program_with_v2_behavior_off_trains_and_keeps_its_mode(tmp_path):
    """tensorpack's form: ``disable_v2_behavior()`` after ``from kerastrainer import *``, and
    ``inputs()`` returning placeholders; SimpleTrainer and a replicated trainer on 2 devices."""
    result, out = _run_program(tmp_path, "v2_off_after_import", placeholders=True)
    _check_graph_mode_program(result, "v2_off_after_import")
    # said once per entry point, in one line each
    assert out.count("launch_train_with_config: eager execution is off in this program") == 1, out[-3000:]


@pytest.mark.slow
def test_eager_execution_off_before_kerastrainer_is_imported_trains(tmp_path):
    """``disable_eager_execution()`` before kerastrainer (and Keras) are imported."""
    result, _ = _run_program(tmp_path, "eager_off_before_import", placeholders=False)
    _check_graph_mode_program(result, "eager_off_before_import")


@pytest.mark.slow
def test_eager_program_trains_as_reference_and_stays_eager(tmp_path):
    """The control: the same program without TF1 mode gives the same weights, and stays eager."""
    result, out = _run_program(tmp_path, "eager", placeholders=False)
    assert result["mode_before"] == EAGER_MODE
    assert result["mode_after_simple"] == EAGER_MODE and result["mode_after_replicated"] == EAGER_MODE
    _check_trained_as_reference(result)
    assert result["predicted"] == [[[3.0, 3.0]]] * 2 and result["mode_after_predictor"] == EAGER_MODE
    assert result["gan_global_step"] == 6 and result["mode_after_gan"] == EAGER_MODE
    assert "eager execution is off in this program" not in out


# --- inputs() returning placeholders / InputDesc, in this (eager) process --------------------------

InputDesc = namedtuple("InputDescTuple", ["type", "shape", "name"])   # tensorpack <= 0.9's InputDesc


class _PlaceholderModel(ModelDesc):
    def inputs(self):
        return [v1.placeholder(tf.float32, (None, 3), "x"), InputDesc(tf.float32, (None,), "y")]

    def build_graph(self, x, y):
        p = tf.squeeze(FullyConnected("fc", x, 1, kernel_initializer=tf.constant_initializer(0.1)), 1)
        return tf.reduce_mean(tf.square(p - y), name="cost")

    def optimizer(self):
        return tf.keras.optimizers.SGD(LR)


def test_inputs_may_return_placeholders_and_input_desc():
    specs = _PlaceholderModel().get_input_signature()
    assert specs == [tf.TensorSpec((None, 3), tf.float32, "x"), tf.TensorSpec((None,), tf.float32, "y")]
    assert [s.name for s in specs] == ["x", "y"]
    assert tf.executing_eagerly()   # inputs() ran in a graph of its own; the program stays eager


def test_placeholder_inputs_train_in_an_eager_program():
    df = BatchData(DataFromList([[a, b] for a, b in zip(X, Y)], shuffle=False), BATCH)
    t = launch_train_with_config(TrainConfig(model=_PlaceholderModel(), dataflow=df, max_epoch=2,
                                             steps_per_epoch=2), SimpleTrainer())
    w, b = _reference(1)
    named = t.named_variables()
    np.testing.assert_allclose(named["fc/W"].numpy().ravel(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(named["fc/b"].numpy(), [b], rtol=1e-5, atol=1e-6)
    assert t.input_signature[0].name == "x"
    assert tf.executing_eagerly()


def test_inputs_that_are_not_placeholders_name_the_fault():
    class NotPlaceholder(_PlaceholderModel):
        def inputs(self):
            return [v1.placeholder(tf.float32, (None, 3), "x") * 2.0]

    with pytest.raises(TypeError, match=r"NotPlaceholder.inputs\(\)\[0\] is the tensor mul:0 made by a Mul op"):
        NotPlaceholder().get_input_signature()

    class Unnamed(_PlaceholderModel):
        def inputs(self):
            return [tf.TensorSpec((None, 3), tf.float32)]

    with pytest.raises(ValueError, match=r"Unnamed.inputs\(\)\[0\] has no name"):
        Unnamed().get_input_signature()


# --- TFLMS's Session tutorial, exactly as written (tests/seed_programs/tflms_session_tutorial_v1.py) --

SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seed_programs")
TUTORIAL = os.path.join(SEEDS, "tflms_session_tutorial_v1.py")


@pytest.mark.slow
@pytest.mark.parametrize("tf1_layer_loaded", [False, True], ids=["as_written", "tf1_layer_loaded_first"])
def test_tflms_session_tutorial_runs_as_written(tf1_layer_loaded):
    """The tutorial's 20000 iterations (200 training steps) with ``disable_v2_behavior()``; the second
    case runs it in a process where kerastrainer's TF1 layer was loaded first (as ``from kerastrainer
    import *`` loads it), where the call used to be replaced by a logged no-op."""
    if tf1_layer_loaded:
        cmd = ["-c", "import runpy, kerastrainer.compat; runpy.run_path(%r, run_name='__main__')" % TUTORIAL]
    else:
        cmd = [TUTORIAL]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, SEEDS] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, *cmd], cwd=SEEDS, env=env, capture_output=True, text=True, timeout=900,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    # LMS edited the tutorial's graph as TFLMS logged it: 6 swap-outs and 7 swap-ins
    assert "added 13 operations to the graph (6 swap-out operations" in out, out[-4000:]
    assert "step 19900, training accuracy" in out
    acc = float(out.split("test accuracy ")[-1].split()[0])
    assert acc > 0.9, out[-2000:]
