#!/usr/bin/env python
"""IBM TFLMS tutorial 01, "MNIST Classification using TFLMS and Session", ported strictly.

Origin: IBM's "Tensorflow Large Model Support (TFLMS) Tutorial - 01" notebook (cells In [3] to
In [6]). The TF1 program is kept: placeholders, the tutorial's deepnn, Adam's
``minimize``, ``LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2).run(graph)``, a
``Session`` and its loop. (tests/seed_programs/tflms_mnist_session.py is the other port,
rewritten as a ModelDesc.) Edits, each forced by TF2 or by testing without downloads:

1. Imports: ``import tensorflow as tf`` -> ``import tensorflow.compat.v1 as tf``;
   ``from tensorflow_large_model_support import LMS`` -> ``from kerastrainer.lms import LMS``;
   the ``from __future__`` lines dropped (Python 3).
2. Graph mode: the graph-building and Session cells run inside ``with tf.Graph().as_default():``
   (in ``main``), so that tests can import this module into an eager process.
   (``tflms_session_tutorial_v1.py`` is the tutorial as written, after ``tf.disable_v2_behavior()``.)
   The cells' code is otherwise unchanged, re-indented.
3. Data: ``tensorflow.examples.tutorials.mnist.input_data`` is gone from TF2 and tests download
   nothing: ``input_data.read_data_sets(".")`` -> ``SyntheticMnist()``, MNIST-shaped data (784
   floats in [0, 1], a label 0-9 that a rule on the pixels decides) with the same
   ``train.next_batch(50)`` / ``test.next_batch(500, shuffle=False)``.
4. Added for the tests: ``--steps`` (default the tutorial's 20000) and ``--no-lms``; ``main``
   returns the LMS, the test accuracy and the graph. The tutorial's ``train_step.run`` sits
   inside ``if i % 100 == 0:`` (its indentation): kept, so the net trains at steps 0, 100, ...
"""
import argparse
import sys
import tempfile

# Enable Large Model Support
from kerastrainer.lms import LMS

import tensorflow.compat.v1 as tf
import numpy

tf.logging.set_verbosity(tf.logging.INFO)
FLAGS = None


class _Split:
    """One split of SyntheticMnist: ``next_batch(n, shuffle=True)`` -> (images (n, 784), labels (n,))."""

    def __init__(self, n, seed):
        rng = numpy.random.RandomState(seed)
        self.images = rng.rand(n, 784).astype("float32") * 0.5
        self.labels = rng.randint(0, 10, size=n).astype("int64")
        for i, y in enumerate(self.labels):   # the label is the brightest of 10 bands of pixels
            self.images[i, y * 78:(y + 1) * 78] += 0.5
        self._rng, self._pos = rng, 0

    def next_batch(self, n, shuffle=True):
        if self._pos + n > len(self.labels):
            self._pos = 0
            if shuffle:
                order = self._rng.permutation(len(self.labels))
                self.images, self.labels = self.images[order], self.labels[order]
        s = slice(self._pos, self._pos + n)
        self._pos += n
        return self.images[s], self.labels[s]


class SyntheticMnist:
    """Stands in for ``input_data.read_data_sets``: ``train`` (2000 images) and ``test`` (10000)."""

    def __init__(self, seed=0):
        self.train = _Split(2000, seed)
        self.test = _Split(10000, seed + 1)


def deepnn(x):
  """deepnn builds the graph for a deep net for classifying digits.

  Args:
    x: an input tensor with the dimensions (N_examples, 784), where 784 is the
    number of pixels in a standard MNIST image.

  Returns:
    A tuple (y, keep_prob). y is a tensor of shape (N_examples, 10), with values
    equal to the logits of classifying the digit into one of 10 classes (the
    digits 0-9). keep_prob is a scalar placeholder for the probability of
    dropout.
  """
  # Reshape to use within a convolutional neural net.
  # Last dimension is for "features" - there is only one here, since images are
  # grayscale -- it would be 3 for an RGB image, 4 for RGBA, etc.
  with tf.name_scope('reshape'):
    x_image = tf.reshape(x, [-1, 28, 28, 1])

  # First convolutional layer - maps one grayscale image to 32 feature maps.
  with tf.name_scope('conv1'):
    W_conv1 = weight_variable([5, 5, 1, 32])
    b_conv1 = bias_variable([32])
    h_conv1 = tf.nn.relu(conv2d(x_image, W_conv1) + b_conv1)

  # Pooling layer - downsamples by 2X.
  with tf.name_scope('pool1'):
    h_pool1 = max_pool_2x2(h_conv1)

  # Second convolutional layer -- maps 32 feature maps to 64.
  with tf.name_scope('conv2'):
    W_conv2 = weight_variable([5, 5, 32, 64])
    b_conv2 = bias_variable([64])
    h_conv2 = tf.nn.relu(conv2d(h_pool1, W_conv2) + b_conv2)

  # Second pooling layer.
  with tf.name_scope('pool2'):
    h_pool2 = max_pool_2x2(h_conv2)

  # Fully connected layer 1 -- after 2 round of downsampling, our 28x28 image
  # is down to 7x7x64 feature maps -- maps this to 1024 features.
  with tf.name_scope('fc1'):
    W_fc1 = weight_variable([7 * 7 * 64, 1024])
    b_fc1 = bias_variable([1024])

    h_pool2_flat = tf.reshape(h_pool2, [-1, 7 * 7 * 64])
    h_fc1 = tf.nn.relu(tf.matmul(h_pool2_flat, W_fc1) + b_fc1)

  # Dropout - controls the complexity of the model, prevents co-adaptation of
  # features.
  with tf.name_scope('dropout'):
    keep_prob = tf.placeholder(tf.float32)
    h_fc1_drop = tf.nn.dropout(h_fc1, keep_prob)

  # Map the 1024 features to 10 classes, one for each digit
  with tf.name_scope('fc2'):
    W_fc2 = weight_variable([1024, 10])
    b_fc2 = bias_variable([10])

    y_conv = tf.matmul(h_fc1_drop, W_fc2) + b_fc2
  return y_conv, keep_prob


def conv2d(x, W):
  """conv2d returns a 2d convolution layer with full stride."""
  return tf.nn.conv2d(x, W, strides=[1, 1, 1, 1], padding='SAME')


def max_pool_2x2(x):
  """max_pool_2x2 downsamples a feature map by 2X."""
  return tf.nn.max_pool(x, ksize=[1, 2, 2, 1],
                        strides=[1, 2, 2, 1], padding='SAME')


def weight_variable(shape):
  """weight_variable generates a weight variable of a given shape."""
  initial = tf.truncated_normal(shape, stddev=0.1)
  return tf.Variable(initial)


def bias_variable(shape):
  """bias_variable generates a bias variable of a given shape."""
  initial = tf.constant(0.1, shape=shape)
  return tf.Variable(initial)


def main(argv=None):
  global FLAGS
  parser = argparse.ArgumentParser()
  parser.add_argument('--steps', type=int, default=20000)
  parser.add_argument('--no-lms', dest='lms', action='store_false')
  FLAGS = parser.parse_args(argv)

  # Import data
  mnist = SyntheticMnist()

  lms_model = None
  with tf.Graph().as_default():
    # Create the model
    x = tf.placeholder(tf.float32, [None, 784])

    # Define loss and optimizer
    y_ = tf.placeholder(tf.int64, [None])

    # Build the graph for the deep net
    y_conv, keep_prob = deepnn(x)

    with tf.name_scope('loss'):
        cross_entropy = tf.losses.sparse_softmax_cross_entropy(
            labels=y_, logits=y_conv)
        cross_entropy = tf.reduce_mean(cross_entropy)

    with tf.name_scope('adam_optimizer'):
        train_step = tf.train.AdamOptimizer(1e-4).minimize(cross_entropy)

    with tf.name_scope('accuracy'):
        correct_prediction = tf.equal(tf.argmax(y_conv, 1), y_)
        correct_prediction = tf.cast(correct_prediction, tf.float32)
    accuracy = tf.reduce_mean(correct_prediction)

    if FLAGS.lms:
      lms_model = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
      lms_model.excl_output_by_scopes = {'loss', 'accuracy', 'dropout'}
      lms_model.run(tf.get_default_graph())

    graph_location = tempfile.mkdtemp()
    print('Saving graph to: %s' % graph_location)
    train_writer = tf.summary.FileWriter(graph_location)
    train_writer.add_graph(tf.get_default_graph())

    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for i in range(FLAGS.steps):
            batch = mnist.train.next_batch(50)
            if i % 100 == 0:
                train_accuracy = accuracy.eval(feed_dict={
                    x: batch[0], y_: batch[1], keep_prob: 1.0})
                print('step %d, training accuracy %g' % (i, train_accuracy))
                train_step.run(feed_dict={x: batch[0], y_: batch[1], keep_prob: 0.5})

        # compute in batches to avoid OOM on GPUs
        accuracy_l = []
        for _ in range(20):
            batch = mnist.test.next_batch(500, shuffle=False)
            accuracy_l.append(accuracy.eval(feed_dict={x: batch[0],
                                                     y_: batch[1],
                                                     keep_prob: 1.0}))
    print('test accuracy %g' % numpy.mean(accuracy_l))
    return lms_model, float(numpy.mean(accuracy_l)), tf.get_default_graph()


if __name__ == '__main__':
  main(sys.argv[1:])
