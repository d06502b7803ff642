#!/usr/bin/env python
"""MNIST convnet, the tensorpack example ported by changing the import line.

    python examples/mnist/mnist-convnet.py --data ~/data/mnist     # IDX files, .gz or not
    python examples/mnist/mnist-convnet.py --download              # fetch MNIST first
    python examples/mnist/mnist-convnet.py --fake                  # random data: 2 short epochs
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="directory with the MNIST IDX files")
    parser.add_argument("--download", action="store_true", help="download MNIST into --data first")
    parser.add_argument("--fake", action="store_true", help="random data: a short smoke test (2 epochs of 20 steps)")
    parser.add_argument("--batch", type=int, default=128, help="batch per tower")
    parser.add_argument("--gpus", type=int, default=1, help="number of towers")
    parser.add_argument("--epochs", type=int, help="the last epoch (default 10; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the data (20 with --fake)")
    parser.add_argument("--logdir", help="default: train_log/mnist-convnet (train_log/mnist-convnet-fake with --fake)")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 10
    if args.logdir is None:
        args.logdir = "train_log/mnist-convnet" + ("-fake" if args.fake else "")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402

from kerastrainer import (AutoResumeTrainConfig, BatchData, ClassificationError, Conv2D, FakeData,  # noqa: E402
                          InferenceRunner, LinearWrap, ModelDesc, ModelSaver, ScalarStats, ScheduledHyperParamSetter,
                          SimpleTrainer, SyncMultiGPUTrainerReplicated, add_moving_summary, add_param_summary,
                          argscope, dataset, l2_regularizer, launch_train_with_config, logger, regularize_cost)

IMAGE_SIZE = 28


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, IMAGE_SIZE, IMAGE_SIZE), tf.float32, "input"),
                tf.TensorSpec((None,), tf.int32, "label")]

    def build_graph(self, image, label):
        image = tf.expand_dims(image * 2 - 1, 3)
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu, filters=32):
            logits = (LinearWrap(image)
                      .Conv2D("conv0")
                      .MaxPooling("pool0", 2)
                      .Conv2D("conv1")
                      .Conv2D("conv2")
                      .MaxPooling("pool1", 2)
                      .Conv2D("conv3")
                      .FullyConnected("fc0", 512, activation=tf.nn.relu)
                      .Dropout("dropout", rate=0.5)
                      .FullyConnected("fc1", 10, activation=None)())
        tf.nn.softmax(logits, name="prob")

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name="cross_entropy_loss")
        correct = tf.cast(tf.nn.in_top_k(label, logits, 1), tf.float32, name="correct")
        accuracy = tf.reduce_mean(correct, name="accuracy")
        tf.subtract(1.0, correct, name="incorrect_vector")
        wd_cost = tf.multiply(1e-5, regularize_cost("fc.*/W", l2_regularizer(1.0)), name="regularize_loss")
        total_cost = tf.add_n([wd_cost, cost], name="total_cost")
        add_moving_summary(cost, wd_cost, total_cost, accuracy)
        add_param_summary((".*/W", ["histogram", "rms"]))
        return total_cost

    def optimizer(self):
        return keras.optimizers.Adam(learning_rate=1e-3)


def get_data(args):
    if args.fake:
        train = FakeData([[args.batch, IMAGE_SIZE, IMAGE_SIZE], [args.batch]], size=args.steps_per_epoch or 20,
                         dtype=["float32", "int32"], domain=[(0, 1), (0, 10)])
        test = FakeData([[64, IMAGE_SIZE, IMAGE_SIZE], [64]], size=5, dtype=["float32", "int32"],
                        domain=[(0, 1), (0, 10)])
        return train, test
    train = BatchData(dataset.Mnist("train", dir=args.data, download=args.download), args.batch)
    test = BatchData(dataset.Mnist("test", dir=args.data, download=args.download), 256, remainder=True)
    return train, test


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="k")
    train, test = get_data(args)
    config = AutoResumeTrainConfig(
        model=Model(),
        dataflow=train,
        callbacks=[
            ModelSaver(),
            InferenceRunner(test, [ScalarStats(["cross_entropy_loss", "accuracy"]),
                                   ClassificationError("incorrect_vector")]),
            ScheduledHyperParamSetter("learning_rate", [(1, 1e-3), (5, 3e-4), (8, 1e-4)]),
        ],
        steps_per_epoch=args.steps_per_epoch,
        max_epoch=args.epochs,
    )
    trainer = SimpleTrainer() if args.gpus <= 1 else SyncMultiGPUTrainerReplicated(args.gpus)
    launch_train_with_config(config, trainer)


if __name__ == "__main__":
    main(ARGS)
