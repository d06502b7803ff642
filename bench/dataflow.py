"""DataFlow benchmark: kerastrainer's parallel runners against tensorpack 0.11, a
PyTorch DataLoader and tf.data, on the same data, in one invocation.

Two measures, each system in its own fresh process, interleaved, 3 repeats, medians:

1. IPC: batches of 64x224x224x3 uint8 (plus 64 int32 labels) made by 2 worker
   processes and received by the consumer, in GB/s of image bytes.
   - kerastrainer ``MultiProcessRunnerZMQ(num_proc=2)``
   - tensorpack 0.11 ``MultiProcessRunnerZMQ(num_proc=2)``          (bench venv)
   - PyTorch ``DataLoader(num_workers=2, batch_size=None)``, the dataset's
     ``__getitem__`` returning the whole batch                     (bench venv)
   - ceiling: ``np.copyto`` of the batch into a preallocated one, in-process
   Every worker yields the same preallocated batch, so the measure is the transfer;
   the consumer reads one byte of every 4 KiB page of what it receives, so memory
   that is only mapped (PyTorch's shared memory) is counted when it is really there.

2. JPEG pipeline: an ImageNet-style training input on 256 JPEGs (500x375) this script
   writes to a temporary directory: read, decode, random crop of 8-100% of the area
   with aspect ratio 3/4-4/3 resized to 224x224, random horizontal flip, batches of
   64, 2 worker processes; images/s.
   - kerastrainer: DataFromList -> MapData(read + cv2 decode) -> AugmentImageComponent
     (imgaug.GoogleNetRandomCropAndResize, imgaug.Flip) -> BatchData -> MultiProcessRunnerZMQ
   - tensorpack: DataFromList -> MapData(the plain cv2 function) -> BatchData -> MultiProcessRunnerZMQ
   - PyTorch: DataLoader(batch_size=64, num_workers=2) over a Dataset calling the plain cv2 function
   - tf.data: map(read_file, decode_jpeg, sample_distorted_bounding_box, resize, flip,
     num_parallel_calls=2) -> batch(64) -> prefetch
   - ceiling: 2 x the single-process rate of the plain cv2 function plus the batching
     (np.stack); also shown, not a goal: the single-process rate of kerastrainer's
     imgaug path, to tell augmentor overhead from IPC overhead.
   OpenCV runs single-threaded everywhere (``cv2.setNumThreads(1)``): 2 workers on 2 cores.

3. Serializer reads (``--only serialize``, in this process): files written by
   LMDBSerializer, HDF5Serializer and NumpySerializer, opened and read back in file order, the
   images stacked into batches of 64 as BatchData does; MB/s of datapoint bytes per second of CPU
   time, median of the repeats (the file in the page cache), for the first epoch (with opening
   the file) and a second epoch of the same DataFlow. Two shapes of data: many small datapoints
   (32x32x3 uint8 + int label, CIFAR-like) and fewer large ones (224x224x3 uint8 + label). The
   reference: the same records in the layout written before checksums (read by the same reader,
   with nothing to check), read alternately with the checked file; the last columns are the
   checks' cost.
   Run it with ``PYTHONPATH=<another checkout>`` to compare two versions of the readers.

Run (after ``bash bench/setup_env.sh`` for the references)::

    python bench/dataflow.py                      # both measures, 3 repeats (~4-5 min)
    python bench/dataflow.py --only ipc --repeats 5 --ipc-batches 400
    python bench/dataflow.py --only jpeg --jpeg-batches 40
    python bench/dataflow.py --only serialize --repeats 5

Without the bench venv, the references are shown as "not run".
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common as C  # noqa: E402

BATCH = 64
IMG_SHAPE = (224, 224, 3)
NUM_WORKERS = 2
NUM_JPEGS = 256
JPEG_HW = (375, 500)
CROP_AREA = (0.08, 1.0)
CROP_RATIO = (0.75, 1.333)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["ipc", "jpeg", "serialize"], help="run one of the measures")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--ipc-batches", type=int, default=200, help="timed batches per IPC run")
    p.add_argument("--jpeg-batches", type=int, default=30, help="timed batches per JPEG run")
    p.add_argument("--warmup-batches", type=int, default=4)
    p.add_argument("--verbose", action="store_true", help="show the children's stderr")
    # child-only arguments
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--images-dir", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ============================================================================
# IPC children
# ============================================================================

def _ipc_batch():
    import numpy as np
    rng = np.random.RandomState(0)
    return [rng.randint(0, 256, size=(BATCH,) + IMG_SHAPE, dtype=np.uint8),
            np.arange(BATCH, dtype=np.int32)]


def _time_consumer(it, warmup: int, n: int, image_of=lambda dp: dp[0], worker_pids=lambda: ()):
    """(wall seconds, CPU seconds of consumer + workers) for ``n`` datapoints of ``it``
    after ``warmup``; touches every page of each image. ``worker_pids`` is asked after
    the warm-up (workers of lazy loaders exist only then)."""
    for _ in range(warmup):
        C.touch_pages(image_of(next(it)))
    meter = C.CpuMeter(worker_pids()).start()
    t0 = time.perf_counter()
    for _ in range(n):
        C.touch_pages(image_of(next(it)))
    return time.perf_counter() - t0, meter.stop()


def _report_ipc(timing, n: int) -> None:
    seconds, cpu = timing
    gb = n * BATCH * int(__import__("numpy").prod(IMG_SHAPE)) / 1e9
    C.emit_result(value=gb / seconds, cpu_per_gb=cpu / gb, seconds=seconds, batches=n,
                  summary=f"{gb / seconds:.2f} GB/s, {cpu / gb:.2f} CPU s/GB")


def child_ipc_kerastrainer(args):
    from kerastrainer.dataflow import DataFlow, MultiProcessRunnerZMQ

    class SameBatch(DataFlow):
        def __init__(self):
            self.dp = _ipc_batch()

        def __iter__(self):
            while True:   # never modified after yielding: safe for zero-copy sends
                yield self.dp

    ds = MultiProcessRunnerZMQ(SameBatch(), num_proc=NUM_WORKERS)
    ds.reset_state()
    try:
        secs = _time_consumer(iter(ds), args.warmup_batches, args.ipc_batches, worker_pids=lambda: _kt_pids(ds))
    finally:
        ds.close()
    _report_ipc(secs, args.ipc_batches)


def _kt_pids(ds):
    return [p.pid for p in ds._workers.procs]


def _tp_pids(ds):
    return [p.pid for p in ds._procs]


def _tensorpack_dataflow():
    sys.modules["tensorflow"] = None   # tensorpack.dataflow would import TF otherwise
    import tensorpack.dataflow as tpdf
    return tpdf


def child_ipc_tensorpack(args):
    tpdf = _tensorpack_dataflow()

    class SameBatch(tpdf.DataFlow):
        def __init__(self):
            self.dp = _ipc_batch()

        def __iter__(self):
            while True:
                yield self.dp

    ds = tpdf.MultiProcessRunnerZMQ(SameBatch(), num_proc=NUM_WORKERS)
    ds.reset_state()
    try:
        secs = _time_consumer(iter(ds), args.warmup_batches, args.ipc_batches, worker_pids=lambda: _tp_pids(ds))
    finally:
        C.kill_pids([p.pid for p in getattr(ds, "_procs", [])])  # no prctl: they would outlive us
    _report_ipc(secs, args.ipc_batches)


def child_ipc_torch(args):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class SameBatch(Dataset):
        def __init__(self):
            self.dp = _ipc_batch()

        def __len__(self):
            return 10 ** 9

        def __getitem__(self, i):
            return self.dp  # default_convert makes tensors; sending copies them to shared memory

    loader = DataLoader(SameBatch(), batch_size=None, num_workers=NUM_WORKERS, shuffle=False)
    it = iter(loader)
    try:
        secs = _time_consumer(it, args.warmup_batches, args.ipc_batches, image_of=lambda dp: dp[0].numpy(),
                              worker_pids=lambda: [w.pid for w in it._workers])
    finally:
        it._shutdown_workers()  # killing them ourselves would trip DataLoader's SIGCHLD handler
    del torch
    _report_ipc(secs, args.ipc_batches)


def child_ipc_ceiling(args):
    import numpy as np
    src = _ipc_batch()[0]
    dst = np.empty_like(src)

    class Copies:
        def __next__(self):
            np.copyto(dst, src)
            return [dst]

    n = 5 * args.ipc_batches  # a copy is fast: more of them for a stable rate
    secs = _time_consumer(Copies(), args.warmup_batches, n)
    _report_ipc(secs, n)


# ============================================================================
# JPEG pipeline children
# ============================================================================

def write_jpegs(directory: str) -> list:
    """256 photo-like JPEGs (smooth colour fields + texture), 500x375, quality 90."""
    import cv2
    import numpy as np
    rng = np.random.RandomState(1)
    h, w = JPEG_HW
    paths = []
    for i in range(NUM_JPEGS):
        coarse = rng.randint(0, 256, size=(6, 8, 3)).astype(np.uint8)
        img = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC).astype(np.int16)
        img += rng.randint(-20, 21, size=img.shape).astype(np.int16)
        ok, buf = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8), [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        path = os.path.join(directory, f"img{i:04d}.jpg")
        buf.tofile(path)
        paths.append(path)
    return paths


def _jpeg_files(args):
    files = sorted(os.path.join(args.images_dir, f) for f in os.listdir(args.images_dir) if f.endswith(".jpg"))
    return [[f, i % 1000] for i, f in enumerate(files)]


def _make_plain_augment():
    """decode + GoogleNet-style random crop + resize to 224 + flip, with plain cv2/numpy.

    Used by tensorpack, PyTorch and the ceiling, so that they do the same per-image work.
    """
    import cv2
    import numpy as np
    cv2.setNumThreads(1)
    th, tw = IMG_SHAPE[:2]
    state = {"pid": None, "rng": None}

    def rng():
        if state["pid"] != os.getpid():  # a forked worker reseeds, so workers differ
            state["pid"], state["rng"] = os.getpid(), np.random.RandomState((os.getpid() * 7919) % 2 ** 31)
        return state["rng"]

    def augment(path):
        return C.reference_random_resized_crop(path, rng(), (th, tw), CROP_AREA, CROP_RATIO)

    return augment


def _report_jpeg(timing, n_batches: int, factor: float = 1.0) -> None:
    seconds, cpu = timing
    ips = factor * n_batches * BATCH / seconds
    ms = 1000 * cpu / (n_batches * BATCH)
    C.emit_result(value=ips, cpu_ms_per_image=ms, seconds=seconds, batches=n_batches,
                  summary=f"{ips:,.0f} images/s, {ms:.2f} CPU ms/image")


def _kt_jpeg_dataflow(args):
    import cv2
    import numpy as np
    from kerastrainer.dataflow import AugmentImageComponent, BatchData, DataFromList, MapData, imgaug
    cv2.setNumThreads(1)

    def decode(dp):
        return [cv2.imdecode(np.fromfile(dp[0], np.uint8), cv2.IMREAD_COLOR), dp[1]]

    ds = DataFromList(_jpeg_files(args), shuffle=True)
    ds = MapData(ds, decode)
    # copy=False: the decoded image is fresh and owned by this pipeline; no need to copy it first
    ds = AugmentImageComponent(ds, [imgaug.GoogleNetRandomCropAndResize(CROP_AREA, CROP_RATIO, IMG_SHAPE[:2]),
                                    imgaug.Flip(horiz=True)], index=0, copy=False)
    return BatchData(ds, BATCH)


def child_jpeg_kerastrainer(args):
    from kerastrainer.dataflow import MultiProcessRunnerZMQ
    ds = MultiProcessRunnerZMQ(_kt_jpeg_dataflow(args), num_proc=NUM_WORKERS)
    ds.reset_state()
    try:
        secs = _time_consumer(_forever(ds), args.warmup_batches, args.jpeg_batches,
                              worker_pids=lambda: _kt_pids(ds))
    finally:
        ds.close()
    _report_jpeg(secs, args.jpeg_batches)


def _forever(ds):
    while True:
        yield from ds


def child_jpeg_tensorpack(args):
    tpdf = _tensorpack_dataflow()
    augment = _make_plain_augment()
    ds = tpdf.DataFromList(_jpeg_files(args), shuffle=True)
    ds = tpdf.MapData(ds, lambda dp: [augment(dp[0]), dp[1]])
    ds = tpdf.BatchData(ds, BATCH)
    ds = tpdf.MultiProcessRunnerZMQ(ds, num_proc=NUM_WORKERS)
    ds.reset_state()
    try:
        secs = _time_consumer(_forever(ds), args.warmup_batches, args.jpeg_batches,
                              worker_pids=lambda: _tp_pids(ds))
    finally:
        C.kill_pids([p.pid for p in getattr(ds, "_procs", [])])
    _report_jpeg(secs, args.jpeg_batches)


def child_jpeg_torch(args):
    from torch.utils.data import DataLoader, Dataset
    augment = _make_plain_augment()
    items = _jpeg_files(args)

    class Jpegs(Dataset):
        def __len__(self):
            return len(items)

        def __getitem__(self, i):
            path, label = items[i]
            return augment(path), label

    loader = DataLoader(Jpegs(), batch_size=BATCH, shuffle=True, drop_last=True, num_workers=NUM_WORKERS,
                        persistent_workers=True)
    it = _forever(loader)
    try:
        secs = _time_consumer(it, args.warmup_batches, args.jpeg_batches, image_of=lambda dp: dp[0].numpy(),
                              worker_pids=lambda: [w.pid for w in loader._iterator._workers])
    finally:
        its = getattr(loader, "_iterator", None)
        if its is not None:
            its._shutdown_workers()
    _report_jpeg(secs, args.jpeg_batches)


def child_jpeg_tfdata(args):
    import tensorflow as tf
    files = _jpeg_files(args)
    th, tw = IMG_SHAPE[:2]

    def load(path, label):
        img = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            tf.shape(img), bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), area_range=CROP_AREA,
            aspect_ratio_range=CROP_RATIO, max_attempts=10, use_image_if_no_bounding_boxes=True)
        img = tf.slice(img, begin, size)
        img = tf.cast(tf.image.resize(img, [th, tw], method="bilinear"), tf.uint8)
        img = tf.image.random_flip_left_right(img)
        return img, label

    ds = tf.data.Dataset.from_tensor_slices(([f for f, _ in files], [lb for _, lb in files]))
    ds = ds.shuffle(len(files)).repeat()
    ds = ds.map(load, num_parallel_calls=NUM_WORKERS, deterministic=False)
    ds = ds.batch(BATCH, drop_remainder=True).prefetch(2)
    secs = _time_consumer(ds.as_numpy_iterator(), args.warmup_batches, args.jpeg_batches)
    _report_jpeg(secs, args.jpeg_batches)


def _single_process_rate(args, per_image):
    """images/s of ``per_image`` + np.stack into batches, in this one process."""
    import numpy as np
    items = _jpeg_files(args)

    class Batches:
        i = 0

        def __next__(self):
            imgs = []
            for _ in range(BATCH):
                path, _ = items[self.i % len(items)]
                self.i += 1
                imgs.append(per_image(path))
            return [np.stack(imgs)]

    n = max(2, args.jpeg_batches // 2)  # one process does half the batches: the same wall time
    return _time_consumer(Batches(), 1, n), n


def child_jpeg_ceiling(args):
    secs, n = _single_process_rate(args, _make_plain_augment())
    _report_jpeg(secs, n, factor=NUM_WORKERS)


def child_jpeg_kt_single(args):
    ds = _kt_jpeg_dataflow(args)
    ds.reset_state()
    it = _forever(ds)
    secs = _time_consumer(it, 1, max(2, args.jpeg_batches // 2))
    _report_jpeg(secs, max(2, args.jpeg_batches // 2), factor=NUM_WORKERS)


CHILDREN = {
    "ipc-kerastrainer": child_ipc_kerastrainer, "ipc-tensorpack": child_ipc_tensorpack,
    "ipc-torch": child_ipc_torch, "ipc-ceiling": child_ipc_ceiling,
    "jpeg-kerastrainer": child_jpeg_kerastrainer, "jpeg-tensorpack": child_jpeg_tensorpack,
    "jpeg-torch": child_jpeg_torch, "jpeg-tfdata": child_jpeg_tfdata, "jpeg-ceiling": child_jpeg_ceiling,
    "jpeg-kt-single": child_jpeg_kt_single,
}


# ============================================================================
# driver
# ============================================================================

def _systems(kind: str, args, images_dir=None):
    """The rows of one table; the first is kerastrainer."""
    me = os.path.abspath(__file__)
    venv = C.bench_venv_python()
    common = ["--warmup-batches", str(args.warmup_batches), "--ipc-batches", str(args.ipc_batches),
              "--jpeg-batches", str(args.jpeg_batches)]
    if images_dir:
        common += ["--images-dir", images_dir]

    def cmd(python, child):
        return None if python is None else [python, me, "--child", child] + common

    no_venv = "no .bench-venv (run bash bench/setup_env.sh)"
    if kind == "ipc":
        return [
            C.System("kerastrainer MultiProcessRunnerZMQ", cmd(sys.executable, "ipc-kerastrainer")),
            C.System("tensorpack 0.11 MultiProcessRunnerZMQ", cmd(venv, "ipc-tensorpack"), why=no_venv),
            C.System("PyTorch DataLoader (batch_size=None)", cmd(venv, "ipc-torch"), why=no_venv),
            C.System("ceiling: in-process np.copyto", cmd(sys.executable, "ipc-ceiling")),
        ]
    return [
        C.System("kerastrainer MultiProcessRunnerZMQ + imgaug", cmd(sys.executable, "jpeg-kerastrainer")),
        C.System("tensorpack 0.11 MultiProcessRunnerZMQ", cmd(venv, "jpeg-tensorpack"), why=no_venv),
        C.System("PyTorch DataLoader", cmd(venv, "jpeg-torch"), why=no_venv),
        C.System("tf.data (parallel map)", cmd(sys.executable, "jpeg-tfdata")),
        C.System("ceiling: 2 x single process", cmd(sys.executable, "jpeg-ceiling")),
        C.System("(info) 2 x single process, kerastrainer imgaug path", cmd(sys.executable, "jpeg-kt-single")),
    ]


def _ratio(a, b):
    return None if a is None or b is None else a / b


def run_ipc(args) -> None:
    systems = _systems("ipc", args)
    print(f"\n-- IPC: {BATCH}x{'x'.join(map(str, IMG_SHAPE))} uint8 batches, {NUM_WORKERS} workers -> consumer; "
          f"{args.ipc_batches} timed batches after {args.warmup_batches}; {args.repeats} interleaved repeats",
          flush=True)
    C.run_interleaved(systems, args.repeats, args.verbose)
    ours, tp, torch_, ceil = (C.median_of(s, "value") for s in systems)
    print()
    print(C.results_table(systems, "value", "GB/s", systems[0].name, extra=[("CPU s / GB", "cpu_per_gb")]))
    r_tp, r_torch = _ratio(ours, tp), _ratio(ours, torch_)
    print(C.goal_line(f">= 1.5x tensorpack (is {C.fmt(r_tp)}x)", None if r_tp is None else r_tp >= 1.5))
    print(C.goal_line(f">= the PyTorch DataLoader (is {C.fmt(r_torch)}x)", None if r_torch is None else r_torch >= 1.0))
    print(f"kerastrainer / ceiling: {C.fmt(_ratio(ours, ceil))}", flush=True)


def run_jpeg(args) -> None:
    tmp = tempfile.mkdtemp(prefix="kt-bench-jpegs-")
    try:
        t0 = time.perf_counter()
        paths = write_jpegs(tmp)
        size_kb = sum(os.path.getsize(p) for p in paths) / len(paths) / 1024
        systems = _systems("jpeg", args, tmp)
        print(f"\n-- JPEG pipeline: {len(paths)} JPEGs {JPEG_HW[1]}x{JPEG_HW[0]} (mean {size_kb:.0f} KiB, written in "
              f"{time.perf_counter() - t0:.1f} s) -> decode, random crop, resize 224, flip, batch {BATCH}, "
              f"{NUM_WORKERS} workers; {args.jpeg_batches} timed batches after {args.warmup_batches}; "
              f"{args.repeats} interleaved repeats", flush=True)
        C.run_interleaved(systems, args.repeats, args.verbose)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    meds = [C.median_of(s, "value") for s in systems]
    ours, ceil = meds[0], meds[4]
    print()
    print(C.results_table(systems, "value", "images/s", systems[0].name,
                          extra=[("CPU ms / image", "cpu_ms_per_image")]))
    r_ceil = _ratio(ours, ceil)
    print(C.goal_line(f">= 90% of the ceiling (is {C.fmt(None if r_ceil is None else 100 * r_ceil, 0)}%)",
                      None if r_ceil is None else r_ceil >= 0.9))
    cpu = [C.median_of(s, "cpu_ms_per_image") for s in systems]
    r_cpu = _ratio(cpu[4], cpu[0])
    print(C.goal_line(f">= 90% of the ceiling on a CPU-time basis, ceiling CPU ms/image / ours "
                      f"(is {C.fmt(None if r_cpu is None else 100 * r_cpu, 0)}%; robust to other load)",
                      None if r_cpu is None else r_cpu >= 0.9))
    refs = [m for m in meds[1:4]]
    ahead = None if ours is None or any(m is None for m in refs) else all(ours > m for m in refs)
    print(C.goal_line("ahead of every reference (tensorpack, PyTorch, tf.data)", ahead))
    ahead_cpu = None if cpu[0] is None or any(c is None for c in cpu[1:4]) else all(cpu[0] < c for c in cpu[1:4])
    print(C.goal_line("less CPU per image than every reference", ahead_cpu), flush=True)


# ============================================================================
# serializer reads
# ============================================================================

SER_DATA = {"small 32x32x3 x 20000": ((32, 32, 3), 20000), "large 224x224x3 x 400": ((224, 224, 3), 400)}


def _ser_dataflow(shape, n):
    import numpy as np
    from kerastrainer.dataflow import DataFromGenerator

    def gen():
        rng = np.random.RandomState(0)
        for i in range(n):
            yield [rng.randint(0, 255, shape, np.uint8), i]
    return DataFromGenerator(gen, size=n)


def _ser_epochs(load, path: str):
    """CPU seconds of (opening the file and reading its first epoch, reading a second epoch of the
    same DataFlow), each epoch's images stacked into batches of 64 as ``BatchData`` does (a reader
    that maps the file has read nothing until its bytes are used)."""
    import numpy as np

    def epoch(ds):
        images = []
        for dp in ds:
            images.append(dp[0])
            if len(images) == 64:
                np.stack(images)
                images = []

    c0 = time.process_time()
    ds = load(path)
    ds.reset_state()
    epoch(ds)
    c1 = time.process_time()
    epoch(ds)
    c2 = time.process_time()
    if hasattr(ds, "close"):
        ds.close()
    return c1 - c0, c2 - c1


def _ser_unchecked_copy(fmt: str, path: str, out: str) -> None:
    """The same records in the layout written before checksums (what today's readers read with
    one warning and without checks): the in-process reference for the checks' cost."""
    import numpy as np
    if fmt == "LMDB":
        import lmdb

        from kerastrainer.dataflow import wire
        from kerastrainer.dataflow.serialize import LMDBSerializer
        src = LMDBSerializer.load(path, shuffle=False)
        src.reset_state()
        env = lmdb.open(out, subdir=False, lock=False, map_size=2 * os.path.getsize(path) + (1 << 24))
        with env.begin(write=True) as txn:
            for key, dp in zip(src.keys, src):
                txn.put(key, wire.dumps(dp))
            txn.put(b"__keys__", wire.dumps(list(src.keys)))
        env.close()
        src.close()
    else:
        import h5py
        with h5py.File(path, "r") as hf, h5py.File(out, "w") as new:
            for name in ("img", "label"):
                new.create_dataset(name, data=np.asarray(hf[name][()]))


def run_serialize(args) -> None:
    import numpy as np

    import kerastrainer
    from kerastrainer.dataflow.serialize import HDF5Serializer, LMDBSerializer, NumpySerializer
    print(f"\n-- Serializer reads (kerastrainer from {os.path.dirname(kerastrainer.__file__)}): one epoch in file "
          f"order, MB/s of CPU time, median of {args.repeats}; LMDB and HDF5 beside the same records in the "
          "layout without checksums (read alternately, so drift of the machine falls on both)", flush=True)
    rows = []
    tmp = tempfile.mkdtemp(prefix="kt-bench-ser-")
    try:
        for label, (shape, n) in SER_DATA.items():
            nbytes = n * (int(np.prod(shape)) + 8)
            for fmt, save, load in (
                    ("LMDB", lambda df, p: LMDBSerializer.save(df, p), lambda p: LMDBSerializer.load(p, shuffle=False)),
                    ("HDF5", lambda df, p: HDF5Serializer.save(df, p, ["img", "label"]),
                     lambda p: HDF5Serializer.load(p, ["img", "label"], shuffle=False)),
                    ("npz", lambda df, p: NumpySerializer.save(df, p),
                     lambda p: NumpySerializer.load(p, shuffle=False))):
                path = os.path.join(tmp, f"{fmt}-{n}")
                save(_ser_dataflow(shape, n), path)
                paths = {"checked": path}
                if fmt != "npz":
                    paths["unchecked"] = path + ".unchecked"
                    _ser_unchecked_copy(fmt, path, paths["unchecked"])
                times = {k: [] for k in paths}
                for r in range(args.repeats + 1):
                    for k, p in paths.items():
                        t = _ser_epochs(load, p)
                        if r:   # the first round warms the page cache and the imports
                            times[k].append(t)
                rate = {k: [nbytes / max(statistics.median(t[e] for t in v), 1e-9) / 1e6 for e in (0, 1)]
                        for k, v in times.items()}
                first, later = rate["checked"]
                row = [label, fmt, f"{first:.0f}", f"{later:.0f}"]
                if "unchecked" in rate:
                    base_first, base_later = rate["unchecked"]
                    row += [f"{base_first:.0f}", f"{base_later:.0f}", f"{first / base_first:.2f}x",
                            f"{later / base_later:.2f}x"]
                else:
                    row += ["-", "-", "(zip CRC)", "(zip CRC)"]
                rows.append(row)
                print("   " + "  ".join(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(C.format_table(["data", "format", "epoch 1 MB/s", "epoch 2 MB/s", "no checksums: epoch 1",
                          "epoch 2", "checked / not: epoch 1", "epoch 2"], rows), flush=True)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        C.dispatch_child({k: (lambda f=f: f(args)) for k, f in CHILDREN.items()}, args.child)
        return
    C.print_header("bench/dataflow.py: kerastrainer DataFlow IPC and JPEG pipeline vs tensorpack, PyTorch, tf.data")
    if C.bench_venv_python() is None:
        print("note: .bench-venv is missing; references that need it are skipped (bash bench/setup_env.sh)")
    if args.only in (None, "ipc"):
        run_ipc(args)
    if args.only in (None, "jpeg"):
        run_jpeg(args)
    if args.only in (None, "serialize"):
        run_serialize(args)


if __name__ == "__main__":
    main()
