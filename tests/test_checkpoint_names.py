"""Checkpoints keyed by variable name: creation order does not matter, every mismatch is named once,
NaN never becomes the latest checkpoint, auto-resume skips damaged files and says what it does."""
import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from _models import LinearData, weights_of
from kerastrainer.callbacks import ModelSaver, PeriodicTrigger, TerminateOnNonFinite
from kerastrainer.callbacks.steps import NonFiniteLossError
from kerastrainer.models import FullyConnected
from kerastrainer.predict import OfflinePredictor, PredictConfig
from kerastrainer.tfutils import CheckpointLoadError, NonFiniteWeightsError, SmartInit, load_chkpt_vars
from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
from kerastrainer.tfutils.checkpoint_write import checkpoint_variables
from kerastrainer.tfutils.sessinit import CheckpointInit, find_resumable_checkpoint
from kerastrainer.train import (AutoResumeTrainConfig, ModelDesc, SimpleTrainer, TrainConfig,
                                launch_train_with_config)
from kerastrainer.utils import logger

W = 4  # every hidden layer is W x W, so a creation-order match would silently swap them


class Swappable(ModelDesc):
    """x -> a -> [mid] -> b -> out; ``first`` names the layer created first."""

    def __init__(self, first="a", insert=False, nan_flag=False, b_width=W):
        self.first, self.insert, self.nan_flag, self.b_width = first, insert, nan_flag, b_width

    def inputs(self):
        specs = [tf.TensorSpec((None, W), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]
        if self.nan_flag:
            specs.append(tf.TensorSpec((None,), tf.float32, "flag"))
        return specs

    def build_graph(self, x, y, flag=None):
        if self.first == "b":
            FullyConnected("b", x, self.b_width)  # only to create 'b' before 'a'
        h = FullyConnected("a", x, W)
        if self.insert:
            h = FullyConnected("mid", h, W)
        h = FullyConnected("b", h, self.b_width)
        logits = FullyConnected("out", h, 3)
        tf.nn.softmax(logits, name="prob")
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if flag is not None:
            # log(1 - 2) is NaN on every CPU and kernel: the flagged batch makes cost and gradients NaN
            cost = cost * (1.0 + tf.math.log(1.0 - 2.0 * tf.reduce_max(flag)))
        return tf.identity(cost, name="cost")

    def optimizer(self):
        return keras.optimizers.Adam(0.05)


class FlaggedData(LinearData):
    """LinearData with a third component: 1.0 in the batches listed in ``bad``."""

    def __init__(self, bad=(), **kw):
        super().__init__(dim=W, **kw)
        self.bad = set(bad)
        self.epoch = 0

    def __iter__(self):
        for i, (x, y) in enumerate(super().__iter__()):
            step = self.epoch * self.num_batches + i
            yield [x, y, np.full([len(y)], 1.0 if step in self.bad else 0.0, "float32")]
        self.epoch += 1


def _train(logdir, model, epochs=1, session_init=None, callbacks=None, data=None, extra_callbacks=(),
           config_cls=TrainConfig, steps_per_epoch=5):
    logger.set_logger_dir(logdir, "k")
    try:
        t = SimpleTrainer(steps_per_call=1)
        launch_train_with_config(config_cls(model=model, dataflow=data or LinearData(dim=W),
                                            callbacks=[ModelSaver()] if callbacks is None else callbacks,
                                            extra_callbacks=list(extra_callbacks), monitors=[],
                                            session_init=session_init, steps_per_epoch=steps_per_epoch,
                                            max_epoch=epochs), t)
    finally:
        logger.unset_logger_dir()
    return t


def test_checkpoint_lists_variables_by_name(tmp_path):
    t = _train(str(tmp_path / "a"), Swappable())
    names = dict(tf.train.list_variables(latest_checkpoint(str(tmp_path / "a"))))
    for n in ["a/W", "a/b", "b/W", "b/b", "out/W", "global_step", "epoch", "optimizer/a/W/momentums",
              "optimizer/b/W/velocities", "optimizer/iteration"]:
        assert n in names, (n, sorted(names))
    assert names["a/W"] == [W, W] and names["out/W"] == [W, 3]
    assert int(tf.train.load_variable(latest_checkpoint(str(tmp_path / "a")), "global_step")) == t.global_step


def test_other_creation_order_loads_each_weight_by_name(tmp_path):
    _train(str(tmp_path / "a"), Swappable(first="a"))
    saved = load_chkpt_vars(latest_checkpoint(str(tmp_path / "a")))
    t = _train(str(tmp_path / "b"), Swappable(first="b"), epochs=0, session_init=str(tmp_path / "a"))
    # the new model created 'b' first; each weight still went to its own name
    got = weights_of(t)
    for name in ["a/W", "a/b", "b/W", "b/b", "out/W", "out/b"]:
        np.testing.assert_array_equal(got[name], saved[name], err_msg=name)
    assert not np.array_equal(saved["a/W"], saved["b/W"])
    # optimizer slots followed their variables, and the counters came back
    slots = checkpoint_variables(t)
    for name in ["optimizer/a/W/momentums", "optimizer/b/W/velocities"]:
        np.testing.assert_array_equal(np.asarray(slots[name].numpy()), saved[name], err_msg=name)
    assert t.global_step == int(saved["global_step"])


def test_inserted_layer_is_named_and_nothing_else_is_blamed(tmp_path, kt_log):
    _train(str(tmp_path / "a"), Swappable())
    saved = load_chkpt_vars(latest_checkpoint(str(tmp_path / "a")))
    # a plain load refuses: the new layer would keep its initial values unnoticed
    with pytest.raises(CheckpointLoadError, match=r"(?s)does not fit the model.*mid/W \[4, 4\].*"
                                                  r"SmartInit\(path, ignore_mismatch=True\)") as e:
        _train(str(tmp_path / "b"), Swappable(insert=True), epochs=0, session_init=str(tmp_path / "a"))
    assert "not in the model" not in str(e.value)   # the checkpoint's variables all have their place
    # a partial load on purpose: one warning naming the new layer, the rest loaded
    t = _train(str(tmp_path / "c"), Swappable(insert=True), epochs=0,
               session_init=SmartInit(str(tmp_path / "a"), ignore_mismatch=True))
    warning = [m for m in kt_log.messages if "not in the checkpoint" in m]
    assert len(warning) == 1, kt_log.text()
    assert "mid/W" in warning[0] and "mid/b" in warning[0] and "optimizer/mid/W/momentums" in warning[0]
    for other in ("a/W", "b/W", "out/W"):
        for text in (warning[0], str(e.value)):
            assert f" {other} [" not in text and f" {other}," not in text and not text.rstrip().endswith(other)
    np.testing.assert_array_equal(weights_of(t)["b/W"], saved["b/W"])
    # auto-resume refuses it: one error naming the new layer
    with pytest.raises(CheckpointLoadError, match=r"(?s)does not fit the model.*mid/W.*new log directory"):
        _train(str(tmp_path / "a"), Swappable(insert=True), epochs=2, config_cls=AutoResumeTrainConfig)


def test_every_shape_mismatch_in_one_error(tmp_path):
    _train(str(tmp_path / "a"), Swappable())
    with pytest.raises(CheckpointLoadError) as e:
        OfflinePredictor(PredictConfig(model=Swappable(b_width=6), session_init=str(tmp_path / "a"),
                                       input_names=["x"], output_names=["prob"]))
    msg = str(e.value)
    assert "b/W (model [4, 6], checkpoint [4, 4])" in msg and "b/b (model [6], checkpoint [4])" in msg
    assert "out/W (model [6, 3], checkpoint [4, 3])" in msg
    assert "optimizer" not in msg  # a predictor loads the model only


def test_predictor_loads_by_name(tmp_path):
    t = _train(str(tmp_path / "a"), Swappable())
    pred = OfflinePredictor(PredictConfig(model=Swappable(first="b"), session_init=str(tmp_path / "a"),
                                          input_names=["x"], output_names=["prob"]))
    for name, value in weights_of(t).items():
        np.testing.assert_array_equal(pred._target.named_variables()[name].numpy(), value)


def test_creation_order_format_still_loads_with_a_warning(tmp_path, kt_log):
    t = _train(str(tmp_path / "a"), Swappable(), callbacks=[])
    prefix = str(tmp_path / "old" / "checkpoint-5")
    t.checkpoint.write(prefix)  # the earlier format: a tf.train.Checkpoint object graph
    t2 = _train(str(tmp_path / "b"), Swappable(), epochs=0, session_init=prefix, callbacks=[])
    for name, value in weights_of(t).items():
        np.testing.assert_array_equal(weights_of(t2)[name], value)
    assert "creation-order format" in kt_log.text() and "save again" in kt_log.text()


def test_tf1_name_based_checkpoint_loads_by_name(tmp_path, kt_log):
    """A checkpoint keyed like tensorpack's (TF1 Saver: variable names, slots as '<name>/Adam')."""
    rng = np.random.RandomState(1)
    arrays = {"a/W": rng.randn(W, W), "a/b": rng.randn(W), "b/W": rng.randn(W, W), "b/b": rng.randn(W),
              "out/W": rng.randn(W, 3), "out/b": rng.randn(3), "a/W/Adam": rng.randn(W, W)}
    arrays = {k: v.astype("float32") for k, v in arrays.items()}
    arrays["global_step"] = np.int64(500)
    names = sorted(arrays)
    prefix = str(tmp_path / "tp" / "model-500")
    os.makedirs(os.path.dirname(prefix))
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(arrays[n]) for n in names])
    pred = OfflinePredictor(PredictConfig(model=Swappable(first="b"), session_init=prefix, input_names=["x"],
                                          output_names=["prob"]))
    for name, var in pred._target.named_variables().items():
        np.testing.assert_array_equal(var.numpy(), arrays[name], err_msg=name)
    assert "a/W/Adam" in kt_log.text()  # not in the model: named in the warning


def test_saver_refuses_nan_weights_and_keeps_the_latest(tmp_path):
    d = str(tmp_path / "a")
    # no NaN guard: the saver alone must refuse; the flagged batch is step 7 (0-based), so the
    # weights are NaN after 8 steps
    with pytest.raises(NonFiniteWeightsError, match="global step 8.*latest checkpoint stays .*checkpoint-7"):
        _train(d, Swappable(nan_flag=True), epochs=2, data=FlaggedData(bad=[7]),
               callbacks=[PeriodicTrigger(ModelSaver(), every_k_steps=1)])
    assert os.path.basename(latest_checkpoint(d)) == "checkpoint-7"
    assert not glob.glob(os.path.join(d, "checkpoint-8.*"))


def test_nan_guard_runs_before_the_saver_and_resume_is_finite(tmp_path, kt_log):
    d = str(tmp_path / "a")
    with pytest.raises(NonFiniteLossError, match="global step 7"):
        _train(d, Swappable(nan_flag=True), epochs=2, data=FlaggedData(bad=[7]),
               callbacks=[PeriodicTrigger(ModelSaver(), every_k_steps=1)], extra_callbacks=[TerminateOnNonFinite()])
    assert os.path.basename(latest_checkpoint(d)) == "checkpoint-7"
    arrays = load_chkpt_vars(latest_checkpoint(d))
    assert all(np.isfinite(v).all() for v in arrays.values() if v.dtype.kind == "f")


def test_auto_resume_skips_nan_and_damaged_checkpoints(tmp_path, kt_log):
    d = str(tmp_path / "a")
    _train(d, Swappable(), epochs=3, steps_per_epoch=2)  # checkpoint-2, -4, -6
    # the newest holds NaN (written as a broken saver would have), the one before is truncated
    arrays = load_chkpt_vars(os.path.join(d, "checkpoint-6"))
    arrays["b/W"] = np.full_like(arrays["b/W"], np.nan)
    names = sorted(arrays)
    for f in glob.glob(os.path.join(d, "checkpoint-6.*")):
        os.remove(f)
    tf.raw_ops.SaveV2(prefix=os.path.join(d, "checkpoint-6"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=[tf.constant(arrays[n]) for n in names])
    data4 = glob.glob(os.path.join(d, "checkpoint-4.data-*"))[0]
    with open(data4, "r+b") as f:
        f.truncate(os.path.getsize(data4) // 2)
    logger.set_logger_dir(d, "k")
    try:
        init = find_resumable_checkpoint(d)
    finally:
        logger.unset_logger_dir()
    assert os.path.basename(init.path) == "checkpoint-2" and init.epoch == 1
    text = kt_log.text()
    assert "skipping checkpoint-6: it holds NaN or Inf (b/W)" in text
    assert "skipping checkpoint-4" in text and "data-00000-of-00001" in text
    assert "using checkpoint-2 instead of checkpoint-6, checkpoint-4" in text
    # an explicit load of the damaged one is an error naming the file
    with pytest.raises(CheckpointLoadError, match=r"checkpoint-4\.data-00000-of-00001"):
        SmartInit(os.path.join(d, "checkpoint-4")).init(init_target(Swappable()))


def init_target(model):
    from kerastrainer.predict.base import _InferenceTarget
    model.get_tower_function().build()
    return _InferenceTarget(model.get_model_variables())


@pytest.mark.parametrize("damage", ["garbage", "empty"])
def test_damaged_index_falls_back_and_explicit_load_names_it(tmp_path, kt_log, damage):
    d = str(tmp_path / "a")
    _train(d, Swappable(), epochs=2, steps_per_epoch=2)
    index = os.path.join(d, "checkpoint-4.index")
    with open(index, "wb") as f:
        f.write(os.urandom(300) if damage == "garbage" else b"")
    init = find_resumable_checkpoint(d)
    assert os.path.basename(init.path) == "checkpoint-2"
    assert index in kt_log.text()
    with pytest.raises(CheckpointLoadError, match=r"checkpoint-4\.index"):
        CheckpointInit(os.path.join(d, "checkpoint-4")).init(init_target(Swappable()))


def test_bad_pointer_falls_back_to_the_files(tmp_path, kt_log):
    d = str(tmp_path / "a")
    _train(d, Swappable(), epochs=2, steps_per_epoch=2)
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write("model_checkpoint_path: {{{ not a proto\n")
    assert os.path.basename(find_resumable_checkpoint(d).path) == "checkpoint-4"
    with open(os.path.join(d, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "checkpoint-99"\n')
    assert os.path.basename(find_resumable_checkpoint(d).path) == "checkpoint-4"
    assert "checkpoint-99, which does not exist" in kt_log.text()


def test_no_usable_checkpoint_is_an_error(tmp_path):
    d = str(tmp_path / "a")
    _train(d, Swappable(), epochs=1, steps_per_epoch=2)
    with open(os.path.join(d, "checkpoint-2.index"), "wb") as f:
        f.write(b"\0" * 64)
    with pytest.raises(CheckpointLoadError, match="no usable checkpoint"):
        find_resumable_checkpoint(d)


def test_relative_log_dir_resume_is_quiet_and_says_what_it_does(tmp_path, monkeypatch, kt_log):
    monkeypatch.chdir(tmp_path)
    _train("train_log/x", Swappable(), epochs=1, steps_per_epoch=2)
    kt_log.clear()
    t = _train("train_log/x", Swappable(), epochs=2, steps_per_epoch=2, config_cls=AutoResumeTrainConfig)
    text = kt_log.text()
    assert "does not exist" not in text and "train_log/x/train_log" not in text
    assert "resuming train_log/x from checkpoint-2: global step 2, epoch 1 done" in text
    assert t.global_step == 4
    kt_log.clear()
    t = _train("train_log/x", Swappable(), epochs=2, steps_per_epoch=2, config_cls=AutoResumeTrainConfig)
    assert t.global_step == 4
    assert ("nothing to train: finished at epoch 2 (checkpoint " in kt_log.text()
            and "use a new log dir or a larger max_epoch" in kt_log.text())


def test_atomic_files_follow_the_umask(tmp_path):
    from kerastrainer.callbacks.fileio import atomic_write_text
    old = os.umask(0o022)
    try:
        atomic_write_text(str(tmp_path / "a.json"), "{}")
        os.umask(0o027)
        atomic_write_text(str(tmp_path / "b.json"), "{}")
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "a.json").st_mode & 0o777 == 0o644
    assert os.stat(tmp_path / "b.json").st_mode & 0o777 == 0o640


def test_atomic_write_has_no_temporary_name_while_writing(tmp_path, monkeypatch):
    # a process killed mid-write (SIGKILL while saving) must not leave '.checkpoint.*.tmp' behind:
    # the data is written to a nameless O_TMPFILE, named only once it is on disk
    from kerastrainer.callbacks import fileio
    if fileio._nameless_until_whole(str(tmp_path), "probe", b"", 0o644) is None:
        pytest.skip("no O_TMPFILE on this file system")
    for f in os.listdir(tmp_path):
        os.unlink(tmp_path / f)
    seen = []
    real = fileio._write_all

    def spy(fd, data, mode):
        seen.append(sorted(os.listdir(tmp_path)))
        real(fd, data, mode)
    monkeypatch.setattr(fileio, "_write_all", spy)
    fileio.atomic_write_text(str(tmp_path / "checkpoint"), "old")
    fileio.atomic_write_text(str(tmp_path / "checkpoint"), "new")
    assert seen == [[], ["checkpoint"]]
    assert sorted(os.listdir(tmp_path)) == ["checkpoint"] and (tmp_path / "checkpoint").read_text() == "new"


def test_atomic_write_on_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    import errno
    from kerastrainer.callbacks import fileio
    path = str(tmp_path / "stats.json")
    fileio.atomic_write_text(path, "[1]")

    def full(fd, data, mode):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))   # what os.write says: no file name
    monkeypatch.setattr(fileio, "_write_all", full)
    with pytest.raises(OSError, match=r"No space left on device: '.*stats\.json'") as info:
        fileio.atomic_write_text(path, "[1, 2]")
    assert info.value.errno == errno.ENOSPC and info.value.filename == path
    assert os.listdir(tmp_path) == ["stats.json"] and (tmp_path / "stats.json").read_text() == "[1]"


def test_model_saver_removes_temporaries_a_killed_save_left(tmp_path):
    # where O_TMPFILE is missing, a kill between naming and renaming can leave one behind
    logdir = tmp_path / "a"
    _train(str(logdir), Swappable())
    for name in (".checkpoint.1a2b3c.tmp", ".notes.txt.1a2b3c.tmp"):
        (logdir / name).write_text("x")
    _train(str(logdir), Swappable(), epochs=2)
    left = [f for f in os.listdir(logdir) if f.endswith(".tmp")]
    assert left == [".notes.txt.1a2b3c.tmp"]   # only the pointer's own temporaries are removed


def test_stats_and_pointer_are_readable_by_others(tmp_path):
    from kerastrainer.callbacks import JSONWriter
    old = os.umask(0o022)
    try:
        d = str(tmp_path / "a")
        logger.set_logger_dir(d, "k")
        try:
            launch_train_with_config(TrainConfig(model=Swappable(), dataflow=LinearData(dim=W), callbacks=[ModelSaver()],
                                                 extra_callbacks=[], monitors=[JSONWriter()], steps_per_epoch=2,
                                                 max_epoch=1), SimpleTrainer())
        finally:
            logger.unset_logger_dir()
    finally:
        os.umask(old)
    for name in ("checkpoint", "stats.json"):
        assert os.stat(os.path.join(d, name)).st_mode & 0o777 == 0o644, name


def test_keras_model_weights_load_by_layer_name(tmp_path):
    from kerastrainer import KerasModel
    x = np.random.RandomState(0).randn(64, W).astype("float32")
    y = (x.sum(1) > 0).astype("int32")

    def fit(model, logdir, **kw):
        km = KerasModel(model, input=(x, y))
        km.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        logger.set_logger_dir(logdir, "k")
        try:
            km.fit(batch_size=16, extra_callbacks=[], monitors=[], **kw)
        finally:
            logger.unset_logger_dir()

    first = keras.Sequential([keras.Input((W,)), keras.layers.Dense(W, name="h"), keras.layers.Dense(2, name="o")])
    fit(first, str(tmp_path / "a"), epochs=1, callbacks=[ModelSaver()])
    path = latest_checkpoint(str(tmp_path / "a"))
    assert "keras_model/h/kernel" in dict(tf.train.list_variables(path))  # no per-process model name
    # another model object (another auto-name), its layers created in the other order
    o = keras.layers.Dense(2, name="o")
    h = keras.layers.Dense(W, name="h")
    inp = keras.Input((W,))
    second = keras.Model(inp, o(h(inp)))
    fit(second, str(tmp_path / "b"), epochs=0, session_init=path)
    for layer in ("h", "o"):
        for a, b in zip(first.get_layer(layer).weights, second.get_layer(layer).weights):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_replicated_trainer_saves_and_loads_by_name(tmp_path):
    from _devices import cpus
    from kerastrainer.train import SyncMultiGPUTrainerReplicated
    devices = cpus(2)  # logical CPU devices (conftest)
    logger.set_logger_dir(str(tmp_path / "a"), "k")
    try:
        t = SyncMultiGPUTrainerReplicated(devices, steps_per_call=1)
        launch_train_with_config(TrainConfig(model=Swappable(), dataflow=LinearData(dim=W), callbacks=[ModelSaver()],
                                             extra_callbacks=[], monitors=[], steps_per_epoch=3, max_epoch=1), t)
    finally:
        logger.unset_logger_dir()
    saved = load_chkpt_vars(latest_checkpoint(str(tmp_path / "a")))
    for name, value in weights_of(t).items():
        np.testing.assert_array_equal(saved[name], value)
    t2 = SyncMultiGPUTrainerReplicated(devices, steps_per_call=1)
    launch_train_with_config(TrainConfig(model=Swappable(first="b"), dataflow=LinearData(dim=W), extra_callbacks=[],
                                         monitors=[], session_init=str(tmp_path / "a"), steps_per_epoch=3,
                                         max_epoch=0), t2)
    for name, var in t2.named_variables().items():
        for replica_value in t2.strategy.experimental_local_results(getattr(var, "value", var)):
            np.testing.assert_array_equal(np.asarray(replica_value), saved[name], err_msg=name)


def test_keras_models_built_twice_save_under_the_same_names():
    # Keras numbers automatic layer names per process: dense_7 now, dense_9 in the next model
    import keras
    from kerastrainer.tfutils.tower_func import ModelVariables
    from kerastrainer.tfutils.layer_store import LayerStore

    def build():
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2, name="out"),
                              keras.layers.Dense(2)])
        return sorted(ModelVariables(LayerStore(), {"keras_model": m}).named_variables())

    first, second = build(), build()
    assert first == second
    assert {"keras_model/dense/kernel", "keras_model/dense_1/bias", "keras_model/out/kernel"} <= set(first)


class WithOptimizer(Swappable):
    def __init__(self, make_opt):
        super().__init__()
        self.make_opt = make_opt

    def optimizer(self):
        return self.make_opt()


@pytest.mark.parametrize("code_opt,hyperparams", [("adam-1e-4", "checkpoint"), ("adam-1e-4", "code"),
                                                  ("sgd-0.1", "checkpoint")])
def test_resume_says_which_learning_rate_wins_and_another_optimizer_starts_afresh(tmp_path, kt_log, code_opt,
                                                                               hyperparams):
    """Saved with Adam(1e-3), resumed after editing optimizer(): the checkpoint's 1e-3 was restored
    over the code's without a word, and an SGD kept Adam's learning rate."""
    d = str(tmp_path / "a")
    _train(d, WithOptimizer(lambda: keras.optimizers.Adam(1e-3)), epochs=1, steps_per_epoch=2)
    make = {"adam-1e-4": lambda: keras.optimizers.Adam(1e-4), "sgd-0.1": lambda: keras.optimizers.SGD(0.1)}[code_opt]
    kt_log.clear()
    logger.set_logger_dir(d, "k")
    try:
        t = SimpleTrainer(steps_per_call=1)
        launch_train_with_config(AutoResumeTrainConfig(model=WithOptimizer(make), dataflow=LinearData(dim=W),
                                                       callbacks=[], monitors=[], steps_per_epoch=2, max_epoch=2,
                                                       hyperparams=hyperparams), t)
    finally:
        logger.unset_logger_dir()
    lr = float(t.optimizer.learning_rate.numpy())
    warned = kt_log.warnings()
    assert t.global_step == 4
    if code_opt == "sgd-0.1":
        assert lr == pytest.approx(0.1)
        assert "another optimizer (slots: momentums, velocities) than the code's (slots: none)" in warned, warned
    elif hyperparams == "code":
        assert lr == pytest.approx(1e-4)
        assert "learning_rate is 0.0001" in warned and "the code's value is used" in warned, warned
    else:
        assert lr == pytest.approx(1e-3)
        assert "learning_rate is 0.001" in warned and "the checkpoint's value is used" in warned, warned
        assert "hyperparams='code'" in warned


class MasksNaNInTheCost(Swappable):
    """A NaN in x makes its rows of h NaN; the cost masks them (finite), the gradients of 'a' are NaN."""

    def build_graph(self, x, y, flag=None):
        h = FullyConnected("a", x, W)
        logits = FullyConnected("out", tf.where(tf.math.is_finite(h), h, 0.0), 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")


def test_nan_in_the_input_with_a_finite_cost_stops_naming_the_gradients_and_the_input(tmp_path):
    class NaNAtBatch3(LinearData):
        def __iter__(self):
            for i, (x, y) in enumerate(super().__iter__()):
                if i == 3:
                    x = x.copy()
                    x[0, 0] = np.nan
                yield [x, y]

    with pytest.raises(NonFiniteLossError, match=r"gradients became NaN or Inf at global step 3 .*while the cost "
                                                 r"stayed finite.*NaN or Inf in that step's input batch") as info:
        _train(str(tmp_path / "a"), MasksNaNInTheCost(), data=NaNAtBatch3(dim=W), extra_callbacks=[TerminateOnNonFinite()])
    assert info.value.global_step == 3
    assert latest_checkpoint(str(tmp_path / "a")) is None or "checkpoint-3" not in latest_checkpoint(str(tmp_path / "a"))


def test_a_checkpoint_rotated_away_while_a_predictor_loads_it(tmp_path, kt_log):
    """A run that saves every step and keeps one: about 1 predictor load in 500 died with a bare
    FileNotFoundError (the file was deleted between finding and reading it)."""
    d = str(tmp_path / "a")
    _train(d, Swappable(), epochs=1, callbacks=[ModelSaver(max_to_keep=1)])         # checkpoint-5
    from_dir, from_prefix = SmartInit(d), SmartInit(latest_checkpoint(d))
    assert os.path.basename(from_dir.path) == "checkpoint-5"
    t = _train(d, Swappable(), epochs=2, callbacks=[ModelSaver(max_to_keep=1)],
               config_cls=AutoResumeTrainConfig)                                       # checkpoint-10; -5 deleted
    assert not os.path.exists(from_dir.path + ".index")
    pred = OfflinePredictor(PredictConfig(model=Swappable(), session_init=from_dir, input_names=["x"],
                                          output_names=["prob"]))
    for name, value in weights_of(t).items():
        np.testing.assert_array_equal(pred._target.named_variables()[name].numpy(), value)
    assert "checkpoint-5 was removed while it was read" in kt_log.text() and "loading the newer checkpoint-10" \
        in kt_log.text()
    with pytest.raises(CheckpointLoadError, match="checkpoint-5' was removed while it was read.*Load the log "
                                                  "directory instead"):
        OfflinePredictor(PredictConfig(model=Swappable(), session_init=from_prefix, input_names=["x"],
                                       output_names=["prob"]))
