#!/usr/bin/env python
"""A Keras CNN on CIFAR-10, data-parallel with ``make_parallel`` (keras_experiments' multi-GPU API).

``--gpus N`` (keras_experiments' ``--mgpu``) splits each global batch over N devices (GPUs,
or logical CPU devices on a machine without GPUs); the serial model shares its
weights with the parallel one, so ``--checkpt`` saves the trained serial model.

    python examples/cifar/cifar10_cnn_mgpu.py --data ~/data/cifar10 --gpus 2 --epochs 10
    python examples/cifar/cifar10_cnn_mgpu.py --fake --gpus 2     # random data, a few steps, CPU
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", "--mgpu", dest="gpus", type=int, default=0,
                        help="devices to split batches over (0 or 1: serial); --mgpu is keras_experiments' name")
    parser.add_argument("--epochs", type=int, default=None, help="default 20; 1 with --fake")
    parser.add_argument("--batch", "--batch-size", dest="batch", type=int, default=128, help="global batch")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over the training set")
    parser.add_argument("--logdir", default="train_log/cifar10_cnn_mgpu", help="where --checkpt saves")
    parser.add_argument("--checkpt", action="store_true", help="save the best model to --checkpt-file")
    parser.add_argument("--checkpt-file", help="default: LOGDIR/best.keras")
    parser.add_argument("--data", help="folder with the CIFAR-10 python batches")
    parser.add_argument("--fake", action="store_true", help="random data, a few steps")
    args = parser.parse_args(argv)
    args.checkpt_file = args.checkpt_file or os.path.join(args.logdir, "best.keras")
    return args


def build_model(input_shape):
    """Keras' classic CIFAR-10 CNN (the one keras_experiments' examples train)."""
    import keras
    return keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Dropout(0.25),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Dropout(0.25),
        keras.layers.Flatten(),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])


def main():
    args = parse_args()
    if not args.fake and not args.data:
        raise SystemExit("give --data DIR (CIFAR-10 python batches) or --fake")
    from kerastrainer.utils.devices import ensure_tower_devices
    ensure_tower_devices(args.gpus)  # no GPU: logical CPU devices, before TF starts its runtime
    import keras
    import numpy as np
    from kerastrainer.dataflow import dataset
    from kerastrainer.keras import get_available_gpus, make_parallel
    from kerastrainer.utils.devices import get_logical_cpus

    if args.fake:
        rng = np.random.RandomState(0)
        x_train, y_train = rng.rand(512, 32, 32, 3).astype("float32"), rng.randint(0, 10, 512)
        x_test, y_test = rng.rand(128, 32, 32, 3).astype("float32"), rng.randint(0, 10, 128)
    else:
        train = dataset.Cifar10("train", shuffle=False, dir=args.data)
        x_train, y_train = train.images, train.labels
        test = dataset.Cifar10("test", shuffle=False, dir=args.data)
        x_test, y_test = test.images, test.labels
        x_train, x_test = (x_train / 255.0).astype("float32"), (x_test / 255.0).astype("float32")

    model = build_model(x_train.shape[1:])
    gdev_list = (get_available_gpus() or get_logical_cpus())[:args.gpus] if args.gpus > 1 else []
    pmodel = make_parallel(model, gdev_list)    # the serial model itself with fewer than 2 devices
    pmodel.compile(keras.optimizers.RMSprop(1e-4), "sparse_categorical_crossentropy", metrics=["accuracy"])
    callbacks = []
    if args.checkpt:
        os.makedirs(os.path.dirname(os.path.abspath(args.checkpt_file)), exist_ok=True)
        callbacks.append(keras.callbacks.ModelCheckpoint(args.checkpt_file, monitor="val_accuracy",
                                                         mode="max", save_best_only=True))
    history = pmodel.fit(x_train, y_train, batch_size=args.batch, epochs=args.epochs or (1 if args.fake else 20),
                         steps_per_epoch=args.steps_per_epoch,
                         validation_data=(x_test, y_test), shuffle=True, callbacks=callbacks)
    print(f"devices: {gdev_list or 'one'}; final val_accuracy {history.history['val_accuracy'][-1]:.4f}")
    if args.checkpt:   # the serial model holds the trained weights
        model.save(os.path.splitext(args.checkpt_file)[0] + "-final.keras")


if __name__ == "__main__":
    main()
