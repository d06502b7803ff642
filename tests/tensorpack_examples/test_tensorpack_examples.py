"""tensorpack 0.11's examples, ported with the import change (and only the edits TF2 forces,
listed in each script's header), train briefly on tiny local data in tensorpack's formats.

Each script runs in its own process through ``_shorten.py``, which caps max_epoch and
steps_per_epoch from environment variables so the scripts keep tensorpack's numbers.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _data  # noqa: E402


def run(script, *args, cwd, env=None, timeout=600):
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", **(env or {}))
    r = subprocess.run([sys.executable, os.path.join(HERE, "_shorten.py"), os.path.join(HERE, script), *args],
                       cwd=str(cwd), env=full_env, capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{script} {args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


def stats_of(logdir):
    with open(os.path.join(logdir, "stats.json")) as f:
        return json.load(f)


@pytest.mark.slow
def test_mnist_convnet(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    out = run("mnist-convnet.py", cwd=tmp_path,
              env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2"})
    assert "AdamOptimizer translated to keras.optimizers.Adam" in out
    stats = stats_of(tmp_path / "train_log" / "mnist-convnet")
    assert [s["epoch_num"] for s in stats] == [1, 2] and stats[-1]["global_step"] == 4
    assert np.isfinite(stats[-1]["total_cost"]) and "val_accuracy" in stats[-1]
    assert os.path.isfile(tmp_path / "train_log" / "mnist-convnet" / "checkpoint")


@pytest.mark.slow
def test_mnist_keras(tmp_path):
    _data.write_mnist(str(tmp_path / "data"))
    run("mnist-keras.py", cwd=tmp_path, env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2"})
    stats = stats_of(tmp_path / "train_log" / "mnist-keras")
    assert stats[-1]["global_step"] == 4 and "validation_accuracy" in stats[-1]
    assert stats[-1]["regularize_loss"] > 0  # the Keras model's own l2 losses reach the cost


@pytest.mark.slow
def test_cifar_convnet(tmp_path):
    _data.write_cifar10(str(tmp_path / "data"))
    run("cifar-convnet.py", cwd=tmp_path, timeout=900,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "2"})
    stats = stats_of(tmp_path / "train_log" / "cifar10")
    assert stats[-1]["global_step"] == 2 and "validation_accuracy" in stats[-1]


@pytest.mark.slow
def test_cifar10_resnet(tmp_path):
    _data.write_cifar10(str(tmp_path / "data"))
    logdir = tmp_path / "log"
    run("cifar10-resnet.py", "-n", "1", "--logdir", str(logdir), cwd=tmp_path, timeout=900,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_PRETEND_GPU": "1",
             "TP_MAX_EPOCH": "2", "TP_STEPS_PER_EPOCH": "2"})
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [2, 4]
    assert "validation_error" in stats[-1] and np.isfinite(stats[-1]["wd_cost"])
    # ScheduledHyperParamSetter('learning_rate', [(1, 0.1), ...]) on the tfv1 learning-rate variable
    assert stats[0]["learning_rate"] == pytest.approx(0.01) and stats[1]["learning_rate"] == pytest.approx(0.1)


@pytest.mark.slow
def test_boilerplate(tmp_path):
    run("boilerplate.py", cwd=tmp_path, env={"TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "3"})
    stats = stats_of(tmp_path / "train_log" / "boilerplate")
    assert stats[-1]["global_step"] == 3 and "validation_total_costs" in stats[-1]


@pytest.mark.slow
def test_export_model(tmp_path):
    import cv2
    import tensorflow as tf
    # the script's own fixed paths (as in tensorpack)
    for p in ("/tmp/exported", "/tmp/compact_graph.pb"):
        shutil.rmtree(p, ignore_errors=True) if os.path.isdir(p) else (os.path.exists(p) and os.remove(p))
    img = np.random.RandomState(0).randint(0, 255, (256, 256, 3)).astype(np.uint8)
    cv2.imwrite(str(tmp_path / "lena.png"), img)
    try:
        run("export-model.py", cwd=tmp_path)
        ckpt = "train_log/export-model/checkpoint"  # the `checkpoint` pointer file, as the script's docs say
        run("export-model.py", "--export", "serving", "--load", ckpt, cwd=tmp_path)
        run("export-model.py", "--export", "compact", "--load", ckpt, cwd=tmp_path)
        run("export-model.py", "--apply", "default", "--load", ckpt, cwd=tmp_path)
        run("export-model.py", "--apply", "inference_graph", "--load", ckpt, cwd=tmp_path)
        run("export-model.py", "--apply", "compact", "--load", "/tmp/compact_graph.pb", cwd=tmp_path)
        for f in ("applied_default.jpg", "applied_inference_graph.png", "applied_compact.png"):
            assert os.path.getsize(tmp_path / f) > 0
        # the frozen graph runs by tensor name in TF1 style and computes the model: the
        # Laplacian of the grayscale image (the filter was trained with learning rate 0)
        graph_def = tf.compat.v1.GraphDef()
        with open("/tmp/compact_graph.pb", "rb") as f:
            graph_def.ParseFromString(f.read())
        with tf.Graph().as_default() as g:
            tf.compat.v1.import_graph_def(graph_def, name="")
            with tf.compat.v1.Session(graph=g) as sess:
                got = sess.run("prediction_img:0", {"input_img:0": img[None]})
        gray = tf.image.rgb_to_grayscale(tf.cast(img[None], tf.float32))
        lap = tf.constant([[0., 1., 0.], [1., -4., 1.], [0., 1., 0.]], shape=[3, 3, 1, 1])
        want = tf.nn.conv2d(gray, lap, strides=1, padding="SAME").numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        served = tf.saved_model.load("/tmp/exported")
        with open(tmp_path / "lena.png", "rb") as f:
            out = served.signatures["serving_default"](input_img_bytes=tf.constant([f.read()]))
        assert out["prediction_img_bytes"].shape == (1,)
    finally:
        shutil.rmtree("/tmp/exported", ignore_errors=True)
        if os.path.exists("/tmp/compact_graph.pb"):
            os.remove("/tmp/compact_graph.pb")
