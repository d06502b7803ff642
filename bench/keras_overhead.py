#!/usr/bin/env python
"""Step overhead of KerasModel.fit against keras.Model.fit, on the same small convnet.

The model: 28x28x1 input, conv 32 3x3 same + relu, 2x2 max pool, flatten, dense 10;
batch 64, Adam, random data. Systems, each in its own subprocess, interleaved and
repeated (medians reported):

- ``keras_spe1``: ``keras.Model.fit`` with ``steps_per_execution=1``;
- ``keras_speN``: ``keras.Model.fit`` with ``steps_per_execution`` N (8, 32, 128);
- ``keras_speN_bfc``: the same with TF's BFC CPU allocator (``TF_CPU_ALLOCATOR_USE_BFC=true``),
  which ``import kerastrainer`` asks for (kerastrainer/utils/cpu_allocator.py): fit given the
  allocator the kerastrainer runs have;
- ``kt_dataflow``: ``KerasModel.fit`` with QueueInput over a DataFlow of batches;
- ``kt_numpy``: ``KerasModel.fit`` on numpy arrays (a DataFlow and QueueInput too);
- ``kt_tfdata``: ``KerasModel.fit`` on a ``tf.data.Dataset`` (TFDatasetInput).

Each run trains one warm-up epoch (tracing, queue fill), then times one epoch.
The table gives steps/s, the ratio to the best keras.Model.fit figure, and the
final training loss (the epoch's mean; same data, seed and steps in every system).

    python bench/keras_overhead.py [--steps 300] [--repeats 3]
"""
import json
import os
import subprocess
import sys
import time

from _common import bfc_variant, print_rate_table, rate_bench_args, run_result_children

BATCH = 64
JIT = os.environ.get("KT_BENCH_JIT") == "1"   # SimpleTrainer(jit_compile=...) for the kerastrainer runs


def build_model():
    import keras
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(10),
    ])


def make_data(steps):
    import numpy as np
    rng = np.random.RandomState(0)
    x = rng.rand(steps * BATCH, 28, 28, 1).astype("float32")
    y = rng.randint(0, 10, size=steps * BATCH).astype("int32")
    return x, y


def run_keras(spe, steps):
    import keras
    x, y = make_data(steps)
    model = build_model()
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=spe)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)      # warm-up
    t0 = time.perf_counter()
    hist = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    dt = time.perf_counter() - t0
    return steps / dt, hist.history["loss"][-1]


def run_kt(kind, steps):
    import keras
    from kerastrainer.callbacks import CallbackFactory
    from kerastrainer.dataflow import DataFromList
    from kerastrainer.keras import KerasModel
    from kerastrainer.train import SimpleTrainer
    x, y = make_data(steps)
    if kind == "numpy":
        data = (x, y)
        fit_kw = dict(batch_size=BATCH, shuffle=False)
    elif kind == "tfdata":
        import tensorflow as tf
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).prefetch(4)
        fit_kw = {}
    else:
        data = DataFromList([(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, len(x), BATCH)], shuffle=False)
        fit_kw = {}
    km = KerasModel(build_model(), input=data, trainer=SimpleTrainer(jit_compile=JIT))
    km.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    stamps = []
    timer = CallbackFactory(trigger_epoch=lambda cb: stamps.append(time.perf_counter()))
    hist = km.fit(max_epoch=2, callbacks=[timer], extra_callbacks=[], monitors=[], **fit_kw)
    print(f"steps_per_call at the end: {km.trainer.last_call_steps} (auto: {km.trainer.steps.auto_k})", file=sys.stderr)
    return steps / (stamps[1] - stamps[0]), hist.history["loss"][-1]


def child(system, steps):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    kind = bfc_variant(system)
    if kind.startswith("keras_spe"):
        rate, loss = run_keras(int(kind[len("keras_spe"):]), steps)
    else:
        rate, loss = run_kt(kind[len("kt_"):], steps)
    print("RESULT " + json.dumps({"system": system, "steps_per_s": rate, "loss": loss}))


def main():
    args = rate_bench_args(__doc__, "8,32,128")
    if args.child:
        child(args.child, args.steps)
        return
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    spes = args.spe.split(",")
    systems = (["keras_spe1"] + [f"keras_spe{s}" for s in spes] + [f"keras_spe{s}_bfc" for s in spes]
               + ["kt_dataflow", "kt_numpy", "kt_tfdata"])
    results = run_result_children(__file__, systems, args.repeats, ["--steps", str(args.steps)],
                                  lambda r: f"{r['steps_per_s']:8.1f} steps/s  loss {r['loss']:.5f}")
    print_rate_table(results, "keras", "final loss",
                     f"medians of {args.repeats} runs, {args.steps} steps of batch {BATCH}")

if __name__ == "__main__":
    main()
