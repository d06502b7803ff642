#!/usr/bin/env python
"""A DCGAN on the handwritten digits that ship with scikit-learn, trained with two Objectives.

The discriminator and the generator are two costs of one step, each minimised by its own Adam
over its own variables (kerastrainer.Objective): one forward pass per step, both gradients from
it, both updates applied. Every epoch a grid of 64 samples (the same noise each time) is written
to <logdir>/samples/epoch-NNN.png. No download; a few minutes on 2 CPU cores.

    python examples/gan/dcgan-digits.py [--epochs 30] [--logdir train_log/dcgan-digits]
    python examples/gan/dcgan-digits.py --fake      # random images: a 2-epoch smoke test
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64, help="batch per tower")
    parser.add_argument("--gpus", type=int, default=1, help="number of towers (GPUs, or logical CPU devices)")
    parser.add_argument("--epochs", type=int, help="the last epoch (default 60; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the digits")
    parser.add_argument("--logdir", help="default: train_log/dcgan-digits (train_log/dcgan-digits-fake with --fake)")
    parser.add_argument("--fake", action="store_true", help="random images instead of the digits: a smoke test")
    parser.add_argument("--z-dim", type=int, default=32, help="size of the generator's noise vector")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 60
    if args.logdir is None:
        args.logdir = "train_log/dcgan-digits" + ("-fake" if args.fake else "")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer import (BatchData, BatchNorm, Callback, Conv2D, Conv2DTranspose, DataFromList,  # noqa: E402
                          FullyConnected, MapData, ModelDesc, ModelSaver, Objective, SimpleTrainer,
                          SyncMultiGPUTrainerReplicated, TrainConfig, add_moving_summary, argscope,
                          launch_train_with_config, logger)
from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402

SIZE = 8   # the digits are 8x8


class DCGAN(ModelDesc):
    def __init__(self, z_dim=32):
        self.z_dim = z_dim

    def inputs(self):
        return [tf.TensorSpec((None, SIZE, SIZE, 1), tf.float32, "image"),
                tf.TensorSpec((None, self.z_dim), tf.float32, "z")]

    def generator(self, z):
        with tf.name_scope("gen"):
            x = FullyConnected("gen/fc", z, 4 * 4 * 64, activation=tf.nn.relu)
            x = tf.reshape(x, [-1, 4, 4, 64])
            x = BatchNorm("gen/bn", x)
            x = Conv2DTranspose("gen/deconv", x, 32, 4, strides=2, activation=tf.nn.relu)   # 8x8
            return Conv2D("gen/out", x, 1, 3, activation=tf.tanh)

    def discriminator(self, image):
        with argscope(Conv2D, kernel_size=3, activation=tf.nn.leaky_relu):
            x = Conv2D("discrim/conv0", image, 32)
            x = Conv2D("discrim/conv1", x, 64, strides=2)   # 4x4
        return FullyConnected("discrim/fc", tf.reshape(x, [-1, 4 * 4 * 64]), 1)

    def build_graph(self, image, z):
        fake = tf.identity(self.generator(z), name="gen_image")
        logits = self.discriminator(tf.concat([image, fake], 0))   # one pass over real and fake
        real_logits, fake_logits = tf.split(logits, 2)
        xent = tf.nn.sigmoid_cross_entropy_with_logits
        d_loss = tf.reduce_mean(xent(labels=tf.ones_like(real_logits), logits=real_logits)) + \
            tf.reduce_mean(xent(labels=tf.zeros_like(fake_logits), logits=fake_logits))
        g_loss = tf.reduce_mean(xent(labels=tf.ones_like(fake_logits), logits=fake_logits))
        d_accuracy = tf.reduce_mean(tf.cast(tf.concat([real_logits > 0, fake_logits < 0], 0), tf.float32),
                                    name="d_accuracy")
        add_moving_summary(d_accuracy)
        return {"d_loss": d_loss, "g_loss": g_loss}

    def optimizer(self):
        return [Objective("d_loss", keras.optimizers.Adam(2e-4, beta_1=0.5), variables="discrim/"),
                Objective("g_loss", keras.optimizers.Adam(1e-3, beta_1=0.5), variables="gen/")]


class SampleGrid(Callback):
    """Every epoch: 64 samples of the same noise, as an 8x8 grid, to <logdir>/samples/epoch-NNN.png."""

    def __init__(self, z_dim, scale=4):
        self.z = np.random.RandomState(0).uniform(-1, 1, (64, z_dim)).astype("float32")
        self.scale = scale

    def _setup_graph(self):
        self.generate = self.trainer.get_predictor(["z"], ["gen_image"])

    def _trigger_epoch(self):
        if logger.get_logger_dir() is None:
            return
        (images,) = self.generate(self.z)
        tiles = np.clip((images[..., 0] + 1) * 127.5, 0, 255).astype("uint8")           # 64 x 8 x 8
        tiles = tiles.repeat(self.scale, 1).repeat(self.scale, 2)                      # 64 x 32 x 32
        tiles = np.pad(tiles, ((0, 0), (1, 1), (1, 1)), constant_values=255)
        n, h, w = tiles.shape
        grid = tiles.reshape(8, 8, h, w).transpose(0, 2, 1, 3).reshape(8 * h, 8 * w)
        path = os.path.join(logger.get_logger_dir(), "samples", f"epoch-{self.epoch_num:03d}.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tf.io.write_file(path, tf.io.encode_png(grid[..., None]))
        logger.info("Samples written to %s", path)


def get_data(batch_size, z_dim, fake=False):
    if fake:
        images = np.random.RandomState(0).rand(1797, SIZE, SIZE, 1).astype("float32")
    else:
        from sklearn.datasets import load_digits
        images = (load_digits().images / 16.0).astype("float32")[..., None]
    images = images * 2 - 1   # [-1, 1], the generator's tanh range
    df = DataFromList([[im] for im in images], shuffle=True)
    df = BatchData(df, batch_size, remainder=False)
    rng = np.random.RandomState(1)
    return MapData(df, lambda dp: [dp[0], rng.uniform(-1, 1, (len(dp[0]), z_dim)).astype("float32")])


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="d")
    data = get_data(args.batch, args.z_dim, fake=args.fake)
    config = TrainConfig(
        model=DCGAN(args.z_dim),
        dataflow=data,
        callbacks=[ModelSaver(), SampleGrid(args.z_dim)],
        steps_per_epoch=args.steps_per_epoch or len(data) // args.gpus,
        max_epoch=args.epochs,
    )
    trainer = SimpleTrainer() if args.gpus <= 1 else SyncMultiGPUTrainerReplicated(args.gpus)
    launch_train_with_config(config, trainer)


if __name__ == "__main__":
    main(ARGS)
