#!/usr/bin/env python
"""MNIST with Keras layers inside a kerastrainer tower function (seed flavour 1).

The Keras layers are created once (``keras_layer``), shared by every tower and every
trace, saved in checkpoints; their regularization losses are added to the cost and
BatchNormalization updates its statistics in training towers.

    python examples/mnist/mnist-keras.py --data ~/data/mnist [--gpus 2]
    python examples/mnist/mnist-keras.py --fake          # random data, a few steps
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1, help="towers (GPUs, or logical CPU devices)")
    parser.add_argument("--data", help="folder with the MNIST IDX files")
    parser.add_argument("--fake", action="store_true", help="random data, a few steps")
    parser.add_argument("--batch", type=int, default=64, help="batch per tower")
    parser.add_argument("--epochs", type=int, default=None, help="default 10; 2 with --fake")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the training set")
    parser.add_argument("--logdir", default="train_log/mnist-keras")
    args = parser.parse_args(argv)
    if not args.fake and not args.data:
        parser.error("give --data DIR (MNIST IDX files) or --fake")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer import (BatchData, ClassificationError, FakeData, InferenceRunner, ModelDesc,  # noqa: E402
                          ModelSaver, ScalarStats, SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                          add_moving_summary, get_current_tower_context, launch_train_with_config, logger)
from kerastrainer.dataflow import dataset  # noqa: E402
from kerastrainer.models import keras_layer  # noqa: E402
from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 28, 28), tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]

    def build_graph(self, image, label):
        training = get_current_tower_context().is_training
        reg = keras.regularizers.L2(1e-5)
        x = tf.expand_dims(image, -1) * 2 - 1
        x = keras_layer("conv0", lambda: keras.layers.Conv2D(32, 3, padding="same", kernel_regularizer=reg))(x)
        x = keras_layer("bn0", lambda: keras.layers.BatchNormalization())(x, training=training)
        x = tf.nn.relu(x)
        x = keras_layer("pool0", lambda: keras.layers.MaxPooling2D(2))(x)
        x = keras_layer("conv1", lambda: keras.layers.Conv2D(64, 3, padding="same", activation="relu",
                                                             kernel_regularizer=reg))(x)
        x = keras_layer("pool1", lambda: keras.layers.MaxPooling2D(2))(x)
        x = keras_layer("flat", lambda: keras.layers.Flatten())(x)
        x = keras_layer("fc0", lambda: keras.layers.Dense(256, activation="relu", kernel_regularizer=reg))(x)
        x = keras_layer("drop", lambda: keras.layers.Dropout(0.5))(x, training=training)
        logits = keras_layer("fc1", lambda: keras.layers.Dense(10))(x)
        tf.nn.softmax(logits, name="prob")

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name="cross_entropy_loss")
        wrong = tf.cast(tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), label), tf.float32,
                        name="incorrect_vector")
        layer_losses = [l for name in ("conv0", "conv1", "fc0")
                        for l in keras_layer(name, lambda: None).losses]
        wd_cost = tf.add_n(layer_losses, name="regularize_loss")
        add_moving_summary(cost, wd_cost, tf.reduce_mean(1 - wrong, name="accuracy"))
        return tf.add(cost, wd_cost, name="total_cost")

    def optimizer(self):
        return keras.optimizers.Adam(1e-3)


def get_data(args, batch):
    if args.fake:
        train = FakeData([[28, 28], []], size=batch * 20, dtype=["float32", "int32"], domain=[(0, 1), (0, 10)])
        test = FakeData([[28, 28], []], size=batch * 4, dtype=["float32", "int32"], domain=[(0, 1), (0, 10)])
    else:
        train, test = dataset.Mnist("train", dir=args.data), dataset.Mnist("test", shuffle=False, dir=args.data)
    return BatchData(train, batch), BatchData(test, 256, remainder=True)


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="d")
    train, test = get_data(args, batch=args.batch)   # per tower: ModelDesc trainers take one batch per tower
    trainer = SimpleTrainer() if args.gpus <= 1 else SyncMultiGPUTrainerReplicated(args.gpus)
    config = TrainConfig(
        model=Model(), dataflow=train,
        callbacks=[ModelSaver(),
                   InferenceRunner(test, [ScalarStats("cross_entropy_loss"), ClassificationError("incorrect_vector")])],
        steps_per_epoch=args.steps_per_epoch, max_epoch=args.epochs or (2 if args.fake else 10))
    trainer = launch_train_with_config(config, trainer)
    logger.info("Validation error: %.4f", trainer.monitors.get_latest("validation_error"))


if __name__ == "__main__":
    main(ARGS)
