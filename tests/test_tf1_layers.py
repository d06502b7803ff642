"""TF1 layer code in a tower function: ``tfv1.layers.*`` (gone with Keras 3) and Keras layers made anew
in every call of ``build_graph`` (TF's migration guide's way), trained, replicated and predicted."""
import os
import subprocess
import sys

import numpy as np
import pytest
import keras
import tensorflow as tf

import kerastrainer
from kerastrainer import (BatchData, DataFromList, ModelDesc, OfflinePredictor, PredictConfig, SimpleTrainer,
                          SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config, tfv1)
from kerastrainer.compat import tf_layers
from kerastrainer.tfutils.variable_replay import normalized_variable_name

from _devices import cpus


def _data(n=32, dim=6, classes=3, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, dim).astype("float32")
    y = (np.argmax(x[:, :classes], axis=1)).astype("int32")
    return x, y


def _dataflow(x, y, batch):
    return BatchData(DataFromList([[a, b] for a, b in zip(x, y)], shuffle=False), batch)


def _train(model, x, y, batch, trainer, epochs=2):
    launch_train_with_config(TrainConfig(model=model, dataflow=_dataflow(x, y, batch), max_epoch=epochs,
                                         callbacks=[], monitors=[]), trainer)
    return {n: v.numpy() for n, v in model.get_model_variables().named_variables().items()}


class _Base(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 6), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def optimizer(self):
        return keras.optimizers.SGD(0.1)

    def _cost(self, logits, y):
        tf.identity(logits, name="logits")
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")


def test_tfv1_layers_is_kerastrainers_when_tfs_own_cannot_load():
    assert tfv1.layers is tf_layers
    assert kerastrainer.tfv1.layers.conv2d is tf_layers.conv2d
    # a fresh program: `import tensorflow.compat.v1 as tf` after kerastrainer's star import
    prog = ("from kerastrainer import *\nimport tensorflow.compat.v1 as tf\n"
            "from kerastrainer.compat import tf_layers\nassert tf.layers is tf_layers\n"
            "print(tuple(tf.layers.dense(tf.ones([2, 3]), 4, name='fc').shape))\n")
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("(2, 4)")


class TFLayersModel(_Base):
    def build_graph(self, x, y):
        h = tfv1.layers.dense(x, 8, activation=tf.nn.relu, name="fc0")
        h = tfv1.layers.dense(h, 8)                                  # automatic name: dense
        h = tfv1.layers.dense(h, 8, activation=tf.nn.relu)           # dense_1
        h = tfv1.layers.batch_normalization(h, training=self.training, name="bn")
        h = tfv1.layers.dropout(h, rate=0.5, training=False)         # identity, as in TF1
        img = tf.reshape(h, [-1, 2, 2, 2])
        img = tfv1.layers.conv2d(img, 4, 2, padding="same", name="conv0")
        img = tfv1.layers.max_pooling2d(img, 2, 2)
        return self._cost(tfv1.layers.dense(tfv1.layers.flatten(img), 3, name="fc1"), y)


def test_tf_layers_names_and_training_replicated():
    x, y = _data()
    values = _train(TFLayersModel(), x, y, 16, SyncMultiGPUTrainerReplicated(cpus(2)))
    names = {n for n in values if not n.startswith(("optimizer/", "global_step", "epoch"))}
    assert names == {"fc0/kernel", "fc0/bias", "dense/kernel", "dense/bias", "dense_1/kernel", "dense_1/bias",
                     "bn/gamma", "bn/beta", "bn/moving_mean", "bn/moving_variance",
                     "conv0/kernel", "conv0/bias", "fc1/kernel", "fc1/bias"}
    # training=self.training: the moving statistics moved during training (Keras 3's rule, no UPDATE_OPS)
    assert not np.allclose(values["bn/moving_mean"], 0.0)


@pytest.mark.parametrize("reuse", [None, True])
def test_tf_layers_a_name_used_twice_shares_the_layer(reuse):
    class Twice(_Base):
        def build_graph(self, x, y):
            h = tfv1.layers.dense(x, 6, name="fc")
            with tfv1.variable_scope("", reuse=tfv1.AUTO_REUSE):
                h = tfv1.layers.dense(h, 6, name="fc", reuse=reuse)
            return self._cost(tfv1.layers.dense(h, 3, name="out"), y)

    x, y = _data()
    values = _train(Twice(), x, y, 16, SimpleTrainer(), epochs=1)
    assert {n for n in values if n.startswith("fc")} == {"fc/kernel", "fc/bias"}   # one layer, shared


def test_tf_layers_dropout_follows_training():
    x = tf.ones([4, 100])
    assert np.array_equal(tfv1.layers.dropout(x, rate=0.5, training=False).numpy(), x.numpy())
    dropped = tfv1.layers.dropout(x, rate=0.5, training=True).numpy()
    assert 0 < (dropped == 0).mean() < 1 and set(np.unique(dropped)) <= {0.0, 2.0}
    assert np.array_equal(tfv1.layers.dropout(x, rate=0.5, training=tf.constant(False)).numpy(), x.numpy())


def test_tf_layers_unsupported_batchnorm_option_is_refused():
    with pytest.raises(ValueError, match="renorm=True.*no such option"):
        tfv1.layers.batch_normalization(tf.ones([2, 3]), renorm=True)


# --- Keras layers made in every call ----------------------------------------------------------------
class FreshKerasLayers(_Base):
    def build_graph(self, x, y):
        h = keras.layers.Dense(8, activation="relu", name="fc0")(x)
        h = keras.layers.Dense(8, activation="relu")(h)              # an automatic, per-process name
        return self._cost(keras.layers.Dense(3, name="fc1")(h), y)


def test_fresh_keras_layers_share_one_set_of_variables_and_replicas_match_one_device():
    x, y = _data()
    keras.utils.set_random_seed(1)
    one = _train(FreshKerasLayers(), x, y, 32, SimpleTrainer())       # each replica below takes a batch of 16
    keras.utils.set_random_seed(1)
    two = _train(FreshKerasLayers(), x, y, 16, SyncMultiGPUTrainerReplicated(cpus(2)))
    def model_vars(values):   # by name without Keras's per-process numbers (dense_3 in one run, dense_5 in the next)
        return {normalized_variable_name(n): v for n, v in values.items()
                if not n.startswith(("optimizer/", "global_step", "epoch"))}
    one, two = model_vars(one), model_vars(two)
    assert set(one) == set(two) == {"fc0/kernel", "fc0/bias", "dense/kernel", "dense/bias", "fc1/kernel", "fc1/bias"}
    # one variable per layer in every trace and replica: 2 replicas on halves of each batch train
    # exactly as 1 replica on the whole batch
    for name in one:
        np.testing.assert_allclose(two[name], one[name], atol=1e-5, err_msg=name)


def test_fresh_keras_layers_predictor_uses_the_trained_variables():
    class Linear(_Base):
        def build_graph(self, x, y):
            return self._cost(keras.layers.Dense(3, name="fc1")(x), y)

    x, y = _data()
    model = Linear()
    values = _train(model, x, y, 16, SimpleTrainer())
    pred = OfflinePredictor(PredictConfig(model=model, input_names=["x"], output_names=["logits"]))
    logits, = pred(x)
    np.testing.assert_allclose(logits, x @ values["fc1/kernel"] + values["fc1/bias"], rtol=1e-5, atol=1e-5)


def test_a_layer_made_only_in_a_later_call_is_a_clear_error():
    class OnlyInInference(_Base):
        def build_graph(self, x, y):
            logits = keras.layers.Dense(3, name="fc1")(x)
            if not self.training:
                logits = keras.layers.Dense(3, name="extra")(logits)
            return self._cost(logits, y)

    x, y = _data()
    model = OnlyInInference()
    _train(model, x, y, 16, SimpleTrainer(), epochs=1)
    with pytest.raises(ValueError, match=r"created the variable 'extra/kernel'.*first call created no such"):
        OfflinePredictor(PredictConfig(model=model, input_names=["x"], output_names=["logits"]))(x)


def test_normalized_variable_name():
    assert normalized_variable_name("tower1/dense_7/kernel:0") == "dense/kernel"
    assert normalized_variable_name("while/tower0/block_2/conv2d_13/bias") == "block/conv2d/bias"
    assert normalized_variable_name("fc1/kernel") == "fc1/kernel"


def test_tf_layers_batchnorm_fused_is_warned_about(monkeypatch):
    logged = []
    monkeypatch.setattr(tf_layers.logger, "warning", lambda msg, *args: logged.append(msg % args))
    tfv1.layers.batch_normalization(tf.ones([2, 3]), fused=True, name="bn_fused")
    assert any("batch_normalization(fused=True) is ignored" in m for m in logged), logged
