#!/usr/bin/env python
"""MNIST convnet on several worker processes: MultiWorkerTrainer, one process per device.

    kerastrainer-run -np 2 python examples/mnist/mnist-multiworker.py --fake          # CPU smoke test
    kerastrainer-run -np 2 python examples/mnist/mnist-multiworker.py --data ~/data/mnist
    srun --ntasks=8 --gpus-per-task=1 python examples/mnist/mnist-multiworker.py --data ~/data/mnist

Each worker trains on its own shard of the training set with ``--batch`` images per
step (the global batch is ``--batch`` x workers) and the gradients are averaged over
all workers. Only the chief (rank 0) writes the log directory, validates and prints
the progress bar; re-running the same command resumes every worker from the chief's
latest checkpoint. See docs/multi-node.md.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="directory with the MNIST IDX files")
    parser.add_argument("--fake", action="store_true", help="random data (no files needed): 2 short epochs")
    parser.add_argument("--batch", type=int, default=64, help="images per worker per step")
    parser.add_argument("--epochs", type=int, default=None, help="the last epoch (default 5; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", type=int, help="default: one pass over this worker's shard")
    parser.add_argument("--logdir", help="default: train_log/mnist-multiworker (-fake appended with --fake)")
    parser.add_argument("--communication", default="auto", choices=["auto", "ring", "nccl"])
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.fake else 5
    if args.logdir is None:
        args.logdir = "train_log/mnist-multiworker" + ("-fake" if args.fake else "")
    if not args.fake and not args.data:
        parser.error("give --data DIR (the MNIST IDX files) or --fake")
    return args


def main():
    args = parse_args()
    # First, before TensorFlow runs any op: the strategy configures TF's collective runtime.
    from kerastrainer import MultiWorkerTrainer
    trainer = MultiWorkerTrainer(communication=args.communication)

    import keras
    import tensorflow as tf
    from kerastrainer import (AutoResumeTrainConfig, BatchData, ClassificationError, Conv2D, DataFromList,
                              FakeData, FullyConnected, InferenceRunner, MaxPooling, ModelDesc, ModelSaver,
                              ScalarStats, ScheduledHyperParamSetter, add_moving_summary, argscope,
                              launch_train_with_config, logger)
    from kerastrainer.dataflow import dataset
    from kerastrainer.utils.cluster import get_rank_and_size, set_logger_dir_on_chief, shard_list

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 28, 28), tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            x = tf.expand_dims(image * 2 - 1, 3)
            with argscope(Conv2D, kernel_size=3, activation=tf.nn.relu):
                x = Conv2D("conv0", x, 32)
                x = MaxPooling("pool0", x, 2)
                x = Conv2D("conv1", x, 64)
                x = MaxPooling("pool1", x, 2)
            x = FullyConnected("fc0", x, 256, activation=tf.nn.relu)
            logits = FullyConnected("fc1", x, 10)
            tf.nn.softmax(logits, name="prob")
            cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                                  name="cross_entropy_loss")
            correct = tf.cast(tf.nn.in_top_k(label, logits, 1), tf.float32)
            tf.subtract(1.0, correct, name="incorrect_vector")
            add_moving_summary(cost, tf.reduce_mean(correct, name="accuracy"))
            return cost

        def optimizer(self):
            return keras.optimizers.Adam(learning_rate=1e-3)

    rank, size = get_rank_and_size()
    set_logger_dir_on_chief(args.logdir, action="k")

    if args.fake:
        train = FakeData([[args.batch, 28, 28], [args.batch]], size=args.steps_per_epoch or 30, dtype=["float32", "int32"],
                         domain=[(0, 1), (0, 10)])
        test = FakeData([[256, 28, 28], [256]], size=4, dtype=["float32", "int32"], domain=[(0, 1), (0, 10)])
    else:
        images, labels = dataset.Mnist("train", dir=args.data).as_arrays()
        # shard the sample list, not a shuffled stream: the shards are disjoint and cost nothing
        mine = shard_list(range(len(images)), rank, size)
        train = DataFromList([[images[i].astype("float32") / 255, int(labels[i])] for i in mine], shuffle=True)
        train = BatchData(train, args.batch, remainder=False)
        test = BatchData(dataset.Mnist("test", dir=args.data, shuffle=False), 256, remainder=True)
    logger.info("Rank %d of %d: %d batches of %d per epoch.", rank, size, len(train), args.batch)

    config = AutoResumeTrainConfig(
        model=Model(),
        dataflow=train,
        callbacks=[
            ModelSaver(),  # writes on the chief only
            InferenceRunner(test, [ScalarStats(["cross_entropy_loss"]), ClassificationError("incorrect_vector")]),
            ScheduledHyperParamSetter("learning_rate", [(1, 1e-3), (3, 3e-4), (5, 1e-4)]),  # every worker
        ],
        steps_per_epoch=args.steps_per_epoch,
        max_epoch=args.epochs,
    )
    launch_train_with_config(config, trainer)
    if trainer.is_chief:
        error = trainer.monitors.get_latest("validation_error")
        logger.info("Validation accuracy after epoch %d: %.2f%%", trainer.epoch_num, 100 * (1 - error))


if __name__ == "__main__":
    main()
