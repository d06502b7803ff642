"""Shared pieces of the ImageNet examples: the data pipeline, the ResNet recipe, the flags.

Used by ``imagenet-resnet.py`` (ModelDesc), ``imagenet-resnet-keras.py`` (KerasModel)
and ``bench/resnet50.py``.

Data pipeline (the fast one):

- training: each of ``num_proc`` worker processes lists the training files, shuffles
  them, reads each JPEG's bytes and turns them into an augmented 224x224 crop in one step
  (``imgaug.DecodeRandomResizedCrop``: fb.resnet.torch's recipe, the crop window drawn
  from the JPEG header so that large images decode at a reduced DCT scale, the colour
  jitter fused into one pass) and batches the uint8 images *in the worker*
  (``fused_decode=False``: full decode, then the ``fbresnet_augmentor`` list); whole
  uint8 batches cross the process boundary
  (``MultiProcessRunnerZMQ``), 4x fewer bytes than float32 and one message per batch;
- validation: a parallel map (``MultiProcessMapDataZMQ``, strict: exactly one pass)
  resizes and centre-crops, then batches;
- conversion to float and normalisation happen on the device, in the tower
  (:func:`image_preprocess`), so the input spec is ``uint8`` NHWC (BGR, OpenCV's order).

The recipe (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour"):
learning rate 0.1 per 256 images of total batch, a linear warm-up over the first 5
epochs (from 0.1, when the scaled rate is larger), x0.1 at epochs 30, 60 and 80 of 90,
SGD with Nesterov momentum 0.9, weight decay 1e-4 on conv and FC weights only.
"""
from __future__ import annotations

import argparse
import os
from typing import Callable, Optional, Sequence

import cv2
import numpy as np

from kerastrainer.dataflow import (BatchData, DataFlow, MapData, MultiProcessMapDataZMQ,
                                   MultiProcessRunnerZMQ, imgaug, read_image)
from kerastrainer.dataflow.dataset import ILSVRC12Files

NUM_CLASSES = 1000
# ImageNet's per-channel mean and std on the [0, 1] scale, RGB order (torchvision's numbers)
MEAN_RGB = np.array([0.485, 0.456, 0.406], np.float32)
STD_RGB = np.array([0.229, 0.224, 0.225], np.float32)
TRAIN_IMAGES = 1281167


# ---------------------------------------------------------------------------------------
# augmentation
# ---------------------------------------------------------------------------------------

class _PerWorker:
    """A picklable mapper (not a closure) that sets OpenCV up once in each worker process."""

    _pid = None

    def __call__(self, dp):
        if self._pid != os.getpid():
            # one worker process per core already: OpenCV's own threads would only oversubscribe
            cv2.setNumThreads(1)
            self._pid = os.getpid()
        fname, label = dp
        return [self.image(fname), np.int32(label)]


class _DecodeAugment(_PerWorker):
    """``[file name, label] -> [uint8 image, int32 label]``: decode with OpenCV, augment."""

    def __init__(self, augmentors):
        self.augs = imgaug.AugmentorList(augmentors)

    def image(self, fname):
        # BGR; BadImageError naming the file (truncated JPEGs too)
        return self.augs.augment(read_image(fname, channel=3))


class _DecodeCrop(_PerWorker):
    """``[file name, label] -> [uint8 image, int32 label]`` through the fused decoder."""

    def __init__(self, aug: "imgaug.DecodeRandomResizedCrop"):
        self.aug = aug

    def image(self, fname):
        return self.aug.decode(fname)   # BadImageError names a bad file


def default_num_workers() -> int:
    return max(1, min(40, os.cpu_count() or 1))


def _meta_dir(datadir: str, meta_dir: Optional[str]) -> Optional[str]:
    # the meta files (synsets.txt, val.txt) usually sit next to train/ and val/
    if meta_dir is None and os.path.isfile(os.path.join(datadir, "synsets.txt")):
        return datadir
    return meta_dir


def get_imagenet_dataflow(datadir: str, name: str, batch_size: int, image_size: int = 224,
                          num_proc: Optional[int] = None, meta_dir: Optional[str] = None,
                          shard: Optional[Callable[[list], list]] = None, fused_decode: bool = True):
    """The DataFlow of uint8 ``[images (B, S, S, 3) BGR, labels (B,) int32]`` batches.

    Args:
        datadir: the ILSVRC12 root (``train/<wnid>/*.JPEG``, ``val/``).
        name: ``'train'`` (shuffled, augmented, runs forever in ``num_proc`` workers,
            each batching its own images) or ``'val'`` (one exact pass, in order of
            completion, the last batch may be short).
        meta_dir: the folder of ``synsets.txt`` / ``val.txt``; default: ``datadir`` when
            it holds them, else the library's default (``$KERASTRAINER_DATASETS``...).
        shard: for multi-worker training, a function that takes the split's list of
            ``(file, label)`` and returns this worker's share (e.g. ``cluster.shard_list``).
        fused_decode: training only: decode, crop, jitter and flip in one step
            (``imgaug.DecodeRandomResizedCrop``); False: decode in full, then the augmentor list.
    """
    num_proc = default_num_workers() if num_proc is None else int(num_proc)
    is_train = name == "train"
    augmentors = imgaug.fbresnet_augmentor(is_train, interp=cv2.INTER_CUBIC, image_size=image_size)
    src = ILSVRC12Files(datadir, name, meta_dir=_meta_dir(datadir, meta_dir), shuffle=is_train)
    if shard is not None:
        src.imglist = list(shard(src.imglist))
    if is_train:
        if fused_decode:
            mapper = _DecodeCrop(imgaug.DecodeRandomResizedCrop(image_size, interp=cv2.INTER_CUBIC))
        else:
            mapper = _DecodeAugment(augmentors)
        ds = MapData(src, mapper)
        ds = BatchData(ds, batch_size, remainder=False)
        return MultiProcessRunnerZMQ(ds, num_proc=num_proc, hwm=max(4, 64 // max(1, batch_size // 8)))
    ds = MultiProcessMapDataZMQ(src, num_proc=num_proc, map_func=_DecodeAugment(augmentors),
                                buffer_size=min(1000, max(4 * num_proc, 2 * batch_size)), strict=True)
    return BatchData(ds, batch_size, remainder=True)


def count_images(datadir: str, name: str, meta_dir: Optional[str] = None) -> int:
    return len(ILSVRC12Files(datadir, name, meta_dir=_meta_dir(datadir, meta_dir), shuffle=False))


class FakeImageNetData(DataFlow):
    """Random uint8 batches (a pool of ``pool`` distinct ones, cycled), forever: ``--fake``.

    No files, no decoding: measures the model and the input path (queue, uint8 to
    the device), not the JPEG pipeline.
    """

    def __init__(self, batch_size: int, image_size: int = 224, num_classes: int = NUM_CLASSES,
                 size: int = 1000, pool: int = 4, seed: int = 0):
        self.batch_size, self.image_size, self.num_classes = batch_size, image_size, num_classes
        self.size, self.pool_size, self.seed = int(size), int(pool), seed
        self._pool = None

    def reset_state(self):
        rng = np.random.RandomState(self.seed)
        shape = (self.batch_size, self.image_size, self.image_size, 3)
        self._pool = [[rng.randint(0, 256, shape, dtype=np.uint8),
                       rng.randint(0, self.num_classes, (self.batch_size,)).astype(np.int32)]
                      for _ in range(self.pool_size)]

    def __len__(self):
        return self.size

    def __iter__(self):
        for i in range(self.size):
            yield self._pool[i % self.pool_size]


# ---------------------------------------------------------------------------------------
# the recipe
# ---------------------------------------------------------------------------------------

def base_learning_rate(total_batch: int) -> float:
    """Linear scaling: 0.1 per 256 images of total batch."""
    return 0.1 * total_batch / 256.0


def learning_rate_schedule(total_batch: int, steps_per_epoch: int, warmup_epochs: int = 5,
                           decay_epochs: Sequence[int] = (30, 60, 80)):
    """``(epoch schedule, step-based warm-up schedule or None)`` for ScheduledHyperParamSetter."""
    base = base_learning_rate(total_batch)
    epochs = [(0, base)] + [(e, base * 0.1 ** (i + 1)) for i, e in enumerate(decay_epochs)]
    start = min(0.1, base)
    warmup = None
    if warmup_epochs > 0 and base > start:
        warmup = [(0, start), (warmup_epochs * steps_per_epoch, base)]
    return epochs, warmup


def lr_callbacks(total_batch: int, steps_per_epoch: int, warmup_epochs: int = 5,
                 decay_epochs: Sequence[int] = (30, 60, 80)):
    """The learning-rate setters of the recipe (the warm-up one last, so it wins while warming up)."""
    from kerastrainer import ScheduledHyperParamSetter
    epochs, warmup = learning_rate_schedule(total_batch, steps_per_epoch, warmup_epochs, decay_epochs)
    cbs = [ScheduledHyperParamSetter("learning_rate", epochs)]
    if warmup is not None:
        cbs.append(ScheduledHyperParamSetter("learning_rate", warmup, interp="linear", step_based=True))
    return cbs


def make_sgd(total_batch: int):
    import keras
    return keras.optimizers.SGD(learning_rate=base_learning_rate(total_batch), momentum=0.9, nesterov=True)


# ---------------------------------------------------------------------------------------
# tensors (TensorFlow is imported when these are called)
# ---------------------------------------------------------------------------------------

def image_preprocess(image):
    """uint8 BGR NHWC -> float32, ``(x / 255 - mean) / std`` per channel, on the device.

    One multiply-add per element (the constants are folded).
    """
    import tensorflow as tf
    mean_bgr, std_bgr = MEAN_RGB[::-1], STD_RGB[::-1]
    scale = tf.constant(1.0 / (255.0 * std_bgr), tf.float32)
    offset = tf.constant(-mean_bgr / std_bgr, tf.float32)
    return tf.cast(image, tf.float32) * scale + offset


def wrong_vectors(logits, label):
    """Per-sample float 0/1 vectors ``wrong-top1`` and ``wrong-top5`` (named tensors)."""
    import tensorflow as tf
    logits = tf.cast(logits, tf.float32)
    out = []
    for k in (1, 5):
        k_eff = min(k, int(logits.shape[-1]))
        hit = tf.math.in_top_k(targets=label, predictions=logits, k=k_eff)
        out.append(tf.cast(tf.logical_not(hit), tf.float32, name=f"wrong-top{k}"))
    return out


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------

def add_common_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The flags both ImageNet scripts take."""
    parser.add_argument("--data", help="ILSVRC12 root: train/<wnid>/*.JPEG, val/, and the meta files")
    parser.add_argument("--meta-dir", help="folder of synsets.txt / val.txt (default: --data when it "
                                           "holds them, else the library's default)")
    parser.add_argument("--fake", action="store_true", help="random uint8 data: no files (speed tests)")
    parser.add_argument("--batch", type=int, default=64, help="batch per tower (per device)")
    parser.add_argument("--gpus", type=int, default=1, help="towers on this machine")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--xla", choices=["auto", "on", "off"], default="auto",
                        help="XLA: auto (the trainers' default: on GPUs, off on CPU), on or off")
    parser.add_argument("--load", help="weights to start from / to evaluate: a checkpoint or log dir")
    parser.add_argument("--eval", action="store_true", help="evaluate --load on the val set and exit")
    parser.add_argument("--epochs", type=int, help="the last epoch (default 90; 2 with --fake)")
    parser.add_argument("--steps-per-epoch", type=int,
                        help="default: one pass over the training set (100 with --fake)")
    parser.add_argument("--warmup-epochs", type=int, default=5)
    parser.add_argument("--data-workers", type=int, default=None,
                        help="decoding/augmenting processes (default: the number of CPUs, at most 40)")
    parser.add_argument("--val-batch", type=int, default=None, help="validation batch (default: --batch)")
    parser.add_argument("--logdir", help="default: train_log/<script>-d<depth>")
    return parser


def check_data_args(args) -> None:
    if args.epochs is None:
        args.epochs = 2 if args.fake else 90
    if not args.fake and not args.data:
        raise SystemExit("Give --data <ILSVRC12 root> (see examples/imagenet/README.md), or --fake.")
    if args.eval and not args.load:
        raise SystemExit("--eval needs --load <checkpoint or log dir>.")
    if args.eval and args.fake:
        raise SystemExit("--eval needs real validation data (--data), not --fake.")


def steps_per_epoch_for(args, total_batch: int) -> int:
    """``--steps-per-epoch``, or one pass over the training set at ``total_batch`` images a step."""
    if args.steps_per_epoch:
        return int(args.steps_per_epoch)
    if args.fake:
        return 100
    return max(1, count_images(args.data, "train", args.meta_dir) // total_batch)


def report_errors(wrong1: float, wrong5: float, count: int) -> str:
    return f"Top-1 error: {wrong1 / count:.4f}   Top-5 error: {wrong5 / count:.4f}   ({count} images)"
