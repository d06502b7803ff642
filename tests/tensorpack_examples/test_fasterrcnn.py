"""tensorpack's examples/FasterRCNN (Faster / Mask R-CNN), ported in tests/tensorpack_examples/FasterRCNN/
with the import change and the edits each file's header lists, trains from scratch on kerastrainer.

The program runs as written, in its own processes (``train.py``, ``predict.py``), on a tiny generated
dataset in the balloon format (``FasterRCNN/_balloon_data.py``: 96x128 JPEGs of one to three
"balloons" with polygon annotations in ``via_region_data.json``, and a COCO-format copy of the
validation images for the program's COCO evaluation). Its defaults hold except for sizes and steps:
ResNet-50, FREEZE_AT=2, FreezeBN, ``SyncMultiGPUTrainerReplicated(1, average=False)`` with
``AccumGradOptimizer(MomentumOptimizer, 8)`` (fewer than 8 GPUs), the linear warm-up and the epoch
schedule, ``SessionRunTimeout``, the memory / throughput trackers, ``PeriodicCallback(ModelSaver)`` and
``EvalCallback`` with its COCO evaluation (pycocotools: ``pip install kerastrainer[test]``). The
configurations are set with its own ``--config`` overrides (small PREPROC sizes and anchors, few
steps, TRAIN.WARMUP=8).

TF_ENABLE_ONEDNN_OPTS=1: the program's own NCHW ops (``tf.nn.avg_pool2d(..., data_format='NCHW')`` in
roi_align) run on a CPU only with oneDNN, and predict.py asserts ``IsMklEnabled()`` on a machine
without a GPU ("Inference requires either GPU support or MKL support!").
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pycocotools")

HERE = os.path.dirname(os.path.abspath(__file__))
FRCNN = os.path.join(HERE, "FasterRCNN")
REPO = os.path.dirname(os.path.dirname(HERE))

STEPS = 8  # TRAIN.STEPS_PER_EPOCH: one AccumGradOptimizer update (8 steps' gradients) per epoch


def _env():
    path = [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_ENABLE_ONEDNN_OPTS="1",
                PYTHONPATH=os.pathsep.join(path))


def _run(argv, cwd, timeout):
    r = subprocess.run([sys.executable] + argv, cwd=str(cwd), env=_env(), capture_output=True, text=True,
                       timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{argv[:3]} failed:\n{r.stdout[-5000:]}\n{r.stderr[-5000:]}"
    return r.stdout + r.stderr


def base_config(data):
    return ["DATA.BASEDIR=" + str(data), "DATA.TRAIN=('balloon_train',)", "DATA.VAL=('coco_val2017',)",
            "PREPROC.TRAIN_SHORT_EDGE_SIZE=[96,96]", "PREPROC.TEST_SHORT_EDGE_SIZE=96", "PREPROC.MAX_SIZE=128",
            "RPN.ANCHOR_SIZES=(8,16,32,64,128)", "FRCNN.BATCH_PER_IM=64",
            "RPN.TEST_PER_LEVEL_NMS_TOPK=100", "RPN.TEST_POST_NMS_TOPK=100"]


def train(logdir, data, *config, cwd, load=None, timeout=1500):
    argv = [os.path.join(FRCNN, "train.py"), "--logdir", str(logdir)]
    if load:
        argv += ["--load", str(load)]
    out = _run(argv + ["--config"] + base_config(data) + list(config), cwd, timeout)
    with open(os.path.join(logdir, "stats.json")) as f:
        return json.load(f), out


def predict(data, *args, cwd, config=(), timeout=900):
    argv = [os.path.join(FRCNN, "_headless.py"), os.path.join(FRCNN, "predict.py"), *args,
            "--config"] + base_config(data) + list(config)
    return _run(argv, cwd, timeout)


def write_data(d):
    sys.path.insert(0, FRCNN)
    try:
        from _balloon_data import write_balloon
    finally:
        sys.path.remove(FRCNN)
    return write_balloon(str(d))


def schedule(epochs, checkpoint_period=100):
    """``epochs`` epochs of STEPS steps (train.py: max_epoch = LR_SCHEDULE[-1] * 8 // NUM_GPUS //
    STEPS_PER_EPOCH); EvalCallback evaluates at the last epoch only (it always adds max_epoch)."""
    return ["TRAIN.STEPS_PER_EPOCH={}".format(STEPS), "TRAIN.LR_SCHEDULE=[{}]".format(epochs * STEPS // 8),
            "TRAIN.WARMUP=8", "TRAIN.EVAL_PERIOD=100", "TRAIN.CHECKPOINT_PERIOD={}".format(checkpoint_period),
            "DATA.NUM_WORKERS=2"]


def detection_loss(s):
    return s["total_cost"] - s["wd_cost"]


def assert_losses_fall(stats, keys, total=True):
    """The moving averages of the losses ``keys`` at the last epoch are below those of the first
    epoch (whose 8 steps run at the initial weights: AccumGradOptimizer updates after the 8th), their
    sum by more than 0.02; with ``total``, so is the sum of every loss (total_cost - wd_cost), by more
    than 0.05."""
    first, last = stats[0], stats[-1]
    for k in keys:
        assert last[k] < first[k], (k, [round(s[k], 4) for s in stats])
    assert sum(last[k] for k in keys) < sum(first[k] for k in keys) - 0.02, \
        [round(sum(s[k] for k in keys), 4) for s in stats]
    if total:
        assert detection_loss(last) < detection_loss(first) - 0.05, [round(detection_loss(s), 4) for s in stats]
    for s in stats:
        assert all(np.isfinite(v) for v in s.values() if isinstance(v, float))


# --- fast: the program's input pipeline and its COCO evaluation on the generated data -------------

_DATA_CHECK = r"""
import sys
import numpy as np
import pycocotools.mask as cocomask
sys.path.insert(0, {frcnn!r})
from config import config as cfg, finalize_configs
from dataset import DatasetRegistry, register_balloon, register_coco
cfg.update_args({config!r})
register_coco(cfg.DATA.BASEDIR)
register_balloon(cfg.DATA.BASEDIR)
finalize_configs(is_training=True)
assert cfg.TRAIN.NUM_GPUS == 1 and cfg.DATA.CLASS_NAMES == ['BG', 'balloon'], (cfg.TRAIN.NUM_GPUS, cfg.DATA.CLASS_NAMES)

from common import polygons_to_mask
from data import get_eval_dataflow, get_train_dataflow
from eval import _paste_mask
from modeling.generalized_rcnn import ResNetFPNModel

specs = ResNetFPNModel().inputs()
df = get_train_dataflow()       # MultiProcessMapData(DataFromList(roidbs), 2, TrainingDataPreprocessor)
df.reset_state()
n = 0
for dp in df:
    for s in specs:
        v = dp[s.name]
        # (gt_labels are int32 for an int64 input: a cast that keeps every value, as TF1's feed made)
        assert np.can_cast(v.dtype, s.dtype.as_numpy_dtype, 'same_kind') and v.ndim == len(s.shape), (s, v.dtype)
    im, boxes, masks = dp['image'], dp['gt_boxes'], dp['gt_masks_packed']
    assert im.shape[:2] == (96, 128) and boxes.shape[0] >= 1 and (dp['gt_labels'] == 1).all()
    bits = np.unpackbits(masks, axis=-1)[:, :, :128]
    assert bits.shape == (len(boxes), 96, 128)
    for m, b in zip(bits, boxes):   # each object's mask fills most of its box, nothing outside it
        ys, xs = np.nonzero(m)
        assert xs.min() >= b[0] - 1 and xs.max() <= b[2] and ys.min() >= b[1] - 1 and ys.max() <= b[3], b
        assert m.sum() > 0.6 * (b[2] - b[0]) * (b[3] - b[1])
    labels = sum(int((dp['anchor_labels_lvl{{}}'.format(k)] == 1).sum()) for k in range(2, 7))
    assert labels >= 1
    n += 1
assert n == len(df) == 8, n

# the COCO evaluation of the ground truth itself, in predict_dataflow's result format
split = DatasetRegistry.get('balloon_val')
gt = {{r['file_name'].split('/')[-1]: r for r in split.training_roidbs()}}
results = []
ds = get_eval_dataflow('coco_val2017')
ds.reset_state()
for img, img_id in ds:
    r = gt['val_{{:03d}}.jpg'.format(img_id - 1)]
    for box, polys in zip(r['boxes'], r['segmentation']):
        full = polygons_to_mask(polys, img.shape[0], img.shape[1])
        x0, y0, x1, y1 = box
        # a 28x28 mask that is the ground truth cropped to its box, pasted back (ACCURATE_PASTE's
        # RegularGridInterpolator: the port's edit of scipy's removed interp2d)
        ys = np.clip(((np.arange(28) + 0.5) / 28 * (y1 - y0) + y0).astype(int), 0, img.shape[0] - 1)
        xs = np.clip(((np.arange(28) + 0.5) / 28 * (x1 - x0) + x0).astype(int), 0, img.shape[1] - 1)
        pasted = _paste_mask(box, full[ys][:, xs].astype('float32'), img.shape[:2])
        inter, union = (pasted & full).sum(), (pasted | full).sum()
        assert pasted.dtype == np.uint8 and inter / union > 0.85, inter / union
        rle = cocomask.encode(np.array(pasted[:, :, None], order='F'))[0]
        rle['counts'] = rle['counts'].decode('ascii')
        results.append({{'image_id': img_id, 'category_id': 1, 'bbox': [float(x) for x in box],
                         'score': 1.0, 'segmentation': rle}})
scores = DatasetRegistry.get('coco_val2017').eval_inference_results(results)
assert scores['mAP(bbox)/IoU=0.5'] == 1.0 and scores['mAP(segm)/IoU=0.5'] > 0.99, scores
print('DATA_CHECK_OK', n, len(results), scores['mAP(bbox)/IoU=0.5:0.95'], scores['mAP(segm)/IoU=0.5:0.95'])
"""


def test_fasterrcnn_data_and_coco_eval(tmp_path):
    """The port's data.py (TrainingDataPreprocessor through kerastrainer's MultiProcessMapData, imgaug
    transforms, FPN anchor targets, packed masks), its balloon and COCO loaders and eval.py's
    mask pasting and COCO evaluation on the generated dataset, in one process of its own."""
    data = write_data(tmp_path / "data")
    code = _DATA_CHECK.format(frcnn=FRCNN, config=base_config(data) + ["DATA.NUM_WORKERS=2"])
    out = _run(["-c", code], tmp_path, 300)
    assert "DATA_CHECK_OK 8" in out, out[-3000:]


# --- slow: training, resuming and predict.py ------------------------------------------------------

@pytest.fixture(scope="module")
def fpn_run(tmp_path_factory):
    """Mask R-CNN + FPN (the default configuration), 6 epochs of 8 steps, EvalCallback at the end."""
    root = tmp_path_factory.mktemp("fasterrcnn")
    data = write_data(root / "data")
    logdir = root / "train_log" / "fpn"
    stats, out = train(logdir, data, *schedule(6, checkpoint_period=3), cwd=root)
    return root, data, logdir, stats, out


@pytest.mark.slow
def test_fasterrcnn_fpn_mask_trains(fpn_run):
    root, data, logdir, stats, out = fpn_run
    assert [s["global_step"] for s in stats] == [8, 16, 24, 32, 40, 48]
    assert_losses_fall(stats, ["rpn_losses/label_loss", "fastrcnn_losses/label_loss", "maskrcnn_loss/maskrcnn_loss"])
    assert "AccumGradOptimizer applies the sum of every 8 steps' gradients" in out
    assert "MomentumOptimizer translated to" in out
    assert "SessionRunTimeout" in out
    # linear warm-up over 8 steps to BASE_LR, then the epoch schedule
    assert [s["learning_rate"] for s in stats] == pytest.approx([0.01] * 6)
    # EvalCallback ran the COCO evaluation at the last epoch and put its scores to the monitors
    last = stats[-1]
    for k in ("coco_val2017-mAP(bbox)/IoU=0.5", "coco_val2017-mAP(segm)/IoU=0.5:0.95"):
        assert k in last and -1 <= last[k] <= 1
    # PeriodicCallback(ModelSaver(...), every_k_epochs=TRAIN.CHECKPOINT_PERIOD=3)
    assert os.path.isfile(logdir / "checkpoint")
    assert os.path.isfile(logdir / "checkpoint-24.index") and os.path.isfile(logdir / "checkpoint-48.index")
    # FREEZE_AT=2: conv0 and group0 are not trained (no optimizer slots); FreezeBN keeps the
    # statistics; group1 trains
    from kerastrainer.tfutils.varmanip import load_chkpt_vars
    v = load_chkpt_vars(str(logdir / "checkpoint-48"))
    assert "group1/block0/conv3/bn/gamma" in v and "optimizer/group1/block0/conv1/W/momentums" in v
    assert not any(k.startswith("optimizer/conv0/") or k.startswith("optimizer/group0/") for k in v)
    assert np.all(v["group1/block0/conv1/bn/mean/EMA"] == 0)
    assert np.any(v["group1/block0/conv3/bn/gamma"] != 0)   # zero-initialised, trained


@pytest.mark.slow
def test_fasterrcnn_resume_with_load(fpn_run):
    """``--load train_log/fpn/checkpoint`` with TRAIN.STARTING_EPOCH=7: the global step and the
    weights continue from the saved ones (SmartInit(..., ignore_mismatch=True))."""
    root, data, logdir, stats, _ = fpn_run
    stats2, out = train(root / "train_log" / "resumed", data, *schedule(7), "TRAIN.STARTING_EPOCH=7",
                        cwd=root, load=logdir / "checkpoint")
    assert [(s["epoch_num"], s["global_step"]) for s in stats2] == [(7, 56)]
    # the restored model, not a fresh one: its classification loss is near the first run's last
    # value, far below the untrained model's
    k = "fastrcnn_losses/label_loss"
    assert stats2[0][k] < stats[0][k] - 0.1, (stats2[0][k], [s[k] for s in stats])
    assert "Restored" in out


_EXPORT_CHECK = r"""
import json, sys
import cv2
import numpy as np
import tensorflow as tf
pb, serving, image, want, pb_threshold = sys.argv[1:6]
img = cv2.imread(image).astype('float32')
graph_def = tf.compat.v1.GraphDef()
with open(pb, 'rb') as f:
    graph_def.ParseFromString(f.read())
with tf.Graph().as_default() as g:
    tf.compat.v1.import_graph_def(graph_def, name='')
    with tf.compat.v1.Session(graph=g) as sess:
        boxes, scores, labels, masks = sess.run(
            ['output/boxes:0', 'output/scores:0', 'output/labels:0', 'output/masks:0'], {'image:0': img})
k = len(scores)
assert boxes.shape == (k, 4) and labels.shape == (k,) and masks.shape == (k, 28, 28), (boxes.shape, masks.shape)
assert np.all(scores >= float(pb_threshold)) and np.all(labels == 1), (scores, labels)   # the threshold baked in
assert np.all(boxes >= 0) and np.all(boxes[:, 2] <= 128) and np.all(boxes[:, 3] <= 96)   # clipped to the image
assert np.all((masks >= 0) & (masks <= 1))

served = tf.saved_model.load(serving)
got = served.signatures['serving_default'](image=tf.constant(img))
got_scores = np.sort(got['output_scores'].numpy())
with open(want) as f:
    want = json.load(f)
assert len(want) > 0 and got['output_masks'].shape[1:] == (28, 28)
np.testing.assert_allclose(got_scores, want, atol=2e-3)
print('EXPORT_CHECK_OK', k, len(got_scores))
"""


@pytest.mark.slow
def test_fasterrcnn_predict_modes(fpn_run, tmp_path):
    root, data, logdir, _, _ = fpn_run
    load = str(logdir / "checkpoint")
    val = [os.path.join(str(data), "val", "val_{:03d}.jpg".format(i)) for i in range(3)]

    # --evaluate: the COCO evaluation of predictions written to a json file
    out = predict(data, "--load", load, "--evaluate", str(tmp_path / "eval.json"), cwd=tmp_path)
    with open(tmp_path / "eval.json-coco_val2017") as f:
        results = json.load(f)
    assert results and {r["image_id"] for r in results} <= {1, 2, 3}
    assert all(set(r) == {"image_id", "category_id", "bbox", "score", "segmentation"} for r in results)
    assert "Evaluate annotation type *segm*" in out

    # --predict (two images; the window is the harness's) and --output-pb in one run
    out = predict(data, "--load", load, "--output-pb", str(tmp_path / "frcnn.pb"), "--predict", *val[:2],
                  cwd=tmp_path)
    import cv2
    viz = cv2.imread(str(tmp_path / "output.png"))
    assert viz.shape == (96, 256, 3)   # the image and the drawn result, side by side
    assert out.count("Inference output for") == 2

    # the frozen graph runs by tensor name in TF1 style, and the SavedModel runs without kerastrainer;
    # the latter's scores are those of the evaluation above (same checkpoint and RESULT_SCORE_THRESH)
    predict(data, "--load", load, "--output-serving", str(tmp_path / "serving"), cwd=tmp_path)
    want = sorted(r["score"] for r in results if r["image_id"] == 1)
    with open(tmp_path / "want.json", "w") as f:
        json.dump(want, f)
    # (in a process of its own: the graphs' NCHW avg_pool needs oneDNN, set before TF starts)
    out = _run(["-c", _EXPORT_CHECK, str(tmp_path / "frcnn.pb"), str(tmp_path / "serving"), val[0],
                str(tmp_path / "want.json"), "0.5"], tmp_path, 300)
    assert "EXPORT_CHECK_OK" in out, out[-3000:]

    # --benchmark: the predictor and post-processing over the validation set
    out = predict(data, "--load", load, "--benchmark", cwd=tmp_path)
    assert "3/3" in out


@pytest.mark.slow
@pytest.mark.parametrize("name,config,keys,total", [
    # C4 (a ResNet conv5 head on each RoI, 16 RoIs a step here) learns slower: in 5 updates its
    # classification losses fall while its Fast R-CNN box loss grows and its mask loss hardly moves
    # (e.g. RPN 0.694 -> 0.688, Fast R-CNN 0.690 -> 0.657, box 0.59 -> 0.73, mask 0.693 -> 0.692)
    ("c4", ["MODE_FPN=False", "FRCNN.BATCH_PER_IM=16"],
     ["rpn_losses/label_loss", "fastrcnn_losses/label_loss"], False),
    ("cascade", ["FPN.CASCADE=True"],
     ["rpn_losses/label_loss", "cascade_loss_stage1/fastrcnn_losses/label_loss",
      "cascade_loss_stage2/fastrcnn_losses/label_loss", "cascade_loss_stage3/fastrcnn_losses/label_loss",
      "maskrcnn_loss/maskrcnn_loss"], True),
    ("gn", ["FPN.NORM=GN", "BACKBONE.NORM=GN", "FPN.FRCNN_HEAD_FUNC=fastrcnn_4conv1fc_gn_head",
            "FPN.MRCNN_HEAD_FUNC=maskrcnn_up4conv_gn_head"],
     ["rpn_losses/label_loss", "fastrcnn_losses/label_loss", "maskrcnn_loss/maskrcnn_loss"], True),
])
def test_fasterrcnn_configurations(tmp_path, name, config, keys, total):
    """The C4 model, Cascade R-CNN and the GroupNorm model (backbone, FPN and heads), each with
    Mask R-CNN, train from scratch: their losses fall in 5 epochs of 8 steps and EvalCallback runs;
    each resumes with --load and predict.py --evaluate runs it."""
    data = write_data(tmp_path / "data")
    logdir = tmp_path / "train_log" / name
    stats, _ = train(logdir, data, *schedule(5), *config, cwd=tmp_path)
    assert [s["global_step"] for s in stats] == [8, 16, 24, 32, 40]
    assert_losses_fall(stats, keys, total)
    assert "coco_val2017-mAP(bbox)/IoU=0.5" in stats[-1]
    # resumes with --load (the checkpoint ModelSaver wrote at the end) for one more epoch
    stats2, out = train(tmp_path / "train_log" / (name + "-resumed"), data, *schedule(6), "TRAIN.STARTING_EPOCH=6",
                        *config, cwd=tmp_path, load=logdir / "checkpoint")
    assert [(s["epoch_num"], s["global_step"]) for s in stats2] == [(6, 48)] and "Restored" in out
    # and predict.py evaluates the trained model in the same configuration
    out = predict(data, "--load", str(logdir / "checkpoint"), "--evaluate", str(tmp_path / "eval.json"),
                  cwd=tmp_path, config=config)
    with open(tmp_path / "eval.json-coco_val2017") as f:
        results = json.load(f)
    assert all({"image_id", "category_id", "bbox", "score"} <= set(r) for r in results)
    assert "Evaluate annotation type *bbox*" in out
