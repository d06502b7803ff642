#!/usr/bin/env python
"""Train a small convnet on the handwritten digits that ship with scikit-learn.

The README's main job: no download, about a minute on 2 CPU cores, and every
piece of a real run: a multiprocess DataFlow with augmentation in worker
processes, QueueInput, validation with InferenceRunner, checkpoints with
ModelSaver, TensorBoard events and stats.json in the log directory.

    python examples/mnist/digits-convnet.py [--epochs 12] [--logdir train_log/digits]
    python examples/mnist/digits-convnet.py --fake      # random images: a 2-epoch smoke test
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="batch per tower")
    parser.add_argument("--gpus", type=int, default=1, help="number of towers (GPUs, or logical CPU devices)")
    parser.add_argument("--epochs", type=int, help="the last epoch (default 12; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the training set")
    parser.add_argument("--logdir",
                        help="default: train_log/digits-convnet (train_log/digits-convnet-fake with --fake)")
    parser.add_argument("--fake", action="store_true", help="random images instead of the digits: a smoke test")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 12
    if args.logdir is None:
        args.logdir = "train_log/digits-convnet" + ("-fake" if args.fake else "")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer import (BatchData, ClassificationError, Conv2D, DataFromList, FullyConnected,  # noqa: E402
                          GlobalAvgPooling, InferenceRunner, MapDataComponent, MaxPooling, ModelDesc,
                          ModelSaver, MultiProcessRunnerZMQ, ScalarStats, ScheduledHyperParamSetter,
                          SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig, add_moving_summary,
                          argscope, l2_regularizer, launch_train_with_config, logger, regularize_cost)
from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402

IMAGE_SIZE = 8


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, IMAGE_SIZE, IMAGE_SIZE, 1), tf.float32, "input"),
                tf.TensorSpec((None,), tf.int32, "label")]

    def build_graph(self, image, label):
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
            x = Conv2D("conv0", image, 32)
            x = Conv2D("conv1", x, 32)
            x = MaxPooling("pool0", x, 2)
            x = Conv2D("conv2", x, 64)
            x = GlobalAvgPooling("gap", x)
        x = FullyConnected("fc0", x, 128, activation=tf.nn.relu)
        logits = FullyConnected("fc1", x, 10)
        tf.nn.softmax(logits, name="prob")

        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
        cost = tf.reduce_mean(xent, name="cross_entropy_loss")
        correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), label), tf.float32)
        # per-sample 0/1, fetched by ClassificationError during validation
        tf.subtract(1.0, correct, name="incorrect_vector")
        accuracy = tf.reduce_mean(correct, name="accuracy")
        wd_cost = regularize_cost("fc.*/W", l2_regularizer(1e-4), name="regularize_loss")
        total_cost = tf.add(cost, wd_cost, name="total_cost")
        add_moving_summary(cost, wd_cost, accuracy)
        return total_cost

    def optimizer(self):
        return keras.optimizers.Adam(learning_rate=3e-3)


def random_shift(img, rng=np.random):
    """Shift by up to one pixel: cheap augmentation, run in the worker processes."""
    dy, dx = rng.randint(-1, 2, size=2)
    return np.roll(np.roll(img, dy, axis=0), dx, axis=1)


def get_data(batch_size=32, fake=False):
    if fake:
        rng = np.random.RandomState(0)
        images, labels = rng.rand(1797, 8, 8, 1).astype("float32"), rng.randint(0, 10, 1797).astype("int32")
    else:
        from sklearn.datasets import load_digits
        digits = load_digits()
        images = (digits.images / 16.0).astype("float32")[..., None]
        labels = digits.target.astype("int32")
    order = np.random.RandomState(42).permutation(len(images))
    images, labels = images[order], labels[order]
    n_train = 1500
    train = DataFromList([[images[i], labels[i]] for i in range(n_train)], shuffle=True)
    test = DataFromList([[images[i], labels[i]] for i in range(n_train, len(images))], shuffle=False)
    train = MapDataComponent(train, random_shift, index=0)
    train = BatchData(train, batch_size, remainder=False)
    train = MultiProcessRunnerZMQ(train, num_proc=2)
    test = BatchData(test, 128, remainder=True)
    return train, test


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="d")
    train, test = get_data(args.batch, fake=args.fake)
    config = TrainConfig(
        model=Model(),
        dataflow=train,
        callbacks=[
            ModelSaver(),
            InferenceRunner(test, [ScalarStats(["cross_entropy_loss"]), ClassificationError("incorrect_vector")]),
            ScheduledHyperParamSetter("learning_rate", [(1, 3e-3), (8, 1e-3), (11, 3e-4)]),
        ],
        steps_per_epoch=args.steps_per_epoch or len(train) // args.gpus,
        max_epoch=args.epochs,
    )
    trainer = SimpleTrainer() if args.gpus <= 1 else SyncMultiGPUTrainerReplicated(args.gpus)
    trainer = launch_train_with_config(config, trainer)
    error = trainer.monitors.get_latest("validation_error")
    logger.info("Validation accuracy after %d epochs: %.2f%%", args.epochs, 100 * (1 - error))


if __name__ == "__main__":
    main(ARGS)
