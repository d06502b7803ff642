"""Restoring a checkpoint into a Keras model built again in the same process.

Keras numbers automatic layer names per process: the second ``Conv2D(4, 3)`` is ``conv2d_1``
where the checkpoint has ``conv2d``. The restore pairs such variables by structure (kind,
role, shape, dtype, in Keras's numbering order), optimizer slots following their variable;
another architecture is one ``CheckpointLoadError`` listing every unmatched variable, never a
warning with weights left unrestored."""
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerastrainer import KerasModel
from kerastrainer.callbacks import ModelSaver
from kerastrainer.dataflow import DataFromList
from kerastrainer.predict import OfflinePredictor, PredictConfig
from kerastrainer.tfutils import CheckpointLoadError, SmartInit, load_chkpt_vars
from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
from kerastrainer.tfutils.sessinit import get_model_loader
from kerastrainer.tfutils.checkpoint_match import match_by_structure, rename_by_structure
from kerastrainer.tfutils.checkpoint_write import checkpoint_variables
from kerastrainer.train import AutoResumeTrainConfig, ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from kerastrainer.utils import logger

RNG = np.random.RandomState(0)
X = RNG.randn(32, 6, 6, 2).astype("float32")
Y = (X.sum((1, 2, 3)) > 0).astype("int32")
QUIET = dict(extra_callbacks=[], monitors=[], verbose=0)


def convnet(filters=4, names=(None, None, None)):
    """conv -> conv (same shapes: a swap would go unnoticed by shape) -> dense."""
    return keras.Sequential([keras.Input((6, 6, 2)),
                             keras.layers.Conv2D(filters, 3, padding="same", name=names[0]),
                             keras.layers.Conv2D(filters, 3, padding="same", name=names[1]),
                             keras.layers.Flatten(), keras.layers.Dense(2, name=names[2])])


def fit(model, logdir, epochs, km=None, **kw):
    if km is None:
        km = KerasModel(model, input=(X, Y))
        km.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    logger.set_logger_dir(logdir, "k")
    try:
        km.fit(batch_size=8, epochs=epochs, shuffle=False, **QUIET, **kw)
    finally:
        logger.unset_logger_dir()
    return km


def values(model):
    return [w.numpy() for w in model.weights]


def test_same_architecture_built_again_restores_every_weight_and_the_optimizer_state(tmp_path, kt_log):
    first = convnet()
    start = first.get_weights()
    reference = convnet()
    reference.set_weights(start)
    fit(reference, str(tmp_path / "ref"), epochs=2)          # two epochs in one go
    km1 = fit(first, str(tmp_path / "a"), epochs=1, callbacks=[ModelSaver()])
    path = latest_checkpoint(str(tmp_path / "a"))
    saved = load_chkpt_vars(path)

    second = convnet()                                       # conv2d_2, conv2d_3 where the checkpoint has others
    assert [w.path for w in second.weights] != [w.path for w in first.weights]
    km = fit(second, str(tmp_path / "b"), epochs=0, session_init=SmartInit(path))
    for a, b in zip(values(first), values(second)):
        np.testing.assert_array_equal(a, b)
    # the optimizer's slots followed their variables
    assert int(km.trainer.optimizer.iterations.numpy()) == int(saved["optimizer/iteration"]) == len(X) // 8
    old_name, new_name = ({id(v): n for n, v in k.trainer.named_variables().items()} for k in (km1, km))
    slots = checkpoint_variables(km.trainer)
    for a, b in zip(first.weights, second.weights):
        for slot in ("momentums", "velocities"):
            np.testing.assert_array_equal(slots[f"optimizer/{new_name[id(b)]}/{slot}"].numpy(),
                                          saved[f"optimizer/{old_name[id(a)]}/{slot}"])
    info = [m for lv, m in kt_log.records if lv == logging.INFO and "matched by structure" in m]
    assert len(info) == 1 and "4 variable(s)" in info[0] and " <- keras_model/conv2d" in info[0], kt_log.text()
    assert not kt_log.at_level(logging.WARNING), kt_log.warnings()

    # training resumes where it stopped: one more epoch lands where two epochs in one go did
    third = convnet()
    fit(third, str(tmp_path / "c"), epochs=1, session_init=path)
    for a, b in zip(values(reference), values(third)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_another_architecture_is_one_error_listing_every_unmatched_variable(tmp_path, kt_log):
    fit(convnet(), str(tmp_path / "a"), epochs=1, callbacks=[ModelSaver()])
    path = latest_checkpoint(str(tmp_path / "a"))
    wider = convnet(filters=6)
    before = values(wider)
    km = KerasModel(wider, input=(X, Y))
    km.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    with pytest.raises(CheckpointLoadError) as e:
        fit(wider, str(tmp_path / "b"), epochs=0, km=km, session_init=path)
    msg = str(e.value)
    model_names = list(km.trainer.named_variables())
    assert len(model_names) == 6
    saved_names = [k for k in load_chkpt_vars(path) if k.startswith("keras_model/")]
    matched = "keras_model/dense/bias"   # the head's bias: [2] in both, found by name
    assert matched in model_names and matched in saved_names and matched not in msg
    for name in model_names + saved_names:
        assert name == matched or name in msg, (name, msg)
    assert "keras_model/dense/kernel (model [216, 2], checkpoint [144, 2])" in msg
    assert "variable(s) of the model are not in the checkpoint" in msg and "[3, 3, 2, 6]" in msg
    assert "variable(s) of the checkpoint are not in the model" in msg and "[3, 3, 2, 4]" in msg
    assert "ignore_mismatch=True" in msg
    for a, b in zip(before, values(wider)):   # nothing half-loaded
        np.testing.assert_array_equal(a, b)
    assert not any("keep their current values" in m for m in kt_log.messages)


def test_a_partial_load_on_purpose_loads_what_matches_with_one_warning(tmp_path, kt_log):
    first = convnet()
    fit(first, str(tmp_path / "a"), epochs=1, callbacks=[ModelSaver()])
    path = latest_checkpoint(str(tmp_path / "a"))
    # same convolutions, another head: the convolutions pair by structure, the head stays as it was
    other = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3, padding="same"),
                              keras.layers.Conv2D(4, 3, padding="same"), keras.layers.Flatten(),
                              keras.layers.Dense(3)])
    head = values(other)[4:]
    fit(other, str(tmp_path / "b"), epochs=0, session_init=SmartInit(path, ignore_mismatch=True))
    for a, b in zip(values(first)[:4], values(other)[:4]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(head, values(other)[4:]):
        np.testing.assert_array_equal(a, b)
    warned = kt_log.at_level(logging.WARNING)
    assert len(warned) == 1 and "keras_model/dense/kernel (model [144, 3], checkpoint [144, 2])" in warned[0], warned


def test_explicit_names_match_by_name_and_automatic_ones_by_structure(tmp_path):
    first = convnet(names=("stem", None, "head"))
    fit(first, str(tmp_path / "a"), epochs=1, callbacks=[ModelSaver()])
    saved = load_chkpt_vars(latest_checkpoint(str(tmp_path / "a")))
    assert {"keras_model/stem/kernel", "keras_model/head/kernel"} <= set(saved)
    second = convnet(names=("stem", None, "head"))
    fit(second, str(tmp_path / "b"), epochs=0, session_init=str(tmp_path / "a"))
    for a, b in zip(values(first), values(second)):
        np.testing.assert_array_equal(a, b)


def test_numbers_that_collide_pair_by_order_not_by_name():
    # after keras.backend.clear_session() the numbers start again: the model's conv2d_1 is its
    # second layer, the checkpoint's conv2d_1 its first; both have the same shape
    w = {n: np.full((3, 3, 4, 4), i, "float32") for i, n in enumerate(["m/conv2d_1/kernel", "m/conv2d_2/kernel"])}
    model = {"m/conv2d/kernel": tf.Variable(tf.zeros((3, 3, 4, 4))),
             "m/conv2d_1/kernel": tf.Variable(tf.zeros((3, 3, 4, 4))),
             "m/head/kernel": tf.Variable(tf.zeros((4, 2)))}
    saved = dict(w, **{"m/head/kernel": np.zeros((4, 2), "float32")})
    assert match_by_structure(model, saved) == {"m/conv2d/kernel": "m/conv2d_1/kernel",
                                                "m/conv2d_1/kernel": "m/conv2d_2/kernel"}
    # another dtype or shape is another structure: nothing paired
    saved["m/conv2d_2/kernel"] = saved["m/conv2d_2/kernel"].astype("float16")
    assert match_by_structure(model, saved) == {}


def test_slots_follow_their_variable_and_a_name_taken_by_a_pairing_is_reported():
    a, b, c = (3, 3, 1, 4), (3, 3, 4, 4), (3, 3, 1, 8)
    model = {"m/conv2d/kernel": tf.Variable(tf.zeros(a)), "m/conv2d_1/kernel": tf.Variable(tf.zeros(b))}
    saved = {"m/conv2d_5/kernel": np.ones(a, "float32"), "m/conv2d/kernel": np.ones(c, "float32"),
             "optimizer/m/conv2d_5/kernel/momentums": np.full(a, 2, "float32"),
             "optimizer/d_loss/m/conv2d_5/kernel/velocities": np.full(a, 3, "float32"),   # an objective's
             "optimizer/iteration": np.int64(7)}
    renamed, shadowed = rename_by_structure(model, saved, "test")
    assert sorted(renamed) == ["m/conv2d/kernel", "optimizer/d_loss/m/conv2d/kernel/velocities", "optimizer/iteration",
                               "optimizer/m/conv2d/kernel/momentums"]
    assert renamed["m/conv2d/kernel"].shape == a and renamed["optimizer/m/conv2d/kernel/momentums"][0, 0, 0, 0] == 2
    # the saved conv2d/kernel (another shape) matched nothing; the model's name now holds conv2d_5's value
    assert shadowed == ["m/conv2d/kernel"]


def test_resume_from_the_log_directory_in_a_notebook(tmp_path):
    """A notebook cell run twice: the model is built again, the same log directory is resumed."""
    logdir = str(tmp_path / "run")
    first = convnet()
    fit(first, logdir, epochs=1, callbacks=[ModelSaver()])
    again = convnet()
    km = fit(again, logdir, epochs=0, session_init=logdir)
    for a, b in zip(values(first), values(again)):
        np.testing.assert_array_equal(a, b)
    assert int(km.trainer.optimizer.iterations.numpy()) == len(X) // 8


class KerasInModelDesc(ModelDesc):
    """A ModelDesc whose tower calls a Keras model kept as an attribute (auto-named layers)."""

    def __init__(self):
        self.net = keras.Sequential([keras.layers.Conv2D(4, 3), keras.layers.Flatten(), keras.layers.Dense(2)])

    def inputs(self):
        return [tf.TensorSpec((None, 6, 6, 2), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        logits = self.net(x)
        tf.nn.softmax(logits, name="prob")
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def optimizer(self):
        return keras.optimizers.Adam(0.01)


def _train_desc(model, logdir, epochs, config_cls=TrainConfig, **kw):
    flow = DataFromList([[X[i:i + 8], Y[i:i + 8]] for i in range(0, len(X), 8)], shuffle=False)
    logger.set_logger_dir(logdir, "k")
    try:
        t = SimpleTrainer()
        launch_train_with_config(config_cls(model=model, dataflow=flow, callbacks=[ModelSaver()], extra_callbacks=[],
                                            monitors=[], max_epoch=epochs, **kw), t)
    finally:
        logger.unset_logger_dir()
    return t


def test_model_desc_with_a_keras_model_predicts_and_auto_resumes(tmp_path, kt_log):
    logdir = str(tmp_path / "run")
    first = KerasInModelDesc()
    _train_desc(first, logdir, 1)
    pred = OfflinePredictor(PredictConfig(model=KerasInModelDesc(), session_init=get_model_loader(logdir),
                                          input_names=["x"], output_names=["prob"]))
    np.testing.assert_allclose(pred(X[:4])[0], keras.activations.softmax(first.net(X[:4])).numpy(), rtol=1e-5)
    # auto-resume (strict) from the same directory, the model built again
    again = KerasInModelDesc()
    t = _train_desc(again, logdir, 2, config_cls=AutoResumeTrainConfig)
    assert t.global_step == 8 and int(t.optimizer.iterations.numpy()) == 8
    assert any("matched by structure" in m for m in kt_log.messages)
