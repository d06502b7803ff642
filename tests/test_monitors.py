"""Tests of the monitors: Monitors, ScalarPrinter, JSONWriter, TFEventWriter."""
import glob
import json
import os

import numpy as np
import pytest

from kerastrainer.callbacks import (Callback, JSONWriter, Monitors, MovingAverageSummary, ScalarPrinter,
                                    TFEventWriter, TrainingMonitor)
from kerastrainer.callbacks.trainer_view import TrainerView
from kerastrainer.callbacks import fileio
from kerastrainer.utils import logger

from test_callbacks import MiniTrainer


class PutEachEpoch(Callback):
    """Puts 'acc' = epoch_num / 10 at each epoch end, and a histogram and an image."""

    def _trigger_epoch(self):
        m = self.trainer.monitors
        m.put_scalar("acc", self.epoch_num / 10)
        m.put_histogram("weights", np.arange(100.0) * self.epoch_num)
        m.put_image("sample", np.full((4, 5, 3), 0.5, np.float32))


class Stub(TrainerView):
    """Just the trainer attributes monitors read."""
    global_step, epoch_num, is_chief = 7, 1, True


class Collect(TrainingMonitor):
    _chief_only = False

    def __init__(self):
        self.scalars, self.hists, self.images, self.events = [], [], [], []

    def process_scalar(self, name, val):
        self.scalars.append((name, val, self.global_step))

    def process_histogram(self, name, values):
        self.hists.append((name, values.shape))

    def process_image(self, name, img):
        self.images.append((name, img.shape))

    def process_event(self, event):
        self.events.append(event)


# --- Monitors ------------------------------------------------------------------------------------
def test_put_scalar_accepts_numbers_numpy_and_tf(tf):
    col = Collect()
    mons = Monitors([col, None])
    mons.setup_graph(Stub())
    mons.put_scalar("a", 1)
    mons.put_scalar("b", np.float32(2.5))
    mons.put_scalar("c", np.array([3.0]))
    mons.put_scalar("d", tf.constant(4.0))
    mons.put_scalar("e", tf.Variable(5, dtype=tf.int64))
    assert [(n, v) for n, v, _ in col.scalars] == [("a", 1.0), ("b", 2.5), ("c", 3.0), ("d", 4.0), ("e", 5.0)]
    assert all(type(v) is float for _, v, _ in col.scalars)
    with pytest.raises(ValueError, match=r"put_scalar\('f'\): expected a scalar .*shape \(2,\)"):
        mons.put_scalar("f", np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="put_scalar\\('g'\\)"):
        mons.put_scalar("g", "high")
    with pytest.raises(TypeError, match="non-empty string"):
        mons.put_scalar("", 1.0)


def test_get_latest_and_history(tf):
    tr = MiniTrainer([MovingAverageSummary(), PutEachEpoch()], steps_per_epoch=4, max_epoch=3,
                     steps_per_call=2).train()
    m = tr.monitors
    assert m.get_latest("acc") == pytest.approx(0.3)
    assert m.get_history("acc") == [(4, 0.1), (8, 0.2), (12, pytest.approx(0.3))]
    cost = m.get_history("cost")
    assert [s for s, _ in cost] == [2, 4, 6, 8, 10, 12]
    assert [s for s, _ in m.get_history("cost", per_epoch=True)] == [4, 8, 12]
    with pytest.raises(KeyError, match="No statistic named 'validation_error'.*Available: acc, cost"):
        m.get_latest("validation_error")
    with pytest.raises(KeyError, match="validation_error"):
        m.get_history("validation_error")


def test_histogram_image_event_validation(tf):
    col = Collect()
    m = Monitors([col])
    m.setup_graph(Stub())
    m.put_histogram("h", [[1, 2], [3, 4]])
    m.put_image("gray", np.zeros((8, 9)))
    m.put_image("rgb", np.zeros((8, 9, 3)))
    m.put_image("batch", np.zeros((2, 8, 9, 4)))
    m.put_event("an event")
    assert col.hists == [("h", (2, 2))]
    assert col.images == [("gray", (1, 8, 9, 1)), ("rgb", (1, 8, 9, 3)), ("batch", (2, 8, 9, 4))]
    assert col.events == ["an event"]
    with pytest.raises(ValueError, match="put_image\\('bad'\\).*shape \\(8, 9, 5\\)"):
        m.put_image("bad", np.zeros((8, 9, 5)))
    with pytest.raises(ValueError, match="put_histogram\\('empty'\\)"):
        m.put_histogram("empty", [])
    with pytest.raises(TypeError, match="not a TrainingMonitor"):
        Monitors([Collect(), MovingAverageSummary()])


def test_chief_only_monitors_skip_on_non_chief_workers(tf, logdir):
    logger.set_logger_dir(logdir)
    col, jw = Collect(), JSONWriter()
    tr = MiniTrainer([PutEachEpoch()], [col, jw], steps_per_epoch=2, max_epoch=1, is_chief=False).train()
    assert tr.monitors.monitors == [col]
    assert col.scalars and not os.path.exists(os.path.join(logdir, "stats.json"))


# --- ScalarPrinter ---------------------------------------------------------------------------------
def test_scalar_printer_table_with_filters(tf, kt_log):  # noqa: F811
    printer = ScalarPrinter(whitelist=["acc", "cost.*"], blacklist=["cost_x2"])
    MiniTrainer([MovingAverageSummary(), PutEachEpoch()], [printer], steps_per_epoch=2, max_epoch=2).train()
    tables = [m for m in kt_log.messages if m.startswith("Epoch ")]
    assert len(tables) == 2
    rows = [line.split() for line in tables[1].split("\n")[3:]]
    assert [r[0] for r in rows] == ["acc", "cost"]  # cost_x2 is blacklisted
    assert rows[0][1] == "0.2"


def test_scalar_printer_enable_step(tf, kt_log):  # noqa: F811
    printer = ScalarPrinter(enable_step=True, enable_epoch=False)
    MiniTrainer([MovingAverageSummary()], [printer], steps_per_epoch=6, max_epoch=1, steps_per_call=2).train()
    # two prints after the first two calls; the epoch's last call is not printed with enable_epoch=False
    assert sum(m.startswith("Epoch 1, global step") for m in kt_log.messages) == 2


# --- JSONWriter --------------------------------------------------------------------------------------
def test_json_writer_one_entry_per_epoch(tf, logdir):
    logger.set_logger_dir(logdir)
    tr = MiniTrainer([MovingAverageSummary(), PutEachEpoch()], [JSONWriter()], steps_per_epoch=4,
                     max_epoch=3, steps_per_call=3).train()
    with open(os.path.join(logdir, "stats.json")) as f:
        stats = json.load(f)
    assert [(s["epoch_num"], s["global_step"]) for s in stats] == [(1, 4), (2, 8), (3, 12)]
    assert stats[-1]["acc"] == pytest.approx(0.3)
    assert stats[-1]["cost"] == pytest.approx(tr.monitors.get_latest("cost"))
    assert JSONWriter.load_existing_epoch_number(logdir) == 3
    assert JSONWriter.load_existing_json(logdir) == stats
    # no temporary files are left behind
    assert sorted(f for f in os.listdir(logdir) if f != ".lock") == ["log.log", "stats.json"]


def test_json_writer_resume_drops_entries_past_global_step(tf, logdir):
    logger.set_logger_dir(logdir)
    old = [{"epoch_num": e, "global_step": 4 * e, "acc": e / 10} for e in (1, 2, 3)]
    with open(os.path.join(logdir, "stats.json"), "w") as f:
        json.dump(old, f)

    class StartAt(Callback):  # a resumed run: weights of global step 4 were restored
        def _setup_graph(self):
            self.trainer.global_step = 4

    MiniTrainer([StartAt(), PutEachEpoch()], [JSONWriter()], steps_per_epoch=4, starting_epoch=2,
                max_epoch=3).train()
    stats = JSONWriter.load_existing_json(logdir)
    assert [(s["epoch_num"], s["global_step"]) for s in stats] == [(1, 4), (2, 8), (3, 12)]
    assert stats[0]["acc"] == 0.1 and stats[1]["acc"] == 0.2


def test_json_writer_crash_while_writing_keeps_the_old_file(tf, logdir, monkeypatch):
    logger.set_logger_dir(logdir)

    class Boom(Callback):
        def _trigger_epoch(self):
            if self.epoch_num == 2:
                def broken_replace(src, dst):
                    raise OSError("disk full")
                monkeypatch.setattr(fileio.os, "replace", broken_replace)

    tr = MiniTrainer([PutEachEpoch(), Boom()], [JSONWriter()], steps_per_epoch=2, max_epoch=3)
    with pytest.raises(OSError, match="disk full"):
        tr.train()
    stats = JSONWriter.load_existing_json(logdir)
    assert [s["epoch_num"] for s in stats] == [1]
    assert not glob.glob(os.path.join(logdir, ".stats.json*"))


def test_json_writer_errors_and_missing_dir(tf, tmp_path, kt_log):  # noqa: F811
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "stats.json").write_text("{not json")
    with pytest.raises(ValueError, match="stats.json is not valid JSON"):
        JSONWriter.load_existing_json(str(bad))
    (bad / "stats.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="JSON list"):
        JSONWriter.load_existing_json(str(bad))
    assert JSONWriter.load_existing_epoch_number(str(tmp_path)) is None
    # no log directory: one warning, nothing written, training goes on
    logger.unset_logger_dir()
    MiniTrainer([PutEachEpoch()], [JSONWriter()], steps_per_epoch=1, max_epoch=3).train()
    assert sum("JSONWriter: no log directory" in m for m in kt_log.messages) == 1


# --- TFEventWriter -----------------------------------------------------------------------------------
def read_events(d, tf):
    from tensorflow.core.util import event_pb2
    out = []
    for path in sorted(glob.glob(os.path.join(d, "events.out.tfevents.*"))):
        for rec in tf.data.TFRecordDataset(path):
            ev = event_pb2.Event.FromString(rec.numpy())
            for v in ev.summary.value:
                out.append((v.tag, ev.step, v))
    return out


def test_tf_event_writer_writes_scalars_histograms_images(tf, logdir):
    logger.set_logger_dir(logdir)
    MiniTrainer([PutEachEpoch()], [TFEventWriter()], steps_per_epoch=3, max_epoch=2).train()
    events = read_events(logdir, tf)
    # scalars are written as simple values (one proto per step, cheap); TensorBoard reads both kinds
    acc = [(step, v.simple_value) for tag, step, v in events if tag == "acc"]
    assert acc == [(3, pytest.approx(0.1)), (6, pytest.approx(0.2))]
    hist = [(step, tf.make_ndarray(v.tensor)) for tag, step, v in events if tag == "weights"]
    assert [s for s, _ in hist] == [3, 6]
    assert hist[1][1][:, 2].sum() == 100  # bucket counts cover all values
    assert [step for tag, step, _ in events if tag == "sample"] == [3, 6]


def test_tf_event_writer_raw_event_and_custom_dir(tf, tmp_path):
    from tensorflow.core.framework import summary_pb2
    from tensorflow.core.util import event_pb2
    d = str(tmp_path / "tb")
    w = TFEventWriter(logdir=d, flush_secs=1)
    mons = Monitors([w])
    mons.setup_graph(Stub())
    ev = event_pb2.Event(step=5, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="raw", simple_value=1.5)]))
    mons.put_event(ev)
    mons.put_scalar("s", 2.0)
    mons.after_train()
    events = read_events(d, tf)
    assert [(t, s) for t, s, _ in events] == [("raw", 5), ("s", 7)]
    with pytest.raises(ValueError, match="max_queue"):
        TFEventWriter(max_queue=0)


# --- what a real training run records ------------------------------------------------------------
def _summary_model():
    import tensorflow as tf
    from _models import MLP

    class SummaryMLP(MLP):
        """MLP whose tower calls tf.summary.* directly, as TF2 code does."""

        def build_graph(self, x, y):
            cost = super().build_graph(x, y)
            tf.summary.scalar("x_mean", tf.reduce_mean(x))
            with tf.name_scope("inputs"):
                tf.summary.histogram("x", x, step=0)
            img = tf.reshape(tf.sigmoid(x[:, :4]), [-1, 2, 2, 1])
            tf.summary.image("x_as_image", img, max_outputs=2)
            return cost

    return SummaryMLP()


def test_learning_rate_and_tower_summaries_reach_stats_tensorboard_and_table(tf, logdir, kt_log):  # noqa: F811
    from _models import LinearData
    from kerastrainer import (ScheduledHyperParamSetter, SimpleTrainer, TrainConfig,
                              launch_train_with_config)
    logger.set_logger_dir(logdir)
    config = TrainConfig(model=_summary_model(), dataflow=LinearData(num_batches=4),
                         callbacks=[ScheduledHyperParamSetter("learning_rate", [(1, 0.1), (2, 0.01)])],
                         max_epoch=3)
    launch_train_with_config(config, SimpleTrainer())
    # the value each epoch trained with: epoch 1 at 0.1, set to 0.01 after epoch 2
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["learning_rate"] for s in stats] == [0.1, 0.1, 0.01]      # as set, not float32 digits
    assert all("x_mean" in s for s in stats)      # tf.summary.scalar in the tower
    events = read_events(logdir, tf)
    tags = {tag for tag, _, _ in events}
    assert {"learning_rate", "x_mean", "inputs/x", "x_as_image"} <= tags
    lr = sorted((step, v.simple_value) for tag, step, v in events if tag == "learning_rate")
    assert lr == [(4, pytest.approx(0.1)), (8, pytest.approx(0.1)), (12, pytest.approx(0.01))]
    hist = [tf.make_ndarray(v.tensor) for tag, _, v in events if tag == "inputs/x"]
    assert len(hist) == 3 and hist[0][:, 2].sum() == 32 * 8     # the whole batch's values
    img = [v for tag, _, v in events if tag == "x_as_image"]
    assert len(img) == 3 and len(tf.make_ndarray(img[0].tensor)) == 2 + 2   # width, height, 2 PNGs
    # the epoch table lists it too
    tables = [m for m in kt_log.messages if m.startswith("Epoch 3, global step 12")]
    assert tables and "learning_rate" in tables[0] and "0.01" in tables[0]
    # by default: samples (images) per second, from the batch of 32 the DataFlow gives, and the time left
    s = stats[-1]
    assert s["throughput/samples_per_sec"] == pytest.approx(32 * s["throughput/steps_per_sec"])
    assert "throughput/samples_per_sec" in tables[0]
    assert sum(m.startswith("Estimated time left") for m in kt_log.messages) == 2   # after epochs 1, 2 of 3


def test_tower_summaries_survive_a_keras_tensorboard_callback_in_the_same_process(tf, logdir, tmp_path):  # noqa: F811
    # Keras's TensorBoard callback loads TensorBoard's tf.summary, a new module object: the tower's
    # tf.summary.scalar calls once went to it, unrouted, and the statistic was lost without a word
    import keras
    import numpy as np
    from _models import LinearData
    from kerastrainer import SimpleTrainer, TrainConfig, launch_train_with_config
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(np.zeros((8, 4)), np.zeros((8, 1)), epochs=1, verbose=0,
              callbacks=[keras.callbacks.TensorBoard(str(tmp_path / "tb"))])
    logger.set_logger_dir(logdir)
    launch_train_with_config(TrainConfig(model=_summary_model(), dataflow=LinearData(num_batches=2), max_epoch=1),
                             SimpleTrainer())
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert "x_mean" in stats[-1]


def test_default_callbacks_give_way_to_the_users_own():
    from kerastrainer import EstimatedTimeLeft, ThroughputTracker, TrainConfig
    mine = ThroughputTracker(samples_per_step=64)
    config = TrainConfig(callbacks=[mine])
    assert [type(c) for c in config.extra_callbacks].count(ThroughputTracker) == 0
    assert any(isinstance(c, EstimatedTimeLeft) for c in config.extra_callbacks)


def test_learning_rate_recorded_without_a_setter(tf, logdir):
    from _models import MLP, LinearData
    from kerastrainer import SimpleTrainer, TrainConfig, launch_train_with_config
    logger.set_logger_dir(logdir)
    launch_train_with_config(TrainConfig(model=MLP(lr=0.05), dataflow=LinearData(num_batches=2), max_epoch=2),
                             SimpleTrainer())
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["learning_rate"] for s in stats] == [0.05, 0.05]      # as given, not float32 digits


def test_tf_summary_outside_a_tower_is_tensorflows(tf, tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))
    with w.as_default(step=3):
        assert bool(tf.summary.scalar("plain", 1.0))
    w.close()
    assert [(t, s) for t, s, _ in read_events(str(tmp_path), tf)] == [("plain", 3)]
    assert not bool(tf.summary.scalar("no_writer", 1.0))
