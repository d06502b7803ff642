"""tensorpack 0.11's public API at its path in kerastrainer (tests/tensorpack_api.json).

The list is written by tools/tensorpack_api.py from tensorpack's sources: every (module, name) of
each module's ``__all__`` as Python builds it, and the top-level ``from tensorpack import *``.
Here: each name resolves at ``kerastrainer.<same path>`` (the ``missing`` ones, whose home another
change owns, are strict xfails with the tool's reason: resolving one fails until the JSON is
regenerated); each ``raises`` name raises ``TF2UnsupportedError`` with the advice the list shows;
the statuses still describe kerastrainer; and small behavioural checks of the names added for it.
"""
import importlib.util
import json
import os
import queue
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from kerastrainer.callbacks.trainer_view import TrainerView

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIST = os.path.join(REPO, "tests", "tensorpack_api.json")
MIRROR = "/work/.mirror/tensorpack+tensorpack/repo"


def _tool():
    spec = importlib.util.spec_from_file_location("tensorpack_api_tool", os.path.join(REPO, "tools", "tensorpack_api.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


TOOL = _tool()
with open(LIST, encoding="utf-8") as _f:
    ENTRIES = json.load(_f)["entries"]
API = [e for e in ENTRIES if e["status"] != "not-api"]


def _id(e):
    return f"{e['module']}.{e['name']}"


def test_the_list_is_whole_and_well_formed():
    # tensorpack 0.11: 901 (module, name) pairs (the 902 counted `contrib`, which becomes a
    # top-level attribute only after `import tensorpack.contrib.keras`; a fresh star-import lacks it)
    assert len(ENTRIES) == 901
    assert len({(e["module"], e["name"]) for e in ENTRIES}) == len(ENTRIES)
    assert {e["status"] for e in ENTRIES} <= {"ok", "warns", "raises", "missing", "not-api"}
    assert all(e["note"] for e in ENTRIES)
    mods = {e["module"] for e in ENTRIES}
    assert {"tensorpack", "tensorpack.callbacks", "tensorpack.tfutils", "tensorpack.dataflow.imgaug",
            "tensorpack.utils.logger"} <= mods
    top = {e["name"] for e in ENTRIES if e["module"] == "tensorpack"}
    assert {"ModelDesc", "QueueInput", "tfv1", "summary", "logger", "get_rng", "train"} <= top


@pytest.mark.skipif(not os.path.isdir(MIRROR), reason="tensorpack's git mirror is not on this machine")
def test_the_list_is_what_the_tool_reads_from_tensorpack_0_11():
    pairs = [(m, n) for m, n, _ in TOOL.extract(TOOL.SourceTree.open(MIRROR + "@v0.11"))]
    assert pairs == [(e["module"], e["name"]) for e in ENTRIES]


def test_the_tool_resolves_init_files_as_python_does(tmp_path):
    pkg = tmp_path / "tensorpack"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from tensorpack.sub import *\nfrom tensorpack.leaf import f\n")
    (pkg / "leaf.py").write_text("__all__ = ['f']\n__all__ += ['g']\n__all__.extend(['h'])\n"
                                 "def f(): pass\ng = h = 1\n_hidden = 2\n")
    (pkg / "sub" / "__init__.py").write_text(
        "STATICA_HACK = True\nglobals()['kcah_acitats'[::-1].upper()] = False\n"
        "if STATICA_HACK:\n    from .a import *\n__all__ = []\n"
        "def _imp(name):\n    p = __import__(name, globals(), locals(), level=1)\n"
        "    lst = p.__all__ if '__all__' in dir(p) else dir(p)\n"
        "    for k in lst:\n        if not k.startswith('__'):\n            globals()[k] = p.__dict__[k]\n"
        "            __all__.append(k)\n"
        "for name in ['a', 'b']:\n    _imp(name)\n__all__.extend(['a'])\n")
    (pkg / "sub" / "a.py").write_text("__all__ = ['A']\nclass A: pass\nclass Hidden: pass\n")
    (pkg / "sub" / "b.py").write_text("import os\nclass B: pass\n_x = 1\n")
    got = {(m, n): TOOL.describe(v) for m, n, v in TOOL.extract(TOOL.SourceTree.open(str(tmp_path)))}
    assert set(got) == {("tensorpack.leaf", "f"), ("tensorpack.leaf", "g"), ("tensorpack.leaf", "h"),
                        ("tensorpack.sub", "A"), ("tensorpack.sub", "B"), ("tensorpack.sub", "os"),
                        ("tensorpack.sub", "_x"), ("tensorpack.sub", "a"), ("tensorpack.sub.a", "A"),
                        # the top level has no __all__: its public globals (no _x; STATICA_HACK is sub's)
                        ("tensorpack", "A"), ("tensorpack", "B"), ("tensorpack", "os"),
                        ("tensorpack", "a"), ("tensorpack", "f"), ("tensorpack", "sub"), ("tensorpack", "leaf")}
    assert got[("tensorpack.sub", "os")] == "external module os"


def _missing_params():
    out = []
    for e in API:
        marks = []
        if e["status"] == "missing":
            marks = [pytest.mark.xfail(strict=True, raises=LookupError, reason=e["note"])]
        out.append(pytest.param(e, marks=marks, id=_id(e)))
    return out


@pytest.mark.parametrize("entry", _missing_params())
def test_every_name_resolves_at_its_path(entry):
    TOOL.resolve(entry["module"], entry["name"])


def test_only_names_owned_elsewhere_are_missing():
    missing = {(e["module"], e["name"]) for e in ENTRIES if e["status"] == "missing"}
    assert missing == set(TOOL.MISSING_NEEDS) & {(e["module"], e["name"]) for e in ENTRIES}, \
        "a missing name must be one whose home another change owns (tools/tensorpack_api.py MISSING_NEEDS)"


def test_the_statuses_describe_kerastrainer_now():
    old = {(e["module"], e["name"]): e for e in ENTRIES}
    rows = TOOL.classify([(e["module"], e["name"], TOOL.External(e["name"]) if e["status"] == "not-api" else None)
                          for e in ENTRIES], old)
    stale = [(r["module"], r["name"], old[(r["module"], r["name"])]["status"], r["status"])
             for r in rows if (r["status"], r["note"]) != (old[(r["module"], r["name"])]["status"],
                                                           old[(r["module"], r["name"])]["note"])]
    assert not stale, ("tests/tensorpack_api.json is stale; regenerate it with tools/tensorpack_api.py "
                       f"(module, name, listed, now): {stale[:10]}")


def test_star_import_gives_the_top_level_names():
    names = [e["name"] for e in API if e["module"] == "tensorpack" and e["status"] != "missing"]
    code = ("import json, sys\nfrom kerastrainer import *\n"
            f"names = {names!r}\n"
            "print(json.dumps([n for n in names if n not in globals()]))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []


# ------------------------------------------------------------------ names that raise
RAISES = [e for e in API if e["status"] == "raises"]


@pytest.mark.parametrize("entry", RAISES, ids=_id)
def test_each_raising_name_raises_its_documented_error(entry):
    from kerastrainer.utils.tf1_only import TF2UnsupportedError
    obj = TOOL.resolve(entry["module"], entry["name"])
    with pytest.raises(TF2UnsupportedError) as e:
        obj()
    assert entry["note"] in str(e.value)
    assert entry["name"] in str(e.value)


def _subclass_of_hook():
    from kerastrainer.callbacks import HookToCallback

    class MyHook(HookToCallback):  # a program may subclass at import time; using it raises
        pass
    return MyHook


# how programs use them, with their arguments: (path, call, words the message must hold)
USES = [
    ("kerastrainer.callbacks.GraphProfiler", lambda c: c(dump_tracing=True), "tf.profiler"),
    ("kerastrainer.callbacks.hooks.HookToCallback", lambda c: _subclass_of_hook()(object()), "Callback"),
    ("kerastrainer.predict.OnlinePredictor", lambda c: c([], []), "OfflinePredictor"),
    ("kerastrainer.input_source.PlaceholderInput", lambda c: c(), "FeedInput"),
    ("kerastrainer.utils.loadcaffe.load_caffe", lambda f: f("a.prototxt", "a.caffemodel"), "SmartInit"),
    ("kerastrainer.dataflow.CaffeLMDB", lambda c: c("x.lmdb", shuffle=False), "LMDBDataDecoder"),
]


@pytest.mark.parametrize("path,use,words", USES, ids=[u[0] for u in USES])
def test_raising_names_used_as_programs_use_them(path, use, words):
    from kerastrainer.utils.tf1_only import TF2UnsupportedError
    mod, name = path.rsplit(".", 1)
    obj = getattr(importlib.import_module(mod), name)
    with pytest.raises(TF2UnsupportedError, match="TensorFlow 2") as e:
        use(obj)
    assert words in str(e.value)


# ------------------------------------------------------------------ behaviour of what was added
class _Monitors:
    def __init__(self):
        self.scalars = []
        self.latest = {}

    def put_scalar(self, name, value):
        self.scalars.append((name, value))

    def get_latest(self, name):
        return self.latest[name]


class _Trainer(TrainerView):
    def __init__(self, variables=None):
        import tensorflow as tf
        self._vars = variables or {"fc/W": tf.Variable(np.ones((2, 2), np.float32))}
        self.last_step_outputs = {}
        self.monitors = _Monitors()
        self.global_step = 0
        self.epoch_num = 1

    def named_variables(self):
        return self._vars


def _step(trainer, cb, cost):
    trainer.global_step += 1
    trainer.last_step_outputs = {"cost": cost}
    cb.trigger_step()


def test_process_tensors_sees_each_step_and_names_what_it_cannot_fetch():
    from kerastrainer.callbacks import ProcessTensors
    seen = []
    t = _Trainer()
    cb = ProcessTensors(["cost", "fc/W:0"], lambda c, w: seen.append((float(c), w.sum())))
    cb.setup_graph(t)
    assert cb.steps_to_next_trigger() == 1
    _step(t, cb, 2.5)
    assert seen == [(2.5, 4.0)]
    bad = ProcessTensors(["tower0/fc/output"], print)
    bad.setup_graph(t)
    with pytest.raises(KeyError, match="add_moving_summary"):
        _step(t, bad, 1.0)


def test_simple_moving_average_puts_the_window_mean():
    from kerastrainer.callbacks.summary import SimpleMovingAverage
    t = _Trainer()
    cb = SimpleMovingAverage(["cost"], window_size=2)
    cb.setup_graph(t)
    for c in (1.0, 3.0, 5.0, 9.0):
        _step(t, cb, c)
    assert t.monitors.scalars == [("cost/SMA", 2.0), ("cost/SMA", 7.0)]


def test_check_numerics_names_the_bad_variable():
    import tensorflow as tf
    from kerastrainer.callbacks import CheckNumerics
    t = _Trainer({"ok": tf.Variable([1.0]), "bad/W": tf.Variable([np.nan])})
    cb = CheckNumerics()
    cb.setup_graph(t)
    with pytest.raises(FloatingPointError, match="bad/W"):
        cb.trigger()


def test_run_op_runs_when_asked():
    from kerastrainer.callbacks import RunOp
    calls = []
    cb = RunOp(lambda: calls.append(1), run_before=True, run_as_trigger=True, run_step=True)
    cb.setup_graph(_Trainer())
    cb.before_train()
    cb.trigger()
    cb.trigger_step()
    assert len(calls) == 3 and cb.steps_to_next_trigger() == 1
    with pytest.raises(TypeError, match="function"):
        RunOp("some_op_name")


def test_human_hyperparam_setter_reads_its_file(tmp_path):
    from kerastrainer.callbacks import HumanHyperParamSetter
    from kerastrainer.callbacks.param import ObjAttrParam

    class Holder:
        lr = 0.1
    h = Holder()
    cb = HumanHyperParamSetter(ObjAttrParam(h, "lr"), file_name=str(tmp_path / "hyper.txt"))
    assert cb._get_value_to_set() is None  # no file: unchanged
    (tmp_path / "hyper.txt").write_text("momentum:0.9\nlr:0.002\n")
    assert cb._get_value_to_set() == pytest.approx(0.002)


def test_binary_classification_stats():
    from kerastrainer.callbacks import BinaryClassificationStats
    inf = BinaryClassificationStats("pred", "label")
    assert inf.get_fetches() == ["pred", "label"]
    inf._before_inference()
    inf._on_fetches([np.array([1, 1, 0, 0]), np.array([1, 0, 1, 0])])
    assert inf._after_inference() == {"val_precision": 0.5, "val_recall": 0.5}


def test_inference_runner_takes_an_input_source_of_a_dataflow():
    from kerastrainer import DataFromList, InferenceRunner, QueueInput, ScalarStats, TFDatasetInput
    df = DataFromList([[np.zeros(2)]], shuffle=False)
    assert InferenceRunner(QueueInput(df), ScalarStats("cost"))._input is df
    import tensorflow as tf
    # a source without a DataFlow is read as tensorpack read it (tests/test_tensorpack_api_met.py)
    assert InferenceRunner(TFDatasetInput(tf.data.Dataset.range(3)), ScalarStats("cost"))._input is not df


def test_send_stat_and_dump_tensors(tmp_path):
    from kerastrainer.callbacks import DumpTensors, SendStat
    from kerastrainer.utils import logger
    t = _Trainer()
    t.monitors.latest["acc"] = 0.75
    out = tmp_path / "sent.txt"
    cb = SendStat(f"echo {{acc}} > {out}", "acc")
    cb.setup_graph(t)
    cb.trigger()
    assert out.read_text().strip() == "0.75"
    logger.set_logger_dir(str(tmp_path / "log"), action="d")
    try:
        d = DumpTensors(["fc/W", "cost"])
        d.setup_graph(t)
        d.before_train()
        _step(t, d, 1.5)
        got = dict(np.load(str(tmp_path / "log" / "DumpTensor-1.npz")))
        assert got["cost"] == 1.5 and got["fc/W"].shape == (2, 2)
    finally:
        logger.unset_logger_dir()


def test_prefetch_names_are_the_runners_and_map_and_batch_batches():
    from kerastrainer import dataflow as D
    assert D.PrefetchData is D.MultiProcessRunner and D.PrefetchDataZMQ is D.MultiProcessRunnerZMQ
    assert D.MultiThreadPrefetchData is D.MultiThreadRunner
    ds = D.MultiProcessMapAndBatchData(D.DataFromList([[i] for i in range(10)], shuffle=False), 2,
                                       lambda dp: None if dp[0] == 3 else [dp[0] * 10], batch_size=4)
    ds.reset_state()
    it = iter(ds)
    batches = [next(it)[0] for _ in range(5)]
    ds.close() if hasattr(ds, "close") else None
    assert all(b.shape == (4,) for b in batches)
    seen = set(np.concatenate(batches).tolist())
    assert 30 not in seen and seen <= {i * 10 for i in range(10)}
    with pytest.raises(TypeError):
        len(ds)


def test_data_from_queue_and_augment_image_coordinates():
    from kerastrainer.dataflow import AugmentImageCoordinates, DataFromList, DataFromQueue, imgaug
    q = queue.Queue()
    for i in range(3):
        q.put([i])
    it = iter(DataFromQueue(q))
    assert [next(it) for _ in range(3)] == [[0], [1], [2]]
    img = np.zeros((10, 20, 3), np.uint8)
    ds = AugmentImageCoordinates(DataFromList([[img, np.array([[1.0, 2.0]])]], shuffle=False),
                                 [imgaug.Flip(horiz=True, prob=1.0)], 0, 1)
    ds.reset_state()
    out_img, coords = next(iter(ds))
    assert out_img.shape == img.shape
    np.testing.assert_allclose(coords, [[19.0, 2.0]])


def test_lmdb_data_decoder_and_svmlight(tmp_path):
    import lmdb
    from kerastrainer.dataflow import LMDBDataDecoder, SVMLightData
    env = lmdb.open(str(tmp_path / "x.lmdb"), subdir=True, map_size=1 << 20)
    with env.begin(write=True) as txn:
        for i in range(4):
            txn.put(f"k{i}".encode(), bytes([i]))
    env.close()
    ds = LMDBDataDecoder(str(tmp_path / "x.lmdb"), lambda k, v: None if v == b"\x02" else [k, v[0]], shuffle=False)
    ds.reset_state()
    assert len(ds) == 4 and list(ds) == [[b"k0", 0], [b"k1", 1], [b"k3", 3]]
    (tmp_path / "a.svm").write_text("1 1:0.5 3:2\n0 2:1\n")
    rows = list(SVMLightData(str(tmp_path / "a.svm"), shuffle=False))
    np.testing.assert_allclose(rows[0][0], [0.5, 0, 2])
    assert [r[1] for r in rows] == [1, 0]


def test_places_and_tiny_imagenet_readers(tmp_path):
    import cv2
    from kerastrainer.dataflow.dataset import Places365Standard, TinyImageNet
    img = np.full((8, 8, 3), 7, np.uint8)
    for cls in ("b_cls", "a_cls"):
        d = tmp_path / "places" / "train" / cls
        d.mkdir(parents=True)
        cv2.imwrite(str(d / "1.png"), img)
    (tmp_path / "places" / "train.txt").write_text("train/b_cls/1.png\ntrain/a_cls/1.png\n")
    ds = Places365Standard(str(tmp_path / "places"), "train", shuffle=False)
    ds.reset_state()
    got = list(ds)
    assert [g[1] for g in got] == [1, 0] and got[0][0].shape == (8, 8, 3)
    root = tmp_path / "tiny"
    for w in ("n02", "n01"):
        (root / "train" / w / "images").mkdir(parents=True)
        cv2.imwrite(str(root / "train" / w / "images" / f"{w}_0.JPEG"), img)
    (root / "val" / "images").mkdir(parents=True)
    cv2.imwrite(str(root / "val" / "images" / "val_0.JPEG"), img)
    (root / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn02\t0\t0\t8\t8\n")
    (root / "wnids.txt").write_text("n02\nn01\n")
    train = TinyImageNet(str(root), "train", shuffle=False)
    train.reset_state()
    assert [dp[1] for dp in train] == [0, 1]  # n01, then n02 (sorted wnids)
    val = TinyImageNet(str(root), "val")
    val.reset_state()
    assert [dp[1] for dp in val] == [1]


def test_input_sources_at_tensorpack_paths():
    import tensorflow as tf
    from kerastrainer.input_source import input_source as S
    from kerastrainer.input_source.input_source_base import InputSource, remap_input_source
    assert issubclass(S.TensorInput, S.FeedfreeInput) and issubclass(S.FeedfreeInput, InputSource)
    ti = S.TensorInput(lambda: [tf.zeros([2, 3]), tf.ones([2], tf.int32)], size=5)
    ti.setup([tf.TensorSpec([None, 3], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")])
    x, y = ti.get_input_tensors()
    assert ti.size() == 5 and x.shape == (2, 3) and y.dtype == tf.int32

    class Two(S.FeedfreeInput):
        def _get_input_tensors(self):
            return [tf.constant([1]), tf.constant([2.0])]
    r = remap_input_source(Two(), ["label", "image"])
    r.setup([tf.TensorSpec([None], tf.float32, "image"), tf.TensorSpec([None], tf.int32, "label")])
    image, label = r.get_input_tensors()
    assert float(image[0]) == 2.0 and int(label[0]) == 1
    with pytest.raises(ValueError, match="get no tensor"):
        remap_input_source(Two(), ["image"]).setup([tf.TensorSpec([None], tf.float32, "image"),
                                                   tf.TensorSpec([None], tf.int32, "label")])


def test_async_predictor_and_predictor_base():
    from kerastrainer.predict import MultiThreadAsyncPredictor, PredictorBase

    class Double(PredictorBase):
        def _do_call(self, inputs):
            return [inputs[0] * 2]
    assert Double()(np.array([1, 2]))[0].tolist() == [2, 4]
    p = MultiThreadAsyncPredictor([Double(), Double()], batch_size=1)
    p.start()
    done = []
    futs = [p.put_task([np.array([i])], callback=lambda f: done.append(1)) for i in range(5)]
    assert [int(f.result(timeout=10)[0][0]) for f in futs] == [0, 2, 4, 6, 8]
    p.stop()
    assert len(done) == 5


def test_utils_added_for_tensorpack(tmp_path):
    from kerastrainer.utils.concurrency import LoopThread, ShareSessionThread
    from kerastrainer.utils.palette import PALETTE_RGB
    from kerastrainer.utils.serialize import dumps, loads
    from kerastrainer.tfutils.model_utils import get_shape_str
    from kerastrainer.tfutils import collect_env_info
    import tensorflow as tf
    n = []
    t = LoopThread(lambda: (n.append(1), time.sleep(0.001)))
    t.start()
    time.sleep(0.05)
    t.stop()
    t.join(2)
    assert n and not t.is_alive()
    got = []
    th = ShareSessionThread(threading.Thread(target=lambda: got.append(1)))
    th.start()
    th.join(2)
    assert got == [1]
    assert PALETTE_RGB.shape == (80, 3) and PALETTE_RGB.max() <= 255 and len({tuple(c) for c in PALETTE_RGB}) == 80
    np.testing.assert_array_equal(loads(dumps([np.arange(3)]))[0], np.arange(3))
    assert get_shape_str([tf.zeros([2, 3]), tf.zeros([4])]) == "[2, 3],[4]"
    assert "TensorFlow" in collect_env_info()


def test_tfutils_argscope_is_the_function():
    from kerastrainer.tfutils import argscope
    from kerastrainer.models import Conv2D
    import kerastrainer.tfutils.argscope as alias_module_path  # tensorpack's: the attribute wins
    assert callable(argscope) and alias_module_path is argscope
    from kerastrainer.tfutils.argscope import get_arg_scope
    with argscope(Conv2D, kernel_size=3):
        assert get_arg_scope()["Conv2D"]["kernel_size"] == 3


# --- names added at their path after the list was first made ------------------------------------
def test_queue_input_trainer_trains_with_simple_trainer_on_a_queue():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _models import MLP, LinearData
    from kerastrainer.train import TrainConfig
    from kerastrainer.train.trainers import QueueInputTrainer, SimpleTrainer
    t = QueueInputTrainer(TrainConfig(model=MLP(), dataflow=LinearData(), max_epoch=1, callbacks=[],
                                      extra_callbacks=[], monitors=[]))
    assert isinstance(t, SimpleTrainer) and t.global_step == len(LinearData())
    with pytest.raises(ValueError, match="TF1 queues do not exist"):
        QueueInputTrainer(TrainConfig(model=MLP(), dataflow=LinearData()), input_queue=object())


def test_send_monitor_data_runs_once_all_names_arrived(tmp_path):
    from kerastrainer.callbacks.monitor import MonitorBase, SendMonitorData, TrainingMonitor
    assert MonitorBase is TrainingMonitor
    out = tmp_path / "sent"
    m = SendMonitorData(f'echo "{{cost}} {{acc}}" >> {out}', ["cost", "acc"])
    m.process_scalar("cost", 1.5)
    assert not out.exists()               # not all of them yet
    m.process_scalar("other", 9)
    m.process_scalar("acc", 0.25)
    m.process_scalar("cost", 2.5)         # a new round
    assert out.read_text().split() == ["1.5", "0.25"]


def test_checkpoint_helpers_at_varmanip(tmp_path):
    from kerastrainer.tfutils.varmanip import (get_all_checkpoints, get_checkpoint_path, load_checkpoint_vars,
                                               load_chkpt_vars, save_checkpoint_vars, save_chkpt_vars)
    values = {"fc/W": np.arange(6, dtype="float32").reshape(2, 3), "step": np.int64(7)}
    save_chkpt_vars(values, str(tmp_path / "w.npz"))
    got = dict(np.load(tmp_path / "w.npz"))
    assert np.array_equal(got["fc/W"], values["fc/W"]) and got["step"] == 7
    for step in (3, 10):
        save_checkpoint_vars(values, str(tmp_path / f"checkpoint-{step}"))
    assert [os.path.basename(p) for p in get_all_checkpoints(str(tmp_path))] == ["checkpoint-3", "checkpoint-10"]
    back = load_checkpoint_vars(str(tmp_path / "checkpoint-10"))
    assert load_checkpoint_vars is not load_chkpt_vars and np.array_equal(back["fc/W"], values["fc/W"])
    assert get_checkpoint_path(str(tmp_path / "checkpoint-3.index")) == str(tmp_path / "checkpoint-3")


def test_draw_boxes_and_intensity_to_rgb():
    from kerastrainer.utils.viz import draw_boxes, intensity_to_rgb
    im = np.zeros((20, 30), np.uint8)
    out = draw_boxes(im, [[2, 3, 10, 12]], color=(0, 0, 255))
    assert out.shape == (20, 30, 3) and im.max() == 0                       # a copy, in colour
    assert tuple(out[3, 5]) == (0, 0, 255) and tuple(out[7, 6]) == (0, 0, 0)  # the edge, not the inside
    with pytest.raises(ValueError, match="2 labels for 1 boxes"):
        draw_boxes(im, [[0, 0, 1, 1]], ["a", "b"])
    rgb = intensity_to_rgb(np.array([[0.0, 0.5], [1.0, 0.25]]))
    assert rgb.shape == (2, 2, 3) and 0 <= rgb.min() and rgb.max() <= 255
    with pytest.raises(ValueError, match="normalize=True"):
        intensity_to_rgb(np.array([[0.0, 3.0]]))
    assert np.allclose(intensity_to_rgb(np.array([[0.0, 3.0]]), normalize=True),
                       intensity_to_rgb(np.array([[0.0, 1.0]])))
