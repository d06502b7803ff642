# -*- coding: utf-8 -*-
# Author: Your Name <your@email.com>
# Ported from tensorpack 0.11 examples/boilerplate.py (tensorpack/tensorpack on GitHub).
# Edits forced by TensorFlow 2:
#  1. `from tensorpack import *` -> `from kerastrainer import *` (the import change).
#  2. `import tensorflow as tf` -> `import tensorflow.compat.v1 as tf`: TF2 removed
#     tf.get_variable and tf.train.AdamOptimizer from the `tf` namespace.
# Edits NOT forced by TF2: the template as published cannot train in tensorpack 0.11 either
# (`input1 - input2` subtracts int32 from float32, which has no TF kernel; the cost is not a
# scalar; there is no trainable variable; FakeData's [1]-shaped label does not fit the (None,)
# input). Minimal repairs so that it is a model at all:
#  3. build_graph: one scalar variable `w` and a scalar squared-error cost named 'total_costs'.
#  4. get_data: the label is a scalar ([] instead of [1]) of dtype int32 (tensorpack's
#     feed_dict cast uint8 to the int32 placeholder silently; kerastrainer checks dtypes).

import argparse
import os
import tensorflow.compat.v1 as tf

from kerastrainer import *

"""
This is a boiler-plate template.
All code is in this file is the most minimalistic way to solve a deep-learning problem with cross-validation.
"""

BATCH_SIZE = 16
SHAPE = 28
CHANNELS = 3


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, SHAPE, SHAPE, CHANNELS), tf.float32, 'input1'),
                tf.TensorSpec((None,), tf.int32, 'input2')]

    def build_graph(self, input1, input2):

        w = tf.get_variable('w', shape=[], initializer=tf.zeros_initializer())
        pred = w * tf.reduce_mean(input1, axis=[1, 2, 3])
        cost = tf.reduce_mean(tf.square(pred - tf.cast(input2, tf.float32)), name='total_costs')
        summary.add_moving_summary(cost)
        return cost

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=5e-3, trainable=False)
        return tf.train.AdamOptimizer(lr)


def get_data(subset):
    # something that yields [[SHAPE, SHAPE, CHANNELS], [1]]
    ds = FakeData([[SHAPE, SHAPE, CHANNELS], []], 1000, random=False,
                  dtype=['float32', 'int32'], domain=[(0, 255), (0, 10)])
    ds = MultiProcessRunnerZMQ(ds, 2)
    ds = BatchData(ds, BATCH_SIZE)
    return ds


def get_config():
    logger.auto_set_dir()

    ds_train = get_data('train')
    ds_test = get_data('test')

    return TrainConfig(
        model=Model(),
        data=QueueInput(ds_train),
        callbacks=[
            ModelSaver(),
            InferenceRunner(ds_test, [ScalarStats('total_costs')]),
        ],
        steps_per_epoch=len(ds_train),
        max_epoch=100,
    )


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--gpu', help='comma separated list of GPU(s) to use.')
    parser.add_argument('--load', help='load model')
    args = parser.parse_args()

    if args.gpu:
        os.environ['CUDA_VISIBLE_DEVICES'] = args.gpu

    config = get_config()
    config.session_init = SmartInit(args.load)

    launch_train_with_config(config, SimpleTrainer())
