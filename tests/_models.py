"""Small models and data shared by the training tests."""
import numpy as np
import keras
import tensorflow as tf

from kerastrainer.dataflow.base import DataFlow
from kerastrainer.models import Conv2D, FullyConnected, MaxPooling
from kerastrainer.tfutils import add_moving_summary
from kerastrainer.train import ModelDesc


class LinearData(DataFlow):
    """Separable 3-class data from a fixed linear map; batches in a fixed order."""

    def __init__(self, num_batches=20, batch=32, dim=8, seed=0):
        rng = np.random.RandomState(seed)
        self.x = rng.randn(num_batches * batch, dim).astype("float32")
        self.y = np.argmax(self.x @ rng.randn(dim, 3), 1).astype("int32")
        self.num_batches, self.batch = num_batches, batch

    def __len__(self):
        return self.num_batches

    def __iter__(self):
        for i in range(self.num_batches):
            s = slice(i * self.batch, (i + 1) * self.batch)
            yield [self.x[s], self.y[s]]


class MLP(ModelDesc):
    """Two dense layers; records accuracy; SGD or Adam."""

    def __init__(self, dim=8, opt="sgd", lr=0.1, hidden_activation=tf.nn.relu):
        self.dim, self.opt, self.lr = dim, opt, lr
        self.hidden_activation = hidden_activation

    def inputs(self):
        return [tf.TensorSpec((None, self.dim), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        h = FullyConnected("fc1", x, 16, activation=self.hidden_activation)
        logits = FullyConnected("fc2", h, 3)
        tf.nn.softmax(logits, name="prob")
        correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
        tf.subtract(1.0, correct, name="wrong")
        add_moving_summary(tf.reduce_mean(correct, name="accuracy"))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                              name="cost")

    def optimizer(self):
        if self.opt == "adam":
            return keras.optimizers.Adam(self.lr)
        return keras.optimizers.SGD(self.lr)


class SmallConvNet(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8, 8, 1), tf.float32, "image"), tf.TensorSpec((None,), tf.int32, "label")]

    def build_graph(self, image, label):
        x = Conv2D("conv0", image, 8, 3, activation=tf.nn.relu)
        x = MaxPooling("pool0", x, 2)
        logits = FullyConnected("fc", x, 10)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name="cost")

    def optimizer(self):
        return keras.optimizers.Adam(1e-2)


def weights_of(trainer):
    return {k: np.array(v.numpy()) for k, v in trainer.named_variables().items()}
