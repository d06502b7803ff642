#!/usr/bin/env python
"""MNIST with a whole Keras model trained by kerastrainer (``KerasModel``).

The model is plain Keras; ``KerasModel`` trains it on kerastrainer's trainers with a
global batch split across ``--gpus`` replicas, Keras callbacks mixed with
kerastrainer's, and writes a ``.keras`` file that ``keras.models.load_model`` reads.

    python examples/mnist/mnist-keras-v2.py --data ~/data/mnist [--gpus 2]
    python examples/mnist/mnist-keras-v2.py --fake          # random data, a few steps
"""
import argparse
import os


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1, help="replicas (GPUs, or logical CPU devices)")
    parser.add_argument("--data", help="folder with the MNIST IDX files")
    parser.add_argument("--fake", action="store_true", help="random data, a few steps")
    parser.add_argument("--epochs", type=int, default=None, help="default 8; 2 with --fake")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the training set")
    parser.add_argument("--batch", type=int, default=128, help="global batch, split across replicas")
    parser.add_argument("--logdir", default="train_log/mnist-keras-v2")
    args = parser.parse_args(argv)
    if not args.fake and not args.data:
        parser.error("give --data DIR (MNIST IDX files) or --fake")
    return args


if __name__ == "__main__":
    ARGS = parse_args()  # before TensorFlow is imported: --help answers at once

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from kerastrainer import ModelSaver, SimpleTrainer, SyncMultiGPUTrainerReplicated, logger  # noqa: E402
from kerastrainer.dataflow import dataset  # noqa: E402
from kerastrainer.keras import KerasModel  # noqa: E402
from kerastrainer.utils.devices import ensure_tower_devices  # noqa: E402


def get_model():
    return keras.Sequential([
        keras.Input((28, 28, 1), name="image"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.BatchNormalization(),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(256, activation="relu", kernel_regularizer=keras.regularizers.L2(1e-5)),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, name="logits"),
    ])


def get_arrays(args):
    if args.fake:
        rng = np.random.RandomState(0)
        return ((rng.rand(1280, 28, 28, 1).astype("float32"), rng.randint(0, 10, 1280).astype("int32")),
                (rng.rand(256, 28, 28, 1).astype("float32"), rng.randint(0, 10, 256).astype("int32")))
    out = []
    for split in ("train", "test"):
        images, labels = dataset.Mnist(split, shuffle=False, dir=args.data).as_arrays()
        out.append(((images[..., None] / 255.0).astype("float32"), labels.astype("int32")))
    return out


def main(args):
    ensure_tower_devices(args.gpus)  # logical CPU devices when there is no GPU
    logger.set_logger_dir(args.logdir, action="d")
    train, test = get_arrays(args)
    trainer = SimpleTrainer() if args.gpus <= 1 else SyncMultiGPUTrainerReplicated(args.gpus)
    km = KerasModel(get_model, input=train, trainer=trainer)
    km.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               metrics=["accuracy"])
    history = km.fit(validation_data=test, batch_size=args.batch, steps_per_epoch=args.steps_per_epoch,
                     max_epoch=args.epochs or (2 if args.fake else 8),
                     callbacks=[ModelSaver(), keras.callbacks.ReduceLROnPlateau("val_loss", factor=0.3, patience=1),
                                keras.callbacks.EarlyStopping("val_loss", patience=3)])
    path = os.path.join(args.logdir, "mnist.keras")
    km.model.save(path)
    logger.info("Validation accuracy %.4f; the model is saved to %s", history.history["val_accuracy"][-1], path)


if __name__ == "__main__":
    main(ARGS)
