"""ResNet-50 benchmark: training images/s of the ImageNet examples against ``keras.Model.fit``,
and the ImageNet augmentation DataFlow against tensorpack 0.11's, in one invocation.

Each system runs in its own fresh process; systems are interleaved, 3 repeats, medians.

1. Training (``--device cpu``, default; ``--device gpu`` where a GPU exists): the same
   batch, image size and precision for every row, random uint8 images, SGD with
   Nesterov momentum, weight decay on the kernels.
   - kerastrainer ModelDesc: the model of ``examples/imagenet/imagenet-resnet.py``
     (the ResNet-50 zoo: v1.5, bias-free convs), ``SimpleTrainer``, the example's fake
     DataFlow through ``QueueInput`` (uint8 to the device, normalised in the tower).
   - kerastrainer KerasModel: ``keras.applications.ResNet50(weights=None)`` as
     ``examples/imagenet/imagenet-resnet-keras.py`` builds it, the same DataFlow.
   - keras.Model.fit: the *same* Keras model, compiled the same way, fed by an
     in-memory ``tf.data`` pipeline (``from_tensors(batch).repeat().prefetch``): fit's
     fastest input. ``jit_compile`` is Keras' default (it resolves to False for this
     model on TF's CPU build) unless ``--xla``.
   Each child trains ``--warmup-steps`` steps (tracing included), then times
   ``--steps`` steps (two epochs; the second is timed by a callback).
   KerasModel vs fit is the like-for-like row (same model, same maths); the ModelDesc
   model is ResNet-50 v1.5 (stride on the 3x3 conv: ~4.1 GFLOPs against v1's ~3.9),
   so its ratio is, if anything, pessimistic.

2. DataFlow: the examples' training pipeline (``imagenet_utils.get_imagenet_dataflow``:
   read + decode + fb.resnet augmentation with the fused colour jitter, batched in 2
   worker processes, uint8 batches over ZeroMQ) against tensorpack 0.11's ImageNet
   example pipeline (``dataset.ILSVRC12`` + ``AugmentImageComponent`` with
   ``fbresnet_augmentor`` built from tensorpack's imgaug, ``MultiProcessRunnerZMQ(2)``,
   ``BatchData``), on the same generated JPEGs (500x375, ILSVRC12 layout), batch 64,
   bicubic resize in both, OpenCV single-threaded in both (2 workers on 2 cores).
   Also images/s per CPU second, which other people's load on a shared machine
   disturbs less than wall-clock rates.

Run (after ``bash bench/setup_env.sh`` for tensorpack)::

    python bench/resnet50.py                          # both measures, CPU, 224 px, batch 8
    python bench/resnet50.py --only train --image-size 160 --batch 8 --steps 4
    python bench/resnet50.py --only dataflow --df-batches 20
    python bench/resnet50.py --only train --device gpu --batch 64 --steps 50 --precision bf16
"""
from __future__ import annotations

import argparse
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


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["train", "dataflow"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--xla", action="store_true", help="jit_compile=True for every training system")
    p.add_argument("--steps", type=int, default=6, help="timed training steps")
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--df-batches", type=int, default=15, help="timed DataFlow batches")
    p.add_argument("--df-warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--images-dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ============================================================================
# training children
# ============================================================================

def _setup_tf(args):
    import tensorflow as tf
    if args.device == "cpu":
        tf.config.set_visible_devices([], "GPU")
    elif not tf.config.list_physical_devices("GPU"):
        raise SystemExit("--device gpu: no GPU visible")
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
    """A kerastrainer callback: wall seconds of the last epoch (before_epoch to after_epoch)."""
    from kerastrainer import Callback

    class EpochTimer(Callback):
        _chief_only = False
        seconds = []

        def _before_epoch(self):
            self._t0 = time.perf_counter()

        def _after_epoch(self):
            self.seconds.append(time.perf_counter() - self._t0)
    return EpochTimer()


def _report_train(args, seconds_timed):
    ips = args.steps * args.batch / seconds_timed
    C.emit_result(value=ips, seconds=seconds_timed, summary=f"{ips:.2f} images/s ({seconds_timed:.1f} s timed)")


def _trainer_kwargs(args):
    return dict(precision=None if args.precision == "fp32" else args.precision, jit_compile=args.xla)


def child_train_modeldesc(args):
    tf, keras = _setup_tf(args)
    from kerastrainer import QueueInput, SimpleTrainer, TrainConfig, launch_train_with_config
    ex = _import_example("imagenet-resnet")
    U = ex.U
    timer = _epoch_timer()
    # epoch 1: warm-up (tracing); epoch 2: timed, same length so steps_per_call settles the same
    n = max(args.steps, args.warmup_steps)
    model = ex.make_model_class()(50, args.image_size, total_batch=args.batch)
    cfg = TrainConfig(model=model, data=QueueInput(U.FakeImageNetData(args.batch, args.image_size)),
                      callbacks=[timer], extra_callbacks=[], monitors=[], steps_per_epoch=n, max_epoch=2)
    launch_train_with_config(cfg, SimpleTrainer(**_trainer_kwargs(args)))
    args.steps = n
    _report_train(args, timer.seconds[-1])


def _keras_model(args):
    ex = _import_example("imagenet-resnet-keras")
    return ex, ex.build_keras_resnet(50, args.image_size)


def child_train_kerasmodel(args):
    tf, keras = _setup_tf(args)
    from kerastrainer import KerasModel, SimpleTrainer
    ex, model = _keras_model(args)
    timer = _epoch_timer()
    n = max(args.steps, args.warmup_steps)
    km = KerasModel(model, input=ex.U.FakeImageNetData(args.batch, args.image_size),
                    trainer=SimpleTrainer(**_trainer_kwargs(args)))
    ex.compile_model(km, args.batch)
    km.fit(steps_per_epoch=n, max_epoch=2, callbacks=[timer], extra_callbacks=[], monitors=[])
    args.steps = n
    _report_train(args, timer.seconds[-1])


def child_train_fit(args):
    tf, keras = _setup_tf(args)
    import numpy as np
    ex, model = _keras_model(args)
    U = ex.U
    n = max(args.steps, args.warmup_steps)
    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, (args.batch, args.image_size, args.image_size, 3)).astype(np.uint8)
    y = rng.randint(0, U.NUM_CLASSES, (args.batch,)).astype(np.int32)
    ds = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(tf.data.AUTOTUNE)
    opt = U.make_sgd(args.batch)
    if args.precision == "fp16":
        opt = keras.optimizers.LossScaleOptimizer(opt)
    model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True if args.xla else "auto")

    class Timer(keras.callbacks.Callback):
        seconds = []

        def on_epoch_begin(self, epoch, logs=None):
            self._t0 = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._t0)

    timer = Timer()
    model.fit(ds, steps_per_epoch=n, epochs=2, callbacks=[timer], verbose=0)
    args.steps = n
    print(f"fit jit_compile resolved to {model.jit_compile}", file=sys.stderr)
    _report_train(args, timer.seconds[-1])


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


CHILDREN = {"train-modeldesc": child_train_modeldesc, "train-kerasmodel": child_train_kerasmodel,
            "train-fit": child_train_fit, "df-kerastrainer": child_df_kerastrainer,
            "df-tensorpack": child_df_tensorpack}


# ============================================================================
# driver
# ============================================================================

def _cmd(python, child, args, extra=()):
    if python is None:
        return None
    common = ["--device", args.device, "--batch", str(args.batch), "--image-size", str(args.image_size),
              "--precision", args.precision, "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
              "--df-batches", str(args.df_batches), "--df-warmup", str(args.df_warmup)]
    if args.xla:
        common.append("--xla")
    return [python, os.path.abspath(__file__), "--child", child] + common + list(extra)


def _ratio(a, b):
    return None if a is None or b is None else a / b


def run_train(args):
    systems = [
        C.System("kerastrainer KerasModel (keras ResNet50)", _cmd(sys.executable, "train-kerasmodel", args),
                 timeout=args.timeout),
        C.System("keras.Model.fit (same keras ResNet50)", _cmd(sys.executable, "train-fit", args),
                 timeout=args.timeout),
        C.System("kerastrainer ModelDesc (zoo ResNet-50 v1.5)", _cmd(sys.executable, "train-modeldesc", args),
                 timeout=args.timeout),
    ]
    print(f"\n-- ResNet-50 training on {args.device.upper()}: batch {args.batch}, {args.image_size} px, "
          f"{args.precision}, xla={args.xla}; {max(args.steps, args.warmup_steps)} timed steps after as many "
          f"warm-up steps; {args.repeats} interleaved repeats", flush=True)
    C.run_interleaved(systems, args.repeats, args.verbose)
    km, fit, md = (C.median_of(s, "value") for s in systems)
    print()
    print(C.results_table(systems, "value", "images/s", systems[0].name))
    r_km, r_md = _ratio(km, fit), _ratio(md, fit)
    print(f"KerasModel / fit: {C.fmt(r_km)}x; ModelDesc / fit: {C.fmt(r_md)}x")
    print(C.goal_line(f"KerasModel >= keras.Model.fit on the same model (is {C.fmt(r_km)}x)",
                      None if r_km is None else r_km >= 1.0))
    print(C.goal_line(f"ModelDesc ResNet-50 >= keras.Model.fit (is {C.fmt(r_md)}x)",
                      None if r_md is None else r_md >= 1.0), flush=True)


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
