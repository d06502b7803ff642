#!/usr/bin/env python
"""IBM TFLMS tutorial 01, "MNIST Classification using TFLMS and Session", ported to kerastrainer.

Origin: IBM's "Tensorflow Large Model Support (TFLMS) Tutorial - 01" notebook (cells In [3] to
In [6]). The TF1 Session part becomes its TF2 equivalent: a ModelDesc trained by a
trainer. Edits, each forced by TF2 / Keras 3 or by testing without downloads:

1. Imports: ``from tensorflow_large_model_support import LMS`` -> ``from kerastrainer.lms import
   LMS, lms_block`` plus the trainer pieces; ``from __future__`` lines and
   ``tf.logging.set_verbosity`` dropped (TF2 has no ``tf.logging``).
2. Data: ``tensorflow.examples.tutorials.mnist.input_data`` is gone from TF2 and tests download
   nothing: ``synthetic_mnist`` makes MNIST-shaped data (784 floats in [0, 1], labels 0-9 that
   a rule on the pixels decides, so the net can learn them).
3. deepnn: TF2 has no graph in which LMS could find name scopes, so each
   ``with tf.name_scope(S):`` layer becomes an LMS block, ``lms_block(S, fn)(x)``, which runs in
   the same name scope. A convolution and its pooling form one block (``conv1`` holds
   ``pool1``): a block boundary is what LMS keeps, and the pooled tensor is 4x smaller.
4. Variables: ``tf.Variable(tf.truncated_normal(...))`` in weight_variable / bias_variable ->
   ``get_variable(name, shape, initializer=...)``: TF2 traces the model more than once and the
   variables must be made once (by the trainer's build pass).
5. Placeholders ``x``, ``y_``, ``keep_prob`` -> ``ModelDesc.inputs()``; the feed dict -> a
   DataFlow of ``[x, y_, keep_prob]``; ``tf.nn.dropout(h, keep_prob)`` -> ``rate=1 - keep_prob``
   (TF2's signature).
6. ``tf.losses.sparse_softmax_cross_entropy`` -> ``tf.nn.sparse_softmax_cross_entropy_with_logits``;
   ``tf.train.AdamOptimizer(1e-4).minimize`` -> ``ModelDesc.optimizer()`` returning Keras ``Adam(1e-4)``.
7. ``lms_model.run(tf.get_default_graph())`` -> ``callbacks=[lms_model]`` (this port's ModelDesc has no
   TF1 graph; tflms_mnist_session_strict.py keeps the graph form, which ``run`` edits).
8. The Session loop (20000 steps of 50, training accuracy every 100 steps, test accuracy in
   batches of 500) -> ``launch_train_with_config``; the FileWriter graph dump is dropped.
9. Added for the tests: ``--steps``, ``--batch``, ``--swapout_threshold``, ``--swapin_ahead``,
   ``--swapin_groupby`` (default: the tutorial's values) and ``--no-lms``; ``main`` returns
   the trainer and the LMS.
"""
import argparse
import sys

import numpy
import keras
import tensorflow as tf

# Enable Large Model Support
from kerastrainer.lms import LMS, lms_block
from kerastrainer.callbacks.base import CallbackFactory
from kerastrainer.dataflow import DataFromList
from kerastrainer.tfutils import get_variable
from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

FLAGS = None


def synthetic_mnist(n, seed=0):
    """MNIST-shaped data: images (n, 784) in [0, 1]; the label is the brightest of 10 bands."""
    rng = numpy.random.RandomState(seed)
    images = rng.rand(n, 784).astype("float32") * 0.5
    labels = rng.randint(0, 10, size=n).astype("int64")
    for i, y in enumerate(labels):
        images[i, y * 78:(y + 1) * 78] += 0.5
    return images, labels


def deepnn(x, keep_prob):
    """deepnn builds the graph for a deep net for classifying digits.

    Args:
      x: an input tensor with the dimensions (N_examples, 784), where 784 is the
      number of pixels in a standard MNIST image.

    Returns:
      y, the logits (N_examples, 10). keep_prob (an input here) is the
      probability of keeping a unit in dropout.
    """
    # Reshape to use within a convolutional neural net.
    with tf.name_scope('reshape'):
        x_image = tf.reshape(x, [-1, 28, 28, 1])

    # First convolutional layer - maps one grayscale image to 32 feature maps.
    def conv1(x_image):
        W_conv1 = weight_variable('W', [5, 5, 1, 32])
        b_conv1 = bias_variable('b', [32])
        h_conv1 = tf.nn.relu(conv2d(x_image, W_conv1) + b_conv1)
        # Pooling layer - downsamples by 2X.
        with tf.name_scope('pool1'):
            return max_pool_2x2(h_conv1)
    h_pool1 = lms_block('conv1', conv1)(x_image)

    # Second convolutional layer -- maps 32 feature maps to 64.
    def conv2(h_pool1):
        W_conv2 = weight_variable('W', [5, 5, 32, 64])
        b_conv2 = bias_variable('b', [64])
        h_conv2 = tf.nn.relu(conv2d(h_pool1, W_conv2) + b_conv2)
        # Second pooling layer.
        with tf.name_scope('pool2'):
            return max_pool_2x2(h_conv2)
    h_pool2 = lms_block('conv2', conv2)(h_pool1)

    # Fully connected layer 1 -- after 2 round of downsampling, our 28x28 image
    # is down to 7x7x64 feature maps -- maps this to 1024 features.
    def fc1(h_pool2):
        W_fc1 = weight_variable('W', [7 * 7 * 64, 1024])
        b_fc1 = bias_variable('b', [1024])
        h_pool2_flat = tf.reshape(h_pool2, [-1, 7 * 7 * 64])
        return tf.nn.relu(tf.matmul(h_pool2_flat, W_fc1) + b_fc1)
    h_fc1 = lms_block('fc1', fc1)(h_pool2)

    # Dropout - controls the complexity of the model, prevents co-adaptation of
    # features.
    def dropout(h_fc1, keep_prob):
        return tf.nn.dropout(h_fc1, rate=1.0 - keep_prob)
    h_fc1_drop = lms_block('dropout', dropout)(h_fc1, keep_prob)

    # Map the 1024 features to 10 classes, one for each digit
    def fc2(h_fc1_drop):
        W_fc2 = weight_variable('W', [1024, 10])
        b_fc2 = bias_variable('b', [10])
        return tf.matmul(h_fc1_drop, W_fc2) + b_fc2
    y_conv = lms_block('fc2', fc2)(h_fc1_drop)
    return y_conv


def conv2d(x, W):
    """conv2d returns a 2d convolution layer with full stride."""
    return tf.nn.conv2d(x, W, strides=[1, 1, 1, 1], padding='SAME')


def max_pool_2x2(x):
    """max_pool_2x2 downsamples a feature map by 2X."""
    return tf.nn.max_pool(x, ksize=[1, 2, 2, 1],
                          strides=[1, 2, 2, 1], padding='SAME')


def weight_variable(name, shape):
    """weight_variable generates a weight variable of a given shape."""
    return get_variable(name, shape, initializer=tf.keras.initializers.TruncatedNormal(stddev=0.1))


def bias_variable(name, shape):
    """bias_variable generates a bias variable of a given shape."""
    return get_variable(name, shape, initializer=tf.keras.initializers.Constant(0.1))


class Model(ModelDesc):
    def inputs(self):
        # Create the model
        return [tf.TensorSpec([None, 784], tf.float32, 'x'),
                # Define loss and optimizer
                tf.TensorSpec([None], tf.int64, 'y_'),
                tf.TensorSpec([], tf.float32, 'keep_prob')]

    def build_graph(self, x, y_, keep_prob):
        # Build the graph for the deep net
        y_conv = deepnn(x, keep_prob)

        with tf.name_scope('loss'):
            cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=y_, logits=y_conv)
            cross_entropy = tf.reduce_mean(cross_entropy)

        with tf.name_scope('accuracy'):
            correct_prediction = tf.equal(tf.argmax(y_conv, 1), y_)
            correct_prediction = tf.cast(correct_prediction, tf.float32)
        tf.identity(tf.reduce_mean(correct_prediction), name='accuracy_value')
        return tf.identity(cross_entropy, name='cost')

    def optimizer(self):
        return keras.optimizers.Adam(1e-4)


def make_lms(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2):
    lms_model = LMS(swapout_threshold=swapout_threshold, swapin_ahead=swapin_ahead,
                    swapin_groupby=swapin_groupby)
    lms_model.excl_output_by_scopes = {'loss', 'accuracy', 'dropout'}
    return lms_model


def main(argv=None):
    global FLAGS
    p = argparse.ArgumentParser()
    p.add_argument('--steps', type=int, default=20000)
    p.add_argument('--batch', type=int, default=50)
    p.add_argument('--swapout_threshold', type=int, default=50)
    p.add_argument('--swapin_ahead', type=int, default=3)
    p.add_argument('--swapin_groupby', type=int, default=2)
    p.add_argument('--no-lms', action='store_true')
    FLAGS = p.parse_args(argv)

    # Import data
    train_x, train_y = synthetic_mnist(20 * FLAGS.batch, seed=0)
    test_x, test_y = synthetic_mnist(1000, seed=1)
    batches = [[train_x[i:i + FLAGS.batch], train_y[i:i + FLAGS.batch], numpy.float32(0.5)]
               for i in range(0, len(train_x), FLAGS.batch)]

    lms_model = None if FLAGS.no_lms else make_lms(FLAGS.swapout_threshold, FLAGS.swapin_ahead,
                                                   FLAGS.swapin_groupby)

    def report(cb):
        i = cb.trainer.global_step
        if i % 100 == 0 or i == FLAGS.steps:
            acc = cb.trainer.get_predictor(['x', 'y_', 'keep_prob'], ['accuracy_value'])(
                batches[0][0], batches[0][1], numpy.float32(1.0))[0]
            print('step %d, training accuracy %g' % (i, acc))

    trainer = SimpleTrainer(steps_per_call=1)
    launch_train_with_config(TrainConfig(
        model=Model(), dataflow=DataFromList(batches, shuffle=False),
        callbacks=[CallbackFactory(trigger_step=report)] + ([lms_model] if lms_model else []),
        extra_callbacks=[], monitors=[], steps_per_epoch=FLAGS.steps, max_epoch=1), trainer)

    # compute in batches to avoid OOM on GPUs
    accuracy = trainer.get_predictor(['x', 'y_', 'keep_prob'], ['accuracy_value'])
    accuracy_l = [accuracy(test_x[i:i + 500], test_y[i:i + 500], numpy.float32(1.0))[0]
                  for i in range(0, len(test_x), 500)]
    print('test accuracy %g' % numpy.mean(accuracy_l))
    return trainer, lms_model


if __name__ == '__main__':
    main(sys.argv[1:])
