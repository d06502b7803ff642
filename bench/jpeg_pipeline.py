"""JPEG training-input benchmark: the ImageNet example's pipeline with the fused decoder
(``imgaug.DecodeRandomResizedCrop``) against its old full-decode path and a PyTorch
DataLoader, on the same JPEGs and the same number of worker processes.

Rows (each system in its own fresh process; interleaved; 3 repeats; medians):

- kerastrainer example, fused: ``imagenet_utils.get_imagenet_dataflow(..., 'train')``:
  read bytes -> DecodeRandomResizedCrop(224, INTER_CUBIC; window drawn from the JPEG
  header, DCT-scaled decode when the window allows it, fused colour jitter, flip) ->
  BatchData(64) in each worker -> MultiProcessRunnerZMQ.
- kerastrainer example, full decode (the old path): the same with ``fused_decode=False``:
  cv2.imread -> AugmentorList(fbresnet_augmentor(True)) -> BatchData -> MultiProcessRunnerZMQ.
- kerastrainer fused, torch's work: DecodeRandomResizedCrop(224, INTER_LINEAR, no colour
  jitter) -> BatchData -> MultiProcessRunnerZMQ: the same per-image work as the torch row.
- PyTorch DataLoader(batch_size=64, num_workers=N): np.fromfile + cv2.imdecode, random
  crop of 8-100% of the area with aspect ratio 3/4-4/3, cv2.resize to 224 (INTER_LINEAR),
  random horizontal flip (bench venv).
- (info) torch's work with numpy's huge-page advice left on in the workers, as before
  2026-11-23: numpy advises transparent huge pages for arrays >= 4 MiB, so the kernel zeroed
  fresh 2 MiB pages for every batch a worker built and dropped.

``--stages`` also times each stage of one image in one process (where the CPU time goes).

Note that the example's rows also do the colour jitter, which the torch row does not.
OpenCV is single-threaded everywhere (``cv2.setNumThreads(1)``): N workers on N cores.
The JPEGs: 256 photo-like images written to a temporary ILSVRC12 layout, 500x375 by
default (ImageNet's most common size); ``--size 1000x750`` shows larger photos, where
most windows allow a reduced-scale decode.

Run (after ``bash bench/setup_env.sh`` for the PyTorch row)::

    python bench/jpeg_pipeline.py                     # 3 repeats, 30 batches each (~3 min)
    python bench/jpeg_pipeline.py --workers 15 --batches 100 --size 1000x750
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

EXAMPLES = os.path.join(C.REPO_ROOT, "examples", "imagenet")
BATCH = 64
OUT = 224
NUM_JPEGS = 256
WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361"]
CROP_AREA = (0.08, 1.0)
CROP_RATIO = (0.75, 1.333)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batches", type=int, default=30, help="timed batches per run")
    p.add_argument("--warmup-batches", type=int, default=4)
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: the number of CPUs)")
    p.add_argument("--size", default="500x375", help="JPEG width x height (default 500x375)")
    p.add_argument("--stages", action="store_true",
                   help="also time each stage of one image in one process (where the CPU time goes)")
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--images-dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def write_ilsvrc(root: str, width: int, height: int) -> float:
    """NUM_JPEGS photo-like JPEGs (smooth colour fields + texture, quality 90) in the ILSVRC12
    layout (train/<wnid>/*.JPEG, train.txt, synsets.txt); returns their mean size in KiB."""
    import cv2
    import numpy as np
    rng = np.random.RandomState(1)
    lines, total = [], 0
    for wnid in WNIDS:
        os.makedirs(os.path.join(root, "train", wnid))
    for i in range(NUM_JPEGS):
        label = i % len(WNIDS)
        coarse = rng.randint(0, 256, size=(6, 8, 3)).astype(np.uint8)
        img = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.int16)
        img += rng.randint(-20, 21, size=img.shape).astype(np.int16)
        rel = f"{WNIDS[label]}/{WNIDS[label]}_{i}.JPEG"
        path = os.path.join(root, "train", rel)
        assert cv2.imwrite(path, np.clip(img, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90])
        total += os.path.getsize(path)
        lines.append(f"{rel} {label}\n")
    with open(os.path.join(root, "train.txt"), "w") as f:
        f.writelines(lines)
    with open(os.path.join(root, "synsets.txt"), "w") as f:
        f.writelines(w + "\n" for w in WNIDS)
    return total / NUM_JPEGS / 1024


def _files(images_dir):
    with open(os.path.join(images_dir, "train.txt")) as f:
        pairs = [ln.split() for ln in f if ln.strip()]
    return [[os.path.join(images_dir, "train", rel), int(lab)] for rel, lab in pairs]


# ============================================================================
# children
# ============================================================================

def _forever(ds):
    while True:
        yield from ds


def _time(it, args, pids, image_of=lambda dp: dp[0]):
    for _ in range(args.warmup_batches):
        C.touch_pages(image_of(next(it)))
    meter = C.CpuMeter(pids()).start()
    t0 = time.perf_counter()
    n = 0
    for _ in range(args.batches):
        images = image_of(next(it))
        C.touch_pages(images)
        n += len(images)
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    C.emit_result(value=n / secs, cpu_ms_per_image=1000 * cpu / n, seconds=secs,
                  summary=f"{n / secs:,.0f} images/s, {1000 * cpu / n:.2f} CPU ms/image")


def _run_kt(ds, args):
    ds.reset_state()
    try:
        _time(_forever(ds), args, lambda: [p.pid for p in ds._workers.procs])
    finally:
        ds.close()


def child_example(args, fused: bool):
    import cv2
    cv2.setNumThreads(1)
    sys.path.insert(0, EXAMPLES)
    import imagenet_utils as U
    _run_kt(U.get_imagenet_dataflow(args.images_dir, "train", BATCH, OUT, num_proc=args.workers,
                                    meta_dir=args.images_dir, fused_decode=fused), args)


def child_fused_plain(args, huge_pages: bool = False):
    import cv2
    import numpy as np
    from kerastrainer.dataflow import BatchData, DataFromList, MapData, MultiProcessRunnerZMQ, imgaug
    cv2.setNumThreads(1)
    aug = imgaug.DecodeRandomResizedCrop(OUT, CROP_AREA, CROP_RATIO, interp=cv2.INTER_LINEAR, color_jitter=False)

    def load(dp):
        return [aug.decode(np.fromfile(dp[0], np.uint8), name=dp[0]), np.int32(dp[1])]

    if huge_pages:  # as before 2026-11-23: the workers keep numpy's huge-page advice
        from kerastrainer.dataflow import _workers
        _workers.no_numpy_huge_pages = lambda: None
    ds = BatchData(MapData(DataFromList(_files(args.images_dir), shuffle=True), load), BATCH, remainder=False)
    _run_kt(MultiProcessRunnerZMQ(ds, num_proc=args.workers), args)


def child_torch(args):
    import cv2
    import numpy as np
    from torch.utils.data import DataLoader, Dataset
    cv2.setNumThreads(1)
    items = _files(args.images_dir)

    class Jpegs(Dataset):
        rng = None

        def __len__(self):
            # each worker makes whole batches: an epoch of 4 batches would leave most of 15 workers idle
            return max(len(items), BATCH * args.workers * 4)

        def __getitem__(self, i):
            if self.rng is None:   # first use in this worker: its own seed
                self.rng = np.random.RandomState(os.getpid())
            r = self.rng
            path, label = items[i % len(items)]
            img = C.reference_random_resized_crop(path, r, (OUT, OUT), CROP_AREA, CROP_RATIO)
            return img, label

    loader = DataLoader(Jpegs(), batch_size=BATCH, shuffle=True, drop_last=True, num_workers=args.workers,
                        persistent_workers=True)
    try:
        _time(_forever(loader), args, lambda: [w.pid for w in loader._iterator._workers],
              image_of=lambda dp: dp[0].numpy())
    finally:
        if getattr(loader, "_iterator", None) is not None:
            loader._iterator._shutdown_workers()


def child_stages(args):
    """CPU ms per image of each stage, one process, one thread, over all the JPEGs."""
    import cv2
    import numpy as np
    from kerastrainer.dataflow import imgaug
    cv2.setNumThreads(1)
    paths = [p for p, _ in _files(args.images_dir)]
    blobs = [np.fromfile(p, np.uint8) for p in paths]
    plain = imgaug.DecodeRandomResizedCrop(OUT, CROP_AREA, CROP_RATIO, interp=cv2.INTER_LINEAR, color_jitter=False)
    example = imgaug.DecodeRandomResizedCrop(OUT, CROP_AREA, CROP_RATIO, interp=cv2.INTER_CUBIC)
    jitter = imgaug.FusedColorJitter()
    crop = imgaug.GoogleNetRandomCropAndResize(CROP_AREA, CROP_RATIO, OUT)
    for a in (plain, example, jitter, crop):
        a.reset_state()
    h, w = cv2.imdecode(blobs[0], cv2.IMREAD_COLOR).shape[:2]
    boxes = [crop.draw_box(h, w) or (0, 0, h, w) for _ in blobs]
    out = cv2.resize(cv2.imdecode(blobs[0], cv2.IMREAD_COLOR), (OUT, OUT))
    stages = [
        ("read the file (np.fromfile)", lambda i: np.fromfile(paths[i], np.uint8)),
        ("cv2.imdecode, whole image (torch's decode)", lambda i: cv2.imdecode(blobs[i], cv2.IMREAD_COLOR)),
        # at 1/8 scale the IDCT keeps only the DC term: what is left is mostly entropy decoding,
        # which every libjpeg decode of the file pays, whatever window or scale it keeps
        ("cv2.imdecode at 1/8 scale (~ the entropy-decoding floor)",
         lambda i: cv2.imdecode(blobs[i], cv2.IMREAD_REDUCED_COLOR_8)),
        ("resize a drawn window to 224 (linear)", lambda i: cv2.resize(
            np.empty((boxes[i][2], boxes[i][3], 3), np.uint8), (OUT, OUT))),
        ("fused colour jitter of a 224 image", lambda i: jitter.augment(out)),
        ("fused decode, torch's work (decode + crop + resize + flip)", lambda i: plain.decode(blobs[i])),
        ("fused decode, the example's (cubic, jitter)", lambda i: example.decode(blobs[i])),
    ]
    try:
        import tensorflow as tf
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tblobs = [tf.constant(b.tobytes()) for b in blobs]
        stages += [
            ("tf.io.decode_jpeg, whole image", lambda i: tf.io.decode_jpeg(tblobs[i], 3)),
            ("tf.io.decode_and_crop_jpeg, the drawn window only", lambda i: tf.io.decode_and_crop_jpeg(
                tblobs[i], list(boxes[i]), 3)),
            # libjpeg stops after the window's last row: rows below it cost nothing, rows above
            # still need their entropy decoding
            ("tf.io.decode_and_crop_jpeg, top quarter of the rows", lambda i: tf.io.decode_and_crop_jpeg(
                tblobs[i], [0, 0, h // 4, w], 3)),
            ("tf.io.decode_and_crop_jpeg, bottom quarter of the rows", lambda i: tf.io.decode_and_crop_jpeg(
                tblobs[i], [h - h // 4, 0, h // 4, w], 3)),
        ]
    except ImportError:
        pass
    rows = []
    for name, fn in stages:
        for i in range(len(blobs)):   # warm-up pass
            fn(i)
        best = float("inf")
        for _ in range(3):
            t0 = time.process_time()
            for i in range(len(blobs)):
                fn(i)
            best = min(best, (time.process_time() - t0) / len(blobs) * 1000)
        rows.append((name, best))
    C.emit_result(value=0.0, stages=rows)


CHILDREN = {"example-fused": lambda a: child_example(a, True), "example-full": lambda a: child_example(a, False),
            "fused-plain": child_fused_plain, "torch": child_torch, "stages": child_stages,
            "fused-plain-huge-pages": lambda a: child_fused_plain(a, huge_pages=True)}


# ============================================================================
# driver
# ============================================================================

def main(argv=None) -> None:
    args = parse_args(argv)
    args.workers = args.workers or os.cpu_count() or 1
    if args.child:
        C.dispatch_child({k: (lambda f=f: f(args)) for k, f in CHILDREN.items()}, args.child)
        return
    width, height = (int(v) for v in args.size.lower().split("x"))
    C.print_header("bench/jpeg_pipeline.py: the ImageNet example's JPEG input, fused decode vs full decode "
                   "vs a PyTorch DataLoader")
    tmp = tempfile.mkdtemp(prefix="kt-bench-jpeg-pipeline-")
    try:
        kib = write_ilsvrc(tmp, width, height)
        common = ["--batches", str(args.batches), "--warmup-batches", str(args.warmup_batches),
                  "--workers", str(args.workers), "--images-dir", tmp]
        me = os.path.abspath(__file__)
        venv = C.bench_venv_python()

        def cmd(python, child):
            return None if python is None else [python, me, "--child", child] + common

        systems = [
            C.System("kerastrainer example, fused decode", cmd(sys.executable, "example-fused")),
            C.System("kerastrainer example, full decode (old path)", cmd(sys.executable, "example-full")),
            C.System("kerastrainer fused, torch's work (no jitter, linear)", cmd(sys.executable, "fused-plain")),
            C.System("PyTorch DataLoader (cv2 decode + crop + flip)", cmd(venv, "torch"),
                     why="no .bench-venv (run bash bench/setup_env.sh)"),
            C.System("(info) torch's work, workers with numpy's huge-page advice (before)",
                     cmd(sys.executable, "fused-plain-huge-pages")),
        ]
        print(f"\n-- {NUM_JPEGS} JPEGs {width}x{height} (mean {kib:.0f} KiB) -> {OUT}x{OUT} uint8, batch {BATCH}, "
              f"{args.workers} workers; {args.batches} timed batches after {args.warmup_batches}; "
              f"{args.repeats} interleaved repeats", flush=True)
        C.run_interleaved(systems, args.repeats, args.verbose)
        stages = None
        if args.stages:
            try:
                stages = C.run_child(cmd(sys.executable, "stages"), timeout=600, verbose=args.verbose)
            except C.ChildFailed as e:
                stages = {"error": str(e)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(C.results_table(systems, "value", "images/s", systems[0].name,
                          extra=[("CPU ms / image", "cpu_ms_per_image")]))
    fused, full, plain, torch_, _ = (C.median_of(s, "value") for s in systems)
    cpu = [C.median_of(s, "cpu_ms_per_image") for s in systems]

    def ratio(a, b):
        return None if a is None or b is None else a / b

    r = ratio(fused, torch_)
    print(C.goal_line(f"example pipeline >= 1.5x the PyTorch DataLoader's images/s (is {C.fmt(r)}x)",
                      None if r is None else r >= 1.5))
    print(f"example fused / example full decode: {C.fmt(ratio(fused, full))}x images/s, "
          f"{C.fmt(ratio(cpu[1], cpu[0]))}x less CPU per image")
    print(f"same work as torch (fused, no jitter) / torch: {C.fmt(ratio(plain, torch_))}x images/s, "
          f"{C.fmt(ratio(cpu[3], cpu[2]))}x less CPU per image")
    print(f"CPU-time basis (robust to other load), torch CPU ms/image / example fused: "
          f"{C.fmt(ratio(cpu[3], cpu[0]))}x", flush=True)
    print(f"workers without / with numpy's huge-page advice (torch's work): {C.fmt(ratio(cpu[4], cpu[2]))}x less "
          "CPU per image", flush=True)
    if stages is not None:
        print(f"\nwhere the CPU time goes: best of 3 passes over the {NUM_JPEGS} JPEGs, one process, one thread")
        if "stages" not in stages:
            print(f"  FAILED: {stages.get('error', stages)}")
        else:
            for name, ms in stages["stages"]:
                print(f"  {name:60s} {ms:6.3f} CPU ms/image")


if __name__ == "__main__":
    main()
