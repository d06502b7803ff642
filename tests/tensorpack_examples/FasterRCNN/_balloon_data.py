"""A tiny generated dataset for the FasterRCNN port (a test helper, not part of the port).

``python _balloon_data.py DIR [--train N] [--val N]`` (or ``write_balloon(DIR)``) writes, under DIR:

- ``train/`` and ``val/``: JPEG images with a ``via_region_data.json`` each, in the format of the
  balloon dataset (matterport's Mask_RCNN v2.1 release) that ``dataset/balloon.py`` reads: one entry
  per image, ``regions`` a dict of polygons (``shape_attributes.all_points_x`` / ``all_points_y``,
  integer pixel coordinates) with empty ``region_attributes``;
- ``annotations/instances_val2017.json`` and ``val2017/``: the same validation images in COCO's
  format, so that ``register_coco(DATA.BASEDIR)``'s ``coco_val2017`` split is an evaluation set
  (``DATA.VAL=('coco_val2017',)``): ``BalloonDemo`` has no ``inference_roidbs`` /
  ``eval_inference_results``, so the program's COCO evaluation (EvalCallback, predict.py --evaluate)
  needs a COCO split. One category, id 1 ("balloon"), the balloon dataset's only class.

Each image is a smooth dark background with 1 to 3 filled ellipses ("balloons") of saturated
colours, each annotated with a 20-point polygon on its outline.
"""
import argparse
import json
import os

import cv2
import numpy as np


def _image(rng, h, w):
    # low-frequency grey-blue background, upsampled noise
    small = rng.uniform(20, 90, size=(h // 16 + 1, w // 16 + 1, 3)).astype(np.float32)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    img += rng.normal(0, 4, size=img.shape)
    objects = []
    for _ in range(rng.randint(1, 4)):
        for _attempt in range(20):
            ax, ay = rng.randint(10, 28), rng.randint(12, 32)
            cx, cy = rng.randint(ax + 2, w - ax - 2), rng.randint(ay + 2, h - ay - 2)
            if all(abs(cx - ox) > ax + oax or abs(cy - oy) > ay + oay  # bounding boxes apart
                   for ox, oy, oax, oay in objects):
                break
        objects.append((cx, cy, ax, ay))
        colour = [rng.randint(0, 60), rng.randint(0, 80), rng.randint(180, 255)]  # BGR: red-ish
        cv2.ellipse(img, (cx, cy), (ax, ay), 0, 0, 360, [float(c) for c in colour], -1)
    img = np.clip(img, 0, 255).astype(np.uint8)
    polys = []
    for cx, cy, ax, ay in objects:
        t = np.linspace(0, 2 * np.pi, 20, endpoint=False)
        px = np.clip(np.round(cx + ax * np.cos(t)), 0, w - 1).astype(int)
        py = np.clip(np.round(cy + ay * np.sin(t)), 0, h - 1).astype(int)
        polys.append((px.tolist(), py.tolist()))
    return img, polys


def _write_split(basedir, split, n, rng, h, w, coco_dir=None):
    d = os.path.join(basedir, split)
    os.makedirs(d, exist_ok=True)
    via = {}
    coco = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "balloon"}]}
    for i in range(n):
        img, polys = _image(rng, h, w)
        fname = "{}_{:03d}.jpg".format(split, i)
        cv2.imwrite(os.path.join(d, fname), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
        size = os.path.getsize(os.path.join(d, fname))
        regions = {}
        for k, (px, py) in enumerate(polys):
            regions[str(k)] = {"shape_attributes": {"name": "polygon", "all_points_x": px, "all_points_y": py},
                               "region_attributes": {}}
            x0, y0 = min(px) + 0.5, min(py) + 0.5
            bw, bh = max(px) - min(px), max(py) - min(py)
            seg = [float(v) + 0.5 for xy in zip(px, py) for v in xy]
            coco["annotations"].append({
                "id": len(coco["annotations"]) + 1, "image_id": i + 1, "category_id": 1,
                "segmentation": [seg], "area": float(bw * bh * np.pi / 4), "bbox": [x0, y0, float(bw), float(bh)],
                "iscrowd": 0})
        via["{}{}".format(fname, size)] = {"filename": fname, "size": size, "regions": regions,
                                            "file_attributes": {}}
        coco["images"].append({"id": i + 1, "file_name": fname, "height": h, "width": w})
        if coco_dir is not None:
            os.makedirs(os.path.join(basedir, coco_dir), exist_ok=True)
            cv2.imwrite(os.path.join(basedir, coco_dir, fname), img, [cv2.IMWRITE_JPEG_QUALITY, 95])
    with open(os.path.join(d, "via_region_data.json"), "w") as f:
        json.dump(via, f)
    if coco_dir is not None:
        os.makedirs(os.path.join(basedir, "annotations"), exist_ok=True)
        with open(os.path.join(basedir, "annotations", "instances_{}.json".format(coco_dir)), "w") as f:
            json.dump(coco, f)


def write_balloon(basedir, num_train=8, num_val=3, height=96, width=128, seed=0):
    rng = np.random.RandomState(seed)
    _write_split(basedir, "train", num_train, rng, height, width)
    _write_split(basedir, "val", num_val, rng, height, width, coco_dir="val2017")
    return basedir


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("basedir")
    p.add_argument("--train", type=int, default=8)
    p.add_argument("--val", type=int, default=3)
    p.add_argument("--height", type=int, default=96)
    p.add_argument("--width", type=int, default=128)
    a = p.parse_args()
    write_balloon(a.basedir, a.train, a.val, a.height, a.width)
