"""What running more of tensorpack 0.11's examples unchanged needed (tests/tensorpack_examples/
test_more_examples.py runs the ports): layer outputs carry ``.variables``, TF1's
``tf.summary.*`` in a tower reach TensorBoard, and a moving summary named ``cost``."""
import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kerastrainer.callbacks import Callback
from kerastrainer.compat import tfv1
from kerastrainer.models import BatchNorm, BNReLU, Conv2D, FullyConnected, MaxPooling, VariableHolder
from kerastrainer.tfutils import add_moving_summary
from kerastrainer.tfutils.layer_store import LayerStore
from kerastrainer.tfutils.tower import TowerContext
from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from kerastrainer.utils import logger

from _models import LinearData


# --- `Conv2D(...).variables.W` (mnist-visualizations) ----------------------------------------
def test_layer_outputs_carry_their_variables():
    store = LayerStore()
    with TowerContext("", is_training=True, layer_store=store):
        x = tf.zeros([2, 8, 8, 3])
        c = Conv2D("conv0", x, 4, 3)
        c_bn = Conv2D("conv1", x, 4, 3, activation=BNReLU, use_bias=False)
        f = FullyConnected("fc", c, 5, use_bias=False)
        bn = BatchNorm("bn", c)
        p = MaxPooling("pool", c, 2)
    named = store.named_variables()
    assert c.variables.W is named["conv0/W"] and c.variables.b is named["conv0/b"]
    # the layer's own variables only, as in tensorpack (not those of its BNReLU activation)
    assert c_bn.variables.all() == [named["conv1/W"]]
    assert f.variables.all() == [named["fc/W"]]
    assert bn.variables.mean is named["bn/mean/EMA"] and bn.variables.gamma is named["bn/gamma"]
    assert not hasattr(p, "variables")          # no variables, nothing attached
    with pytest.raises(AttributeError, match="no variable 'gamma'.*'W', 'b'"):
        c.variables.gamma


def test_variable_holder_is_tensorpacks():
    h = VariableHolder(W=1)
    h.b = 2
    assert (h.W, h.b, h.all()) == (1, 2, [1, 2])
    from kerastrainer import VariableHolder as star  # `from kerastrainer import *` has it
    assert star is VariableHolder


# --- tfv1.summary.* in a tower ------------------------------------------------------------------
def _tf1_png_images(imgs, max_outputs):
    with tf.Graph().as_default():
        s = tfv1.summary.image("x", tf.constant(imgs), max_outputs=max_outputs)
        with tfv1.Session() as sess:
            serialized = sess.run(s)
    summ = tfv1.Summary.FromString(serialized)
    return np.stack([tf.image.decode_png(v.image.encoded_image_string).numpy() for v in summ.value])


def test_tf1_summary_image_in_a_tower_scales_floats_as_tf1():
    rng = np.random.RandomState(0)
    imgs = np.stack([rng.randn(5, 6, 1) * 0.1,        # signed: 0 is mid-grey
                     rng.rand(5, 6, 1) * 300,          # positive: the largest is white
                     np.zeros((5, 6, 1)),
                     rng.rand(5, 6, 1) - 0.9,
                     np.full((5, 6, 1), 7.0)]).astype(np.float32)
    with TowerContext("", is_training=True, layer_store=LayerStore()) as ctx:
        with tf.name_scope("viz"):
            out = tfv1.summary.image("w", imgs, 4)     # TF1's third argument is max_outputs
    assert out.dtype == tf.string
    got = ctx.tensor_summaries["viz/w"].numpy()
    assert got.shape == (4, 5, 6, 1)
    np.testing.assert_array_equal(np.round(got * 255).astype(np.uint8), _tf1_png_images(imgs, 4))
    # uint8 images keep their values
    u8 = rng.randint(0, 256, (2, 3, 3, 3)).astype(np.uint8)
    with TowerContext("", is_training=True, layer_store=LayerStore()) as ctx:
        tfv1.summary.image("u", u8)
    np.testing.assert_array_equal(np.round(ctx.tensor_summaries["u"].numpy() * 255), u8)


def test_tf1_summary_outside_a_tower_is_tensorflows():
    with tf.Graph().as_default():
        s = tfv1.summary.scalar("a", tf.constant(1.0))
        with tfv1.Session() as sess:
            assert tfv1.Summary.FromString(sess.run(s)).value[0].simple_value == 1.0


class _TF1Summaries(ModelDesc):
    """mnist-visualizations' pattern: tfv1 summaries of a layer's weights and activations."""

    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        h = FullyConnected("fc0", x, 4, activation=tf.nn.relu)
        logits = FullyConnected("fc1", h, 3)
        with tfv1.name_scope("visualizations"):
            tfv1.summary.image("w_fc0", tf.reshape(h.variables.W, [1, 8, 4, 1]))
            tfv1.summary.histogram("act_fc0", h)
            tfv1.summary.scalar("x_mean", tf.reduce_mean(x))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_tf1_summaries_in_build_graph_reach_tensorboard(logdir):
    logger.set_logger_dir(logdir)
    config = TrainConfig(model=_TF1Summaries(), dataflow=LinearData(num_batches=3, batch=8), max_epoch=2)
    launch_train_with_config(config, SimpleTrainer())
    from tensorflow.core.util import event_pb2
    found = {}
    for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
        for rec in tf.data.TFRecordDataset(path):
            ev = event_pb2.Event.FromString(rec.numpy())
            for v in ev.summary.value:
                found.setdefault(v.tag, []).append((ev.step, v))
    assert [s for s, _ in found["visualizations/w_fc0"]] == [3, 6]     # each epoch's last step
    assert found["visualizations/w_fc0"][0][1].metadata.plugin_data.plugin_name == "images"
    assert [s for s, _ in found["visualizations/act_fc0"]] == [3, 6]
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert all("visualizations/x_mean" in s for s in stats)


# --- add_moving_summary of a cost named 'cost' (mnist-embeddings) ---------------------------------
class _CostSummary(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        logits = FullyConnected("fc", x, 3)
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        cost = tf.identity(cost, name="cost")
        add_moving_summary(tf.reduce_mean(logits, name="logit_mean"), cost)
        return cost

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


class _Outputs(Callback):
    def __init__(self):
        self.seen = []

    def _trigger_step(self):
        self.seen.append(dict(self.trainer.last_step_outputs))


def test_moving_summary_named_cost_is_the_cost_statistic():
    rec = _Outputs()
    config = TrainConfig(model=_CostSummary(), dataflow=LinearData(num_batches=4, batch=8),
                         callbacks=[rec], monitors=[], extra_callbacks=[], max_epoch=1, steps_per_epoch=4)
    launch_train_with_config(config, SimpleTrainer(steps_per_call=1))
    assert len(rec.seen) == 4
    for out in rec.seen:
        # it was mixed up with the NaN-step marker (-1) when both were called 'cost'
        assert out["cost"] == pytest.approx(out["_cost"]) and out["cost"] > 0
        assert out["_nonfinite_step"] == -1 and "logit_mean" in out
