"""tensorpack 0.11's API as the public programs met it (FasterRCNN, PTB-LSTM, research code built on
tensorpack): each test fails on the behaviour it replaced (a TypeError, a refusal, a missing name,
a name that resolved to the wrong object)."""
import logging

import numpy as np
import pytest
import tensorflow as tf

from _models import MLP, LinearData
from kerastrainer.callbacks import Callback, ClassificationError, InferenceRunner, ScalarStats
from kerastrainer.input_source import QueueInput, TensorInput, TFDatasetInput
from kerastrainer.models import FullyConnected
from kerastrainer.tfutils.tower import TowerFunc
from kerastrainer.train import SimpleTrainer, TrainConfig, launch_train_with_config


def quiet_config(**kw):
    kw.setdefault("extra_callbacks", [])
    kw.setdefault("monitors", [])
    return TrainConfig(**kw)


def _train(callbacks=(), max_epoch=1, model=None, trainer=None, **kw):
    t = trainer or SimpleTrainer()
    launch_train_with_config(quiet_config(model=model or MLP(), dataflow=LinearData(num_batches=4),
                                          callbacks=list(callbacks), max_epoch=max_epoch, **kw), t)
    return t


def _mean_over(pred, batches):
    return float(np.mean([pred(list(b))[0] for b in batches]))


# --- 1. get_predictor(..., device=k) -------------------------------------------------------------------
def test_get_predictor_takes_tensorpack_device_index():
    """FasterRCNN's EvalCallback: trainer.get_predictor(in, out, device=k) for each GPU (TypeError before)."""
    t = _train()
    x = LinearData(num_batches=1).x[:5]
    base, = t.get_predictor(["x"], ["prob"])(x)
    for k, where in ((0, "CPU:0"), (1, "CPU:1"), (-1, "CPU:0")):   # no GPU: /gpu:k is the logical /cpu:k
        pred = t.get_predictor(["x"], ["prob"], device=k)
        assert pred.device.upper().endswith(where), pred.device
        np.testing.assert_allclose(pred(x)[0], base, rtol=1e-6)
    with pytest.raises(TypeError, match="device index"):
        t.get_predictor(["x"], ["prob"], device="gpu0")


# --- 2. InferenceRunner(tower_func=...), over a TensorInput / TFDatasetInput ----------------------------
class EvalTwice(MLP):
    """A second tower function on the same layers (research code evaluates a different graph)."""

    def build_eval_graph(self, x, y):
        h = FullyConnected("fc1", x * 2.0, 16, activation=self.hidden_activation)
        logits = FullyConnected("fc2", h, 3)
        tf.reduce_mean(tf.nn.softmax(logits)[:, 0], name="eval_score")


def test_inference_runner_with_another_tower_function():
    model = EvalTwice()
    val = LinearData(num_batches=2, seed=5)
    runner = InferenceRunner(val, [ScalarStats("eval_score")], tower_name="EvalTower",
                             tower_func=TowerFunc(model.build_eval_graph, model.inputs()))
    t = _train([runner], model=model)
    pred = t.get_predictor(["x"], ["prob"])
    want = np.mean([pred(b[0] * 2.0)[0][:, 0].mean() for b in val])   # the same layers on 2x
    assert t.monitors.get_latest("validation_eval_score") == pytest.approx(want, rel=1e-5)
    with pytest.raises(TypeError, match="TowerFunc"):
        InferenceRunner(val, [ScalarStats("cost")], tower_func="build_eval_graph")


def test_inference_runner_over_a_tensor_input():
    """tensorpack's PTB-LSTM: InferenceRunner(TensorInput(producer, size), ...) (refused before)."""
    val = list(LinearData(num_batches=3, seed=7))
    xs = tf.constant(np.stack([b[0] for b in val]))
    ys = tf.constant(np.stack([b[1] for b in val]))
    step = tf.Variable(0, dtype=tf.int64)

    def producer():   # a stateful producer, as PTB's: the next batch of the validation text each call
        k = tf.math.floormod(step.assign_add(1) - 1, 3)
        return [tf.gather(xs, k), tf.gather(ys, k)]

    t = _train([InferenceRunner(TensorInput(producer, 3), [ScalarStats(["cost"])]),
                InferenceRunner(TensorInput(producer, 3), [ScalarStats(["cost"], prefix="test")],
                                tower_name="InferenceTowerTest")])
    want = _mean_over(t.get_predictor(["x", "y"], ["cost"]), val)
    assert t.monitors.get_latest("validation_cost") == pytest.approx(want, rel=1e-5)
    assert t.monitors.get_latest("test_cost") == pytest.approx(want, rel=1e-5)
    assert int(step.numpy()) == 6   # each runner read its size() batches, once


def test_inference_runner_over_a_dataset_input_reads_one_pass_each_time():
    val = list(LinearData(num_batches=2, seed=9))
    ds = tf.data.Dataset.from_tensor_slices((np.concatenate([b[0] for b in val]),
                                             np.concatenate([b[1] for b in val]))).batch(32)
    t = _train([InferenceRunner(TFDatasetInput(ds), [ClassificationError("wrong")])], max_epoch=2)
    pred = t.get_predictor(["x", "y"], ["wrong"])
    want = float(np.mean(np.concatenate([pred(list(b))[0] for b in val])))
    assert t.monitors.get_latest("validation_error") == pytest.approx(want)
    assert len(t.monitors.get_history("validation_error")) == 2


# --- 3. an Inferencer is a Callback: its _setup_graph runs ------------------------------------------------
class AllReducedError(ClassificationError):
    """Horovod-style evaluation: the counts of every rank summed before the ratio; the reduction is
    built in _setup_graph, as tensorpack's programs do."""

    def _setup_graph(self):
        strategy = self.trainer.strategy

        def total(values):
            per_replica = strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.constant(values, tf.float64) if ctx.replica_id_in_sync_group == 0
                else tf.zeros([2], tf.float64))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()

        self._all_reduce = total
        self.setup_trainer = self.trainer

    def _after_inference(self):
        wrong, count = self._all_reduce([self.err_stat.count, self.err_stat.total])
        return {self.summary_name: wrong / count}


def test_an_inferencer_is_set_up_as_a_callback():
    inf = AllReducedError("wrong", "val_error")
    assert isinstance(inf, Callback)
    t = _train([InferenceRunner(LinearData(num_batches=2, seed=3), [inf])])
    assert inf.setup_trainer is t
    pred = t.get_predictor(["x", "y"], ["wrong"])
    want = float(np.mean(np.concatenate([pred(list(b))[0] for b in LinearData(num_batches=2, seed=3)])))
    assert t.monitors.get_latest("val_error") == pytest.approx(want)


# --- 4. ClassificationError.err_stat, Callback.set_chief_only ---------------------------------------------
def test_classification_error_keeps_its_counts_in_err_stat():
    ce = ClassificationError()
    ce.before_inference()
    ce.on_fetches([np.array([1.0, 0.0, 0.0, 1.0])], 4)
    ce.on_fetches([np.array([1.0, 0.0])], 2)
    assert (ce.err_stat.count, ce.err_stat.total) == (3.0, 6)
    assert ce.after_inference() == {"validation_error": 0.5}


def test_set_chief_only_returns_the_callback():
    runner = InferenceRunner(LinearData(num_batches=1), ScalarStats("cost"))
    assert runner.chief_only
    assert runner.set_chief_only(False) is runner and runner.chief_only is False
    assert runner.set_chief_only() is runner and runner.chief_only is True


# --- 5. QueueInput(df, queue=...) --------------------------------------------------------------------
def test_queue_input_takes_the_programs_queue():
    queue = tf.queue.FIFOQueue(7, [tf.float32, tf.int32], name="my_queue")
    source = QueueInput(LinearData(num_batches=4), queue=queue)
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), data=source, max_epoch=2, steps_per_epoch=4), t)
    assert source.queue is queue and t.global_step == 8
    with pytest.raises(TypeError, match="capacity="):
        QueueInput(LinearData(), 10)
    from kerastrainer.input_source import InputSourceError
    wrong = QueueInput(LinearData(), queue=tf.queue.FIFOQueue(3, [tf.float32, tf.float32]))
    with pytest.raises(InputSourceError, match=r"holds dtypes \['float32', 'float32'\].*int32"):
        wrong.setup(MLP().get_input_signature())


# --- 6. TFDatasetInput(dataflow), TFDatasetInput.dataflow_to_dataset ----------------------------------
def test_tf_dataset_input_of_a_dataflow_and_dataflow_to_dataset():
    data = LinearData(num_batches=3)
    ds = TFDatasetInput.dataflow_to_dataset(data, [tf.float32, tf.int32])
    got = list(ds)
    assert len(got) == 3 and got[1][1].dtype == tf.int32
    np.testing.assert_array_equal(got[2][0].numpy(), data.x[64:96])
    source = TFDatasetInput(LinearData(num_batches=4))
    assert source.size() == 4
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), data=source, max_epoch=2), t)
    assert t.global_step == 8   # steps_per_epoch from the DataFlow's len(); repeated past one pass
    with pytest.raises(TypeError, match="tf.data.Dataset or a DataFlow"):
        TFDatasetInput([1, 2, 3])


# --- 8. a package's name never turns into its submodule of the same name --------------------------
_WALK = r'''
import importlib, json, pkgutil, types
import kerastrainer

def describe(v):
    if v is None:
        return None
    return ("module " + v.__name__) if isinstance(v, types.ModuleType) else ("object " + repr(v)[:80])

packages = ["kerastrainer"] + [m.name for m in pkgutil.walk_packages(kerastrainer.__path__, "kerastrainer.")
                               if m.ispkg]
bound, lazy = {}, []
for p in packages:   # what each package's __init__ binds for its submodules' names
    mod = importlib.import_module(p)
    for s in pkgutil.iter_modules(mod.__path__):
        v = mod.__dict__.get(s.name)
        if v is not None:
            bound[(p, s.name)] = v
        elif "__getattr__" in mod.__dict__:
            lazy.append((p, s.name))   # asked for later: asking now would bind it
for m in pkgutil.walk_packages(kerastrainer.__path__, "kerastrainer."):   # then every module
    importlib.import_module(m.name)
clashes = []
for (p, s), v in bound.items():
    now = importlib.import_module(p).__dict__.get(s)
    if not isinstance(v, types.ModuleType) and now is not v:
        clashes.append([p, s, describe(v), describe(now)])
for p, s in lazy:
    mod = importlib.import_module(p)
    now = mod.__dict__.get(s)
    try:
        meant = mod.__getattr__(s)
    except AttributeError:
        continue
    if not isinstance(meant, types.ModuleType) and now is not None and now is not meant:
        clashes.append([p, s, describe(meant), describe(now)])
print("CLASHES" + json.dumps(clashes))
'''


def _run_python(code, timeout=300):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_from_tfutils_import_argscope_is_the_function_after_its_submodule_loaded():
    """FasterRCNN's predict.py: another file imported kerastrainer.tfutils.argscope, then
    `from kerastrainer.tfutils import argscope` gave the module ('module' object is not callable)."""
    out = _run_python("import kerastrainer.tfutils.argscope\n"
                      "from kerastrainer.tfutils import argscope\n"
                      "from kerastrainer.models import argscope as home\n"
                      "print('SAME', argscope is home)")
    assert "SAME True" in out


@pytest.mark.slow
def test_no_package_name_is_replaced_by_its_submodule():
    """Walks the package: a name a package binds to something else than its submodule of that name
    (tfutils.argscope, models.resnet) must stay that object once every module is imported; tensorpack
    gets this by importing the submodule in the package's __init__ before binding the name."""
    import json
    out = _run_python(_WALK, timeout=600)
    clashes = json.loads(out.split("CLASHES", 1)[1])
    assert clashes == [], clashes


# --- 9. viz.draw_boxes on a float image ------------------------------------------------------------
def test_draw_boxes_takes_a_float_image_as_tensorpack():
    """FasterRCNN's viz.py draws on `img.mean(axis=2)` stacked to 3 channels (float64): OpenCV refused."""
    pytest.importorskip("cv2")
    from kerastrainer.utils import viz
    rng = np.random.RandomState(0)
    img = rng.uniform(0, 255, (40, 50, 3))
    bw = np.stack([img.mean(axis=2)] * 3, axis=2)
    out = viz.draw_boxes(bw, [[2, 3, 30, 35]], ["balloon 0.9"])
    assert out.dtype == np.uint8 and out.shape == (40, 50, 3)
    np.testing.assert_array_equal(out[39, 49], bw[39, 49].astype(np.uint8))   # untouched pixel: truncated
    assert (out[3, 2:31] == (0, 255, 0)).all()                                   # the box's top edge
    gray = viz.draw_boxes(img.mean(axis=2).astype("float32")[:, :, None], [[1, 1, 10, 10]])
    assert gray.shape == (40, 50, 3) and gray.dtype == np.uint8


# --- 10. tensorpack 0.11's modules that were absent at their path ---------------------------------
def test_alias_modules_at_tensorpack_paths_hold_the_same_objects():
    from kerastrainer import callbacks, train
    from kerastrainer.callbacks import stats
    from kerastrainer.graph_builder import model_desc
    from kerastrainer.graph_builder.utils import LeastLoadedDeviceSetter
    from kerastrainer.models import utils as mutils
    from kerastrainer.models.registry import VariableHolder
    from kerastrainer.train import utility
    from kerastrainer.utils import compatible_serialize, naming, serialize
    assert (stats.DumpParamAsImage, stats.InjectShell, stats.SendStat) == (
        callbacks.DumpParamAsImage, callbacks.InjectShell, callbacks.SendStat)
    assert model_desc.ModelDesc is train.ModelDesc and model_desc.ModelDescBase is train.ModelDescBase
    assert utility.LeastLoadedDeviceSetter is LeastLoadedDeviceSetter and mutils.VariableHolder is VariableHolder
    assert compatible_serialize.loads is serialize.loads
    x = {"a": np.arange(3)}
    np.testing.assert_array_equal(compatible_serialize.loads(compatible_serialize.dumps(x))["a"], x["a"])
    assert (naming.MOVING_SUMMARY_OPS_KEY, naming.GLOBAL_STEP_INCR_OP_NAME) == ("MOVING_SUMMARY_OPS",
                                                                               "global_step_incr")
    calls = []

    @mutils.disable_autograph()
    def branchy(t):
        calls.append(tf.executing_eagerly())
        return t + 1
    assert float(tf.function(lambda t: branchy(t))(tf.constant(1.0))) == 2.0 and calls == [False]


def test_static_dynamic_shape():
    from kerastrainer.models.shape_utils import StaticDynamicAxis, StaticDynamicShape
    seen = {}

    @tf.function(input_signature=[tf.TensorSpec([None, 3, None, 10], tf.float32)])
    def f(x):
        shape = StaticDynamicShape(x)
        shape.apply(1, lambda d: d * 3)
        shape.apply(2, lambda d: d + 5)
        seen["static"] = list(shape.get_static())
        seen["ints"] = [d for d in shape.get_dynamic() if isinstance(d, int)]
        return tf.stack(shape.get_dynamic())

    assert f(tf.zeros([2, 3, 4, 10])).numpy().tolist() == [2, 9, 9, 10]
    assert seen == {"static": [None, 9, None, 10], "ints": [9, 10]}
    axis = StaticDynamicAxis(None, tf.constant(4)).apply(lambda d: d * 2)
    assert axis.static is None and int(axis.dynamic) == 8
    assert StaticDynamicAxis(3, 3).apply(lambda d: d + 1).static == 4


def test_develop_helpers(kt_log):
    from kerastrainer.utils import develop
    Missing = develop.create_dummy_class("LMDBData", "lmdb")
    with pytest.raises(ImportError, match="Cannot import 'lmdb', therefore 'LMDBData' is not available"):
        Missing("path")
    with pytest.raises(AttributeError, match="'lmdb'"):
        Missing.from_path
    with pytest.raises(ImportError, match="'cv2,PIL'.*'imread'"):
        develop.create_dummy_func("imread", ["cv2", "PIL"])("x.png")

    @develop.deprecated("Use new() instead.", max_num_warnings=2)
    def old(v):
        return v * 2
    assert [old(1), old(2), old(3)] == [2, 4, 6]
    warned = [m for m in kt_log.warnings().splitlines() if "[Deprecated] old [" in m]
    assert len(warned) == 2 and "was deprecated. Use new() instead." in warned[0]
    develop.log_deprecated("thing", "Gone.", eos="2027-01-05")
    assert "[Deprecated] thing will be deprecated after 05 Jan. Gone." in kt_log.warnings()
    assert develop.HIDE_DOC(old).__HIDE_SPHINX_DOC__ is True
    scope = {}
    lazy = develop.LazyLoader("js", scope, "json")
    scope["js"] = lazy
    assert lazy.dumps([1]) == "[1]" and scope["js"].__name__ == "json" and scope["js"] is not lazy


def test_enable_call_trace_prints_calls(capsys):
    import sys
    from kerastrainer.utils.debug import enable_call_trace

    def inner():
        return 1

    before = sys.gettrace()
    enable_call_trace()
    try:
        inner()
    finally:
        sys.settrace(before)
    assert "Call to `inner` on line" in capsys.readouterr().out


def test_between_graph_distributed_names_raise_naming_the_multi_worker_trainers():
    from kerastrainer.graph_builder import distributed
    from kerastrainer.tfutils.distributed import get_distributed_session_creator
    from kerastrainer.train.utility import override_to_local_variable
    from kerastrainer.utils.tf1_only import TF2UnsupportedError
    for make in (lambda: distributed.DistributedReplicatedBuilder([0], "server"),
                 lambda: distributed.DistributedParameterServerBuilder([0], "server", "cpu"),
                 lambda: get_distributed_session_creator(None), lambda: override_to_local_variable()):
        with pytest.raises(TF2UnsupportedError, match="MultiWorkerTrainer"):
            make()


# --- 7. ProgressBar of a tower tensor that is not the cost -------------------------------------------
class ErrorNamed(MLP):
    def build_graph(self, x, y):
        from kerastrainer.tfutils import add_moving_summary
        logits = FullyConnected("fc2", FullyConnected("fc1", x, 16, activation=tf.nn.relu), 3)
        wrong = tf.cast(tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
        err = tf.reduce_mean(wrong, name="train_error")          # named only, as tensorpack's programs do
        add_moving_summary(tf.identity(err, name="err_summary"))  # the same value, as a summary (the check)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def test_progress_bar_shows_a_tower_tensor():
    from kerastrainer.callbacks import ProgressBar
    pb = ProgressBar(["cost", "train_error"])
    shown, outputs = [], []

    class Look(Callback):
        def _trigger_step(self):
            shown.append(pb._bar.postfix)
            outputs.append(dict(self.trainer.last_step_outputs))

    _train([pb, Look()], model=ErrorNamed(), max_epoch=2)
    assert shown and all("train_error=" in s and "cost=" in s for s in shown), shown
    for out in outputs:
        assert out["_fetch:train_error"] == pytest.approx(out["err_summary"], abs=1e-6)
    assert "train_error" not in outputs[-1]   # reported for the bar, not as a statistic of the run
    bad = ProgressBar(["no_such_tensor"])
    with pytest.raises(ValueError, match="(?s)ProgressBar.*'no_such_tensor'"):
        _train([bad])


@pytest.mark.parametrize("steps_per_call", [1, 2])
def test_progress_bar_says_a_tower_tensor_is_a_mean_over_several_steps(steps_per_call, kt_log):
    """tensorpack showed each step's value; over several steps a call reports their mean, and says so."""
    from kerastrainer.callbacks import ProgressBar
    _train([ProgressBar(["cost", "train_error"])], model=ErrorNamed(),
           trainer=SimpleTrainer(steps_per_call=steps_per_call))
    said = [m for m in kt_log.at_level(logging.WARNING) if "ProgressBar" in m and "mean" in m]
    if steps_per_call == 1:
        assert not said
    else:
        assert len(said) == 1 and "'train_error'" in said[0] and "2 steps" in said[0], said


def test_every_tensorpack_module_is_at_its_path():
    """Modules exporting no name (tools/tensorpack_api.py MODULES_WITHOUT_NAMES) are invisible to the
    name list; each tensorpack 0.11 module, tests and private ones aside, imports at kerastrainer's path."""
    import importlib.util
    import os
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location("tensorpack_api_tool",
                                                  os.path.join(repo, "tools", "tensorpack_api.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    not_yet = {m for m, note in tool.MODULES_WITHOUT_NAMES.items() if "not at kerastrainer" in note}
    assert not_yet == set()
    modules = set(tool.MODULES_WITHOUT_NAMES)
    mirror = "/work/.mirror/tensorpack+tensorpack/repo"
    if os.path.isdir(mirror):   # with tensorpack's sources: all of its modules, not only these
        tree = tool.SourceTree.open(mirror + "@v0.11")
        for f in tree.files:
            mod = f[:-3].replace("/", ".").removesuffix(".__init__")
            last = mod.rsplit(".", 1)[-1]
            if not (last.endswith("_test") or last == "unit_tests" or last.startswith("_")):
                modules.add(mod)
    absent = sorted(m for m in modules - not_yet
                    if importlib.util.find_spec("kerastrainer" + m[len("tensorpack"):]) is None)
    assert absent == []
