"""More of tensorpack 0.11's examples, ported with the import change (and only the edits TF2
forces, listed in each script's header), run on tiny local data in tensorpack's formats.

As in test_tensorpack_examples.py, each script runs in its own process through ``_shorten.py``.
"""
import glob
import os
import shutil
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _data  # noqa: E402
from test_tensorpack_examples import run, stats_of  # noqa: E402


def event_tags(logdir):
    """``{tag: (plugin name, [steps])}`` of the TensorBoard event files in ``logdir``."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2
    tags = {}
    for path in glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")):
        for rec in tf.data.TFRecordDataset(path):
            ev = event_pb2.Event.FromString(rec.numpy())
            for v in ev.summary.value:
                tags.setdefault(v.tag, (v.metadata.plugin_data.plugin_name, []))[1].append(ev.step)
    return tags


@pytest.mark.slow
def test_mnist_visualizations(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    run("mnist-visualizations.py", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2"})
    logdir = tmp_path / "train_log" / "mnist-visualizations"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [2, 4]
    assert stats[-1]["validation_accuracy"] > 0.3       # chance is 0.1
    assert stats[-1]["validation_cross_entropy_loss"] < stats[0]["validation_cross_entropy_loss"]
    # its point: tfv1 tf.summary.image of `Conv2D(...).variables.W` and of activations, each epoch
    tags = event_tags(logdir)
    for layer in ("conv0", "conv1", "conv2", "conv3"):
        for kind in ("w", "act"):
            assert tags[f"visualizations/visualize_{kind}_{layer}"] == ("images", [2, 4])
    assert tags["visualizations/input"] == ("images", [2, 4])
    assert os.path.isfile(logdir / "checkpoint")


@pytest.mark.parametrize("script", ["mnist-tflayers.py", "mnist-tflayers-keras.py"])
@pytest.mark.slow
def test_mnist_tflayers(tmp_path, script):
    # the original program with the import change only (tfv1.layers.* on Keras 3 layers), and the
    # same with tf.keras layers made anew in every call of build_graph (TF's migration guide)
    _data.write_mnist(str(tmp_path / "data"))
    run(script, cwd=tmp_path, env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "3"})
    logdir = tmp_path / "train_log" / script[:-3]
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [2, 4, 6]
    assert stats[-1]["validation_accuracy"] > 0.2       # chance is 0.1
    assert stats[-1]["validation_cross_entropy_loss"] < stats[0]["validation_cross_entropy_loss"]
    assert stats[-1]["regularize_loss"] > 0             # regularize_cost('fc.*/kernel') found fc0, fc1
    assert {f"param-summary/{n}/kernel/rms" for n in ("conv0", "conv3", "fc0", "fc1")} <= set(stats[-1])
    # MaxSaver('validation_accuracy') kept the best model
    assert glob.glob(str(logdir / "max-validation_accuracy*"))


@pytest.mark.slow
def test_cifar10_preact18_mixup(tmp_path):
    _data.write_cifar10(str(tmp_path / "data"))
    run("cifar10-preact18-mixup.py", "--mixup", cwd=tmp_path, timeout=900,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_PRETEND_GPU": "1",
             "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2"})
    logdir = tmp_path / "train_log" / "cifar10-preact18-mixup"
    stats = stats_of(logdir)
    s = stats[-1]
    assert s["global_step"] == 2 and s["learning_rate"] == pytest.approx(0.1)
    # soft (mixed) one-hot labels: the cross-entropy of 10 classes starts near log(10)
    assert 1.5 < s["cross_entropy_loss"] < 3.5 and s["cost"] > s["cross_entropy_loss"]  # + wd_cost
    assert 0 <= s["train_error"] <= 1 and 0 <= s["validation_error"] <= 1
    assert np.isfinite(s["validation_cost"])
    tags = event_tags(logdir)
    # add_param_summary(('.*/W', ['histogram'])) on every conv and the linear layer
    hists = [t for t, (plugin, _) in tags.items() if t.startswith("param-summary/") and plugin == "histograms"]
    assert len(hists) == 21 and "param-summary/linear/W" in hists
    assert os.path.isfile(logdir / "checkpoint-2.index")


@pytest.mark.slow
def test_mnist_embeddings_siamese(tmp_path):
    algorithm = "siamese"
    _data.write_mnist(str(tmp_path / "data"), n_test=768)   # visualize() plots 6 batches of 128
    env = {"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "4"}
    out = run("mnist-embeddings.py", "-a", algorithm, cwd=tmp_path, env=env)
    assert "GradientDescentOptimizer translated" in out
    logdir = tmp_path / "train_log" / f"mnist-embeddings:{algorithm}"
    stats = stats_of(logdir)
    assert len(stats) == 4
    # the tower's own add_moving_summary(cost) named 'cost' is the 'cost' statistic
    assert stats[-1]["cost"] < stats[0]["cost"]
    assert stats[-1]["loss/neg-dist"] > stats[-1]["loss/pos-dist"] > 0
    # --visualize: an OfflinePredictor of 'emb' from the checkpoint, plotted with matplotlib.
    # (The script's auto_set_dir asks what to do with an existing log dir, so it moves first.)
    shutil.move(str(logdir), str(tmp_path / "trained"))
    run("mnist-embeddings.py", "-a", algorithm, "--visualize", "--load", "trained/checkpoint",
        cwd=tmp_path, env=env)
    import cv2
    img = cv2.imread(str(tmp_path / "siamese.jpg"))
    assert img is not None and img.shape[0] > 100 and img.std() > 1     # a drawn plot, not blank
