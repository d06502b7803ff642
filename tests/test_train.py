"""The core training loop: SimpleTrainer, input sources, steps per call, errors, resume."""
import json
import os
import threading

import numpy as np
import pytest
import tensorflow as tf

from _models import MLP, LinearData, SmallConvNet, weights_of
from kerastrainer.callbacks import Callback, ModelSaver, StopTraining
from kerastrainer.dataflow import DataFromGenerator, DataFromList
from kerastrainer.input_source import (DataFlowEndedError, DummyConstantInput, FeedInput, InputSourceError,
                                       QueueInput, TFDatasetInput)
from kerastrainer.train import (AutoResumeTrainConfig, SimpleTrainer, TrainConfig,
                                launch_train_with_config)
from kerastrainer.utils import logger


def quiet_config(**kw):
    kw.setdefault("extra_callbacks", [])
    kw.setdefault("monitors", [])
    return TrainConfig(**kw)


def test_loss_falls_and_accuracy_rises():
    trainer = SimpleTrainer()
    costs = []

    class Record(Callback):
        def _trigger_epoch(self):
            costs.append(self.trainer.last_step_outputs["cost"])

    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[Record()], max_epoch=6),
                             trainer)
    assert trainer.global_step == 6 * 20
    assert costs[-1] < 0.5 * costs[0]
    assert trainer.last_step_outputs["accuracy"] > 0.85
    assert trainer.last_step_outputs["_nonfinite_step"] == -1


def test_update_matches_reference_sgd_step():
    """One trainer step equals a hand-written GradientTape + SGD step on the same batch."""
    data = LinearData(num_batches=1)
    model = MLP(lr=0.5)
    trainer = SimpleTrainer(steps_per_call=1)
    launch_train_with_config(quiet_config(model=model, dataflow=data, max_epoch=0), trainer)  # build only
    before = weights_of(trainer)
    x, y = next(iter(data))
    named = trainer.named_variables()
    variables = [named[k] for k in sorted(named)]
    with tf.GradientTape() as tape:
        cost, _ = trainer.tower_func(tf.constant(x), tf.constant(y), name="ref", is_training=True)
    grads = tape.gradient(cost, variables)
    expected = {k: before[k] - 0.5 * g.numpy() for k, g in zip(sorted(named), grads)}

    trainer2 = SimpleTrainer(steps_per_call=1)
    model2 = MLP(lr=0.5)
    launch_train_with_config(quiet_config(model=model2, dataflow=data, max_epoch=0), trainer2)
    for k, v in trainer2.named_variables().items():
        v.assign(before[k])
    trainer2.input = FeedInput(data)
    trainer2.input.setup(model2.get_input_signature())
    trainer2.step_runner = trainer2._make_step_runner()
    trainer2.steps_per_epoch = 1
    trainer2.run_step_call(1)
    for k, v in weights_of(trainer2).items():
        np.testing.assert_allclose(v, expected[k], rtol=1e-5, atol=1e-6)


def test_steps_per_call_does_not_change_the_result():
    results = []
    for spc in (1, 7, "auto"):
        tf.keras.utils.set_random_seed(3)
        t = SimpleTrainer(steps_per_call=spc)
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), max_epoch=2), t)
        results.append(weights_of(t))
    for other in results[1:]:
        for k in results[0]:
            np.testing.assert_allclose(other[k], results[0][k], rtol=1e-4, atol=1e-5)


def test_callback_that_needs_every_step_sees_every_step():
    seen = []

    class EveryStep(Callback):
        def steps_to_next_trigger(self):
            return 1

        def _trigger_step(self):
            seen.append(self.global_step)

    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[EveryStep()],
                                          max_epoch=2), t)
    assert seen == list(range(1, 41))


def test_calls_never_cross_an_epoch_end():
    ends = []

    class EpochEnd(Callback):
        def _trigger_epoch(self):
            ends.append((self.epoch_num, self.global_step, self.local_step))

    t = SimpleTrainer(steps_per_call=1000)
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[EpochEnd()],
                                          steps_per_epoch=13, max_epoch=3), t)
    assert ends == [(1, 13, 13), (2, 26, 13), (3, 39, 13)]


@pytest.mark.parametrize("source", ["feed", "tfdata", "dummy"])
def test_other_input_sources_train(source):
    data = LinearData()
    if source == "feed":
        src = FeedInput(data)
    elif source == "tfdata":
        src = TFDatasetInput(tf.data.Dataset.from_tensor_slices((data.x, data.y)).batch(32))
    else:
        src = DummyConstantInput([[32, 8], [32]])
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), data=src, steps_per_epoch=20, max_epoch=3), t)
    assert t.global_step == 60
    assert np.isfinite(t.last_step_outputs["cost"])


@pytest.mark.parametrize("bad,match", [
    ([np.zeros((4, 8), "float32")], "1 components but inputs\\(\\) declares 2"),
    ([np.zeros((4, 8, 1), "float32"), np.zeros(4, "int32")], "'x'.*wrong rank 3.*trailing axis of size 1"),
    ([np.zeros((4, 7), "float32"), np.zeros(4, "int32")], "'x'.*wrong shape.*\\(4, 7\\)"),
    ([np.zeros((4, 8), "float32"), np.full(4, 0.5, "float32")], "'y'.*wrong dtype.*float32.*int32"),
])
def test_datapoint_mismatch_is_a_clear_error(bad, match):
    df = DataFromList([bad] * 3, shuffle=False)
    with pytest.raises(InputSourceError, match=match):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=df, max_epoch=1), SimpleTrainer())


def test_a_cast_that_would_change_a_value_is_an_error_naming_it():
    """int64 labels feeding an int32 input: 2**32 + 1 became 1 and trained."""
    x = np.zeros((4, 8), "float32")
    good = [x, np.array([0, 1, 0, 1], "int64")]
    bad = [x, np.array([0, 1, 2 ** 32 + 1, 0], "int64")]
    df = DataFromList([good] * 4 + [bad] + [good] * 3, shuffle=False)
    with pytest.raises(InputSourceError, match=r"datapoint 5 of its pass: input 'y'.*4294967297 at index \(2,\).*"
                                               r"does not fit int32.*would make it 1"):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=df, max_epoch=1), SimpleTrainer())

    from kerastrainer.input_source.base import check_datapoint
    specs = [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]
    kept = check_datapoint([x.astype("float64") + 0.1, np.array([-5, 7], "int64")], specs, "here")
    assert kept[0].dtype == np.float32 and kept[1].tolist() == [-5, 7]   # in range: cast as before
    with pytest.raises(InputSourceError, match="'x'.*1e\+300.*would make it inf"):
        check_datapoint([np.full((1, 8), 1e300), np.zeros(1, "int64")], specs, "here")
    with pytest.raises(InputSourceError, match="'x'.*16777217.*does not fit float32"):
        check_datapoint([np.full((1, 8), 2 ** 24 + 1, "int64"), np.zeros(1, "int64")], specs, "here")


@pytest.mark.parametrize("how", ["static", "squeezed", "py_function"])
def test_a_per_example_cost_is_refused_naming_its_shape(how):
    """tensorpack requires a scalar cost; a (batch,) cost would train on the gradient of its sum."""
    from kerastrainer.models import FullyConnected

    class PerExample(MLP):
        def build_graph(self, x, y):
            per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=FullyConnected("fc", x, 3))
            if how == "squeezed":    # rank unknown with an unknown batch
                return tf.squeeze(tf.expand_dims(per, 1))
            if how == "py_function":   # rank unknown with any batch: refused at the first step
                return tf.py_function(lambda t: t, [per], tf.float32)
            return per

    match = {"static": r"scalar cost; it returned shape \(None,\)",
             "squeezed": r"scalar cost; with a batch of 2 it returned shape \(2,\)",
             "py_function": r"scalar cost; when run, it returned 32 values"}[how]
    with pytest.raises(ValueError, match=match):
        launch_train_with_config(quiet_config(model=PerExample(), dataflow=LinearData(), max_epoch=1),
                                 SimpleTrainer(jit_compile=False))


@pytest.mark.parametrize("declared,yields", [(20, 7), (7, 20)])
def test_a_dataflow_whose_len_is_wrong_is_warned_about_once(kt_log, declared, yields):
    """steps_per_epoch comes from len(): a wrong __len__ silently changed what an epoch is."""
    class WrongLength(LinearData):
        def __len__(self):
            return declared

    df = WrongLength(num_batches=yields)
    t = SimpleTrainer(steps_per_call=1)
    launch_train_with_config(quiet_config(model=MLP(), dataflow=df, max_epoch=2), t)
    warned = [m for m in kt_log.at_level(30) if "len() is" in m]
    found = "7" if yields == 7 else "more than 7"
    assert len(warned) == 1, warned
    assert f"QueueInput (WrongLength): the DataFlow's len() is {declared} but a pass yields {found} datapoints" \
        in warned[0]


def test_a_dataflow_whose_len_is_right_is_not_warned_about(kt_log):
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(num_batches=5), max_epoch=3),
                             SimpleTrainer(steps_per_call=1))
    assert not [m for m in kt_log.messages if "len() is" in m]


def test_missing_channel_axis_names_the_fix():
    """dataset.Mnist yields 28x28; a model declaring 28x28x1 is told how to reconcile them."""
    from kerastrainer.input_source.base import check_datapoint
    specs = [tf.TensorSpec((None, 28, 28, 1), tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]
    with pytest.raises(InputSourceError, match=r"tf.expand_dims\(x, -1\).*MapDataComponent\(df, lambda x: "
                                               r"x\[\.\.\., None\], index=0\)"):
        check_datapoint([np.zeros((2, 28, 28), "float32"), np.zeros(2, "int32")], specs, "QueueInput")


def _producer_threads():
    return [t for t in threading.enumerate() if t.name.endswith("EnqueueThread") and t.is_alive()]


def test_dataflow_error_stops_training_with_its_traceback():
    def gen():
        data = LinearData()
        for i, dp in enumerate(data):
            if i == 5:
                raise ZeroDivisionError("broken datapoint 5")
            yield dp

    df = DataFromGenerator(gen)
    with pytest.raises(InputSourceError, match="(?s)raised while producing data.*ZeroDivisionError: broken"):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=df, steps_per_epoch=50, max_epoch=1),
                                 SimpleTrainer())
    assert not _producer_threads()


def test_dataflow_that_cannot_restart_is_reported():
    data = LinearData(num_batches=3)
    it = iter(data)
    one_shot = DataFromGenerator(lambda: it)
    with pytest.raises(DataFlowEndedError, match="produced nothing when restarted"):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=one_shot, steps_per_epoch=10, max_epoch=1),
                                 SimpleTrainer())
    assert not _producer_threads()


def test_keyboard_interrupt_cleans_up():
    class Interrupt(Callback):
        def _trigger_step(self):
            if self.global_step >= 3:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[Interrupt()],
                                              max_epoch=5), SimpleTrainer(steps_per_call=1))
    assert not _producer_threads()


def test_ctrl_c_mid_call_counts_the_steps_the_call_ran():
    # Ctrl-C while a multi-step call runs: the steps it ran are counted before the callbacks'
    # end of training, so a save there is labelled with the step its weights are at
    import signal

    ended = threading.Event()

    class SigintAt(LinearData):
        def __iter__(self):
            for i, dp in enumerate(super().__iter__()):
                if i == 13:   # no more data: the second call waits after 5 of its 8 steps; Ctrl-C then
                    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
                    ended.wait(30)
                    return
                yield dp

    seen = {}

    class Record(Callback):
        def _after_train(self):
            seen["python"], seen["graph"] = self.trainer.global_step, int(self.trainer.global_step_var.numpy())
            ended.set()

    t = SimpleTrainer(steps_per_call=8)
    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=SigintAt(num_batches=400), callbacks=[Record()],
                                              max_epoch=1), t)
    assert seen["graph"] > 8 and seen["python"] == seen["graph"], seen   # cut within the second call
    assert not _producer_threads()


def test_sigterm_outside_a_call_terminates_even_when_the_watcher_saw_it_first():
    # the watcher thread records the signal before the main thread's handler runs; SIGTERM
    # must still end as TrainingTerminated (exit 143), not as a Ctrl-C
    import signal
    from kerastrainer.train import TrainingTerminated
    from kerastrainer.train.stop_signals import StopSignals
    stop = StopSignals(SimpleTrainer())
    stop.signum = signal.SIGTERM     # what the watcher thread did
    with pytest.raises(TrainingTerminated) as info:
        stop._handle(signal.SIGTERM, None)
    assert info.value.code == 128 + signal.SIGTERM
    with pytest.raises(KeyboardInterrupt):
        StopSignals(SimpleTrainer())._handle(signal.SIGINT, None)


def _sigint_handler_is_pythons():
    import signal
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_lost_in_a_finalizer_still_stops_training():
    """Python runs a signal's handler at the main thread's next bytecode; inside a finalizer
    (a TF object or a shared-memory batch collected between calls) its KeyboardInterrupt is
    printed and lost. Training must still stop, through after_train, and leave no handler."""
    import signal
    import weakref
    seen = {}

    class Garbage:
        pass

    class SignalInAFinalizer(Callback):
        def _trigger_step(self):
            if self.trainer.global_step == 4 and "sent" not in seen:
                seen["sent"] = True
                g = Garbage()
                weakref.finalize(g, signal.raise_signal, signal.SIGINT)   # the handler runs in there
                del g

        def _after_train(self):
            seen["after_train_at"] = self.trainer.global_step

    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(num_batches=400),
                                              callbacks=[SignalInAFinalizer()], max_epoch=1),
                                 SimpleTrainer(steps_per_call=2))
    assert seen.get("after_train_at", 99) <= 8, seen
    assert _sigint_handler_is_pythons() and not _producer_threads()


def test_ctrl_c_during_set_up_stops_before_the_first_step_with_tf_intact():
    """A KeyboardInterrupt raised inside TensorFlow's tracing can leave a context manager half
    entered (TF then fails with "Exiting variable_creator_scope without proper nesting"): during
    set-up the first Ctrl-C is recorded, set-up finishes, and training stops before step 1,
    through after_train. The next training in the process is unharmed."""
    import signal
    seen = {}

    class SignalWhileTracing(MLP):
        def build_graph(self, x, y):
            if "sent" not in seen:
                seen["sent"] = True
                signal.raise_signal(signal.SIGINT)   # the handler runs in the middle of the trace
            return super().build_graph(x, y)

    class Record(Callback):
        def _after_train(self):
            seen["after_train_at"] = self.trainer.global_step

    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=SignalWhileTracing(), dataflow=LinearData(),
                                              callbacks=[Record()], max_epoch=1), SimpleTrainer())
    assert seen == {"sent": True, "after_train_at": 0}
    assert _sigint_handler_is_pythons() and not _producer_threads()
    t = launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), max_epoch=1), SimpleTrainer())
    assert t.global_step == len(LinearData())


def test_a_process_forked_during_training_gets_the_handlers_the_trainer_replaced():
    # DataFlow workers forked during set-up once inherited the trainer's SIGTERM handler (they
    # logged "stopping" instead of dying at clean-up) and its wakeup fd (their SIGTERM reached the
    # parent's watcher, which then ended a finished training with exit status 143)
    import signal
    from kerastrainer.train.stop_signals import StopSignals
    with StopSignals(SimpleTrainer()) as stop:
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the child: report and leave at once
            ok = (signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                  and signal.getsignal(signal.SIGINT) is signal.default_int_handler
                  and signal.set_wakeup_fd(-1) == -1)
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        assert signal.getsignal(signal.SIGTERM) == stop._handle   # the parent keeps its own
    os.close(r)
    os.close(w)
    assert _sigint_handler_is_pythons()


def test_ctrl_c_while_the_input_thread_starts_ends_as_keyboard_interrupt(monkeypatch):
    # Ctrl-C while QueueInput's Thread.start() waited for its thread: closing the input then raised
    # "cannot join thread before it is started", a RuntimeError in place of the KeyboardInterrupt
    start = threading.Thread.start

    def interrupted_start(self):
        if self.name.endswith("EnqueueThread"):
            raise KeyboardInterrupt
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), max_epoch=1), SimpleTrainer())
    assert _sigint_handler_is_pythons() and not _producer_threads()


def test_ctrl_c_lost_in_a_finalizer_after_the_last_call_is_raised_at_the_end():
    # the last chance to stop is after the loop: the stop came, its exception was lost, and
    # training ended by itself; the caller still gets the KeyboardInterrupt
    import signal
    import weakref

    class Garbage:
        pass

    class SignalInAFinalizerAtTheEnd(Callback):
        def _trigger_epoch(self):
            g = Garbage()
            weakref.finalize(g, signal.raise_signal, signal.SIGINT)
            del g

    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(),
                                              callbacks=[SignalInAFinalizerAtTheEnd()], max_epoch=1),
                                 SimpleTrainer())
    assert _sigint_handler_is_pythons() and not _producer_threads()


@pytest.mark.parametrize("where", ["watcher-start", "before_train", "watcher-stop", "after_train"])
def test_an_interrupt_during_set_up_or_clean_up_leaves_python_s_handler(monkeypatch, where):
    # a KeyboardInterrupt between installing the trainer's handler and its loop (or while the
    # watcher stopped) once left a dead trainer's handler installed: the next trainer in the
    # process then left Ctrl-C alone, and a step waiting for input could not be released
    from kerastrainer.utils.interrupt import SignalWatcher

    def interrupted(*args):
        raise KeyboardInterrupt

    if where == "watcher-start":
        monkeypatch.setattr(SignalWatcher, "__enter__", interrupted)
    if where == "watcher-stop":
        monkeypatch.setattr(SignalWatcher, "__exit__", interrupted)

    class Raises(Callback):
        def _before_train(self):
            if where == "before_train":
                raise KeyboardInterrupt

        def _after_train(self):
            if where == "after_train":
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[Raises()],
                                              max_epoch=1), SimpleTrainer(steps_per_call=2))
    assert _sigint_handler_is_pythons()
    assert not _producer_threads()


def test_a_dead_trainers_handler_is_taken_over_and_a_programs_own_is_left_with_a_warning(caplog):
    import logging
    import signal
    from kerastrainer.train.stop_signals import StopSignals, _ACTIVE

    leaked = StopSignals(SimpleTrainer())
    leaked._install()
    _ACTIVE.discard(leaked)          # its loop ended without restoring: a stale handler
    try:
        stop = StopSignals(SimpleTrainer())
        with stop:
            assert signal.getsignal(signal.SIGINT) == stop._handle
        assert _sigint_handler_is_pythons()   # not the stale one: Python's own

        def programs_own(signum, frame):
            pass
        signal.signal(signal.SIGINT, programs_own)
        logger._logger.addHandler(caplog.handler)
        with caplog.at_level(logging.WARNING, logger="kerastrainer"):
            with StopSignals(SimpleTrainer()):
                assert signal.getsignal(signal.SIGINT) is programs_own
        assert "SIGINT has the program's own handler" in caplog.text and "programs_own" in caplog.text
        assert signal.getsignal(signal.SIGINT) is programs_own
    finally:
        logger._logger.removeHandler(caplog.handler)
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.mark.parametrize("hook", ["_setup_graph", "_before_train", "_trigger_step", "_trigger_epoch", "_after_train"])
def test_an_exception_from_a_user_callback_names_the_callback_and_the_hook(kt_log, hook):
    class Boom(Callback):
        pass

    def boom(self):
        raise ZeroDivisionError("the user's own bug")

    setattr(Boom, hook, boom)
    with pytest.raises(ZeroDivisionError, match="the user's own bug") as info:   # the user's type, kept
        launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[Boom()], max_epoch=1),
                                 SimpleTrainer(steps_per_call=2))
    where = f"callback Boom (test_train.Boom) failed in {hook.lstrip('_')}"
    assert any(where in note for note in info.value.__notes__), info.value.__notes__
    assert any(where in m for m in kt_log.at_level(40)), kt_log.messages
    assert not _producer_threads()


def test_stop_training_from_callback():
    class Stop(Callback):
        def _trigger_epoch(self):
            if self.epoch_num == 2:
                raise StopTraining("enough")

    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[Stop()], max_epoch=9), t)
    assert t.epoch_num == 2 and t.global_step == 40


def test_nonfinite_cost_names_the_step():
    from kerastrainer.callbacks import NonFiniteLossError, TerminateOnNonFinite

    data = LinearData(num_batches=10)
    # batch 7, i.e. the 8th step of epoch 1. Without a hidden activation the NaN reaches the
    # logits directly: behind a relu it could vanish (oneDNN's relu maps NaN to 0).
    data.x[7 * 32 + 3, 0] = np.nan
    with pytest.raises(NonFiniteLossError, match="step 7"):
        launch_train_with_config(quiet_config(model=MLP(hidden_activation=None), dataflow=data, max_epoch=1,
                                              extra_callbacks=[TerminateOnNonFinite()]),
                                 SimpleTrainer(steps_per_call=10))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains(precision):
    t = SimpleTrainer(precision=precision)
    launch_train_with_config(quiet_config(model=MLP(opt="adam", lr=0.01), dataflow=LinearData(), max_epoch=4), t)
    assert t.last_step_outputs["accuracy"] > 0.7
    assert all(v.dtype == "float32" for v in t.trainable_variables)
    if precision == "fp16":
        import keras
        assert isinstance(t.optimizer, keras.optimizers.LossScaleOptimizer)


def test_xla_trains():
    t = SimpleTrainer(jit_compile=True)
    launch_train_with_config(quiet_config(model=SmallConvNet(), dataflow=DataFromList(
        [[np.random.rand(16, 8, 8, 1).astype("float32"), np.random.randint(0, 10, 16).astype("int32")]] * 4,
        shuffle=False), max_epoch=2), t)
    assert np.isfinite(t.last_step_outputs["cost"])


def test_checkpoint_predictor_and_export(logdir, tmp_path):
    from kerastrainer.predict import ModelExporter, OfflinePredictor, PredictConfig

    logger.set_logger_dir(logdir, "d")
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), callbacks=[ModelSaver()],
                                          max_epoch=2), t)
    x = LinearData().x[:5]
    live, = t.get_predictor(["x"], ["prob"])(x)
    pred = OfflinePredictor(PredictConfig(model=MLP(), session_init=logdir, input_names=["x"],
                                          output_names=["prob"]))
    loaded, = pred(x)
    np.testing.assert_allclose(loaded, live, rtol=1e-6)
    export_dir = str(tmp_path / "export")
    ModelExporter(PredictConfig(model=MLP(), session_init=logdir, input_names=["x"],
                                output_names=["prob"])).export_serving(export_dir)
    served = tf.saved_model.load(export_dir).signatures["serving_default"](x=tf.constant(x))
    np.testing.assert_allclose(served["prob"].numpy(), live, rtol=1e-6)


def test_predictor_errors_name_the_tensor():
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), max_epoch=0), t)
    with pytest.raises(KeyError, match="No tensor named 'nope'"):
        t.get_predictor(["x"], ["nope"])
    with pytest.raises(KeyError, match="Unknown input names"):
        t.get_predictor(["image"], ["prob"])


def test_predictor_inputs_are_cast_only_where_no_value_changes():
    """OfflinePredictor, InferenceRunner and get_predictor cast their feeds: 1.7 became the int 1
    and 2**32 + 3 the int32 3, silently."""
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), dataflow=LinearData(), max_epoch=0), t)
    pred = t.get_predictor(["x", "y"], ["wrong"])
    x = np.zeros((2, 8))                                      # float64 -> float32: fine
    expected = pred(x, np.array([1, 2], "int32"))[0]
    np.testing.assert_array_equal(pred(x, np.array([1.0, 2.0]))[0], expected)   # whole floats: fine
    np.testing.assert_array_equal(pred(x, np.array([1, 2], "int64"))[0], expected)
    with pytest.raises(ValueError, match=r"predictor input 'y': the value 1.7 at index \(0,\) is not a whole number"):
        pred(x, np.array([1.7, 2.0]))
    with pytest.raises(ValueError, match=r"predictor input 'y': the value 4294967299 .*does not fit int32.*would "
                                         r"make it 3"):
        pred(x, np.array([2 ** 32 + 3, 1]))


def test_an_inferencer_gets_the_output_of_the_op_it_names():
    """'topk:1' (the indices) was cut to 'topk' and fetched the values."""
    from kerastrainer.callbacks import InferenceRunner, Inferencer

    class TopK(MLP):
        def build_graph(self, x, y):
            cost = super().build_graph(x, y)
            tf.math.top_k(tf.nn.softmax(x), k=2, name="topk")
            return cost

    got = {}

    class Keep(Inferencer):
        def _get_fetches(self):
            return ["topk:1", "topk:0", "prob:0"]

        def _on_fetches(self, results):
            got.update(zip(["indices", "values", "prob"], results))

    launch_train_with_config(quiet_config(model=TopK(), dataflow=LinearData(), max_epoch=1,
                                          callbacks=[InferenceRunner(LinearData(num_batches=2), [Keep()])]),
                             SimpleTrainer())
    assert got["indices"].dtype == np.int32 and got["indices"].shape == (32, 2)
    assert got["values"].dtype == np.float32 and got["prob"].shape == (32, 3)


def test_config_numbers_are_whole_and_resume_says_what_it_overrides(logdir, kt_log):
    for bad in ({"steps_per_epoch": 2.5}, {"max_epoch": "3"}, {"starting_epoch": 1.5}):
        with pytest.raises((ValueError, TypeError), match="must be a whole number"):   # 2.5 steps were cut to 2
            TrainConfig(model=MLP(), dataflow=LinearData(), **bad)
    assert TrainConfig(model=MLP(), dataflow=LinearData(), steps_per_epoch=4.0, max_epoch=np.int64(2)).max_epoch == 2

    logger.set_logger_dir(logdir, "d")
    try:
        launch_train_with_config(TrainConfig(model=MLP(), dataflow=LinearData(), callbacks=[ModelSaver()],
                                             extra_callbacks=[], monitors=[], max_epoch=1), SimpleTrainer())
        kt_log.clear()
        cfg = AutoResumeTrainConfig(model=MLP(), dataflow=LinearData(), session_init={"fc1/W": np.zeros((8, 16))},
                                    starting_epoch=3, max_epoch=5, always_resume=False)
        assert cfg.resumed_from is None   # looked for at launch
        cfg.resolve_resume()               # what launch_train_with_config does first
        assert cfg.resumed_from is not None and cfg.starting_epoch == 2
    finally:
        logger.unset_logger_dir()
    warned = kt_log.warnings()
    assert "always_resume=False): kerastrainer never asks" in warned
    assert "session_init and starting_epoch given, but a checkpoint to resume was found" in warned, warned


def test_auto_resume_is_decided_at_launch_in_the_log_directory_set_then(logdir, tmp_path):
    logger.set_logger_dir(logdir, "d")
    try:
        launch_train_with_config(TrainConfig(model=MLP(), dataflow=LinearData(), callbacks=[ModelSaver()],
                                             extra_callbacks=[], monitors=[], max_epoch=1), SimpleTrainer())
    finally:
        logger.unset_logger_dir()
    # made before any log directory is set (a program that builds its config first): no scan yet
    cfg = AutoResumeTrainConfig(model=MLP(), dataflow=LinearData(), extra_callbacks=[], monitors=[], max_epoch=2)
    logger.set_logger_dir(logdir, "k")
    try:
        t = launch_train_with_config(cfg, SimpleTrainer())
    finally:
        logger.unset_logger_dir()
    assert cfg.resumed_from is not None and t.global_step == 40   # epoch 1 from the checkpoint, epoch 2 trained
    # the same config launched in an empty directory starts afresh
    logger.set_logger_dir(str(tmp_path / "empty"), "d")
    try:
        cfg2 = AutoResumeTrainConfig(model=MLP(), dataflow=LinearData(), extra_callbacks=[], monitors=[], max_epoch=1)
        t2 = launch_train_with_config(cfg2, SimpleTrainer())
    finally:
        logger.unset_logger_dir()
    assert cfg2.resumed_from is None and t2.global_step == 20


def test_auto_resume_continues_step_epoch_and_optimizer(logdir):
    logger.set_logger_dir(logdir, "d")
    t1 = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=MLP(opt="adam", lr=0.01), dataflow=LinearData(),
                                         callbacks=[ModelSaver()], max_epoch=2), t1)
    iterations = int(t1.optimizer.iterations.numpy())
    w1 = weights_of(t1)
    logger.unset_logger_dir()

    logger.set_logger_dir(logdir, "k")
    started = []

    class Start(Callback):
        def _before_train(self):
            started.append((self.epoch_num, self.global_step, int(self.trainer.optimizer.iterations.numpy()),
                            weights_of(self.trainer)))

    t2 = SimpleTrainer()
    launch_train_with_config(AutoResumeTrainConfig(model=MLP(opt="adam", lr=0.01), dataflow=LinearData(),
                                                   callbacks=[ModelSaver(), Start()], max_epoch=3), t2)
    epoch, step, its, w2 = started[0]
    assert (epoch, step, its) == (2, 40, iterations)  # before_train sees starting_epoch - 1 == 2
    for k in w1:
        np.testing.assert_array_equal(w2[k], w1[k])
    assert t2.global_step == 60 and t2.epoch_num == 3
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2, 3]


def test_config_errors():
    with pytest.raises(ValueError, match="no model"):
        launch_train_with_config(TrainConfig(dataflow=LinearData()), SimpleTrainer())
    with pytest.raises(TypeError, match="Trainer instance"):
        launch_train_with_config(TrainConfig(model=MLP(), dataflow=LinearData()), SimpleTrainer)
    with pytest.raises(TypeError, match="must be a DataFlow.*DataFromList"):
        TrainConfig(model=MLP(), dataflow=[1, 2, 3])
    with pytest.raises(ValueError, match="steps_per_epoch is unknown"):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=DataFromGenerator(LinearData().__iter__),
                                              max_epoch=1), SimpleTrainer())


def test_histograms_reach_tensorboard(logdir):
    from kerastrainer.callbacks import TFEventWriter
    from kerastrainer.tfutils import add_param_summary, add_tensor_summary

    class WithSummaries(MLP):
        def build_graph(self, x, y):
            cost = super().build_graph(x, y)
            add_param_summary((".*/W", ["histogram", "rms"]))
            add_tensor_summary(x, ["histogram", "mean"], name="input_x")
            return cost

    logger.set_logger_dir(logdir, "d")
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=WithSummaries(), dataflow=LinearData(), max_epoch=2,
                                          monitors=[TFEventWriter()]), t)
    assert "param-summary/fc1/W/rms" in t.last_step_outputs and "input_x/mean" in t.last_step_outputs
    events = [f for f in os.listdir(logdir) if f.startswith("events.out.tfevents")]
    assert events
    tags = set()
    for e in tf.compat.v1.train.summary_iterator(os.path.join(logdir, events[0])):
        for v in e.summary.value:
            tags.add(v.tag)
    assert {"param-summary/fc1/W", "param-summary/fc2/W", "input_x"} <= tags


def test_killed_dataflow_worker_stops_training_and_leaves_no_process():
    import signal

    import psutil

    from kerastrainer.dataflow import MultiProcessRunnerZMQ

    class KillWorker(Callback):
        def _trigger_step(self):
            if self.global_step >= 5 and not getattr(self, "done", False):
                self.done = True
                kids = psutil.Process().children(recursive=True)
                assert kids, "the runner has no worker processes"
                os.kill(kids[0].pid, signal.SIGKILL)

    df = MultiProcessRunnerZMQ(LinearData(), num_proc=2)
    with pytest.raises(InputSourceError, match="(?s)(SIGKILL|killed|signal)"):
        launch_train_with_config(quiet_config(model=MLP(), dataflow=df, callbacks=[KillWorker()], max_epoch=50),
                                 SimpleTrainer(steps_per_call=1))
    assert not _producer_threads()
    gone, alive = psutil.wait_procs(psutil.Process().children(recursive=True), timeout=5)
    assert not alive


def test_tfdataset_input_repeat_false():
    """repeat=False: an endless dataset is read as given; a finite one's end stops training."""
    data = LinearData()
    endless = tf.data.Dataset.from_tensor_slices((data.x, data.y)).batch(32).repeat()
    t = SimpleTrainer()
    launch_train_with_config(quiet_config(model=MLP(), data=TFDatasetInput(endless, repeat=False),
                                          steps_per_epoch=10, max_epoch=2), t)
    assert t.global_step == 20
    short = tf.data.Dataset.from_tensor_slices((data.x[:96], data.y[:96])).batch(32)  # 3 batches
    with pytest.raises(InputSourceError, match="the dataset ended while training needed more batches"):
        launch_train_with_config(quiet_config(model=MLP(), data=TFDatasetInput(short, repeat=False),
                                              steps_per_epoch=5, max_epoch=1), SimpleTrainer(steps_per_call=1))
