"""Replication overhead: 2 towers on 2 logical CPU devices against 1 tower doing the same work.

Model: 28x28x1 input, conv 16 3x3 + relu, conv 32 3x3 + relu, 2x2 max pool, dense 64 + relu,
dense 10; SGD momentum; softmax cross-entropy. The same total batch of 2B images per step:

- kerastrainer, 1 tower, batch 2B (``SimpleTrainer``, QueueInput over a DataFlow)
- kerastrainer, 2 towers, batch B each (``SyncMultiGPUTrainerReplicated(2)``)
- ``keras.Model.fit``, one device, batch 2B, ``steps_per_execution=1``
- ``keras.Model.fit`` under ``MirroredStrategy`` on the 2 logical devices, global batch 2B,
  ``steps_per_execution=1`` (Keras 3.15 fails with more under MirroredStrategy)

Each runs in its own process with 2 logical CPU devices, interleaved, 3 repeats; the
table reports steps/s, and for each system pair the overhead of replication:
``time per step with 2 replicas / time per step with 1`` - 1. With a GPU, ``--gpu``
runs kerastrainer's 1-tower images/s on it instead.

    python bench/multidevice.py [--steps 200] [--batch 64] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

CLASSES = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="timed steps (after a warm-up of the same count)")
    p.add_argument("--batch", type=int, default=32, help="B: the per-tower batch; the total is 2B")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gpu", action="store_true", help="measure images/s of one tower on a GPU")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _setup_tf(devices=2):
    import tensorflow as tf
    if not tf.config.list_physical_devices("GPU"):
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * devices)
    return tf


def _keras_model():
    import keras
    return keras.Sequential([
        keras.layers.Input((28, 28, 1)),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(CLASSES),
    ])


def _data(total_batch):
    import numpy as np
    rng = np.random.RandomState(0)
    return [rng.rand(total_batch, 28, 28, 1).astype("float32"),
            rng.randint(0, CLASSES, total_batch).astype("int32")]


def child_kerastrainer(towers: int, args) -> None:
    tf = _setup_tf()
    import keras
    from kerastrainer.callbacks import Callback
    from kerastrainer.dataflow import DataFlow
    from kerastrainer.models import Conv2D, FullyConnected, MaxPooling
    from kerastrainer.train import (ModelDesc, SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                                    launch_train_with_config)

    per_tower = 2 * args.batch // towers
    batch = _data(per_tower)

    class Batches(DataFlow):
        def __iter__(self):
            while True:
                yield batch

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 28, 28, 1), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

        def build_graph(self, x, y):
            h = Conv2D("conv0", x, 16, 3, activation=tf.nn.relu)
            h = Conv2D("conv1", h, 32, 3, activation=tf.nn.relu)
            h = MaxPooling("pool", h, 2)
            h = FullyConnected("fc0", h, 64, activation=tf.nn.relu)
            logits = FullyConnected("fc1", h, CLASSES)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

        def optimizer(self):
            return keras.optimizers.SGD(0.01, momentum=0.9)

    clock = {}

    class Clock(Callback):
        _chief_only = False

        def _before_epoch(self):
            if self.epoch_num == 2:
                clock["t0"] = time.perf_counter()

        def _after_epoch(self):
            clock["t1"] = time.perf_counter()

    trainer = SimpleTrainer() if towers == 1 else SyncMultiGPUTrainerReplicated(towers)
    launch_train_with_config(TrainConfig(model=Model(), dataflow=Batches(), callbacks=[Clock()], extra_callbacks=[],
                                         monitors=[], steps_per_epoch=args.steps, max_epoch=2), trainer)
    sps = args.steps / (clock["t1"] - clock["t0"])
    C.emit_result(steps_per_sec=sps, images_per_sec=sps * 2 * args.batch, summary=f"{sps:.1f} steps/s")


def child_fit(mirrored: bool, args) -> None:
    tf = _setup_tf()
    import keras

    x, y = _data(2 * args.batch)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]) if mirrored else tf.distribute.get_strategy()
    with strategy.scope():
        model = _keras_model()
        model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=1)
    model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)  # warm-up
    t0 = time.perf_counter()
    model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)
    sps = args.steps / (time.perf_counter() - t0)
    C.emit_result(steps_per_sec=sps, images_per_sec=sps * 2 * args.batch, summary=f"{sps:.1f} steps/s")


def main(argv=None) -> None:
    args = parse_args(argv)
    children = {
        "kt1": lambda: child_kerastrainer(1, args),
        "kt2": lambda: child_kerastrainer(2, args),
        "fit1": lambda: child_fit(False, args),
        "fit2": lambda: child_fit(True, args),
    }
    name = C.child_arg(sys.argv if argv is None else argv)
    if name:
        C.dispatch_child(children, name)
        return

    C.print_header("replication overhead on 2 logical CPU devices (same total batch per step)")
    me = os.path.abspath(__file__)
    common = ["--steps", str(args.steps), "--batch", str(args.batch)]
    systems = [C.System(label, [sys.executable, me, "--child", key] + common, timeout=900)
               for label, key in [("kerastrainer 1 tower (2B)", "kt1"), ("kerastrainer 2 towers (B each)", "kt2"),
                                  ("keras fit 1 device (2B)", "fit1"), ("keras fit MirroredStrategy (2B)", "fit2")]]
    C.run_interleaved(systems, args.repeats, verbose=args.verbose)
    med = {s.name: C.median_of(s, "steps_per_sec") for s in systems}
    print()
    print(C.results_table(systems, "steps_per_sec", "steps/s", ours="kerastrainer 2 towers (B each)"))

    def overhead(one, two):
        if med[one] and med[two]:
            return med[one] / med[two] - 1.0
        return None

    ours = overhead("kerastrainer 1 tower (2B)", "kerastrainer 2 towers (B each)")
    fit = overhead("keras fit 1 device (2B)", "keras fit MirroredStrategy (2B)")
    print()
    print(f"replication overhead, kerastrainer: {C.fmt(None if ours is None else 100 * ours)}%")
    print(f"replication overhead, keras fit:    {C.fmt(None if fit is None else 100 * fit)}%")
    print(C.goal_line("kerastrainer replication overhead <= 10%", None if ours is None else ours <= 0.10))
    print(C.goal_line("lower than fit's under MirroredStrategy",
                      None if ours is None or fit is None else ours < fit))


if __name__ == "__main__":
    main()
