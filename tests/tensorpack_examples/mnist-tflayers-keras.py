#!/usr/bin/env python
# -*- coding: utf-8 -*-
# File: mnist-tflayers.py
# Ported from tensorpack 0.11 examples/basics/mnist-tflayers.py (tensorpack/tensorpack on GitHub),
# the way TensorFlow's migration guide moves tf.layers code: each `tf.layers.x(inputs, ...)` call
# becomes `tf.keras.layers.X(...)(inputs)`, a new Keras layer in every call of build_graph.
# Edits: the import change `tensorpack` -> `kerastrainer` (4 lines); the 10 tf.layers calls as above
# (argscope's padding/activation written into each Conv2D); `enable_argscope_for_module(tf.layers)`
# and the argscope removed (nothing of tf.layers is used). The layers keep their names, so the
# regexes `fc.*/kernel` and `.*/kernel` are unchanged.

from kerastrainer import tfv1 as tf
from kerastrainer import *
from kerastrainer.dataflow import dataset
from kerastrainer.tfutils import summary

"""
MNIST ConvNet example using tf.layers
Mostly the same as 'mnist-convnet.py',
the only differences are:
    1. use tf.layers
    2. use tf.layers variable names to summarize weights
"""

IMAGE_SIZE = 28


class Model(ModelDesc):
    def inputs(self):
        """
        Define all the inputs (with type, shape, name) that the graph will need.
        """
        return [tf.TensorSpec((None, IMAGE_SIZE, IMAGE_SIZE), tf.float32, 'input'),
                tf.TensorSpec((None,), tf.int32, 'label')]

    def build_graph(self, image, label):
        """This function should build the model which takes the input variables
        and return cost at the end"""

        # In tensorflow, inputs to convolution function are assumed to be
        # NHWC. Add a single channel here.
        image = tf.expand_dims(image, 3)

        image = image * 2 - 1   # center the pixels values at zero

        # tf.layers -> tf.keras.layers, made in the call as tf.layers made them
        l = tf.keras.layers.Conv2D(32, 3, padding='same', activation=tf.nn.relu, name='conv0')(image)
        l = tf.keras.layers.MaxPooling2D(2, 2, padding='valid')(l)
        l = tf.keras.layers.Conv2D(32, 3, padding='same', activation=tf.nn.relu, name='conv1')(l)
        l = tf.keras.layers.Conv2D(32, 3, padding='same', activation=tf.nn.relu, name='conv2')(l)
        l = tf.keras.layers.MaxPooling2D(2, 2, padding='valid')(l)
        l = tf.keras.layers.Conv2D(32, 3, padding='same', activation=tf.nn.relu, name='conv3')(l)
        l = tf.keras.layers.Flatten()(l)
        l = tf.keras.layers.Dense(512, activation=tf.nn.relu, name='fc0')(l)
        l = tf.keras.layers.Dropout(0.5)(l, training=self.training)
        logits = tf.keras.layers.Dense(10, activation=tf.identity, name='fc1')(l)

        # a vector of length B with loss of each sample
        cost = tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label)
        cost = tf.reduce_mean(cost, name='cross_entropy_loss')  # the average cross-entropy loss

        correct = tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32, name='correct')
        accuracy = tf.reduce_mean(correct, name='accuracy')

        # This will monitor training error & accuracy (in a moving average fashion). The value will be automatically
        # 1. written to tensosrboard
        # 2. written to stat.json
        # 3. printed after each epoch
        train_error = tf.reduce_mean(1 - correct, name='train_error')
        summary.add_moving_summary(train_error, accuracy)

        # Use a regex to find parameters to apply weight decay.
        # Here we apply a weight decay on all W (weight matrix) of all fc layers
        # If you don't like regex, you can certainly define the cost in any other methods.
        wd_cost = tf.multiply(1e-5,
                              regularize_cost('fc.*/kernel', tf.nn.l2_loss),
                              name='regularize_loss')
        total_cost = tf.add_n([wd_cost, cost], name='total_cost')
        summary.add_moving_summary(cost, wd_cost, total_cost)

        # monitor histogram of all weight (of conv and fc layers) in tensorboard
        summary.add_param_summary(('.*/kernel', ['histogram', 'rms']))
        # the function should return the total cost to be optimized
        return total_cost

    def optimizer(self):
        lr = tf.train.exponential_decay(
            learning_rate=1e-3,
            global_step=get_global_step_var(),
            decay_steps=468 * 10,
            decay_rate=0.3, staircase=True, name='learning_rate')
        # This will also put the summary in tensorboard, stat.json and print in terminal
        # but this time without moving average
        tf.summary.scalar('lr', lr)
        return tf.train.AdamOptimizer(lr)


def get_data():
    train = BatchData(dataset.Mnist('train'), 128)
    test = BatchData(dataset.Mnist('test'), 256, remainder=True)
    return train, test


if __name__ == '__main__':
    # automatically setup the directory train_log/mnist-convnet for logging
    logger.auto_set_dir()

    dataset_train, dataset_test = get_data()

    # How many iterations you want in each epoch.
    # This len(data) is the default value.
    steps_per_epoch = len(dataset_train)

    # get the config which contains everything necessary in a training
    config = TrainConfig(
        model=Model(),
        # The input source for training. FeedInput is slow, this is just for demo purpose.
        # In practice it's best to use QueueInput or others. See tutorials for details.
        data=FeedInput(dataset_train),
        callbacks=[
            ModelSaver(),   # save the model after every epoch
            InferenceRunner(    # run inference(for validation) after every epoch
                dataset_test,   # the DataFlow instance used for validation
                ScalarStats(['cross_entropy_loss', 'accuracy'])),
            MaxSaver('validation_accuracy'),  # save the model with highest accuracy (prefix 'validation_')
        ],
        steps_per_epoch=steps_per_epoch,
        max_epoch=100,
    )
    launch_train_with_config(config, SimpleTrainer())
