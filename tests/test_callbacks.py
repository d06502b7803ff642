"""Tests of the standard callbacks, driven by a small stand-in for the trainer.

``MiniTrainer`` runs the loop documented in ``kerastrainer/callbacks/base.py`` on a
real linear-regression model: TF variables, a Keras SGD optimizer updated inside a
``tf.function`` that runs k steps per call, and a ``tf.train.Checkpoint``. It has
the trainer attributes of docs/internals.md that callbacks use. test_monitors.py and
test_saver.py import it from here.
"""
import math

import numpy as np
import pytest

from kerastrainer.callbacks import (
    Callback, CallbackFactory, Callbacks, ClassificationError, EnableCallbackIf, EstimatedTimeLeft,
    HyperParamSetterWithFunc, Inferencer, InferenceRunner, Monitors, MovingAverageSummary,
    NonFiniteLossError, ObjAttrParam, PeriodicCallback, PeriodicTrigger, ProgressBar, ScalarStats,
    ScheduledHyperParamSetter, StatMonitorParamSetter, StopTraining, TerminateOnNaN,
    TerminateOnNonFinite, ThroughputTracker)
from kerastrainer.callbacks.trainer_view import TrainerView
from kerastrainer.callbacks import group as group_mod
from kerastrainer.dataflow import DataFlow

N_FEATURES = 3


def make_data(n=64, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, N_FEATURES).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32") + 0.3).astype("float32")
    return x, y


class MiniTrainer(TrainerView):
    """A minimal trainer: the documented callback loop around a real TF train function.

    Each step trains on batch ``global_step % n_batches`` of a fixed dataset. A train call
    runs ``k = min(steps_per_call, steps left in the epoch, callbacks' request)`` steps.
    ``nan_at``: a 0-based global step whose cost is made NaN (the trainer's convention for
    ``_nonfinite_step``: the number of steps done before the bad one).
    """

    def __init__(self, callbacks=(), monitors=(), steps_per_epoch=10, max_epoch=3, starting_epoch=1,
                 steps_per_call=4, lr=0.05, batch_size=8, nan_at=None, is_chief=True,
                 report_nonfinite=True, with_sync_counters=False):
        import keras
        import tensorflow as tf
        self.tf = tf
        self.steps_per_epoch = steps_per_epoch
        self.max_epoch = max_epoch
        self.starting_epoch = starting_epoch
        self.steps_per_call = steps_per_call
        self.is_chief = is_chief
        self.num_replicas = 1
        self.strategy = tf.distribute.get_strategy()
        self.epoch_num = starting_epoch - 1
        self.global_step = 0
        self.local_step = 0
        self.last_step_outputs = {}
        self.last_call_steps = 0
        self.call_sizes = []          # k of every call, for tests
        self._report_nonfinite = report_nonfinite
        self.sync_calls = 0
        if with_sync_counters:
            self.sync_counters = self._sync_counters

        x, y = make_data(64)
        self.x, self.y = x, y
        self.batch_size = batch_size
        self._xb = tf.constant(x.reshape(-1, batch_size, N_FEATURES))
        self._yb = tf.constant(y.reshape(-1, batch_size, 1))
        self.model = tf.Module()
        self.model.w = tf.Variable(tf.zeros([N_FEATURES, 1]), name="w")
        self.model.b = tf.Variable(tf.zeros([1]), name="b")
        self.trainable_variables = [self.model.w, self.model.b]
        self.optimizer = keras.optimizers.SGD(learning_rate=lr, momentum=0.9)
        self.optimizer.build(self.trainable_variables)
        self.global_step_var = tf.Variable(0, dtype=tf.int64, name="global_step")
        self.epoch_var = tf.Variable(0, dtype=tf.int64, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                              global_step=self.global_step_var, epoch=self.epoch_var)
        self.input_signature = [tf.TensorSpec([None, N_FEATURES], tf.float32, name="x"),
                                tf.TensorSpec([None, 1], tf.float32, name="y")]
        self._nan_at = -1 if nan_at is None else nan_at
        self._train_fn = tf.function(self._train_k)
        self.monitors = Monitors(list(monitors))
        self.callbacks = Callbacks(list(callbacks) + [self.monitors])

    # --- the trainer API that callbacks use --------------------------------------------------
    def _sync_counters(self):
        self.sync_calls += 1
        self.global_step_var.assign(self.global_step)
        self.epoch_var.assign(self.epoch_num if self.local_step >= self.steps_per_epoch else self.epoch_num - 1)

    def get_hyperparam_var(self, name):
        if name in ("learning_rate", "lr"):
            return self.optimizer.learning_rate
        raise KeyError(f"no hyper-parameter variable {name!r}")

    def _forward(self, x, y):
        tf = self.tf
        pred = tf.matmul(x, self.model.w) + self.model.b
        abs_err = tf.reshape(tf.abs(pred - y), [-1])
        return {"pred": pred, "cost": tf.reduce_mean(tf.square(pred - y)), "abs_error": abs_err,
                "incorrect_vector": tf.cast(abs_err > 1.0, tf.float32)}

    def get_predictor(self, input_names, output_names, is_training=False):
        assert list(input_names) == ["x", "y"], input_names
        self.predictor_requests = getattr(self, "predictor_requests", 0) + 1

        def predict(inputs):
            outs = self._forward(self.tf.constant(inputs[0]), self.tf.constant(inputs[1]))
            return [outs[n].numpy() for n in output_names]
        return predict

    # --- the train function: k steps per call -------------------------------------------------
    def _train_k(self, k, start):
        tf = self.tf
        n = tf.shape(self._xb)[0]
        total = tf.constant(0.0)
        first_bad = tf.constant(-1)
        for i in tf.range(k):
            step = start + i
            idx = step % n
            with tf.GradientTape() as tape:
                cost = self._forward(self._xb[idx], self._yb[idx])["cost"]
                cost = tf.where(step == self._nan_at, tf.constant(math.nan), cost)
            grads = tape.gradient(cost, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            first_bad = tf.where((first_bad < 0) & ~tf.math.is_finite(cost), i, first_bad)
            total += cost
        return total / tf.cast(k, tf.float32), first_bad

    def run_call(self, k):
        tf = self.tf
        cost, first_bad = self._train_fn(tf.constant(k), tf.constant(self.global_step))
        first_bad = int(first_bad)
        outs = {"cost": float(cost), "cost_x2": 2 * float(cost)}
        if self._report_nonfinite:
            outs["_nonfinite_step"] = self.global_step + first_bad if first_bad >= 0 else -1
        self.global_step += k
        self.local_step += k
        self.last_call_steps = k
        self.last_step_outputs = outs
        self.call_sizes.append(k)

    def train(self):
        cbs = self.callbacks
        cbs.setup_graph(self)
        try:
            cbs.before_train()
            for self.epoch_num in range(self.starting_epoch, self.max_epoch + 1):
                self.local_step = 0
                cbs.before_epoch()
                while self.local_step < self.steps_per_epoch:
                    k = min(self.steps_per_call, self.steps_per_epoch - self.local_step)
                    wish = cbs.steps_to_next_trigger()
                    if wish is not None:
                        k = min(k, wish)
                    self.run_call(k)
                    cbs.trigger_step()
                cbs.after_epoch()
                cbs.trigger_epoch()
        except StopTraining:
            pass
        finally:
            cbs.after_train()
        return self


class Recorder(Callback):
    """Records (hook, epoch_num, global_step) for each hook, and the learning rate."""

    _chief_only = False

    def __init__(self, name="rec", log=None):
        self.name = name
        self.log = [] if log is None else log
        self.steps_wanted = None

    def _lr(self):
        return float(self.trainer.optimizer.learning_rate.numpy())

    def _before_train(self):
        self.log.append((self.name, "before_train", self.epoch_num, self.global_step, self._lr()))

    def _before_epoch(self):
        self.log.append((self.name, "before_epoch", self.epoch_num, self.global_step, self._lr()))

    def _trigger_step(self):
        self.log.append((self.name, "trigger_step", self.epoch_num, self.global_step, self._lr()))

    def _after_epoch(self):
        self.log.append((self.name, "after_epoch", self.epoch_num, self.global_step, self._lr()))

    def _trigger(self):
        self.log.append((self.name, "trigger", self.epoch_num, self.global_step, self._lr()))

    def _after_train(self):
        self.log.append((self.name, "after_train", self.epoch_num, self.global_step, self._lr()))

    def steps_to_next_trigger(self):
        return self.steps_wanted

    def events(self, hook):
        return [(e, s) for n, h, e, s, _ in self.log if h == hook and n == self.name]


# --- Callbacks (the group) ----------------------------------------------------------------------
def test_group_runs_hooks_in_order_and_the_trainer_sees_every_call(tf):
    log = []
    a, b = Recorder("a", log), Recorder("b", log)
    tr = MiniTrainer([a, b], steps_per_epoch=10, max_epoch=2, steps_per_call=4).train()
    assert tr.call_sizes == [4, 4, 2, 4, 4, 2]
    names = [(n, h) for n, h, *_ in log]
    assert names[:2] == [("a", "before_train"), ("b", "before_train")]
    assert names[-2:] == [("a", "after_train"), ("b", "after_train")]
    assert a.events("trigger_step") == [(1, 4), (1, 8), (1, 10), (2, 14), (2, 18), (2, 20)]
    # trigger_epoch runs trigger() by default, with the epoch just finished
    assert a.events("trigger") == [(1, 10), (2, 20)]
    assert a.events("before_train") == [(0, 0)]


def test_group_steps_to_next_trigger_is_min_of_members(tf):
    a, b, c = Recorder("a"), Recorder("b"), Recorder("c")
    g = Callbacks([a, b, c])
    assert g.steps_to_next_trigger() is None
    a.steps_wanted, b.steps_wanted = 7, 3
    assert g.steps_to_next_trigger() == 3
    c.steps_wanted = 0
    with pytest.raises(ValueError, match="Recorder.steps_to_next_trigger"):
        g.steps_to_next_trigger()


def test_group_honoured_by_the_loop(tf):
    rec = Recorder()
    rec.steps_wanted = 3
    tr = MiniTrainer([rec], steps_per_epoch=10, max_epoch=1, steps_per_call=8).train()
    assert tr.call_sizes == [3, 3, 3, 1]


def test_group_rejects_non_callbacks():
    with pytest.raises(TypeError, match="item 1 .*not a Callback"):
        Callbacks([Recorder(), lambda: None])


def test_group_stop_training_lets_the_rest_of_the_hook_run(tf):
    log = []

    def stop(cb):
        if cb.epoch_num == 2:
            raise StopTraining()
    stopper = CallbackFactory(trigger_epoch=stop)
    after = Recorder("after", log)
    tr = MiniTrainer([stopper, after], steps_per_epoch=5, max_epoch=5, steps_per_call=5).train()
    # 'after' still ran its trigger for epoch 2, then training stopped
    assert after.events("trigger") == [(1, 5), (2, 10)]
    assert tr.global_step == 10
    assert after.events("after_train") == [(2, 10)]


def test_group_after_train_runs_every_member_despite_errors(tf):
    def boom(cb):
        raise OSError("disk gone")
    rec = Recorder()
    pb = ProgressBar()
    tr = MiniTrainer([CallbackFactory(after_train=boom), pb, rec], steps_per_epoch=2, max_epoch=1)
    with pytest.raises(OSError, match="disk gone"):
        tr.train()
    assert rec.events("after_train") == [(1, 2)] and pb._bar is None


def test_group_logs_slowest_callbacks(tf, kt_log, monkeypatch):
    # a fake clock: the "slow" callback advances it by 2 s per hook; no real waiting
    clock = [0.0]
    monkeypatch.setattr(group_mod.time, "perf_counter", lambda: clock[0])

    class Slow(Callback):
        def _trigger_step(self):
            clock[0] += 2.0

    tr = MiniTrainer([Recorder(), Slow()], steps_per_epoch=4, max_epoch=1, steps_per_call=2)
    tr.train()
    text = kt_log.text()
    assert "Callbacks took 4 s in this epoch" in text
    assert "Slow: 4s" in text and "Recorder" not in text.split("Slowest:")[1]
    assert tr.callbacks.epoch_times()["Slow"] == pytest.approx(4.0)


# --- MovingAverageSummary ------------------------------------------------------------------------
class OutputsLog(Callback):
    """Keeps a copy of last_step_outputs and last_call_steps after each call."""

    def __init__(self):
        self.seen = []

    def _trigger_step(self):
        self.seen.append((dict(self.trainer.last_step_outputs), self.trainer.last_call_steps))


def test_moving_average_summary_matches_per_step_ema(tf):
    outs = OutputsLog()
    mas = MovingAverageSummary(decay=0.8)
    tr = MiniTrainer([outs, mas], steps_per_epoch=10, max_epoch=2, steps_per_call=3).train()
    ema = None
    for o, k in outs.seen:
        ema = o["cost"] if ema is None else ema * 0.8 ** k + o["cost"] * (1 - 0.8 ** k)
    assert tr.monitors.get_latest("cost") == pytest.approx(ema, rel=1e-6)
    assert tr.monitors.get_latest("cost_x2") == pytest.approx(2 * ema, rel=1e-5)
    assert "_nonfinite_step" not in tr.monitors.scalar_names()
    assert len(tr.monitors.get_history("cost")) == len(outs.seen)
    # training made progress: the smoothed cost fell
    hist = [v for _, v in tr.monitors.get_history("cost")]
    assert hist[-1] < hist[0]


def test_moving_average_k_steps_equals_k_single_steps():
    class Stub(TrainerView):
        def __init__(self):
            self.monitors = Monitors([])
            self.global_step = 0
            self.epoch_num = 1

    def run(calls):
        tr = Stub()
        m = MovingAverageSummary(decay=0.9)
        m.setup_graph(tr)
        tr.monitors.setup_graph(tr)
        for value, k in calls:
            tr.last_step_outputs, tr.last_call_steps = {"cost": value}, k
            tr.global_step += k
            m.trigger_step()
        return tr.monitors.get_latest("cost")

    a = run([(5.0, 1), (1.0, 4)])
    b = run([(5.0, 1)] + [(1.0, 1)] * 4)
    assert a == pytest.approx(b)
    assert a == pytest.approx(5.0 * 0.9 ** 4 + 1.0 * (1 - 0.9 ** 4))
    with pytest.raises(ValueError, match="decay"):
        MovingAverageSummary(decay=1.0)


# --- TerminateOnNonFinite ------------------------------------------------------------------------
def test_terminate_on_nonfinite_names_the_step(tf):
    rec = Recorder()
    tr = MiniTrainer([TerminateOnNonFinite(), rec], steps_per_epoch=10, max_epoch=3, steps_per_call=4,
                     nan_at=13)
    with pytest.raises(NonFiniteLossError, match="global step 13") as ei:
        tr.train()
    assert ei.value.global_step == 13
    assert isinstance(ei.value, RuntimeError)
    assert tr.global_step == 14  # stopped after the call that contained step 13 (steps 10..13)
    assert rec.events("after_train") == [(2, 14)]


def test_terminate_on_nonfinite_without_trainer_report_checks_cost(tf):
    tr = MiniTrainer([TerminateOnNaN()], steps_per_epoch=10, max_epoch=2, steps_per_call=4,
                     nan_at=5, report_nonfinite=False)
    with pytest.raises(NonFiniteLossError, match="global steps 5-8") as ei:
        tr.train()
    assert ei.value.global_step == 5


def test_finite_training_is_not_stopped(tf):
    tr = MiniTrainer([TerminateOnNonFinite()], steps_per_epoch=5, max_epoch=2).train()
    assert tr.global_step == 10


# --- ProgressBar, ThroughputTracker, EstimatedTimeLeft -------------------------------------------
def test_progress_bar_follows_the_steps_and_closes(tf):
    pb = ProgressBar(["cost", "missing_stat"])
    seen = []

    class Check(Callback):
        def _trigger_step(self):
            seen.append((pb._bar.n, self.local_step, pb._bar.total))

    tr = MiniTrainer([pb, Check()], steps_per_epoch=10, max_epoch=2, steps_per_call=4).train()
    assert seen == [(4, 4, 10), (8, 8, 10), (10, 10, 10)] * 2
    assert pb._bar is None
    assert tr.global_step == 20


def test_progress_bar_closes_on_error(tf):
    pb = ProgressBar()
    tr = MiniTrainer([TerminateOnNonFinite(), pb], steps_per_epoch=10, max_epoch=2, nan_at=2)
    with pytest.raises(NonFiniteLossError):
        tr.train()
    assert pb._bar is None


def test_throughput_tracker_puts_speeds(tf):
    tt = ThroughputTracker(samples_per_step=8)
    tr = MiniTrainer([tt], steps_per_epoch=6, max_epoch=2, steps_per_call=3).train()
    steps = tr.monitors.get_history("throughput/steps_per_sec")
    samples = tr.monitors.get_history("throughput/samples_per_sec")
    assert [s for s, _ in steps] == [6, 12]
    assert all(v > 0 for _, v in steps)
    assert [v for _, v in samples] == pytest.approx([8 * v for _, v in steps])
    with pytest.raises(ValueError, match="samples_per_step"):
        ThroughputTracker(samples_per_step=0)


def test_estimated_time_left_logs_until_the_last_epoch(tf, kt_log):
    MiniTrainer([EstimatedTimeLeft()], steps_per_epoch=2, max_epoch=3, steps_per_call=2).train()
    assert sum("Estimated time left" in m for m in kt_log.messages) == 2


def test_humanize_seconds():
    from kerastrainer.callbacks import humanize_seconds
    assert humanize_seconds(5) == "5 seconds"
    assert humanize_seconds(3725) == "1 hour 2 minutes"
    assert humanize_seconds(90061) == "1 day 1 hour"


# --- triggers --------------------------------------------------------------------------------------
def test_periodic_trigger_every_k_steps_ends_calls_on_multiples(tf):
    rec = Recorder()
    pt = PeriodicTrigger(rec, every_k_steps=3)
    tr = MiniTrainer([pt], steps_per_epoch=10, max_epoch=2, steps_per_call=4).train()
    assert [s for _, s in rec.events("trigger")] == [3, 6, 9, 12, 15, 18]
    assert all(s % 3 == 0 or s % 10 == 0 for s in np.cumsum(tr.call_sizes))
    # inner trigger_step still runs after every call
    assert len(rec.events("trigger_step")) == len(tr.call_sizes)


def test_periodic_trigger_every_k_epochs_and_before_train(tf):
    rec = Recorder()
    MiniTrainer([PeriodicTrigger(rec, every_k_epochs=2, before_train=True)],
                steps_per_epoch=3, max_epoch=5).train()
    assert rec.events("trigger") == [(0, 0), (2, 6), (4, 12)]


def test_periodic_trigger_checks_arguments():
    with pytest.raises(ValueError, match="never trigger"):
        PeriodicTrigger(Recorder())
    with pytest.raises(ValueError, match="every_k_steps"):
        PeriodicTrigger(Recorder(), every_k_steps=0)
    with pytest.raises(TypeError, match="every_k_epochs"):
        PeriodicTrigger(Recorder(), every_k_epochs="2")
    with pytest.raises(TypeError, match="wraps a Callback"):
        PeriodicTrigger(print, every_k_steps=2)


def test_enable_callback_if(tf):
    rec = Recorder()
    cb = EnableCallbackIf(rec, lambda self: self.epoch_num % 2 == 0)
    MiniTrainer([cb], steps_per_epoch=2, max_epoch=4, steps_per_call=2).train()
    assert rec.events("trigger") == [(2, 4), (4, 8)]
    assert [e for e, _ in rec.events("before_epoch")] == [2, 4]
    assert rec.events("before_train") == [(0, 0)]  # always runs
    with pytest.raises(TypeError, match="pred must be callable"):
        EnableCallbackIf(Recorder(), 3)


def test_periodic_callback_every_k_steps(tf):
    rec = Recorder()
    tr = MiniTrainer([PeriodicCallback(rec, every_k_steps=4)], steps_per_epoch=6, max_epoch=2,
                     steps_per_call=6).train()
    assert [s for _, s in rec.events("trigger_step")] == [4, 8, 12]
    assert tr.call_sizes == [4, 2, 2, 4]


# --- hyper-parameter setters ---------------------------------------------------------------------
def epoch_lrs(rec):
    return {e: lr for n, h, e, s, lr in rec.log if h == "before_epoch"}


def test_scheduled_setter_epoch_based(tf, kt_log):
    rec = Recorder()
    setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (2, 0.01), (3, 0.001)])
    assert setter.chief_only is False
    MiniTrainer([setter, rec], steps_per_epoch=2, max_epoch=4, lr=0.5).train()
    assert epoch_lrs(rec) == pytest.approx({1: 0.1, 2: 0.1, 3: 0.01, 4: 0.001})
    assert "learning_rate: 0.1 -> 0.01 (after epoch 2)" in kt_log.text()


def test_scheduled_setter_resume_gets_the_value_of_its_starting_point(tf):
    rec = Recorder()
    setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (2, 0.01), (5, 0.001)])
    MiniTrainer([setter, rec], steps_per_epoch=2, starting_epoch=4, max_epoch=6, lr=0.5).train()
    assert epoch_lrs(rec) == pytest.approx({4: 0.01, 5: 0.01, 6: 0.001})


def test_scheduled_setter_linear_interp(tf):
    rec = Recorder()
    setter = ScheduledHyperParamSetter("lr", [(1, 1.0), (3, 0.2)], interp="linear")
    MiniTrainer([setter, rec], steps_per_epoch=1, max_epoch=5, steps_per_call=1, lr=0.01).train()
    # epoch 1 runs with the initial value: the schedule starts after epoch 1
    assert epoch_lrs(rec) == pytest.approx({1: 0.01, 2: 1.0, 3: 0.6, 4: 0.2, 5: 0.2})


def test_scheduled_setter_step_based_changes_at_exact_steps(tf):
    rec = Recorder()
    setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.1), (5, 0.01), (13, 0.001)],
                                       step_based=True)
    tr = MiniTrainer([setter, rec], steps_per_epoch=10, max_epoch=2, steps_per_call=8).train()
    ends = list(np.cumsum(tr.call_sizes))
    assert 5 in ends and 13 in ends
    lr_after = {s: lr for n, h, e, s, lr in rec.log if h == "trigger_step"}
    assert lr_after[5] == pytest.approx(0.01) and lr_after[13] == pytest.approx(0.001)
    assert ends[:3] == [5, 10, 13]
    assert [lr for n, h, e, s, lr in rec.log if h == "before_train"] == pytest.approx([0.1])


def test_scheduled_setter_step_based_interp_granularity(tf):
    rec = Recorder()
    setter = ScheduledHyperParamSetter("learning_rate", [(0, 0.0), (200, 0.2)], interp="linear",
                                       step_based=True)
    tr = MiniTrainer([setter, rec], steps_per_epoch=100, max_epoch=3, steps_per_call=50).train()
    ends = list(np.cumsum(tr.call_sizes))
    # about 100 updates over the 200-step ramp (every 2 steps), free calls after it
    assert ends[:3] == [2, 4, 6] and 200 in ends and ends[-1] == 300 and ends[-2] == 250
    lr_after = {s: lr for n, h, e, s, lr in rec.log if h == "trigger_step"}
    assert lr_after[100] == pytest.approx(0.1) and lr_after[200] == pytest.approx(0.2)


def test_scheduled_setter_checks_schedule():
    with pytest.raises(ValueError, match="non-negative integer"):
        ScheduledHyperParamSetter("lr", [(-1, 0.1)])
    with pytest.raises(ValueError, match="appears twice"):
        ScheduledHyperParamSetter("lr", [(1, 0.1), (1, 0.2)])
    with pytest.raises(ValueError, match="interp"):
        ScheduledHyperParamSetter("lr", [(1, 0.1)], interp="cubic")
    with pytest.raises(ValueError, match="not a \\(point, value\\) pair"):
        ScheduledHyperParamSetter("lr", [(1, 0.1, 3)])


def test_unknown_hyperparam_is_a_clear_error(tf):
    with pytest.raises(KeyError, match="momentum"):
        MiniTrainer([ScheduledHyperParamSetter("momentum", [(0, 0.1)])]).train()


def test_setter_with_func_and_obj_attr_param(tf):
    class Aug:
        strength = 1.0
    aug = Aug()
    rec = Recorder()
    halve = HyperParamSetterWithFunc("learning_rate", lambda e, x: x * 0.5 if e > 0 and e % 2 == 0 else x)
    grow = HyperParamSetterWithFunc(ObjAttrParam(aug, "strength"), lambda e, x: e + 1.0)
    MiniTrainer([halve, grow, rec], steps_per_epoch=1, max_epoch=5, lr=0.8).train()
    assert epoch_lrs(rec) == pytest.approx({1: 0.8, 2: 0.8, 3: 0.4, 4: 0.4, 5: 0.2})
    assert aug.strength == 6.0
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ObjAttrParam(aug, "nope")


def test_stat_monitor_param_setter(tf, kt_log):
    values = {1: 1.0, 2: 0.5, 3: 0.45, 4: 0.46, 5: 0.44, 6: 0.43, 7: 0.3}

    class PutStat(Callback):
        def _trigger_epoch(self):
            # an earlier put in the same epoch must not count: only the epoch's last value does
            self.trainer.monitors.put_scalar("val_err", 99.0)
            self.trainer.monitors.put_scalar("val_err", values[self.epoch_num])

    rec = Recorder()
    setter = StatMonitorParamSetter("learning_rate", "val_err", lambda x: x * 0.1, threshold=0.1, last_k=2)
    MiniTrainer([PutStat(), setter, rec], steps_per_epoch=1, max_epoch=7, lr=1.0).train()
    # epochs 2..4: 0.5, 0.45, 0.46 -> min of last 2 not below 0.5 - 0.1: change after epoch 4;
    # then wait 2 epochs; epochs 4..6 (0.46, 0.44, 0.43) did not improve by 0.1: change after 6
    assert epoch_lrs(rec) == pytest.approx({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0, 5: 0.1, 6: 0.1, 7: 0.01})
    assert "val_err did not decrease by 0.1" in kt_log.text()


def test_stat_monitor_param_setter_missing_stat_warns_once(tf, kt_log):
    setter = StatMonitorParamSetter("learning_rate", "nope", lambda x: x, threshold=0, last_k=1)
    MiniTrainer([setter], steps_per_epoch=1, max_epoch=3).train()
    assert sum("No statistic named 'nope'" in m for m in kt_log.messages) == 1


# --- inference -------------------------------------------------------------------------------------
class Batches(DataFlow):
    """Uneven batches of the MiniTrainer's data; counts reset_state calls."""

    def __init__(self, sizes=(20, 20, 20, 4), extra=False):
        self.x, self.y = make_data(sum(sizes), seed=1)
        self.sizes = sizes
        self.resets = 0
        self.extra = extra

    def reset_state(self):
        self.resets += 1

    def __len__(self):
        return len(self.sizes)

    def __iter__(self):
        i = 0
        for s in self.sizes:
            dp = [self.x[i:i + s], self.y[i:i + s]]
            yield dp + [np.zeros(s)] if self.extra else dp
            i += s


def _expected(tr, ds):
    pred = ds.x @ tr.model.w.numpy() + tr.model.b.numpy()
    err = np.abs(pred - ds.y).reshape(-1)
    return float(np.mean((pred - ds.y) ** 2)), float(err.mean()), float((err > 1.0).mean())


def test_inference_runner_weighted_stats(tf):
    ds = Batches()
    seen = []

    class Snap(Callback):  # the expected values with the weights of each epoch's end
        def _trigger_epoch(self):
            seen.append(_expected(self.trainer, ds))

    runner = InferenceRunner(ds, [ScalarStats(["cost", "abs_error"]), ClassificationError("incorrect_vector")])
    tr = MiniTrainer([Snap(), runner], steps_per_epoch=4, max_epoch=2).train()
    cost, mae, err = seen[-1]
    # 'cost' is a batch mean: weighting by batch size gives the dataset's mean squared error
    assert tr.monitors.get_latest("validation_cost") == pytest.approx(cost, rel=1e-5)
    assert tr.monitors.get_latest("validation_abs_error") == pytest.approx(mae, rel=1e-5)
    assert tr.monitors.get_latest("validation_error") == pytest.approx(err)
    assert len(tr.monitors.get_history("validation_error")) == 2
    assert ds.resets == 1 and tr.predictor_requests == 1


def test_inference_runner_custom_inferencer_and_prefix(tf):
    class Count(Inferencer):
        def _get_fetches(self):
            return ["pred:0"]

        def _before_inference(self):
            self.n = 0

        def _on_fetches(self, results):
            assert self.batch_size == len(results[0])
            self.n += len(results[0])

        def _after_inference(self):
            return {"n_predictions": self.n}

    tr = MiniTrainer([InferenceRunner(Batches(), [Count(), ScalarStats("cost", prefix=None)])],
                     steps_per_epoch=2, max_epoch=1).train()
    assert tr.monitors.get_latest("n_predictions") == 64
    assert "cost" in tr.monitors.scalar_names()


def test_inference_runner_bad_input(tf):
    with pytest.raises(TypeError, match="must be a DataFlow.*list"):
        InferenceRunner([1, 2, 3], ScalarStats("cost"))
    with pytest.raises(TypeError, match="is not an Inferencer"):
        InferenceRunner(Batches(), ["cost"])
    tr = MiniTrainer([InferenceRunner(Batches(extra=True), ScalarStats("cost"))], steps_per_epoch=1, max_epoch=1)
    with pytest.raises(ValueError, match="has 3 components, but the input signature has 2"):
        tr.train()


def test_classification_error_needs_a_vector():
    ce = ClassificationError()
    ce.before_inference()
    with pytest.raises(ValueError, match="incorrect_vector' must be a vector"):
        ce.on_fetches([np.float32(0.5)], 4)
