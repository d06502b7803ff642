#!/usr/bin/env python
"""Pre-activation ResNet on CIFAR-10 (He et al., "Identity Mappings in Deep Residual Networks").

The DataFlow batch is per tower: with --gpus 2 each step takes 2 batches.

    python examples/cifar/cifar10-resnet.py --data ~/data/cifar10 --gpus 2 -n 5   # ResNet-32
    python examples/cifar/cifar10-resnet.py --fake          # random data: 2 epochs of 20 steps
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="directory holding cifar-10-batches-py/")
    parser.add_argument("--download", action="store_true")
    parser.add_argument("--fake", action="store_true", help="random data: a short smoke test (2 epochs of 20 steps)")
    parser.add_argument("--batch", type=int, default=128, help="batch per tower")
    parser.add_argument("--gpus", type=int, default=1, help="number of towers")
    parser.add_argument("--trainer", choices=["replicated", "ps"], default="replicated")
    parser.add_argument("-n", "--num-units", type=int, default=5, help="units per stage; depth = 6n + 2")
    parser.add_argument("--epochs", type=int, help="the last epoch (default 400; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", "--steps", dest="steps_per_epoch", type=int,
                        help="default: one pass over the data (20 with --fake)")
    parser.add_argument("--load", help="a checkpoint to start from")
    parser.add_argument("--logdir",
                        help="default: train_log/cifar10-resnet (train_log/cifar10-resnet-fake with --fake)")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 400
    if args.logdir is None:
        args.logdir = "train_log/cifar10-resnet" + ("-fake" if args.fake else "")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402

from kerastrainer import (AugmentImageComponent, AutoResumeTrainConfig, AvgPooling, BatchData,  # noqa: E402
                          BNReLU, ClassificationError, Conv2D, FakeData, FullyConnected, GlobalAvgPooling,
                          InferenceRunner, MapDataComponent, ModelDesc, ModelSaver, MultiProcessRunnerZMQ,
                          ScalarStats, ScheduledHyperParamSetter, SimpleTrainer,
                          SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated, add_moving_summary,
                          argscope, dataset, imgaug, l2_regularizer, launch_train_with_config, logger,
                          regularize_cost)

class Model(ModelDesc):
    def __init__(self, n):
        self.n = n

    def inputs(self):
        return [tf.TensorSpec((None, 32, 32, 3), tf.uint8, "input"), tf.TensorSpec((None,), tf.int32, "label")]

    def build_graph(self, image, label):
        image = tf.cast(image, tf.float32) / 128.0 - 1.0  # on the device: uint8 crosses processes

        def residual(name, x, increase_dim=False, first=False):
            in_channel = x.shape[-1]
            out_channel, stride = (in_channel * 2, 2) if increase_dim else (in_channel, 1)
            with tf.name_scope(name):
                b1 = x if first else BNReLU("preact", x)
                c1 = Conv2D("conv1", b1, out_channel, strides=stride, activation=BNReLU)
                c2 = Conv2D("conv2", c1, out_channel)
                if increase_dim:
                    x = AvgPooling("pool", x, 2)
                    x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [in_channel // 2, in_channel // 2]])
                return c2 + x

        with argscope(Conv2D, use_bias=False, kernel_size=3,
                         kernel_initializer=keras.initializers.VarianceScaling(2.0, mode="fan_out")):
            x = Conv2D("conv0", image, 16, activation=BNReLU)
            x = residual("res1.0", x, first=True)
            for k in range(1, self.n):
                x = residual(f"res1.{k}", x)
            x = residual("res2.0", x, increase_dim=True)
            for k in range(1, self.n):
                x = residual(f"res2.{k}", x)
            x = residual("res3.0", x, increase_dim=True)
            for k in range(1, self.n):
                x = residual(f"res3.{k}", x)
            x = BNReLU("bnlast", x)
            x = GlobalAvgPooling("gap", x)
        logits = FullyConnected("linear", x, 10)
        tf.nn.softmax(logits, name="output")

        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name="cross_entropy_loss")
        wrong = tf.cast(tf.logical_not(tf.nn.in_top_k(label, logits, 1)), tf.float32, name="wrong_vector")
        add_moving_summary(tf.reduce_mean(wrong, name="train_error"))
        wd_cost = regularize_cost(".*/W", l2_regularizer(2e-4), name="wd_cost")
        add_moving_summary(cost, wd_cost)
        return tf.add_n([cost, wd_cost], name="cost")

    def optimizer(self):
        return keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)


def pad_and_crop(img, rng=np.random):
    """4-pixel zero padding, then a random 32x32 crop."""
    padded = np.pad(img, ((4, 4), (4, 4), (0, 0)))
    y, x = rng.randint(0, 9, size=2)
    return padded[y:y + 32, x:x + 32]


def get_data(train_or_test, args):
    is_train = train_or_test == "train"
    if args.fake:
        return FakeData([[args.batch, 32, 32, 3], [args.batch]], size=(args.steps_per_epoch or 20) if is_train else 4,
                        dtype=["uint8", "int32"], domain=[(0, 255), (0, 10)])
    ds = dataset.Cifar10(train_or_test, dir=args.data, download=args.download)
    if is_train:
        ds = AugmentImageComponent(ds, [imgaug.Flip(horiz=True)])
        ds = MapDataComponent(ds, pad_and_crop, index=0)
    ds = BatchData(ds, args.batch, remainder=not is_train)
    if is_train:
        ds = MultiProcessRunnerZMQ(ds, num_proc=2)
    return ds


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="k")
    train, test = get_data("train", args), get_data("test", args)
    config = AutoResumeTrainConfig(
        model=Model(n=args.num_units),
        dataflow=train,
        callbacks=[
            ModelSaver(),
            InferenceRunner(test, [ScalarStats("cost"), ClassificationError("wrong_vector")]),
            ScheduledHyperParamSetter("learning_rate", [(1, 0.1), (82, 0.01), (123, 0.001), (300, 0.0002)]),
        ],
        steps_per_epoch=args.steps_per_epoch,
        max_epoch=args.epochs,
        session_init=args.load,
    )
    if args.gpus <= 1:
        trainer = SimpleTrainer()
    elif args.trainer == "ps":
        trainer = SyncMultiGPUTrainerParameterServer(args.gpus)
    else:
        trainer = SyncMultiGPUTrainerReplicated(args.gpus)
    launch_train_with_config(config, trainer)


if __name__ == "__main__":
    main(ARGS)
