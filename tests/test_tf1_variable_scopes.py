"""TF1 code names and shares variables by variable scope, TF2 code by name scope.

A tower whose code uses TF1's API (tensorpack programs) keys its layers by TF1's variable scope:
a layer called again under ``tf.name_scope`` or inside a ``tf.while_loop`` body is the same layer
(an adversarial-training program builds its attack in such a loop; it trained a second, untrained
copy of the network before). A TF2 tower keeps keying by name scope.
"""
import numpy as np
import pytest
import tensorflow as tf

from kerastrainer import (BatchData, DataFromList, FullyConnected, ModelDesc, SimpleTrainer, TrainConfig,
                          launch_train_with_config)
from kerastrainer.compat import tfv1


def _data():
    rng = np.random.RandomState(0)
    return BatchData(DataFromList([[rng.normal(size=4).astype("float32"), np.int32(i % 3)] for i in range(16)],
                                  shuffle=False), 4)


def _train(model):
    trainer = SimpleTrainer(steps_per_call=1)
    launch_train_with_config(TrainConfig(model=model, dataflow=_data(), max_epoch=1, extra_callbacks=[],
                                         monitors=[]), trainer)
    return trainer


class _TF1Attack(ModelDesc):
    """The network, then the same network under a name scope and in a while-loop body (TF1 code)."""

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        def net(v):
            with tfv1.variable_scope("net", reuse=tfv1.AUTO_REUSE):
                return FullyConnected("fc", v, 3)

        logits = net(x)
        with tf.name_scope("attack"):
            adv = net(x + 0.1)

        def body(i, acc):
            return i + 1, acc + tf.reduce_sum(net(x * 0.5))
        _, looped = tf.while_loop(lambda i, a: i < 2, body, [tf.constant(0), tf.constant(0.0)])
        # the attack's output feeds the cost: its gradient must reach the one network
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)) \
            + 0.01 * tf.reduce_mean(adv) + 0.001 * looped
        return tf.identity(cost, name="cost")

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_tf1_code_shares_a_layer_across_name_scopes_and_loop_bodies():
    trainer = _train(_TF1Attack())
    assert sorted(trainer.named_variables()) == ["net/fc/W", "net/fc/b"]
    assert len(trainer.trainable_variables) == 2


class _TF2Heads(ModelDesc):
    """Two heads told apart by name scopes only (TF2 code)."""

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        with tf.name_scope("a"):
            a = FullyConnected("fc", x, 3)
        with tf.name_scope("b"):
            b = FullyConnected("fc", x, 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=a + b))

    def optimizer(self):
        import keras
        return keras.optimizers.SGD(0.1)


def test_tf2_code_keeps_layers_apart_by_name_scope():
    trainer = _train(_TF2Heads())
    assert sorted(trainer.named_variables()) == ["a/fc/W", "a/fc/b", "b/fc/W", "b/fc/b"]


@pytest.mark.parametrize("model, expected", [(_TF1Attack, True), (_TF2Heads, False)])
def test_which_code_is_tf1_is_read_from_the_models_own_source(model, expected):
    from kerastrainer.tfutils.extensions import code_names_tf1
    assert code_names_tf1(model().build_graph) is expected


class _QuantizedScope(ModelDesc):
    """A quantization program's pattern: every weight of the scope through a custom getter."""

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        def quantize(getter, name, *args, **kwargs):
            self.seen.append(name)
            w = getter(name, *args, **kwargs)
            return w + tf.stop_gradient(tf.round(w * 4.) / 4. - w)   # straight-through: W still trains

        with tfv1.variable_scope("q", custom_getter=quantize):
            logits = FullyConnected("fc", x, 3)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_a_custom_getter_of_the_variable_scope_reaches_the_layers_weights(kt_log):
    # (what the getter computes, and training through it: tests/test_custom_getters.py)
    model = _QuantizedScope()
    model.seen = []
    _train(model)
    assert model.seen[:2] == ["q/fc/W", "q/fc/b"] and set(model.seen) == {"q/fc/W", "q/fc/b"}
    assert "custom getter" not in kt_log.warnings()
