#!/usr/bin/env python
"""A whole Keras CNN on CIFAR-10 over several processes: KerasModel on MultiWorkerTrainer.

kerastrainer's form of keras_experiments' ``cifar10_cnn_distrib_slurm.py``: one process per
device, started by ``srun`` (or ``kerastrainer-run``); no cluster spec, server, session or
parameter server to set up: ``MultiWorkerTrainer()`` reads the job step from SLURM's variables.

    srun --ntasks=8 --gpus-per-task=1 python examples/cifar/cifar10_cnn_slurm.py --data ~/data/cifar10
    kerastrainer-run -np 2 python examples/cifar/cifar10_cnn_slurm.py --fake      # CPU smoke test

``--batch`` images per worker and step, as the original's 32 per device: the global
batch given to ``KerasModel.fit`` is ``--batch`` x workers, and each worker reads its own
shard of the arrays (``fit`` shards them). The learning rate is scaled by the workers, as
in the original. Only the chief writes the log directory and saves ``final.keras``. See
docs/migration-keras2-tflms.md and docs/multi-node.md.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="folder with the CIFAR-10 python batches")
    parser.add_argument("--fake", action="store_true", help="random data (no files needed): 2 short epochs")
    parser.add_argument("--batch", type=int, default=32, help="images per worker per step")
    parser.add_argument("--epochs", type=int, default=None, help="default 5; 2 with --fake")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over this worker's shard")
    parser.add_argument("--logdir", help="default: train_log/cifar10_cnn_slurm (-fake appended with --fake)")
    parser.add_argument("--lr", type=float, default=1e-4, help="per-worker learning rate (scaled by the workers)")
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 5
    if args.logdir is None:
        args.logdir = "train_log/cifar10_cnn_slurm" + ("-fake" if args.fake else "")
    if not args.fake and not args.data:
        parser.error("give --data DIR (the CIFAR-10 python batches) or --fake")
    return args


def main():
    args = parse_args()
    from kerastrainer import MultiWorkerTrainer
    trainer = MultiWorkerTrainer()  # first: it sets up TF's collectives before any TF op runs

    import keras
    import numpy as np
    from cifar10_cnn_mgpu import build_model   # the same CNN as the multi-GPU example
    from kerastrainer.keras import KerasModel
    from kerastrainer.utils.cluster import set_logger_dir_on_chief

    set_logger_dir_on_chief(args.logdir, action="k")
    if args.fake:
        rng = np.random.RandomState(0)
        x_train, y_train = rng.rand(256, 32, 32, 3).astype("float32"), rng.randint(0, 10, 256)
        x_test, y_test = rng.rand(64, 32, 32, 3).astype("float32"), rng.randint(0, 10, 64)
    else:
        from kerastrainer.dataflow import dataset
        train = dataset.Cifar10("train", shuffle=False, dir=args.data)
        test = dataset.Cifar10("test", shuffle=False, dir=args.data)
        x_train, y_train = (train.images / 255.0).astype("float32"), train.labels
        x_test, y_test = (test.images / 255.0).astype("float32"), test.labels

    workers = trainer.size * trainer.num_local_replicas
    model = build_model(x_train.shape[1:])
    km = KerasModel(model, trainer=trainer)
    km.compile(keras.optimizers.RMSprop(args.lr * workers), "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = km.fit(input=(x_train, y_train), batch_size=args.batch * workers, epochs=args.epochs,
                     steps_per_epoch=args.steps_per_epoch, validation_data=(x_test, y_test))
    if trainer.is_chief:
        model.save(os.path.join(args.logdir, "final.keras"))
        print(f"rank 0 of {trainer.size}: final loss {history.history['loss'][-1]:.4f}, "
              f"val_accuracy {history.history['val_accuracy'][-1]:.4f}")


if __name__ == "__main__":
    main()
