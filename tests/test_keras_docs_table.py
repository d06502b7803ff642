"""Every row of docs/keras.md's tables of ``keras.Model.fit`` arguments and ``keras.callbacks``
holds: one test per row, observing the effect (the numbers, the files, the calls), and a test
that the tables list every argument of the installed Keras's ``fit`` and every callback class.
"""
import csv
import inspect
import os
import re

import keras
import numpy as np
import pytest

from kerastrainer.keras import KerasModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
Q = dict(extra_callbacks=[], monitors=[])


def _data(n=64, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, 6).astype("float32")
    y = np.argmax(x @ np.random.RandomState(42).randn(6, 3), 1).astype("int32")
    return x, y


def _model(seed=1, lr=0.05):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    m.compile(keras.optimizers.SGD(lr), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
    return m


def _fit(*args, model=None, **kw):
    model = model or _model()
    km = KerasModel(model)
    kw.setdefault("verbose", 0)
    return km, km.fit(*args, **Q, **kw)


def _like_keras(**kw):
    """KerasModel.fit and keras.Model.fit from the same weights on the same batches: same weights."""
    x, y = _data()
    ref = _model()
    ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, **kw)
    ours = _model()
    _fit(x, y, model=ours, batch_size=16, epochs=2, shuffle=False, **kw)
    for a, b in zip(ours.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _table(heading):
    text = open(os.path.join(ROOT, "docs", "keras.md")).read()
    part = text.split(heading, 1)[1]
    return re.findall(r"^\| `([A-Za-z_]+)`", part.split("\n\n", 2)[1], re.M)


# --- the tables name everything --------------------------------------------------------------
def test_fit_table_lists_every_fit_argument():
    args = [p for p in inspect.signature(keras.Model.fit).parameters if p != "self"]
    assert _table("### Every `fit` argument") == args


def test_callback_table_lists_every_keras_callback():
    names = sorted(n for n in dir(keras.callbacks) if isinstance(getattr(keras.callbacks, n), type))
    assert sorted(_table("### Every Keras callback")) == names


# --- fit arguments -----------------------------------------------------------------------------
def test_x_y_batch_size():
    x, y = _data()
    km, h = _fit(x, y, batch_size=10, epochs=2)
    assert km.trainer.steps_per_epoch == 7 and km.trainer.global_step == 14  # ceil(64 / 10)
    assert h.history["loss"][1] < h.history["loss"][0]


def test_epochs():
    assert len(_fit(*_data(), epochs=3)[1].history["loss"]) == 3


def test_verbose():
    with pytest.raises(ValueError, match="verbose must be 'auto', 0, 1 or 2"):
        _fit(*_data(), verbose=3)
    km, h = _fit(*_data(), verbose=2)
    assert len(h.history["loss"]) == 1


def test_callbacks_user_callback_reads_self_model():
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            seen.append((epoch, self.model.count_params(), sorted(logs)))

    m = _model()
    _fit(*_data(), model=m, epochs=2, callbacks=[Probe()])
    assert seen == [(e, m.count_params(), ["accuracy", "loss"]) for e in (0, 1)]


def test_validation_split():
    x, y = _data()
    m = _model()
    _, h = _fit(x, y, model=m, validation_split=0.25, batch_size=16)
    assert h.history["val_loss"][0] == pytest.approx(m.evaluate(x[48:], y[48:], verbose=0)[0], rel=1e-4)


def test_validation_data():
    x, y = _data()
    xv, yv = _data(32, seed=5)
    m = _model()
    _, h = _fit(x, y, model=m, validation_data=(xv, yv))
    assert h.history["val_accuracy"][0] == pytest.approx(m.evaluate(xv, yv, verbose=0)[1], abs=1e-6)


def test_shuffle():
    _like_keras()  # shuffle=False: the batches in order, as fit's
    x, y = _data()   # shuffle=True (Keras's default): fit's order under the same seed
    ref, ours = _model(), _model()
    keras.utils.set_random_seed(2)
    ref.fit(x, y, batch_size=16, epochs=2, verbose=0)
    keras.utils.set_random_seed(2)
    _fit(x, y, model=ours, batch_size=16, epochs=2)
    for a, b in zip(ours.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_class_weight():
    _like_keras(class_weight={0: 1.0, 1: 3.0, 2: 0.5})


def test_sample_weight():
    _like_keras(sample_weight=np.linspace(0.1, 2.0, 64).astype("float32"))


def test_initial_epoch():
    _, h = _fit(*_data(), epochs=3, initial_epoch=1)
    assert len(h.history["loss"]) == 2


def test_steps_per_epoch():
    import tensorflow as tf
    x, y = _data()
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    km, h = _fit(ds, steps_per_epoch=3, epochs=2)
    assert km.trainer.global_step == 6


def test_validation_steps_and_validation_batch_size():
    x, y = _data()
    xv, yv = _data(32, seed=5)
    m = _model()
    _, h = _fit(x, y, model=m, validation_data=(xv, yv), validation_steps=1, validation_batch_size=7)
    assert h.history["val_loss"][0] == pytest.approx(m.evaluate(xv[:7], yv[:7], verbose=0)[0], rel=1e-4)


def test_validation_freq():
    x, y = _data()
    _, h = _fit(x, y, epochs=4, validation_data=_data(16, 5), validation_freq=2)
    assert len(h.history["val_loss"]) == 2 and len(h.history["loss"]) == 4


# --- callbacks -----------------------------------------------------------------------------------
def test_orbax_checkpoint_refused(tmp_path):
    # OrbaxCheckpoint cannot be made without orbax-checkpoint (Keras raises ImportError): the refusal is by type
    cb = keras.callbacks.OrbaxCheckpoint.__new__(keras.callbacks.OrbaxCheckpoint)
    with pytest.raises(TypeError, match="keras.callbacks.OrbaxCheckpoint cannot run in kerastrainer's loop: .*ModelSaver"):
        _fit(*_data(), callbacks=[cb])


class _Interrupt(keras.callbacks.Callback):
    """Raises at the start of epoch ``at`` (0-based), as a crash would."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_epoch_begin(self, epoch, logs=None):
        if epoch == self.at:
            raise RuntimeError("interrupted")


def _momentum_model(seed):
    m = _model(seed)
    m.compile(keras.optimizers.SGD(0.05, momentum=0.9), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def test_backup_and_restore_resumes_model_optimizer_and_epoch(tmp_path):
    x, y = _data()
    ref = _momentum_model(1)
    ref.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0)
    backup = str(tmp_path / "backup")
    first = _momentum_model(1)
    with pytest.raises(RuntimeError, match="interrupted"):
        _fit(x, y, model=first, batch_size=16, epochs=4, shuffle=False,
             callbacks=[keras.callbacks.BackupAndRestore(backup), _Interrupt(2)])
    assert os.path.exists(os.path.join(backup, "latest.weights.h5"))   # kept after the crash
    # a new process: the model built again (other initial weights), the same command
    again = _momentum_model(7)
    _, h = _fit(x, y, model=again, batch_size=16, epochs=4, shuffle=False,
                callbacks=[keras.callbacks.BackupAndRestore(backup)])
    assert len(h.history["loss"]) == 2                   # epochs 2 and 3 only
    for a, b in zip(again.get_weights(), ref.get_weights()):   # momentum restored too: the same numbers
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not os.path.exists(backup)                    # deleted once training completed, as in Keras


def test_swap_ema_weights_validates_the_moving_average():
    x, y = _data()
    xv, yv = _data(16, 5)

    def ema_model():
        m = _model()
        m.compile(keras.optimizers.SGD(0.05, use_ema=True, ema_momentum=0.5),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return m
    ref = ema_model()
    hr = ref.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, validation_data=(xv, yv),
                 callbacks=[keras.callbacks.SwapEMAWeights()])
    ours = ema_model()
    _, h = _fit(x, y, model=ours, batch_size=16, epochs=2, shuffle=False, validation_data=(xv, yv),
                callbacks=[keras.callbacks.SwapEMAWeights()])
    assert h.history["val_loss"] == pytest.approx(hr.history["val_loss"], rel=1e-5)
    # and the trained weights are the moving averages, as after keras.Model.fit with use_ema=True
    for a, b in zip(ours.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_csv_logger(tmp_path):
    _fit(*_data(), epochs=2, callbacks=[keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))])
    rows = list(csv.DictReader(open(tmp_path / "log.csv")))
    assert [r["epoch"] for r in rows] == ["0", "1"] and float(rows[1]["loss"]) > 0


def test_callback_batch_hooks():
    calls = []

    class Steps(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            calls.append(batch)

    x, y = _data()
    _fit(x, y, batch_size=16, epochs=1, callbacks=[Steps()])
    assert calls == [0, 1, 2, 3]


def test_callback_list():
    ends = []
    cbl = keras.callbacks.CallbackList([keras.callbacks.LambdaCallback(on_epoch_end=lambda e, l: ends.append(e))])
    _fit(*_data(), epochs=2, callbacks=[cbl])
    assert ends == [0, 1]


def test_early_stopping():
    _, h = _fit(*_data(), epochs=6, callbacks=[keras.callbacks.EarlyStopping("loss", min_delta=10.0, patience=1)])
    assert len(h.history["loss"]) == 2


def test_history():
    extra = keras.callbacks.History()
    _, h = _fit(*_data(), epochs=2, callbacks=[extra])
    assert extra.epoch == [0, 1] and h.history["loss"] == pytest.approx(extra.history["loss"])


def test_lambda_callback():
    begun = []
    _fit(*_data(), epochs=3, callbacks=[keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, l: begun.append(e))])
    assert begun == [0, 1, 2]


def test_learning_rate_scheduler():
    sched = keras.callbacks.LearningRateScheduler(lambda e, lr: 0.1 / (e + 1))
    _, h = _fit(*_data(), epochs=3, callbacks=[sched])
    assert h.history["learning_rate"] == pytest.approx([0.1, 0.05, 0.1 / 3], rel=1e-6)


def test_model_checkpoint(tmp_path):
    m = _model()
    _fit(*_data(), model=m, epochs=2, callbacks=[keras.callbacks.ModelCheckpoint(str(tmp_path / "m-{epoch}.keras"))])
    loaded = keras.models.load_model(tmp_path / "m-2.keras")
    for a, b in zip(loaded.get_weights(), m.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_progbar_logger(capsys):
    _fit(*_data(), epochs=2, callbacks=[keras.callbacks.ProgbarLogger()])
    out = capsys.readouterr().out
    assert "Epoch 1/2" in out and "Epoch 2/2" in out and "loss:" in out


def test_reduce_lr_on_plateau():
    cb = keras.callbacks.ReduceLROnPlateau("loss", factor=0.5, patience=0, min_delta=10.0)
    _, h = _fit(*_data(), epochs=3, callbacks=[cb])
    # as under keras.Model.fit: epoch 0 improves on inf, epoch 1 does not, epoch 2 trains at half
    assert h.history["learning_rate"] == pytest.approx([0.05, 0.05, 0.025], rel=1e-6)


def test_remote_monitor(monkeypatch):
    import requests
    posts = []
    monkeypatch.setattr(requests, "post", lambda url, *a, **kw: posts.append((url, a, kw)))
    _fit(*_data(), epochs=2, callbacks=[keras.callbacks.RemoteMonitor(root="http://127.0.0.1:9")])
    assert len(posts) == 2 and posts[0][0] == "http://127.0.0.1:9/publish/epoch/end/"


def test_tensorboard(tmp_path):
    _fit(*_data(), epochs=2, validation_data=_data(16, 5), callbacks=[keras.callbacks.TensorBoard(str(tmp_path))])
    assert list((tmp_path / "train").glob("events.out.tfevents.*"))
    assert list((tmp_path / "validation").glob("events.out.tfevents.*"))


def test_terminate_on_nan():
    x, y = _data()
    w = np.full(len(y), np.nan, np.float32)  # a NaN loss from the first step
    km, h = _fit(x, y, sample_weight=w, epochs=3, batch_size=16, callbacks=[keras.callbacks.TerminateOnNaN()])
    assert km.trainer.epoch_num == 1 and km.trainer.global_step <= 4


# --- the hooks around evaluate / predict -----------------------------------------------------------
def test_on_test_begin_and_end_around_fit_validation_and_evaluate_refuses_callbacks():
    called = []
    cb = keras.callbacks.LambdaCallback(on_test_begin=lambda logs: called.append("begin"),
                                        on_test_end=lambda logs: called.append(("end", sorted(logs))),
                                        on_epoch_end=lambda epoch, logs: called.append("epoch_end"))
    km, _ = _fit(*_data(), validation_data=_data(16, 5), epochs=2, callbacks=[cb])
    assert called == ["begin", ("end", ["accuracy", "loss"]), "epoch_end"] * 2   # Keras's order
    with pytest.raises(NotImplementedError, match="evaluate\\(callbacks=...\\) is not supported"):
        km.evaluate(*_data(), callbacks=[cb])


def test_predict_runs_on_predict_hooks():
    called = []
    cb = keras.callbacks.LambdaCallback(on_predict_end=lambda logs: called.append("end"))
    km, _ = _fit(*_data())
    out = km.predict(_data()[0], batch_size=16, callbacks=[cb])
    assert out.shape == (64, 3) and called == ["end"]
