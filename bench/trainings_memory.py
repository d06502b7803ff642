"""Memory of many trainings in one process: kerastrainer beside plain ``keras.Model.fit``.

A notebook, a hyper-parameter search or a test suite trains many models in one process; each
training must free what it made. Each system runs in a fresh child process that trains the same
small MLP (8 -> 16 -> 3, 2 batches of 32, one epoch) ``--trainings`` times and reports, after
training 10, at the halfway point and at the end: the process's resident memory (RSS) and the
``tf.Variable`` objects still alive after ``gc.collect()``. The figure that matters is the slope
over the second half (MiB per training, once caches and allocator arenas have settled) and the
live variables (a training's variables alive after it ended are a leak).

- ``kt_modeldesc``: a ``ModelDesc`` trained by ``SimpleTrainer`` + ``launch_train_with_config``
  (no callbacks, no monitors), the trainer dropped after each run.
- ``kt_keras``: the same layers as a Keras model, trained by ``KerasModel(model).fit``.
- ``keras_fit``: the same Keras model trained by ``keras.Model.fit`` (the reference).

Run::

    python bench/trainings_memory.py                  # 200 trainings per system (~8 min on 2 cores)
    python bench/trainings_memory.py --trainings 60
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

SYSTEMS = ("kt_modeldesc", "kt_keras", "keras_fit")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def _live_variables() -> int:
    import tensorflow as tf
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, tf.Variable))


def _data():
    import numpy as np
    rng = np.random.RandomState(0)
    x = rng.randn(64, 8).astype("float32")
    return x, (x[:, :3].sum(axis=1) > 0).astype("int64")


def _keras_mlp():
    import keras
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])


def _train_kt_modeldesc():
    import keras
    import tensorflow as tf

    from kerastrainer import DataFromList, ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
    from kerastrainer.dataflow import BatchData
    from kerastrainer.models import FullyConnected
    x, y = _data()

    class MLP(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int64, "y")]

        def build_graph(self, xb, yb):
            logits = FullyConnected("fc2", FullyConnected("fc1", xb, 16, activation=tf.nn.relu), 3)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))

        def optimizer(self):
            return keras.optimizers.SGD(0.1)

    def run():
        df = BatchData(DataFromList([[a, b] for a, b in zip(x, y)], shuffle=False), 32)
        launch_train_with_config(TrainConfig(model=MLP(), dataflow=df, max_epoch=1, extra_callbacks=[],
                                             monitors=[]), SimpleTrainer())
    return run


def _train_keras(ours: bool):
    x, y = _data()

    def run():
        import keras
        model = _keras_mlp()
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if ours:
            from kerastrainer import KerasModel
            KerasModel(model).fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
        else:
            model.fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False)
    return run


def _child(system: str, trainings: int) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import logging

    from kerastrainer.utils import logger
    logger._logger.setLevel(logging.ERROR)   # a training's log lines, times 200
    run = {"kt_modeldesc": _train_kt_modeldesc, "kt_keras": lambda: _train_keras(True),
           "keras_fit": lambda: _train_keras(False)}[system]()
    marks = sorted({10, trainings // 2, trainings})
    points = []
    t0 = time.perf_counter()
    for i in range(1, trainings + 1):
        run()
        if i in marks:
            points.append([i, round(_rss_mib(), 1), _live_variables()])
    C.emit_result(points=points, seconds=round(time.perf_counter() - t0, 1))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainings", type=int, default=200)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.trainings < 40:
        p.error("--trainings must be at least 40 (the slope is read over the second half)")
    if args.child:
        _child(args.child, args.trainings)
        return
    C.print_header(f"bench/trainings_memory.py: {args.trainings} trainings in one process, kerastrainer and "
                   "keras.Model.fit")
    rows, slopes = [], {}
    for system in SYSTEMS:
        try:
            r = C.run_child([sys.executable, os.path.abspath(__file__), "--child", system, "--trainings",
                             str(args.trainings)], timeout=60 * 60, verbose=args.verbose)
        except C.ChildFailed as e:
            print(f"{system}: failed: {e}", flush=True)
            rows.append([system, "failed", "", "", "", ""])
            continue
        at = {n: (rss, live) for n, rss, live in r["points"]}
        n0, n1, n2 = 10, args.trainings // 2, args.trainings
        (rss0, _), (rss1, _), (rss2, live) = at[n0], at[n1], at[n2]
        slope = (rss2 - rss1) / (n2 - n1)
        slopes[system] = slope
        rows.append([system, f"{rss0:.0f}", f"{rss1:.0f}", f"{rss2:.0f}", f"{slope:+.3f}", str(live)])
        print(f"   {system:13s} RSS after {n0}/{n1}/{n2} trainings: {rss0:.0f}/{rss1:.0f}/{rss2:.0f} MiB; "
              f"{slope:+.3f} MiB per training over the second half; {live} live tf.Variables "
              f"({r['seconds']:.0f} s)", flush=True)
    print()
    print(C.format_table(["system", "RSS MiB at 10", "at half", "at end", "MiB / training (2nd half)",
                          "live tf.Variables at end"], rows), flush=True)
    ref = slopes.get("keras_fit")
    for ours in ("kt_modeldesc", "kt_keras"):
        if ours in slopes and ref is not None:
            print(C.goal_line(f"{ours}: no more growth per training than keras.Model.fit (+0.05 MiB of slack)",
                              slopes[ours] <= max(ref, 0.0) + 0.05))


if __name__ == "__main__":
    main()
