"""Step-overhead benchmark: training steps/s of a small convnet, where the training
loop's own cost (Python, input pipeline hand-off, per-step dispatch) shows.

Model: 28x28x1 input, conv 32 3x3 same + relu, 2x2 max pool, flatten, dense 10;
batch 64; Adam(1e-3); softmax cross-entropy. Inputs are random arrays made once:
the data source yields the same preallocated numpy batch, so data making costs
nothing and the measure is the loop.

Systems, each in its own fresh process (fresh TF), interleaved, 3 repeats, medians:
- kerastrainer ``SimpleTrainer(steps_per_call='auto')`` + ``QueueInput`` over a DataFlow,
  ``extra_callbacks=[]``, ``monitors=[]`` (the bare loop)
- the same with the default callbacks and monitors (progress bar, moving-average
  summaries, NaN guard; TensorBoard events, stats.json, console table)
- ``keras.Model.fit`` on the same model as a Keras Sequential, ``steps_per_execution``
  1 and 32, fed from ``tf.data.Dataset.from_tensors(batch).repeat()`` (the cheapest
  fit input: no per-epoch shuffling or slicing of numpy arrays), ``jit_compile=False``
- tensorpack 0.11 ``SimpleTrainer`` + ``QueueInput`` (bench venv, TF1 graph mode via
  tf-keras and ``TF_USE_LEGACY_KERAS=1``), ``extra_callbacks=[]``, ``monitors=[]``
- ceiling: kerastrainer with ``DummyConstantInput`` and a fixed ``steps_per_call`` of
  a whole epoch (no input pipeline, one Python call per epoch)
- (info, not a goal) kerastrainer + ``QueueInput`` with that same fixed ``steps_per_call``:
  tells the cost of the input path from the cost of the calls 'auto' makes

Every system runs one warm-up epoch (tracing, graph building, queue filling) and
then ``--epochs`` timed epochs of ``--steps`` steps; steps/s is timed steps over the
time from the first timed epoch's start to the last one's end. Per-step CPU time
(all threads of the process) is reported too: on a shared machine it swings less
than wall-clock rates.

Run (after ``bash bench/setup_env.sh`` for tensorpack)::

    python bench/step_overhead.py                   # ~5 min on 2 busy cores
    python bench/step_overhead.py --steps 640 --repeats 5 --skip-defaults --skip-fixed
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

BATCH = 64
IMAGE = (28, 28, 1)
CLASSES = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=160, help="steps per epoch (a multiple of 32)")
    p.add_argument("--epochs", type=int, default=1, help="timed epochs after the warm-up epoch")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-defaults", action="store_true",
                   help="do not run kerastrainer with its default callbacks and monitors")
    p.add_argument("--skip-fixed", action="store_true",
                   help="do not run the (info) row: QueueInput with a fixed steps_per_call of a whole epoch")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps % 32:
        p.error("--steps must be a multiple of 32 (fit's steps_per_execution=32)")
    return args


def _batch():
    import numpy as np
    rng = np.random.RandomState(0)
    return [rng.rand(BATCH, *IMAGE).astype(np.float32), rng.randint(0, CLASSES, size=(BATCH,)).astype(np.int32)]


class EpochClock:
    """Wall and CPU time from the start of epoch 2 (the first after the warm-up) to the end of the last."""

    def __init__(self):
        self.t0 = self.t1 = self.c0 = self.c1 = None

    def begin(self, epoch: int) -> None:
        if epoch == 2:
            self.t0, self.c0 = time.perf_counter(), time.process_time()

    def end(self) -> None:
        self.t1, self.c1 = time.perf_counter(), time.process_time()

    def report(self, steps: int, **extra) -> None:
        secs, cpu = self.t1 - self.t0, self.c1 - self.c0
        C.emit_result(value=steps / secs, cpu_ms_per_step=1000 * cpu / steps, seconds=secs, steps=steps,
                      summary=f"{steps / secs:,.0f} steps/s, {1000 * cpu / steps:.2f} CPU ms/step", **extra)


# ============================================================================
# kerastrainer
# ============================================================================

def _kt_run(args, source: str, defaults: bool = False, fixed_calls: bool = False):
    import keras
    import tensorflow as tf

    from kerastrainer import logger
    from kerastrainer.callbacks import Callback
    from kerastrainer.dataflow import DataFlow
    from kerastrainer.input_source import DummyConstantInput, QueueInput
    from kerastrainer.models import Conv2D, FullyConnected, MaxPooling
    from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None,) + IMAGE, tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            x = Conv2D("conv0", image, 32, 3, padding="same", activation=tf.nn.relu)
            x = MaxPooling("pool0", x, 2)
            logits = FullyConnected("fc", x, CLASSES)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                                  name="cost")

        def optimizer(self):
            return keras.optimizers.Adam(1e-3)

    class SameBatch(DataFlow):
        def __init__(self):
            self.dp = _batch()

        def __iter__(self):
            while True:
                yield self.dp

    clock = EpochClock()
    largest_call = [0]

    class Timer(Callback):
        _chief_only = False

        def _before_epoch(self):
            clock.begin(self.trainer.epoch_num)

        def _trigger_step(self):  # runs after each call; asks for no particular step
            largest_call[0] = max(largest_call[0], self.trainer.last_call_steps)

        def _after_epoch(self):
            clock.end()

    if source == "queue":
        data = QueueInput(SameBatch())
        trainer = SimpleTrainer(steps_per_call=args.steps if fixed_calls else "auto")
    else:
        data = DummyConstantInput([[BATCH, *IMAGE], [BATCH]])
        trainer = SimpleTrainer(steps_per_call=args.steps)
    kw = {} if defaults else {"extra_callbacks": [], "monitors": []}
    if defaults:
        logger.set_logger_dir(tempfile.mkdtemp(prefix="kt-bench-log-"), action="d")
    config = TrainConfig(model=Model(), data=data, callbacks=[Timer()], steps_per_epoch=args.steps,
                         max_epoch=1 + args.epochs, **kw)
    launch_train_with_config(config, trainer)
    assert trainer.global_step == args.steps * (1 + args.epochs), trainer.global_step
    clock.report(args.steps * args.epochs, largest_steps_per_call=largest_call[0])


def child_kt_queue(args):
    _kt_run(args, "queue")


def child_kt_defaults(args):
    _kt_run(args, "queue", defaults=True)


def child_kt_queue_fixed(args):
    _kt_run(args, "queue", fixed_calls=True)


def child_kt_ceiling(args):
    _kt_run(args, "dummy")


# ============================================================================
# keras.Model.fit
# ============================================================================

def _fit(args, steps_per_execution: int):
    import keras
    import tensorflow as tf
    from keras import layers

    model = keras.Sequential([
        keras.Input(IMAGE),
        layers.Conv2D(32, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(2),
        layers.Flatten(),
        layers.Dense(CLASSES),
    ])
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=steps_per_execution, jit_compile=False)
    x, y = _batch()
    ds = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(tf.data.AUTOTUNE)
    clock = EpochClock()

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            clock.begin(epoch + 1)

        def on_epoch_end(self, epoch, logs=None):
            clock.end()

    model.fit(ds, steps_per_epoch=args.steps, epochs=1 + args.epochs, verbose=0, callbacks=[Timer()])
    clock.report(args.steps * args.epochs)


def child_fit1(args):
    _fit(args, 1)


def child_fit32(args):
    _fit(args, 32)


# ============================================================================
# tensorpack 0.11 (bench venv, TF_USE_LEGACY_KERAS=1)
# ============================================================================

def child_tensorpack(args):
    # tensorpack's tf.layers wrappers need the legacy Keras; must be set before TF loads
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tensorpack as tp

    class Model(tp.ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None,) + IMAGE, tf.float32, "input"), tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            x = tp.Conv2D("conv0", image, 32, 3, padding="same", activation=tf.nn.relu)
            x = tp.MaxPooling("pool0", x, 2)
            logits = tp.FullyConnected("fc", x, CLASSES)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                                  name="cost")

        def optimizer(self):
            return tf.compat.v1.train.AdamOptimizer(1e-3)

    class SameBatch(tp.DataFlow):
        def __init__(self):
            self.dp = _batch()

        def __iter__(self):
            while True:
                yield self.dp

    clock = EpochClock()

    class Timer(tp.Callback):
        def _before_epoch(self):
            clock.begin(self.epoch_num)

        def _after_epoch(self):
            clock.end()

    trainer = tp.SimpleTrainer()
    config = tp.TrainConfig(model=Model(), data=tp.QueueInput(SameBatch()), callbacks=[Timer()],
                            extra_callbacks=[], monitors=[], steps_per_epoch=args.steps,
                            max_epoch=1 + args.epochs)
    tp.launch_train_with_config(config, trainer)
    assert trainer.global_step == args.steps * (1 + args.epochs), trainer.global_step
    clock.report(args.steps * args.epochs)


CHILDREN = {"kt-queue": child_kt_queue, "kt-queue-fixed": child_kt_queue_fixed, "kt-defaults": child_kt_defaults, "kt-ceiling": child_kt_ceiling,
            "fit-1": child_fit1, "fit-32": child_fit32, "tensorpack": child_tensorpack}


# ============================================================================
# driver
# ============================================================================

def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        C.dispatch_child({k: (lambda f=f: f(args)) for k, f in CHILDREN.items()}, args.child)
        return
    C.print_header("bench/step_overhead.py: training steps/s of a small convnet, kerastrainer vs fit and tensorpack")
    me = os.path.abspath(__file__)
    venv = C.bench_venv_python()
    common = ["--steps", str(args.steps), "--epochs", str(args.epochs)]

    def cmd(python, child):
        return None if python is None else [python, me, "--child", child] + common

    ours = C.System("kerastrainer SimpleTrainer + QueueInput", cmd(sys.executable, "kt-queue"))
    systems = [ours]
    if not args.skip_defaults:
        systems.append(C.System("kerastrainer, default callbacks+monitors", cmd(sys.executable, "kt-defaults")))
    fit1 = C.System("keras fit, steps_per_execution=1", cmd(sys.executable, "fit-1"))
    fit32 = C.System("keras fit, steps_per_execution=32", cmd(sys.executable, "fit-32"))
    tp = C.System("tensorpack 0.11 SimpleTrainer + QueueInput", cmd(venv, "tensorpack"),
                  env={"TF_USE_LEGACY_KERAS": "1"}, why="no .bench-venv (run bash bench/setup_env.sh)")
    ceiling = C.System("ceiling: kerastrainer DummyConstantInput", cmd(sys.executable, "kt-ceiling"))
    fixed = C.System(f"(info) kerastrainer QueueInput, steps_per_call={args.steps}",
                     cmd(sys.executable, "kt-queue-fixed"))
    systems += [fit1, fit32, tp, ceiling]
    if not args.skip_fixed:
        systems.append(fixed)
    print(f"\n-- {args.steps} steps per epoch, 1 warm-up epoch + {args.epochs} timed; batch {BATCH}; "
          f"{args.repeats} interleaved repeats", flush=True)
    C.run_interleaved(systems, args.repeats, args.verbose)

    med = {s.name: C.median_of(s, "value") for s in systems}
    notes = {ceiling.name: f"steps_per_call={args.steps}"}
    calls = [r.get("largest_steps_per_call") for r in ours.results if r.get("largest_steps_per_call")]
    if calls:
        notes[ours.name] = f"auto steps_per_call reached {max(calls)}"
    print()
    print(C.results_table(systems, "value", "steps/s", ours.name, notes=notes,
                          extra=[("CPU ms / step", "cpu_ms_per_step")]))
    refs = [m for m in (med[fit1.name], med[fit32.name], med[tp.name]) if m is not None]
    mine = med[ours.name]
    best = max(refs) if refs else None
    r_best = mine / best if mine and best else None
    r_ceil = mine / med[ceiling.name] if mine and med[ceiling.name] else None
    missing = any(m is None for m in (med[fit1.name], med[fit32.name], med[tp.name]))
    print(C.goal_line(f">= 1.3x the best reference (is {C.fmt(r_best)}x)",
                      None if r_best is None or missing else r_best >= 1.3))
    print(C.goal_line(f">= 90% of the ceiling (is {C.fmt(None if r_ceil is None else 100 * r_ceil, 0)}%)",
                      None if r_ceil is None else r_ceil >= 0.9))
    cpu_ours, cpu_ceil = C.median_of(ours, "cpu_ms_per_step"), C.median_of(ceiling, "cpu_ms_per_step")
    r_cpu = cpu_ceil / cpu_ours if cpu_ours and cpu_ceil else None
    print(C.goal_line(f">= 90% of the ceiling on a CPU-time basis, ceiling CPU ms/step / ours "
                      f"(is {C.fmt(None if r_cpu is None else 100 * r_cpu, 0)}%; robust to other load)",
                      None if r_cpu is None else r_cpu >= 0.9), flush=True)


if __name__ == "__main__":
    main()
