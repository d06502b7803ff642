"""ResNet-50 benchmark: training images/s of kerastrainer (ModelDesc and KerasModel) against
``keras.Model.fit``, XLA off and on, the XLA compile times, the real JPEG pipeline beside the
synthetic input; and the ImageNet augmentation DataFlow against tensorpack 0.11's. One invocation.

Each configuration runs in its own fresh process with a timeout; one that does not finish
in time is reported as "not finished" (``fit`` with XLA gets ``--fit-timeout``).

1. Training (``--device gpu`` on a GPU machine; ``--device cpu`` or ``--quick`` elsewhere).
   The same batch, image size and precision for every row, SGD with Nesterov momentum,
   weight decay on the kernels. Rows:
   - ModelDesc: the model of ``examples/imagenet/imagenet-resnet.py`` (the ResNet-50 zoo:
     v1.5, bias-free convs), ``SimpleTrainer``, fed by
     ``DummyConstantInput`` (the model's ceiling), by ``QueueInput`` of the example's fake
     uint8 DataFlow (``StagingInput`` around it on a GPU, the default: a thread stages the
     batches; ``md-queue-step-xla`` is the in-loop staging it replaced), and by the example's
     real training pipeline (``imagenet_utils.get_imagenet_dataflow``: JPEG decode +
     fb.resnet augmentation in ``--df-workers`` processes) over generated JPEGs.
   - KerasModel: ``keras.applications.ResNet50(weights=None)`` as
     ``examples/imagenet/imagenet-resnet-keras.py`` builds it, the fake DataFlow.
   - keras.Model.fit: the *same* Keras model, compiled the same way, fed by an in-memory
     ``tf.data`` pipeline (``from_tensors(batch).repeat().prefetch``): fit's fastest input.
     ``fit-xla-kt`` (not a default row): fit with XLA under the ``XLA_FLAGS`` that ``import
     kerastrainer`` adds (with Keras's own, fit's XLA compile stalled on an H100) and
     ``steps_per_execution=10``: the best fit settings that finish.
   "XLA on" is kerastrainer's default ``jit_compile='auto'`` on a GPU (``True`` on CPU,
   where 'auto' means off); "XLA off" is ``jit_compile=False``; fit gets
   ``jit_compile=True`` / ``False``. Each child trains one warm-up epoch (tracing, XLA
   compile, queue filling) and one timed epoch of the same length. "first call s" is
   kerastrainer's first call (tracing + XLA compile + one step), or, for fit, the warm-up
   epoch minus its steps at the timed rate. Ratios are against the best fit row that
   finished. KerasModel vs fit is the like-for-like comparison (same model, same maths).

2. DataFlow: the examples' training pipeline (``imagenet_utils.get_imagenet_dataflow``:
   read + decode + fb.resnet augmentation with the fused colour jitter, batched in 2
   worker processes, uint8 batches over ZeroMQ) against tensorpack 0.11's ImageNet
   example pipeline (``dataset.ILSVRC12`` + ``AugmentImageComponent`` with
   ``fbresnet_augmentor`` built from tensorpack's imgaug, ``MultiProcessRunnerZMQ(2)``,
   ``BatchData``), on the same generated JPEGs (500x375, ILSVRC12 layout), batch 64,
   bicubic resize in both, OpenCV single-threaded in both (2 workers on 2 cores).
   Also images/s per CPU second, which other people's load on a shared machine
   disturbs less than wall-clock rates.

``--child train-rows --row-list KEY[:STEPS],...`` runs several rows one after the other in one
process (``bench/gpu/check.py`` uses it to fit one device call; see bench/gpu/README.md).

Run (after ``bash bench/setup_env.sh`` for tensorpack)::

    python bench/resnet50.py --device gpu             # on a GPU: bf16, 224 px, batch 128
    python bench/resnet50.py --quick                  # CPU, tiny sizes: shows every row works
    python bench/resnet50.py --only train --device gpu --rows md-dummy,md-queue-xla
    python bench/resnet50.py --only dataflow --df-batches 20
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import _common as C  # noqa: E402

EXAMPLES = os.path.join(C.REPO_ROOT, "examples", "imagenet")
DF_BATCH = 64
DF_WORKERS = 2
NUM_JPEGS = 256
JPEG_HW = (375, 500)
WNIDS = [f"n{10000000 + i:08d}" for i in range(8)]

# row key -> (label, child, input, xla)
ROWS = {
    "md-dummy-xla": ("ModelDesc, DummyConstantInput, XLA on", "train-modeldesc", "dummy", "on"),
    "md-queue": ("ModelDesc, QueueInput (fake uint8), XLA off", "train-modeldesc", "queue", "off"),
    "md-queue-xla": ("ModelDesc, QueueInput (fake uint8), XLA on", "train-modeldesc", "queue", "on"),
    # the default on a GPU stages batches from a thread; the in-loop staging it replaced
    "md-queue-step-xla": ("ModelDesc, QueueInput, StagingInput(mode='step', nr_stage=1) (before), XLA on",
                          "train-modeldesc", "queue-step", "on"),
    "md-jpeg-xla": ("ModelDesc, real JPEG pipeline, XLA on", "train-modeldesc", "jpeg", "on"),
    # where QueueInput's gap to the ceiling goes (bench/README.md, "On one H100"), not run by default
    "md-queue2-xla": ("ModelDesc, QueueInput + StagingInput(mode='step', nr_stage=2), XLA on", "train-modeldesc",
                      "queue2", "on"),
    "md-tfdata-xla": ("ModelDesc, TFDatasetInput (from_generator, prefetch to the GPU), XLA on", "train-modeldesc",
                      "tfdata", "on"),
    "km": ("KerasModel (keras ResNet50), XLA off", "train-kerasmodel", "queue", "off"),
    "km-xla": ("KerasModel (keras ResNet50), XLA on", "train-kerasmodel", "queue", "on"),
    "fit": ("keras.Model.fit (same keras ResNet50), XLA off", "train-fit", "tfdata", "off"),
    "fit-xla": ("keras.Model.fit (same keras ResNet50), XLA on", "train-fit", "tfdata", "on"),
    # fit's XLA with the XLA_FLAGS kerastrainer adds at import (Keras's own defaults stalled on an H100)
    "fit-xla-kt": ("keras.Model.fit (same keras ResNet50), XLA on, kerastrainer's XLA flags, steps_per_execution=10",
                   "train-fit", "tfdata", "on"),
    # diagnostics of the slow Keras compile (docs/training.md), not run by default
    "km-xla-nobias": ("KerasModel, keras ResNet50 with bias-free convs, XLA on", "train-kerasmodel", "nobias", "on"),
    "km-xla-noautotune": ("KerasModel, XLA on, XLA_FLAGS=--xla_gpu_autotune_level=0", "train-kerasmodel", "queue",
                          "on"),
    "km-xla-fused": ("KerasModel, XLA on, KERASTRAINER_XLA_DEFAULTS=0 (cuDNN conv+bias fusion on)",
                     "train-kerasmodel", "queue", "on"),
}
DEFAULT_ROWS = ["md-dummy-xla", "md-queue", "md-queue-xla", "md-queue-step-xla", "md-jpeg-xla", "km", "km-xla", "fit",
                "fit-xla"]


def _kerastrainer_xla_flags() -> str:
    """The flags ``import kerastrainer`` adds to XLA_FLAGS, read from its module file: importing the
    package here would add them to this driver's environment, and so to every row's."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "_kt_xla_flags", os.path.join(C.REPO_ROOT, "kerastrainer", "utils", "xla_flags.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.merge_disabled_passes("")


ROW_XLA_FLAGS = {"km-xla-noautotune": "--xla_gpu_autotune_level=0", "fit-xla-kt": _kerastrainer_xla_flags()}
ROW_ENV = {"km-xla-fused": {"KERASTRAINER_XLA_DEFAULTS": "0"}}
# fit's steps_per_execution (Keras's default 1): fewer host round trips, the fit user's other knob
ROW_FIT_SPE = {"fit-xla-kt": 10}
DEFAULTS = {  # --device -> batch, image size, precision, timed steps
    "gpu": dict(batch=128, image_size=224, precision="bf16", steps=60),
    "cpu": dict(batch=8, image_size=224, precision="fp32", steps=6),
    "quick": dict(batch=2, image_size=64, precision="fp32", steps=2),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["train", "dataflow"])
    p.add_argument("--quick", "--small", action="store_true",
                   help="CPU, 64 px, batch 2, 2 steps, 1 repeat: every row in a few minutes")
    p.add_argument("--repeats", type=int, help="default 3 (1 with --device gpu or --quick)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--rows", help=f"comma-separated training rows: {','.join(ROWS)} (default: all but the last two)")
    p.add_argument("--batch", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--steps", type=int, help="steps per epoch (warm-up epoch, then the timed one)")
    p.add_argument("--df-workers", type=int, help="processes of the real JPEG training pipeline "
                   "(default: CPUs - 1)")
    p.add_argument("--df-batches", type=int, default=15, help="timed DataFlow batches")
    p.add_argument("--df-warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900, help="seconds per training child")
    p.add_argument("--fit-timeout", type=float, default=600,
                   help="seconds for fit with XLA (on an H100 it did not finish 2 x 60 steps in 420 s)")
    p.add_argument("--xla-dump", help="dump each row's XLA modules under this folder (XLA_FLAGS=--xla_dump_to); "
                   "the table then counts the modules each row compiled")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--xla", choices=["on", "off"], help=argparse.SUPPRESS)
    p.add_argument("--images-dir", help=argparse.SUPPRESS)
    p.add_argument("--row", help=argparse.SUPPRESS)  # the row a training child runs (for per-row settings)
    p.add_argument("--row-list", help=argparse.SUPPRESS)  # train-rows: KEY[:STEPS],...
    p.add_argument("--jit-auto", action="store_true", help=argparse.SUPPRESS)  # XLA-on rows: 'auto' on CPU too
    # ModelDesc's QueueInput rows: StagingInput(force=True), so a CPU dry run stages too
    p.add_argument("--force-staging", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    defaults = DEFAULTS["quick" if args.quick else args.device]
    if args.quick:
        args.device = "cpu"
        args.df_batches, args.df_warmup = min(args.df_batches, 3), min(args.df_warmup, 1)
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.repeats is None:  # a GPU machine is quiet, and each training child compiles for a minute
        args.repeats = 1 if args.quick or args.device == "gpu" else 3
    if args.df_workers is None:
        args.df_workers = 2 if args.quick else max(1, (os.cpu_count() or 2) - 1)
    return args


# ============================================================================
# training children
# ============================================================================

_TF_READY = []


def _setup_tf(args, kerastrainer_first=True):
    if kerastrainer_first:  # as a kerastrainer user would: its XLA_FLAGS defaults before TF starts the GPU
        import kerastrainer  # noqa: F401
    import tensorflow as tf
    if not _TF_READY:  # once per process (train-rows runs several rows in one)
        if args.device == "cpu":
            tf.config.set_visible_devices([], "GPU")
        elif not tf.config.list_physical_devices("GPU"):
            raise SystemExit("--device gpu: no GPU visible")
        _TF_READY.append(True)
    import keras
    if args.precision != "fp32":
        keras.mixed_precision.set_global_policy({"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[args.precision])
    return tf, keras


def _import_example(name):
    import importlib.util
    sys.path.insert(0, EXAMPLES)
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(EXAMPLES, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _epoch_timer():
    """A kerastrainer callback: wall seconds of each epoch (before_epoch to after_epoch)."""
    from kerastrainer import Callback

    class EpochTimer(Callback):
        _chief_only = False

        def __init__(self):
            self.seconds = []

        def _before_epoch(self):
            self._t0 = time.perf_counter()

        def _after_epoch(self):
            self.seconds.append(time.perf_counter() - self._t0)
    return EpochTimer()


_ROW_EXTRA = {}  # train-rows: the row's key etc., added to its result line


def _versions() -> str:
    import platform
    tf, keras = sys.modules.get("tensorflow"), sys.modules.get("keras")
    return f"TensorFlow {getattr(tf, '__version__', '?')}, Keras {getattr(keras, '__version__', '?')}, " \
           f"Python {platform.python_version()}"


def _report_train(args, seconds, compile_s=None, **extra):
    warmup, timed = seconds[0], seconds[-1]
    ips = args.steps * args.batch / timed
    if compile_s is None:  # fit: the warm-up epoch beyond its steps at the timed rate
        compile_s = max(0.0, warmup - timed)
    extra = dict(_ROW_EXTRA, versions=_versions(), **extra)
    C.emit_result(value=ips, seconds=timed, warmup_s=warmup, compile_s=compile_s,
                  summary=f"{ips:,.1f} images/s ({timed:.1f} s timed; warm-up epoch {warmup:.1f} s, "
                          f"first call {compile_s:.1f} s)", **extra)


def _jit(args):
    """kerastrainer's jit_compile for --xla: the default 'auto' on a GPU (it means on there)."""
    if args.xla == "off":
        return False
    return "auto" if args.device == "gpu" or args.jit_auto else True


def _trainer(args):
    from kerastrainer import SimpleTrainer
    return SimpleTrainer(precision=None if args.precision == "fp32" else args.precision, jit_compile=_jit(args))


def _report_kerastrainer(args, timer, trainer):
    _report_train(args, timer.seconds, compile_s=(trainer.trace_seconds or 0) + (trainer.first_call_seconds or 0),
                  xla=bool(trainer.use_xla), region=trainer.xla_region)


def child_train_modeldesc(args):
    tf, keras = _setup_tf(args)
    from kerastrainer import DummyConstantInput, TrainConfig, launch_train_with_config
    ex = _import_example("imagenet-resnet")
    U = ex.U
    timer = _epoch_timer()
    model = ex.make_model_class()(50, args.image_size, total_batch=args.batch)
    if args.input == "dummy":
        data = dict(data=DummyConstantInput([[args.batch, args.image_size, args.image_size, 3], [args.batch]]))
    elif args.input == "jpeg":
        df = U.get_imagenet_dataflow(args.images_dir, "train", args.batch, args.image_size, num_proc=args.df_workers)
        data = dict(dataflow=df)  # the default input: QueueInput, StagingInput around it on a GPU
    elif args.input in ("queue-step", "queue2"):
        from kerastrainer import QueueInput, StagingInput
        data = dict(data=StagingInput(QueueInput(U.FakeImageNetData(args.batch, args.image_size)), mode="step",
                                      nr_stage=2 if args.input == "queue2" else 1, force=args.force_staging))
    elif args.input == "queue" and args.force_staging:  # the default wrapping, made on CPU too (a dry run)
        from kerastrainer import QueueInput, StagingInput
        data = dict(data=StagingInput(QueueInput(U.FakeImageNetData(args.batch, args.image_size)), force=True))
    elif args.input == "tfdata":
        data = dict(data=_tfdata_input(tf, U.FakeImageNetData(args.batch, args.image_size), args))
    else:
        data = dict(dataflow=U.FakeImageNetData(args.batch, args.image_size))
    trainer = _trainer(args)
    cfg = TrainConfig(model=model, callbacks=[timer], extra_callbacks=[], monitors=[], steps_per_epoch=args.steps,
                      max_epoch=2, **data)
    launch_train_with_config(cfg, trainer)
    _report_kerastrainer(args, timer, trainer)


def _tfdata_input(tf, df, args):
    """The fake DataFlow through tf.data: the host-to-GPU copy made by tf.data's own prefetch
    thread, outside the train function's loop (on CPU: a plain prefetch)."""
    from kerastrainer import TFDatasetInput
    df.reset_state()
    shape = (args.batch, args.image_size, args.image_size, 3)
    ds = tf.data.Dataset.from_generator(lambda: (tuple(dp) for dp in df), output_signature=(
        tf.TensorSpec(shape, tf.uint8), tf.TensorSpec((args.batch,), tf.int32))).repeat()
    if args.device == "gpu":  # the last transformation: TFDatasetInput must not repeat it again
        ds = ds.apply(tf.data.experimental.prefetch_to_device("/gpu:0", 3))
    else:
        ds = ds.prefetch(3)
    return TFDatasetInput(ds, repeat=False)


def _keras_model(args):
    ex = _import_example("imagenet-resnet-keras")
    model = ex.build_keras_resnet(50, args.image_size)
    if args.input == "nobias":  # the convs without their bias, as in the zoo model (a BatchNorm follows each)
        import keras

        def strip_bias(layer):
            if isinstance(layer, keras.layers.Conv2D):
                return keras.layers.Conv2D.from_config(dict(layer.get_config(), use_bias=False))
            if isinstance(layer, keras.Model):
                return keras.models.clone_model(layer, clone_function=strip_bias)
            return layer.__class__.from_config(layer.get_config())
        model = keras.models.clone_model(model, clone_function=strip_bias)
    return ex, model


def child_train_kerasmodel(args):
    tf, keras = _setup_tf(args)
    from kerastrainer import KerasModel
    ex, model = _keras_model(args)
    timer = _epoch_timer()
    km = KerasModel(model, input=ex.U.FakeImageNetData(args.batch, args.image_size), trainer=_trainer(args))
    ex.compile_model(km, args.batch)
    km.fit(steps_per_epoch=args.steps, max_epoch=2, callbacks=[timer], extra_callbacks=[], monitors=[])
    _report_kerastrainer(args, timer, km.trainer)


def child_train_fit(args):
    tf, keras = _setup_tf(args, kerastrainer_first=False)  # Keras as it comes
    import numpy as np
    ex, model = _keras_model(args)
    U = ex.U
    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, (args.batch, args.image_size, args.image_size, 3)).astype(np.uint8)
    y = rng.randint(0, U.NUM_CLASSES, (args.batch,)).astype(np.int32)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(tf.data.AUTOTUNE)
    opt = U.make_sgd(args.batch)
    if args.precision == "fp16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    spe = min(ROW_FIT_SPE.get(args.row, 1), args.steps)
    model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=args.xla == "on",
                  steps_per_execution=spe)

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seconds = []  # per instance: several rows may run in one process (train-rows)

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._t0)

    timer = Timer()
    model.fit(ds, steps_per_epoch=args.steps, epochs=2, callbacks=[timer], verbose=0)
    print(f"fit jit_compile resolved to {model.jit_compile}, steps_per_execution {spe}", file=sys.stderr)
    _report_train(args, timer.seconds, xla=bool(model.jit_compile))


# ============================================================================
# DataFlow children
# ============================================================================

def write_ilsvrc(root: str) -> int:
    """256 photo-like 500x375 JPEGs in the ILSVRC12 layout (train/<wnid>/, synsets.txt, train.txt)."""
    import cv2
    import numpy as np
    rng = np.random.RandomState(1)
    h, w = JPEG_HW
    lines = []
    for label, wnid in enumerate(WNIDS):
        os.makedirs(os.path.join(root, "train", wnid))
    for i in range(NUM_JPEGS):
        label = i % len(WNIDS)
        coarse = rng.randint(0, 256, size=(6, 8, 3)).astype(np.uint8)
        img = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC).astype(np.int16)
        img += rng.randint(-20, 21, size=img.shape).astype(np.int16)
        rel = f"{WNIDS[label]}/{WNIDS[label]}_{i}.JPEG"
        ok = cv2.imwrite(os.path.join(root, "train", rel), np.clip(img, 0, 255).astype(np.uint8),
                         [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        lines.append(f"{rel} {label}\n")
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.writelines(lines)
    with open(os.path.join(root, "synsets.txt"), "w") as f:
        f.writelines(w + "\n" for w in WNIDS)
    return NUM_JPEGS


def _time_batches(it, args, pids):
    for _ in range(args.df_warmup):
        next(it)
    meter = C.CpuMeter(pids()).start()
    t0 = time.perf_counter()
    n = 0
    for _ in range(args.df_batches):
        images, _ = next(it)
        n += len(images)
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    ips = n / secs
    C.emit_result(value=ips, images_per_cpu_s=n / cpu, cpu_ms_per_image=1000 * cpu / n,
                  summary=f"{ips:,.0f} images/s, {1000 * cpu / n:.2f} CPU ms/image")


def _forever(ds):
    while True:
        yield from ds


def child_df_kerastrainer(args):
    import cv2
    cv2.setNumThreads(1)
    sys.path.insert(0, EXAMPLES)
    import imagenet_utils as U
    ds = U.get_imagenet_dataflow(args.images_dir, "train", DF_BATCH, 224, num_proc=DF_WORKERS)
    ds.reset_state()
    try:
        _time_batches(_forever(ds), args, lambda: [p.pid for p in ds._workers.procs])
    finally:
        ds.close()


def child_df_tensorpack(args):
    import cv2
    import numpy as np
    cv2.setNumThreads(1)
    sys.modules["tensorflow"] = None  # tensorpack.dataflow would import TF otherwise
    from tensorpack.dataflow import AugmentImageComponent, BatchData, MultiProcessRunnerZMQ, dataset, imgaug
    # tensorpack's examples/ImageNetModels/imagenet_utils.py: fbresnet_augmentor(True), BGR constants
    augmentors = [
        imgaug.GoogleNetRandomCropAndResize(interp=cv2.INTER_CUBIC),
        imgaug.ToFloat32(),
        imgaug.RandomOrderAug([
            imgaug.BrightnessScale((0.6, 1.4)),
            imgaug.Contrast((0.6, 1.4), rgb=False),
            imgaug.Saturation(0.4, rgb=False),
            imgaug.Lighting(0.1, eigval=np.asarray([0.2175, 0.0188, 0.0045][::-1]) * 255.0,
                            eigvec=np.array([[-0.5675, 0.7192, 0.4009], [-0.5808, -0.0045, -0.8140],
                                             [-0.5836, -0.6948, 0.4203]], dtype="float32")[::-1, ::-1])]),
        imgaug.ToUint8(),
        imgaug.Flip(horiz=True),
    ]
    # its get_imagenet_dataflow(..., 'train', ...): decode + augment in workers, batch in the consumer
    ds = dataset.ILSVRC12(args.images_dir, "train", meta_dir=args.images_dir, shuffle=True)
    ds = AugmentImageComponent(ds, augmentors, copy=False)
    runner = MultiProcessRunnerZMQ(ds, DF_WORKERS)
    ds = BatchData(runner, DF_BATCH, remainder=False)
    ds.reset_state()
    try:
        _time_batches(_forever(ds), args, lambda: [p.pid for p in runner._procs])
    finally:
        C.kill_pids([p.pid for p in getattr(runner, "_procs", [])])  # no prctl: they would outlive us


ROW_START_PREFIX = "@@ROW_START "


def child_train_rows(args):
    """Several training rows, one after the other, in this one process (``--row-list KEY[:STEPS],...``).

    Saves a TensorFlow start per row and, on a GPU, lets the later rows reuse what XLA keeps per
    process (autotuning results of the same convolutions, compiled kernels): their first call is
    shorter than a fresh process's. All rows share this process's XLA_FLAGS (XLA reads them once).
    Before each row a ``@@ROW_START key`` line, after it its result line with ``row`` added (or
    ``error``): the driver (``bench/gpu/check.py``) times each row and stops a row that runs long.
    """
    import gc
    import threading
    import traceback
    base_steps = args.steps
    for item in args.row_list.split(","):
        key, _, steps = item.partition(":")
        label, child, inp, xla = ROWS[key]
        args.row, args.input, args.xla = key, inp, xla
        args.steps = int(steps) if steps else base_steps
        threads = threading.active_count()
        print(ROW_START_PREFIX + json.dumps(dict(row=key, threads=threads, steps=args.steps)), flush=True)
        print(f"== row {key}: {label} ({args.steps} steps; {threads} threads alive before it)", file=sys.stderr,
              flush=True)
        _ROW_EXTRA.clear()
        _ROW_EXTRA.update(row=key, threads_before=threads, steps=args.steps)
        try:
            CHILDREN[child](args)
        except BaseException as e:  # noqa: BLE001  (a failed row must not hide the next ones)
            traceback.print_exc()
            C.emit_result(row=key, error=f"{type(e).__name__}: {str(e).strip()[:300]}")
            if isinstance(e, KeyboardInterrupt):
                raise
        finally:
            _ROW_EXTRA.clear()
            try:  # Keras's global state (layer names); the policy is set again by the next row
                import keras
                keras.backend.clear_session()
            except Exception:  # noqa: BLE001
                pass
            gc.collect()


CHILDREN = {"train-modeldesc": child_train_modeldesc, "train-kerasmodel": child_train_kerasmodel,
            "train-fit": child_train_fit, "train-rows": child_train_rows, "df-kerastrainer": child_df_kerastrainer,
            "df-tensorpack": child_df_tensorpack}


# ============================================================================
# driver
# ============================================================================

def _cmd(python, child, args, extra=()):
    if python is None:
        return None
    common = ["--device", args.device, "--batch", str(args.batch), "--image-size", str(args.image_size),
              "--precision", args.precision, "--steps", str(args.steps), "--df-batches", str(args.df_batches),
              "--df-warmup", str(args.df_warmup), "--df-workers", str(args.df_workers)]
    return [python, os.path.abspath(__file__), "--child", child] + common + list(extra)


def _ratio(a, b):
    return None if a is None or b is None else a / b


def run_train(args):
    keys = args.rows.split(",") if args.rows else list(DEFAULT_ROWS)
    unknown = [k for k in keys if k not in ROWS]
    if unknown:
        raise SystemExit(f"--rows: unknown {unknown}; known: {list(ROWS)}")
    tmp = tempfile.mkdtemp(prefix="kt-bench-ilsvrc-") if any(ROWS[k][2] == "jpeg" for k in keys) else None
    try:
        if tmp:
            write_ilsvrc(tmp)
        systems = []
        for key in keys:
            label, child, inp, xla = ROWS[key]
            extra = ["--input", inp, "--xla", xla, "--row", key] + (["--images-dir", tmp] if inp == "jpeg" else [])
            timeout = args.fit_timeout if key == "fit-xla" else args.timeout
            # a row's XLA flags are added to the caller's (which may name CUDA's folder, for one)
            flags = [os.environ.get("XLA_FLAGS", ""), ROW_XLA_FLAGS.get(key, "")]
            if args.xla_dump:  # one folder per row: count the XLA modules each compiled
                flags.append(f"--xla_dump_to={os.path.join(args.xla_dump, key)}")
            env = dict(ROW_ENV.get(key, {}), XLA_FLAGS=" ".join(f for f in flags if f))
            s = C.System(label, _cmd(sys.executable, child, args, extra), env=env, timeout=timeout)
            s.key = key
            systems.append(s)
        print(f"\n-- ResNet-50 training on {args.device.upper()}: batch {args.batch}, {args.image_size} px, "
              f"{args.precision}; {args.steps} timed steps after a warm-up epoch of as many; real JPEG "
              f"pipeline: {args.df_workers} worker processes over {NUM_JPEGS} JPEGs; {args.repeats} interleaved "
              f"repeat(s); timeout {args.timeout:.0f} s per child ({args.fit_timeout:.0f} s for fit with XLA)",
              flush=True)
        C.run_interleaved(systems, args.repeats, args.verbose)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    print_train_table(args, systems)


def _count_modules(folder: str) -> int:
    try:
        # (not kerastrainer's one-op module that makes XLA register its kernels)
        return sum(1 for f in os.listdir(folder) if f.endswith(".before_optimizations.txt")
                   and "_xla_kernel_registration" not in f)
    except OSError:
        return 0


def print_train_table(args, systems):
    med = {s.key: C.median_of(s, "value") for s in systems}
    fits = [v for k, v in med.items() if k.startswith("fit") and v]
    best_fit = max(fits) if fits else None
    rows = []
    for s in systems:
        v = med[s.key]
        if s.cmd is None:
            runs = f"not run: {s.why}"
        elif not s.results:
            timed_out = any("timed out" in e for e in s.errors)
            runs = f"not finished in {s.timeout:.0f} s" if timed_out else "failed (see above)"
        else:
            runs = ", ".join(C.fmt(r["value"]) for r in s.results)
        rows.append([s.name, C.fmt(v), runs, C.fmt(C.median_of(s, "compile_s"), 1),
                     C.fmt(C.median_of(s, "warmup_s"), 1),
                     (C.fmt(_ratio(v, best_fit)) + "x") if v and best_fit else "n/a"]
                    + ([str(_count_modules(os.path.join(args.xla_dump, s.key)))] if args.xla_dump else []))
    print()
    print(C.format_table(["system", "median images/s", "runs", "first call s", "warm-up epoch s", "/ best fit"]
                         + (["XLA modules compiled"] if args.xla_dump else []), rows))
    print("(XLA on = kerastrainer's default jit_compile='auto' on a GPU; on CPU, 'auto' is off and the "
          "rows force True. first call = tracing + XLA compile + one step; for fit, the warm-up epoch "
          "beyond its steps at the timed rate)")
    dummy, queue, jpeg = med.get("md-dummy-xla"), med.get("md-queue-xla"), med.get("md-jpeg-xla")
    km_x, km, fit = med.get("km-xla"), med.get("km"), med.get("fit")
    if queue and med.get("md-queue"):
        print(f"XLA speed-up: ModelDesc {C.fmt(_ratio(queue, med['md-queue']))}x, KerasModel "
              f"{C.fmt(_ratio(km_x, km))}x; QueueInput / DummyConstantInput {C.fmt(_ratio(queue, dummy))}; real "
              f"JPEG / fake QueueInput {C.fmt(_ratio(jpeg, queue))}")
    print(C.goal_line(f"KerasModel (XLA off) >= keras.Model.fit (XLA off) on the same model "
                      f"(is {C.fmt(_ratio(km, fit))}x)", None if km is None or fit is None else km >= fit))
    best_kt = max([v for k, v in med.items() if k in ("md-queue-xla", "km-xla") and v] or [0]) or None
    print(C.goal_line(f">= 1.3x the best fit configuration that finishes (is {C.fmt(_ratio(best_kt, best_fit))}x)",
                      None if best_kt is None or best_fit is None else best_kt >= 1.3 * best_fit))
    if args.device == "gpu":
        for key, name in (("md-queue-xla", "ModelDesc"), ("km-xla", "KerasModel")):
            v = med.get(key)
            print(C.goal_line(f"{name} >= 4,000 images/s with default settings (is {C.fmt(v)})",
                              None if v is None else v >= 4000))
            w = C.median_of(next(s for s in systems if s.key == key), "warmup_s") if v else None
            print(C.goal_line(f"{name}: compile + first epoch < 90 s (is {C.fmt(w, 1)} s)",
                              None if w is None else w < 90))
        for key, name in (("md-queue-xla", "QueueInput"), ("md-jpeg-xla", "the real JPEG pipeline")):
            r = _ratio(med.get(key), dummy)
            print(C.goal_line(f"{name} >= 95% of DummyConstantInput (is {C.fmt(r)})",
                              None if r is None else r >= 0.95))
    sys.stdout.flush()


def run_dataflow(args):
    tmp = tempfile.mkdtemp(prefix="kt-bench-ilsvrc-")
    try:
        write_ilsvrc(tmp)
        venv = C.bench_venv_python()
        systems = [
            C.System("kerastrainer imagenet_utils.get_imagenet_dataflow",
                     _cmd(sys.executable, "df-kerastrainer", args, ["--images-dir", tmp])),
            C.System("tensorpack 0.11 ImageNet example pipeline",
                     _cmd(venv, "df-tensorpack", args, ["--images-dir", tmp]),
                     why="no .bench-venv (run bash bench/setup_env.sh)"),
        ]
        print(f"\n-- ImageNet augmentation DataFlow: {NUM_JPEGS} JPEGs {JPEG_HW[1]}x{JPEG_HW[0]}, fb.resnet "
              f"augmentation to 224 px, batch {DF_BATCH}, {DF_WORKERS} worker processes; {args.df_batches} timed "
              f"batches after {args.df_warmup}; {args.repeats} interleaved repeats", flush=True)
        C.run_interleaved(systems, args.repeats, args.verbose)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ours, tp = (C.median_of(s, "value") for s in systems)
    print()
    print(C.results_table(systems, "value", "images/s", systems[0].name,
                          extra=[("images / CPU s", "images_per_cpu_s"), ("CPU ms / image", "cpu_ms_per_image")]))
    r = _ratio(ours, tp)
    r_cpu = _ratio(*(C.median_of(s, "images_per_cpu_s") for s in systems))
    print(f"per CPU second: ours / tensorpack = {C.fmt(r_cpu)}x")
    print(C.goal_line(f">= 1.2x tensorpack's images/s on the same 2 cores (is {C.fmt(r)}x)",
                      None if r is None else r >= 1.2), flush=True)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        C.dispatch_child({k: (lambda f=f: f(args)) for k, f in CHILDREN.items()}, args.child)
        return
    C.print_header("bench/resnet50.py: ImageNet ResNet-50 training and augmentation DataFlow")
    if args.only in (None, "dataflow"):
        run_dataflow(args)
    if args.only in (None, "train"):
        run_train(args)


if __name__ == "__main__":
    main()
